"""Deliberately broken exporters, one per rule of the conformance suite.

``Good`` is a correct exporter in the jsonl layout (``<export_dir>/<stream>.jsonl``,
one ``to_dict()`` per line), so ``read_jsonl`` reads any of them back. Each
broken variant changes one thing, the way a real exporter gets it wrong;
``test_matrix.py`` asserts that each fails exactly the checks of its rule.
Leaked threads end by themselves after a few seconds so the test process can exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from typing import Any

from traceml_exporter_sdk import RECORD_TYPES

LEAK_SECONDS = 4.0


def part_name(stream: str, part: int) -> str:
    """``<stream>.jsonl``, then ``<stream>.<part>.jsonl``: the jsonl layout's parts."""
    return f"{stream}.{part}.jsonl" if part else f"{stream}.jsonl"


def next_part(folder: Any) -> int:
    """One past the highest part of any stream in ``folder`` (0 when there is none)."""
    highest = -1
    for path in folder.glob("*.jsonl"):
        number = path.name.split(".")[1] if path.name.count(".") == 2 else "0"
        highest = max(highest, int(number) if number.isdigit() else 0)
    return highest + 1


class Good:
    """A correct exporter: files made in open, dispatch on STREAM, close flushes and closes,
    and a failing write or flush closes its files before it raises. Each instance writes
    a new part (``<stream>.N.jsonl``), so a restart keeps what earlier ones wrote and
    never continues a line a kill cut off."""

    def __init__(self, context: Any) -> None:
        self.context = context
        self.dir = context.export_dir
        self.streams = context.streams
        self.include_hostname = context.include_hostname
        self.files: dict[str, Any] = {}

    def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.open_files(next_part(self.dir))

    def open_files(self, part: int) -> None:
        """Make part ``part``'s file of every stream; close those made if one fails."""
        try:
            for stream in self.streams:
                self.files[stream] = open(self.dir / part_name(stream, part), "x", encoding="utf-8")  # noqa: SIM115
        except BaseException:
            self.close_files()
            raise

    def line(self, record: Any) -> str:
        data = record.to_dict()
        if not self.include_hostname:
            data.pop("hostname", None)
        return json.dumps(data) + "\n"

    def write(self, records: Any) -> None:
        try:
            self.put(records)
        except BaseException:
            self.release()
            raise

    def put(self, records: Any) -> None:
        """Write each record's line to its stream's file (what the broken variants change)."""
        for record in records:
            self.files[record.STREAM].write(self.line(record))

    def flush(self) -> None:
        try:
            for handle in self.files.values():
                handle.flush()
        except BaseException:
            self.release()
            raise

    def close(self, *, dropped_batches: int = 0) -> None:
        self.close_files()

    def close_files(self) -> None:
        """Close every file, even when closing one raises; then raise the first error."""
        files, self.files = self.files, {}
        error: BaseException | None = None
        for handle in files.values():
            try:
                handle.close()
            except BaseException as exc:
                error = error or exc
        if error is not None:
            raise error

    def release(self) -> None:
        """After a failure the worker calls nothing more, not even close: let go of the files."""
        files, self.files = self.files, {}
        for handle in files.values():
            with contextlib.suppress(OSError):  # a broken sink may fail this close too
                handle.close()


def make_good(context: Any) -> Good:
    return Good(context)


# -- thread confinement ----------------------------------------------------------------


class ResourceInFactory(Good):
    """Opens its log file in the factory (main thread) instead of in open."""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = open(self.dir / "exporter.log", "a", encoding="utf-8")  # noqa: SIM115

    def write(self, records: Any) -> None:
        super().write(records)
        self.log.write(f"wrote {len(records)}\n")

    def close(self, *, dropped_batches: int = 0) -> None:
        super().close()
        self.log.close()

    def release(self) -> None:
        super().release()
        self.log.close()


def make_resource_in_factory(context: Any) -> ResourceInFactory:
    return ResourceInFactory(context)


