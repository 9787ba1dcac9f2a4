"""Follow a live TraceML run: tail its SQLite database and feed new rows to an exporter.

TraceML 0.5.0 has no exporter setting; its aggregator writes
``<run>/aggregator/telemetry`` (WAL mode, one transaction per 0.5 s flush). The
follower reads the rows each flush added (``id > last id`` per table, in short
read-only statements, ``backfill.SqliteSource.read_page``), turns them into
records exactly as the backfill does, and hands them to an ``ExportWorker``
whose exporter gets ``ExporterContext(session_root=<run>)``, as TraceML's would.

Guarantees (docs/follow.md):

* It never disturbs the run: read-only, no snapshot held across an exporter
  call or a sleep, nothing written into the run folder but the exporter's own
  output and ``aggregator/follow/`` (the bookmark and the follower's
  ``finalization_warning.json``; TraceML's own file of that name is its own).
* At-least-once: the bookmark (last id per table, and the run's identity) is
  saved atomically only after a flush that returned, so a follower killed and
  started again repeats at most what was not yet acknowledged. Dedupe on
  ``stream_key``.
* Every loss is counted: rows pruned before they were read (id gaps), rows that
  fit no record, a run that ended without TraceML marking it complete.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import apsw
import orjson

from ._backfill import (
    DATABASE_ERRORS,
    PAGE_ROWS,
    BackfillError,
    Connection,
    SqliteSource,
    connect_read_only,
    open_database,
    plan_tables,
)
from ._feeding import wait_for_room
from ._report import ExportReport, write_warning_file
from ._writers import DatabaseWriters, database_holders
from .worker import ExportWorker

__all__ = [
    "BOOKMARK_VERSION",
    "End",
    "FollowError",
    "FollowResult",
    "Follower",
    "RunFolder",
]

BOOKMARK_VERSION = 1
DATABASE = Path("aggregator") / "telemetry"
STATE_DIR = Path("aggregator") / "follow"
QUEUE_LIMIT = 16
"""Batches kept queued in the worker; the follower waits for room, so nothing is dropped."""
ALIVE_CHECK_S = 2.0
"""Idle seconds before the follower looks whether the aggregator still has the database open."""
MARK_GRACE_S = 10.0
"""Seconds to wait, once the aggregator is gone, for TraceML's launcher to mark the manifest
(it does so after its aggregator exits); less when the launcher is seen to be gone too."""
GC_YOUNG_THRESHOLD = 50_000
"""Allocations between collections of the cyclic GC's youngest generation while following."""

End = Literal[
    "complete", "aggregator-gone", "idle", "exporter-failed", "stalled", "read-error", "interrupted"
]


class FollowError(Exception):
    """The run folder cannot be followed; the message says why and what is accepted."""