class SqliteInFactory(Good):
    """Connects to sqlite3 in the factory; the connection then fails on the worker thread."""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.dir / "index.db")

    def open(self) -> None:
        super().open()
        self.db.execute("CREATE TABLE IF NOT EXISTS batches (n INTEGER)")

    def write(self, records: Any) -> None:
        super().write(records)
        self.db.execute("INSERT INTO batches VALUES (?)", (len(records),))

    def close(self, *, dropped_batches: int = 0) -> None:
        super().close()
        self.db.commit()
        self.db.close()


def make_sqlite_in_factory(context: Any) -> SqliteInFactory:
    return SqliteInFactory(context)


class LeakedThread(Good):
    """Starts a heartbeat thread in open and never stops it."""

    def open(self) -> None:
        super().open()
        threading.Thread(
            target=time.sleep, args=(LEAK_SECONDS,), name="heartbeat", daemon=True
        ).start()


def make_leaked_thread(context: Any) -> LeakedThread:
    return LeakedThread(context)


class LeakedFd(Good):
    """Opens a lock file in open and never closes its descriptor."""

    def open(self) -> None:
        super().open()
        try:
            self.lock = os.open(self.dir / ".lock", os.O_CREAT | os.O_RDWR)
        except BaseException:
            self.close_files()
            raise


def make_leaked_fd(context: Any) -> LeakedFd:
    return LeakedFd(context)


class ThreadRaises(Good):
    """Runs a metrics thread that crashes; the exception never reaches the worker."""

    def open(self) -> None:
        super().open()

        def metrics() -> None:
            raise RuntimeError("metrics endpoint unreachable")

        self.metrics = threading.Thread(target=metrics, name="metrics", daemon=True)
        self.metrics.start()

    def close(self, *, dropped_batches: int = 0) -> None:
        self.metrics.join()
        super().close()


def make_thread_raises(context: Any) -> ThreadRaises:
    return ThreadRaises(context)


# -- lifecycle -----------------------------------------------------------------------------


class LazyOpen(Good):
    """Opens its files on the first write; flush and close assume a write happened."""

    def open(self) -> None:
        self.files = None  # type: ignore[assignment]

    def write(self, records: Any) -> None:
        if self.files is None:
            self.files = {}
            super().open()
        super().write(records)

    def flush(self) -> None:
        for handle in self.files.values():
            handle.flush()

    def close(self, *, dropped_batches: int = 0) -> None:
        self.close_files()  # every file closed even when one fails: only its own mistake


def make_lazy_open(context: Any) -> LazyOpen:
    return LazyOpen(context)


class FlushNotIdempotent(Good):
    """Treats a flush with nothing new written as an error."""

    def open(self) -> None:
        super().open()
        self.dirty = False

    def write(self, records: Any) -> None:
        super().write(records)
        self.dirty = True

    def flush(self) -> None:
        if not self.dirty:
            raise RuntimeError("flush called with nothing to flush")
        super().flush()
        self.dirty = False


def make_flush_not_idempotent(context: Any) -> FlushNotIdempotent:
    return FlushNotIdempotent(context)


class FlushTruncates(Good):
    """Buffers records and rewrites each file from the buffer on flush (mode "w")."""

    def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.buffer: dict[str, list[str]] = {s: [] for s in self.streams}
        for stream in self.streams:
            (self.dir / f"{stream}.jsonl").touch(exist_ok=False)

    def write(self, records: Any) -> None:
        for record in records:
            self.buffer[record.STREAM].append(self.line(record))

    def flush(self) -> None:
        for stream, lines in self.buffer.items():
            if lines:
                (self.dir / f"{stream}.jsonl").write_text("".join(lines), encoding="utf-8")
                lines.clear()

    def close(self, *, dropped_batches: int = 0) -> None:
        self.flush()


def make_flush_truncates(context: Any) -> FlushTruncates:
    return FlushTruncates(context)


_ACTIVE_DIRS: set[str] = set()


class ProcessGlobalLock(Good):
    """Registers its folder in a module-level set and never releases it."""

    def open(self) -> None:
        key = str(self.dir)
        if key in _ACTIVE_DIRS:
            raise RuntimeError(f"another exporter in this process already writes to {key}")
        _ACTIVE_DIRS.add(key)
        super().open()


def make_process_global_lock(context: Any) -> ProcessGlobalLock:
    return ProcessGlobalLock(context)


class CloseWithoutKeyword(Good):
    """Defines close(self) with no dropped_batches keyword."""

    def close(self) -> None:  # type: ignore[override]
        self.close_files()


def make_close_without_keyword(context: Any) -> CloseWithoutKeyword:
    return CloseWithoutKeyword(context)


# -- STREAM dispatch --------------------------------------------------------------------


class IsinstanceDispatch(Good):
    """Dispatches with isinstance on the SDK's classes and drops anything else."""

    def put(self, records: Any) -> None:
        for record in records:
            for cls in RECORD_TYPES:
                if isinstance(record, cls):
                    self.files[cls.STREAM].write(self.line(record))


def make_isinstance_dispatch(context: Any) -> IsinstanceDispatch:
    return IsinstanceDispatch(context)


class OneClassPerStream(Good):
    """Groups a batch by class, then keys the groups by their STREAM: where one stream
    arrives in two classes in a batch, the last class's group replaces the first's."""

    def put(self, records: Any) -> None:
        by_class: dict[type, list[Any]] = {}
        for record in records:
            by_class.setdefault(type(record), []).append(record)
        by_stream = {kind.STREAM: group for kind, group in by_class.items()}
        for stream, group in by_stream.items():
            self.files[stream].writelines(map(self.line, group))


def make_one_class_per_stream(context: Any) -> OneClassPerStream:
    return OneClassPerStream(context)


class GroupedByClass(Good):
    """Writes a batch class by class: a stream that arrives in two classes in one batch is
    written out of payload order."""

    def put(self, records: Any) -> None:
        by_class: dict[type, list[Any]] = {}
        for record in records:
            by_class.setdefault(type(record), []).append(record)
        for kind, group in by_class.items():
            self.files[kind.STREAM].writelines(map(self.line, group))


def make_grouped_by_class(context: Any) -> GroupedByClass:
    return GroupedByClass(context)


class OneStreamPerBatch(Good):
    """Assumes a batch holds one stream and files it all under the first record's."""

    def put(self, records: Any) -> None:
        if records:
            handle = self.files[records[0].STREAM]
            for record in records:
                handle.write(self.line(record))


def make_one_stream_per_batch(context: Any) -> OneStreamPerBatch:
    return OneStreamPerBatch(context)


class AssumesStepTime(Good):
    """Writes a run summary to the step_time file in close, selected or not."""

    def close(self, *, dropped_batches: int = 0) -> None:
        self.files["step_time"].write(json.dumps({"closing": True}) + "\n")
        super().close()


def make_assumes_step_time(context: Any) -> AssumesStepTime:
    return AssumesStepTime(context)


# -- close semantics ----------------------------------------------------------------------


class NoFlushOnClose(Good):
    """Buffers lines in memory, writes them on flush, and drops the buffer on close."""

    def open(self) -> None:
        super().open()
        self.pending: list[tuple[str, str]] = []

    def write(self, records: Any) -> None:
        self.pending.extend((r.STREAM, self.line(r)) for r in records)

    def flush(self) -> None:
        try:
            for stream, line in self.pending:
                self.files[stream].write(line)
            self.pending.clear()
        except BaseException:
            self.release()
            raise
        super().flush()


def make_no_flush_on_close(context: Any) -> NoFlushOnClose:
    return NoFlushOnClose(context)