@dataclass(frozen=True, slots=True)
class RunFolder:
    """A TraceML run folder: ``manifest.json`` and ``aggregator/telemetry``."""

    root: Path

    @property
    def database(self) -> Path:
        return self.root / DATABASE

    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    @property
    def state_dir(self) -> Path:
        return self.root / STATE_DIR

    @property
    def bookmark_path(self) -> Path:
        return self.state_dir / "bookmark.json"

    @property
    def warning_path(self) -> Path:
        return self.state_dir / "finalization_warning.json"

    def manifest(self) -> dict[str, Any] | None:
        """The manifest as TraceML last wrote it; None while it is missing or mid-write."""
        try:
            data = orjson.loads(self.manifest_path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        return data if type(data) is dict else None

    def identity(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """What tells this run from another in the same folder."""
        try:
            inode = self.database.stat().st_ino
        except OSError:
            inode = None
        return {
            "session_id": manifest.get("session_id"),
            "created_at": manifest.get("created_at"),
            "database_inode": inode,
        }


def run_complete(manifest: dict[str, Any] | None) -> bool:
    """TraceML marked the telemetry finished (``telemetry_status`` other than running)."""
    if manifest is None:
        return False
    status = manifest.get("telemetry_status")
    return status not in (None, "starting", "running") or (
        manifest.get("aggregator_exit_code") is not None
    )


@dataclass
class FollowResult:
    """How following ended, and its figures."""

    end: End
    report: ExportReport
    source: SqliteSource
    resumed: bool
    skipped_before: int = 0
    pruned_before: int = 0
    bookmark_error: str | None = None
    warning_path: Path | None = None
    warning_error: str | None = None
    read_error: str | None = None
    """Why reading the database failed (``end`` is ``read-error``)."""

    @property
    def pruned_rows(self) -> int:
        return self.source.pruned_rows

    @property
    def finished(self) -> bool:
        return self.end == "complete"


class Follower:
    """Tail one run's database into one ``ExportWorker``; ``run`` returns how it ended."""

    def __init__(
        self,
        folder: RunFolder,
        worker: ExportWorker,
        *,
        poll_interval: float = 0.25,
        idle_timeout: float = 120.0,
        shutdown_timeout: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.folder = folder
        self.worker = worker
        self.poll_interval = poll_interval
        self.idle_timeout = idle_timeout
        self.shutdown_timeout = shutdown_timeout
        self._clock = clock
        self._streams = worker.context.streams
        self._submitted = 0
        # (records submitted when the mark was taken, last ids, pruned and skipped then)
        self._marks: collections.deque[tuple[int, dict[str, int], dict[str, int], int]] = (
            collections.deque()
        )
        self._saved: tuple[dict[str, int], dict[str, int], int] | None = None
        self._identity: dict[str, Any] = {}
        self._skipped_before = 0
        self._writers = DatabaseWriters(folder.database)
        self._stalled = False
        self.bookmark_error: str | None = None
        self.read_error: str | None = None

    # -- setup ------------------------------------------------------------------

    def open_source(self) -> tuple[SqliteSource, bool]:
        """Open the database, and resume from the bookmark when there is one.

        Raises:
            FollowError: the bookmark is of another run, unreadable, or ahead of the database.
        """
        manifest = self.folder.manifest() or {}
        self._identity = self.folder.identity(manifest)
        try:
            source = open_database(self.folder.database, self._streams, self._connect())
        except BackfillError as exc:
            raise FollowError(str(exc)) from None
        try:
            bookmark = self._load_bookmark()
            if bookmark is not None:
                self._resume(source, bookmark)
        finally:
            source.close()
        return source, bookmark is not None

    def _load_bookmark(self) -> dict[str, Any] | None:
        path = self.folder.bookmark_path
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise FollowError(f"cannot read the bookmark {path}: {exc.strerror or exc}") from None
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            data = None
        if type(data) is not dict or data.get("version") != BOOKMARK_VERSION:
            raise FollowError(
                f"{path} is not a follow bookmark of version {BOOKMARK_VERSION}; "
                "remove it to follow this run from its first row"
            )
        return data

    def _resume(self, source: SqliteSource, bookmark: dict[str, Any]) -> None:
        theirs = bookmark.get("run") or {}
        if theirs != self._identity:
            raise FollowError(
                f"the bookmark {self.folder.bookmark_path} is of another run "
                f"(session {theirs.get('session_id')!r} created {theirs.get('created_at')}); "
                f"this folder holds session {self._identity.get('session_id')!r} created "
                f"{self._identity.get('created_at')}: remove the bookmark (and the old "
                "export) to follow the new run"
            )
        last_id = {str(k): int(v) for k, v in (bookmark.get("last_id") or {}).items()}
        pruned = {str(k): int(v) for k, v in (bookmark.get("pruned") or {}).items()}
        highest = source.highest_ids()
        for table, last in last_id.items():
            if table in highest and highest[table] < last:
                raise FollowError(
                    f"the bookmark {self.folder.bookmark_path} is ahead of the database "
                    f"({table}: bookmark id {last}, highest id {highest[table]}): it is of "
                    "another database; remove it to follow this one from its first row"
                )
        source.last_id.update(last_id)
        source.pruned.update(pruned)
        self._skipped_before = int(bookmark.get("skipped") or 0)
        self._saved = (dict(last_id), dict(pruned), self._skipped_before)

    # -- the loop ---------------------------------------------------------------

    def run(self, source: SqliteSource, resumed: bool) -> FollowResult:
        """Follow until the run ends, the exporter fails, or Ctrl-C; then drain and close."""
        with fewer_collections():
            return self._run(source, resumed)

    def _run(self, source: SqliteSource, resumed: bool) -> FollowResult:
        end: End
        try:
            end = self._loop(source)
        except KeyboardInterrupt:
            end = "interrupted"
        except BackfillError as exc:
            end, self.read_error = "read-error", str(exc)
        try:
            report = self.worker.shutdown(self.shutdown_timeout)
        except KeyboardInterrupt:
            report = self.worker.shutdown(0.0)
            end = "interrupted"
        if end != "exporter-failed" and report.failure is not None:
            end = "exporter-failed"
        if end == "complete":
            self._finish_traceml_close()
        self._save_delivered(report.delivered_records)
        return FollowResult(
            end,
            report,
            source,
            resumed,
            self._skipped_before,
            bookmark_error=self.bookmark_error,
            read_error=self.read_error,
        )

    def _loop(self, source: SqliteSource) -> End:
        last_rows = self._clock()
        next_alive_check = 0.0
        while True:
            got = self._read_all(source)
            if self.worker.failure is not None:
                return "exporter-failed"
            if self._stalled:
                return "stalled"
            self._save_delivered(self.worker.delivered_records)
            now = self._clock()
            if got:
                last_rows = now
                if self._writers.holders is None:
                    self._writers.find()  # while it writes, so its launcher is known
                continue  # a backlog: read on before sleeping
            if run_complete(self.folder.manifest()):
                self._final_read(source)
                return "complete"
            idle = now - last_rows
            if idle >= ALIVE_CHECK_S and now >= next_alive_check:
                next_alive_check = now + ALIVE_CHECK_S
                if not self._writers.alive():
                    self._await_mark()
                    self._final_read(source)
                    return "complete" if run_complete(self.folder.manifest()) else "aggregator-gone"
            if idle >= self.idle_timeout:
                self._final_read(source)
                return "idle"
            time.sleep(self.poll_interval)

    def _final_read(self, source: SqliteSource) -> None:
        """Read what is left, then count the rows deleted after the last one read."""
        while self._read_all(source) and not self._stalled:
            pass
        if self._stalled or self.worker.failure is not None:
            return
        source.count_tail_pruned()
        self._mark(source)

    def _finish_traceml_close(self) -> None:
        """Remove the ``-wal`` and ``-shm`` TraceML's last close left because a read of
        ours overlapped it, as that close does when it is the last one.

        Only where the run is marked complete, no process has the database open, and the
        ``-wal`` is empty (TraceML's closing checkpoint ran whole and truncated it): then
        opening and closing a connection that may write copies nothing into the
        database, and SQLite removes both files. Anything else is left as it is.
        """
        database = self.folder.database
        wal = database.with_name(database.name + "-wal")
        try:
            if wal.stat().st_size != 0:
                return
        except OSError:
            return
        if not run_complete(self.folder.manifest()) or database_holders(database) != set():
            return
        with contextlib.suppress(*DATABASE_ERRORS):
            connection = apsw.Connection(str(database), flags=apsw.SQLITE_OPEN_READWRITE)
            try:
                connection.execute("PRAGMA schema_version").fetchall()
            finally:
                connection.close()

    def _connect(self) -> Connection:
        """A read-only connection, immutable once no one has the database open.

        While TraceML's writer has the database open, its ``-wal`` file exists; its
        last close removes it. A read-only connection made after that would make
        the ``-wal`` and ``-shm`` files again and could not remove them, so a
        database without a ``-wal`` that no process has open (or whose run is
        marked complete) is read as immutable, and the run folder is left as
        TraceML left it.

        Raises:
            BackfillError: the database cannot be opened.
        """
        database = self.folder.database
        immutable = False
        if not database.with_name(database.name + "-wal").exists():
            immutable = run_complete(self.folder.manifest()) or database_holders(database) == set()
        return connect_read_only(database, immutable=immutable)

    def _read_all(self, source: SqliteSource) -> int:
        """One pass over every table on a connection of its own, closed at the end (so
        TraceML's last close is the last one and removes its WAL): submit each page of
        new rows. Returns rows read."""
        try:
            source.connection = self._connect()
        except BackfillError:
            return 0  # the file went away: the manifest or the idle timeout ends the follow
        try:
            return self._read_tables(source)
        finally:
            source.close()

    def _read_tables(self, source: SqliteSource) -> int:
        if source.missing:
            plan_tables(source, self._streams)
        got = 0
        for plan in source.tables:
            while True:
                rows, records = source.read_page(plan)
                got += rows
                if records:
                    if not wait_for_room(self.worker, QUEUE_LIMIT, self.shutdown_timeout):
                        self._stalled = True  # rows of this page stay after the bookmark
                        return got
                    self.worker.submit_records(records)
                    self._submitted += len(records)
                if rows:
                    self._mark(source)
                if rows < PAGE_ROWS:
                    break
        return got

    def _mark(self, source: SqliteSource) -> None:
        self._marks.append(
            (self._submitted, dict(source.last_id), dict(source.pruned), source.skipped)
        )

    def _await_mark(self) -> None:
        """The aggregator is gone: give its launcher up to ``MARK_GRACE_S`` to mark the
        manifest, unless the launcher is known and gone too (the whole run was killed)."""
        deadline = self._clock() + MARK_GRACE_S
        while not run_complete(self.folder.manifest()) and self._clock() < deadline:
            if self._writers.launchers_gone():
                return
            time.sleep(self.poll_interval)

    # -- bookmark ---------------------------------------------------------------

    def _save_delivered(self, delivered: int) -> None:
        """Save the newest mark whose records have all been delivered."""
        best = None
        while self._marks and self._marks[0][0] <= delivered:
            best = self._marks.popleft()
        if best is None:
            return
        _, last_id, pruned, skipped = best
        state = (last_id, pruned, self._skipped_before + skipped)
        if state == self._saved:
            return
        self._write_bookmark(*state)
        self._saved = state

    def _write_bookmark(
        self, last_id: dict[str, int], pruned: dict[str, int], skipped: int
    ) -> None:
        path = self.folder.bookmark_path
        data = {
            "version": BOOKMARK_VERSION,
            "run": self._identity,
            "last_id": last_id,
            "pruned": pruned,
            "skipped": skipped,
        }
        tmp = path.with_name(path.name + ".tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as fh:
                fh.write(orjson.dumps(data, option=orjson.OPT_INDENT_2))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            self.bookmark_error = f"could not save the bookmark {path}: {exc.strerror or exc}"


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Collect the cyclic GC's youngest generation every ``GC_YOUNG_THRESHOLD`` allocations
    instead of 700, and restore the thresholds after.

    Each row makes a record and, for step_time, a dozen dicts, and up to ``QUEUE_LIMIT``
    pages of them wait in the worker's queue: at the default threshold the collector
    scans them again and again, about a third of the follower's CPU time. Rows and
    records hold no reference cycles, so nothing waits longer to be freed.
    """
    old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def record_follow(result: FollowResult, folder: RunFolder, block: dict[str, Any]) -> None:
    """Write the follower's ``finalization_warning.json`` (its ``export`` and ``follow``
    blocks) beside its bookmark, never into TraceML's own."""
    content: dict[str, Any] = {"follow": block}
    if result.report.warning_path is not None or result.report.exporter_failed:
        content["export"] = result.report.warning_block()
    path, error = write_warning_file(folder.root, content, folder.warning_path)
    result.warning_path, result.warning_error = path, error