class RejectsDroppedBatches(Good):
    """Raises in close when batches were dropped, as if a loss count were an error."""

    def close(self, *, dropped_batches: int = 0) -> None:
        super().close()
        if dropped_batches:
            raise RuntimeError(f"{dropped_batches} batches were dropped")


def make_rejects_dropped_batches(context: Any) -> RejectsDroppedBatches:
    return RejectsDroppedBatches(context)


class WritesAfterClose(Good):
    """Returns from close at once and writes its closing lines from a timer thread."""

    def close(self, *, dropped_batches: int = 0) -> None:
        self.flush()
        files, self.files = self.files, {}

        def finish() -> None:
            for stream, handle in files.items():
                handle.write(json.dumps({"stream": stream, "closing": True}) + "\n")
                handle.close()

        threading.Timer(0.1, finish).start()


def make_writes_after_close(context: Any) -> WritesAfterClose:
    return WritesAfterClose(context)


# -- data fidelity -------------------------------------------------------------------------


class HostnameLeaked(Good):
    """Keeps hostname whatever include_hostname says."""

    def line(self, record: Any) -> str:
        return json.dumps(record.to_dict()) + "\n"


def make_hostname_leaked(context: Any) -> HostnameLeaked:
    return HostnameLeaked(context)


class HostnameAlwaysDropped(Good):
    """Drops hostname even when include_hostname is on."""

    def line(self, record: Any) -> str:
        data = record.to_dict()
        data.pop("hostname", None)
        return json.dumps(data) + "\n"


def make_hostname_always_dropped(context: Any) -> HostnameAlwaysDropped:
    return HostnameAlwaysDropped(context)


class RecordsReordered(Good):
    """Writes each batch newest first."""

    def write(self, records: Any) -> None:
        super().write(list(reversed(records)))


def make_records_reordered(context: Any) -> RecordsReordered:
    return RecordsReordered(context)


class DuplicatesDropped(Good):
    """Skips any line it has written before."""

    def open(self) -> None:
        super().open()
        self.seen: set[str] = set()

    def put(self, records: Any) -> None:
        for record in records:
            line = self.line(record)
            if line not in self.seen:
                self.seen.add(line)
                self.files[record.STREAM].write(line)


def make_duplicates_dropped(context: Any) -> DuplicatesDropped:
    return DuplicatesDropped(context)


class LossyValues(Good):
    """Writes ``value or None``: a measured 0, False, "" and {} all become null."""

    def line(self, record: Any) -> str:
        data = {k: (v or None) for k, v in record.to_dict().items()}
        if not self.include_hostname:
            data.pop("hostname", None)
        return json.dumps(data) + "\n"


def make_lossy_values(context: Any) -> LossyValues:
    return LossyValues(context)


class HostileTextCrash(Good):
    """Writes readable UTF-8 JSON (``ensure_ascii=False``), so a lone surrogate cannot be
    encoded and write raises ``UnicodeEncodeError`` (it closes its files first)."""

    def line(self, record: Any) -> str:
        data = record.to_dict()
        if not self.include_hostname:
            data.pop("hostname", None)
        return json.dumps(data, ensure_ascii=False) + "\n"

    def write(self, records: Any) -> None:
        try:
            super().write(records)
        except BaseException:
            self.close_files()
            raise


def make_hostile_text_crash(context: Any) -> HostileTextCrash:
    return HostileTextCrash(context)


# -- failure behaviour ---------------------------------------------------------------------


class LeaksOnOpenFailure(Good):
    """Opens its log file first and does not close it when the rest of open fails."""

    def open(self) -> None:
        self.log = open(self.context.session_root / "exporter.log", "a", encoding="utf-8")  # noqa: SIM115
        super().open()

    def close(self, *, dropped_batches: int = 0) -> None:
        super().close()
        self.log.close()

    def release(self) -> None:
        super().release()
        self.log.close()


def make_leaks_on_open_failure(context: Any) -> LeaksOnOpenFailure:
    return LeaksOnOpenFailure(context)


class LeaksFolderWhenListingFails(Good):
    """Lists its export folder through a descriptor of it, and does not close that
    descriptor when the listing fails (EMFILE, EIO)."""

    def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        folder = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
        names = os.listdir(folder)
        os.close(folder)
        self.open_files(next_part_of(names))


def next_part_of(names: list[str]) -> int:
    """``next_part`` of a folder's listing."""
    highest = -1
    for name in names:
        if name.endswith(".jsonl"):
            number = name.split(".")[1] if name.count(".") == 2 else "0"
            highest = max(highest, int(number) if number.isdigit() else 0)
    return highest + 1


def make_leaks_folder_when_listing_fails(context: Any) -> LeaksFolderWhenListingFails:
    return LeaksFolderWhenListingFails(context)


class SwallowsListingFailure(LeaksFolderWhenListingFails):
    """Carries on when listing its export folder fails, "it only picks the part number":
    open returns having opened nothing, and the first write fails."""

    def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            names = os.listdir(self.dir)
        except OSError:
            return
        self.open_files(next_part_of(names))


def make_swallows_listing_failure(context: Any) -> SwallowsListingFailure:
    return SwallowsListingFailure(context)


class LeaksDescriptorWhenWrapFails(Good):
    """Makes each file with ``os.open`` (exclusive, its own mode) and wraps the descriptor
    in a file object; when the wrapping fails, the bare descriptor is left open."""

    def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        part = next_part(self.dir)
        try:
            for stream in self.streams:
                path = self.dir / part_name(stream, part)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
                self.files[stream] = open(fd, "w", encoding="utf-8")  # noqa: SIM115
        except BaseException:
            self.close_files()
            raise


def make_leaks_descriptor_when_wrap_fails(context: Any) -> LeaksDescriptorWhenWrapFails:
    return LeaksDescriptorWhenWrapFails(context)


class SwallowsCloseFailure(Good):
    """Flushes every file in close, then closes them ignoring errors, "flushed, so closing
    cannot lose anything": a close that fails after its write-back (NFS) loses records
    and close returns."""

    def close(self, *, dropped_batches: int = 0) -> None:
        self.flush()
        files, self.files = self.files, {}
        for handle in files.values():
            with contextlib.suppress(OSError):
                handle.close()


def make_swallows_close_failure(context: Any) -> SwallowsCloseFailure:
    return SwallowsCloseFailure(context)


class SwallowedSinkError(Good):
    """Logs and ignores every OSError from its files."""

    def write(self, records: Any) -> None:
        with contextlib.suppress(OSError):
            super().write(records)

    def flush(self) -> None:
        with contextlib.suppress(OSError):
            super().flush()

    def close(self, *, dropped_batches: int = 0) -> None:
        for handle in self.files.values():
            with contextlib.suppress(OSError):
                handle.close()
        self.files = {}


def make_swallowed_sink_error(context: Any) -> SwallowedSinkError:
    return SwallowedSinkError(context)


class NonDaemonThreadAfterFailure(Good):
    """Runs a non-daemon uploader thread that only close stops (never called after a failure)."""

    def open(self) -> None:
        super().open()
        self.stop = threading.Event()
        self.uploader = threading.Thread(
            target=self.stop.wait, args=(LEAK_SECONDS,), name="uploader", daemon=False
        )
        self.uploader.start()

    def close(self, *, dropped_batches: int = 0) -> None:
        self.stop.set()
        self.uploader.join()
        super().close()


def make_non_daemon_thread_after_failure(context: Any) -> NonDaemonThreadAfterFailure:
    return NonDaemonThreadAfterFailure(context)


# -- throughput ---------------------------------------------------------------------------


class Slow(Good):
    """Spends 0.2 ms per record (at most 5,000 records/s), whatever the batch size."""

    def write(self, records: Any) -> None:
        time.sleep(0.0002 * len(records))
        super().write(records)


def make_slow(context: Any) -> Slow:
    return Slow(context)
