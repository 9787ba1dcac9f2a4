"""``ExportWorker``: drives one exporter exactly as TraceML's aggregator does.

The producer side (``submit``) never blocks: a bounded queue of payload batches,
and a full queue drops the batch and counts it. One background thread applies
the stream selection, then calls ``open`` once, ``write``/``flush`` as batches
arrive and the flush interval passes, and ``close`` once at shutdown, never
overlapping. After any exporter method raises, the worker calls nothing more
on it (not even ``close``), keeps admitting and counting batches, and records
the loss in ``<session_root>/aggregator/finalization_warning.json``.

Accounting: a batch is *admitted* when the worker takes it off the queue and
selects its records; ``admitted_records`` counts the selected records of every
admitted batch, whatever happened to the exporter. A batch the worker never
took (full queue, or still queued when ``shutdown`` timed out) is a *dropped
batch*; its records are never mapped, so they are counted in
``dropped_batches`` only, not in ``admitted_records``.

Each ``write`` gets the selected records of every batch queued when the worker
got to them, up to ``max_batches_per_write`` batches, in queue order: one
payload batch per write while the exporter keeps up, fewer and larger writes
when a backlog builds (``max_batches_per_write=1`` gives one write per batch).
A batch whose records are all unselected gives no write.

A record is *delivered* once a later ``flush`` or ``close`` returned normally.
``failed_records`` is every admitted record that was not delivered: after a
failure midway, the records written since the last good flush, those in the
failing call and everything admitted afterwards.

When ``shutdown`` times out, the worker is abandoned: the batches still queued
(and one taken but not yet admitted) count as dropped, the report is made from
what was delivered by then, and when the exporter call in progress returns the
worker calls nothing more on the exporter, so nothing can change the report.

Nothing an exporter, a producer or a payload raises (any ``BaseException``,
one whose ``str()`` raises included) ends the worker thread. Should the thread
end anyway (a bug of the worker's own), the report says so: a ``worker``
failure, every batch it had not admitted counted as dropped, the warning file
written, and later submits dropped and counted.
"""

from __future__ import annotations

import collections
import math
import operator
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import compress
from pathlib import Path
from typing import Any, Final, Literal

from ._export.redact import redacted
from ._export.report import (
    WARNING_FILE,
    ExportFailure,
    ExportReport,
    Method,
    describe_exception,
    log_error,
    write_warning_file,
)
from ._export.shown import shown
from .context import ExporterContext
from .exporter import Exporter, is_permanent
from .factory import FactoryFailure, call_factory, load_exporter
from .mapping import records_from_payload
from .records import ExportRecord, RecordBatch

__all__ = [
    "NO_PAYLOAD",
    "WARNING_FILE",
    "ExportFailure",
    "ExportReport",
    "ExportWorker",
    "describe_exception",
    "write_warning_file",
]

_stream_of = operator.attrgetter("STREAM")

_LONGEST_WAIT = 3600.0
"""The longest single timed wait: a longer one (an infinite flush interval) overflows."""


_PAYLOAD: Final = "payload"
_RECORDS: Final = "records"
_DEFERRED: Final = "deferred"

NO_PAYLOAD: Final = object()
"""What a ``submit_deferred`` producer returns for "nothing to export" (not a skipped unit)."""
_Batch = tuple[Literal["payload", "records", "deferred"], Any]


class ExportWorker:
    """Run one exporter on its own thread, the way TraceML's export worker does.

    ``exporter`` is the setting value (``"jsonl"`` or ``"module:factory"``) or
    a factory callable; either is resolved on the thread that calls ``start``.
    """

    def __init__(
        self,
        exporter: str | Callable[[ExporterContext], object],
        context: ExporterContext,
        *,
        queue_size: int = 1024,
        flush_interval_s: float = 1.0,
        max_batches_per_write: int = 64,
        thread_name: str = "traceml-export-worker",
        warning_path: Path | None = None,
    ) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size must be at least 1, got {queue_size}")
        if max_batches_per_write < 1:
            raise ValueError(
                f"max_batches_per_write must be at least 1, got {max_batches_per_write}"
            )
        if not flush_interval_s > 0:  # NaN too; math.inf means "at shutdown only"
            raise ValueError(f"flush_interval_s must be positive, got {flush_interval_s}")
        self._setting = exporter
        self.label = exporter if isinstance(exporter, str) else _callable_name(exporter)
        self.context = context
        self.warning_path = warning_path or context.session_root / "aggregator" / WARNING_FILE
        """Where the loss is recorded (TraceML's place unless a caller moves it)."""
        self._selected = frozenset(context.streams)
        self._streams = context.streams
        self._queue_size = queue_size
        self._flush_interval = flush_interval_s
        self._max_batches = max_batches_per_write
        self._thread_name = thread_name
        self._queue: collections.deque[_Batch] = collections.deque()
        # One lock guards the queue and every figure of the report, so a report
        # made while the thread is still running (timed out) reads a consistent state.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._waiting = False
        self._stopping = False
        self._abandoned = False
        self._in_flight = 0  # batches taken off the queue, not yet admitted
        self._started = False
        self._finished = False  # the thread ran to its end (or was abandoned)
        self._dead = False  # the thread ended early; submits are dropped
        # Set as the thread's last act. Thread.is_alive() cannot be trusted after a join
        # that Ctrl-C interrupted (it may say False while the thread still runs).
        self._ended = False
        self._report: ExportReport | None = None
        self._thread: threading.Thread | None = None
        self._exporter: Exporter | None = None
        self._opened = False
        self._call_now: tuple[Method, float] | None = None
        self._failure: ExportFailure | None = None
        self._dropped = 0
        self._skipped = 0
        self._admitted = 0
        self._delivered = 0
        self._by_stream: dict[str, int] = dict.fromkeys(context.streams, 0)

    # -- producer side ---------------------------------------------------------

    def start(self) -> ExportWorker:
        """Resolve the factory on this thread, then start the worker thread."""
        if self._started:
            raise RuntimeError("ExportWorker.start() called twice")
        self._started = True
        if isinstance(self._setting, str):
            loaded = load_exporter(self._setting, self.context)
        else:
            loaded = call_factory(self._setting, self.context, self.label)
        if isinstance(loaded, FactoryFailure):
            self._fail("factory", loaded.error, permanent=True)
        else:
            self._exporter = loaded
        self._thread = threading.Thread(target=self._main, name=self._thread_name, daemon=True)
        self._thread.start()
        return self

    def submit(self, payload: Any) -> bool:
        """Queue one telemetry payload; False when the queue was full and it was dropped."""
        return self._put((_PAYLOAD, payload))

    def submit_records(self, records: Sequence[ExportRecord]) -> bool:
        """Queue ready records (of any class with ``STREAM``); same selection and accounting."""
        return self._put((_RECORDS, records))

    def submit_deferred(self, produce: Callable[[], Any]) -> bool:
        """Queue a payload that the worker thread makes by calling ``produce()``.

        For a producer that only reads bytes (a replay): decoding on the worker
        thread keeps the two threads from contending for the GIL over every
        payload. ``produce`` returning ``NO_PAYLOAD`` adds nothing (not a skipped
        unit); raising counts one skipped unit; returning a ``RecordBatch`` (a
        producer that mapped the payload itself) admits its records as
        ``submit_records`` does and adds its skipped units. Same queue, drop and
        accounting as ``submit``.
        """
        return self._put((_DEFERRED, produce))

    def _put(self, batch: _Batch) -> bool:
        with self._lock:
            if self._stopping:
                raise RuntimeError("ExportWorker is shut down; submit before shutdown()")
            if self._dead or len(self._queue) >= self._queue_size:
                self._dropped += 1
                return False
            self._queue.append(batch)
            if self._waiting:
                self._cond.notify()
            return True

    def shutdown(self, timeout: float | None = 30.0) -> ExportReport:
        """Drain the queue, flush, close; write the warning file if anything was lost.

        After ``timeout`` seconds the batches still queued count as dropped,
        the report is made from what was delivered by then, and the worker
        calls nothing more on the exporter (see the module docstring).
        ``None`` or ``math.inf`` waits as long as the exporter takes.

        Raises:
            ValueError: ``timeout`` is NaN.
        """
        if self._report is not None:
            return self._report
        if timeout is not None and math.isnan(timeout):
            raise ValueError("shutdown timeout must be a number of seconds or None, got nan")
        if timeout is not None and timeout >= threading.TIMEOUT_MAX:
            timeout = None
        if not self._started:
            self.start()
        assert self._thread is not None
        with self._lock:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout)
        if self._ended and not self._finished and not self._dead:
            self._died("the worker thread ended without finishing")
        with self._lock:
            timed_out = not self._ended
            if timed_out:
                self._abandoned = True
                self._dropped += len(self._queue) + self._in_flight
                self._in_flight = 0
                self._queue.clear()
            report = ExportReport(
                exporter=self.label,
                admitted_records=self._admitted,
                delivered_records=self._delivered,
                dropped_batches=self._dropped,
                skipped_units=self._skipped,
                admitted_by_stream={s: n for s, n in self._by_stream.items() if n},
                failure=self._failure,
                timed_out=timed_out,
            )
        if report.exporter_failed or report.dropped_batches or report.timed_out:
            path, error = write_warning_file(
                self.context.session_root,
                {"export": report.warning_block()},
                self.warning_path,
            )
            report = replace(report, warning_path=path, warning_error=error)
        self._report = report
        return report

    def __enter__(self) -> ExportWorker:
        return self.start() if not self._started else self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def thread(self) -> threading.Thread | None:
        """The worker thread (None before ``start``)."""
        return self._thread

    @property
    def queued_batches(self) -> int:
        """Batches waiting in the queue now; a producer that must not drop waits while it is high."""
        return len(self._queue)

    @property
    def delivered_records(self) -> int:
        """Records a ``flush`` or ``close`` has returned for so far, in submission order."""
        with self._lock:
            return self._delivered

    @property
    def opened(self) -> bool:
        """The exporter's ``open`` returned (and nothing has failed since)."""
        return self._opened and self._failure is None

    @property
    def call_in_progress(self) -> tuple[Method, float] | None:
        """The exporter method running now and when it started (Unix time), or None: a
        watcher sees a call that hangs, which nothing else shows until it returns."""
        return self._call_now

    @property
    def failure(self) -> ExportFailure | None:
        """The failure that stopped export so far, if any."""
        return self._failure

    # -- worker thread ---------------------------------------------------------

    def _fail(
        self,
        method: Method,
        error: str,
        *,
        permanent: bool = False,
        error_type: type[BaseException] | None = None,
    ) -> None:
        error = redacted(error)  # kept in status and warning files others may read
        self._failure = ExportFailure(method, error, permanent, error_type)
        self._exporter = None
        log_error(
            "[TraceML] exporter %r failed in %s: %s; export stopped for this run, "
            "the loss is recorded in %s",
            self.label,
            method,
            shown(error),
            WARNING_FILE,
        )

    def _died(self, error: str) -> None:
        """The thread ends early: count what it will never admit, refuse what comes next."""
        with self._lock:
            if self._abandoned or self._dead:
                return
            self._dead = True
            self._dropped += len(self._queue) + self._in_flight
            self._queue.clear()
            self._in_flight = 0
            if self._failure is None:
                self._fail("worker", error)
            else:
                self._exporter = None
                log_error("[TraceML] export worker %r: %s", self.label, error)

    def _main(self) -> None:
        try:
            try:
                self._run()
            except BaseException as exc:  # a bug of the worker's own: report it, never vanish
                self._died(f"the worker thread died: {describe_exception(exc)}")
            else:
                self._finished = True
        finally:
            self._ended = True

    def _call(self, method: Method, *args: Any, **kwargs: Any) -> bool:
        exporter = self._exporter
        if exporter is None or self._abandoned:
            return False
        self._call_now = (method, time.time())
        try:
            getattr(exporter, method)(*args, **kwargs)
        except BaseException as exc:  # any raise stops export; the run goes on
            if not self._abandoned:
                self._fail(
                    method,
                    describe_exception(exc),
                    permanent=is_permanent(exc),
                    error_type=type(exc),
                )
            return False
        finally:
            self._call_now = None
        return True

    def _admit(self, group: list[_Batch]) -> list[Any]:
        """Map or filter a group of batches to their selected records, and admit them."""
        records: list[Any] = []
        by_stream: collections.Counter[str] = collections.Counter()
        skipped = 0
        selected = self._selected
        for kind, value in group:
            try:
                if kind == _DEFERRED:
                    value = value()
                    if value is NO_PAYLOAD:
                        continue
                    if type(value) is RecordBatch:  # the producer mapped its payload itself
                        skipped += value.skipped
                        value = value.records
                        kind = _RECORDS
                    else:
                        kind = _PAYLOAD
                if kind == _PAYLOAD:
                    mapped = records_from_payload(value, streams=self._streams)
                    batch = mapped.records
                    batch_streams = list(map(_stream_of, batch))
                    skipped += mapped.skipped
                else:
                    batch = list(value)
                    batch_streams = list(map(_stream_of, batch))
                    if not selected.issuperset(batch_streams):
                        keep = list(map(selected.__contains__, batch_streams))
                        batch = list(compress(batch, keep))
                        batch_streams = list(compress(batch_streams, keep))
                counts = collections.Counter(batch_streams)
                if not selected.issuperset(counts):
                    raise ValueError("a record's STREAM is not one of the selected")
            # Not a payload, not records, or a producer or value raising anything at all
            # (SystemExit, KeyboardInterrupt from a __str__): one lost unit, never the thread.
            except BaseException:
                skipped += 1
                continue
            records += batch
            by_stream.update(counts)
        with self._lock:
            self._in_flight = 0
            if self._abandoned:  # already counted as dropped by the report
                return []
            self._skipped += skipped
            if records:
                self._admitted += len(records)
                for stream, count in by_stream.items():
                    self._by_stream[stream] += count
        return records

    def _deliver(self, count: int) -> None:
        with self._lock:
            if not self._abandoned:
                self._delivered += count

    def _run(self) -> None:
        self._opened = self._call("open")
        pending = 0
        last_flush = time.monotonic()
        interval = self._flush_interval
        most = self._max_batches
        lock = self._lock
        wait = self._cond.wait
        queue = self._queue
        group: list[_Batch] | None
        while True:
            with lock:
                while not queue and not self._stopping:
                    self._waiting = True
                    try:
                        if pending and self._exporter is not None:
                            remaining = interval - (time.monotonic() - last_flush)
                            if remaining <= 0:
                                break
                            if not wait(min(remaining, _LONGEST_WAIT)):
                                break
                        else:
                            wait()
                    finally:
                        self._waiting = False
                if self._abandoned:
                    self._finished = True
                    return
                if len(queue) > most:
                    group = [queue.popleft() for _ in range(most)]
                elif queue:
                    group = list(queue)
                    queue.clear()
                elif self._stopping:
                    break
                else:
                    group = None
                if group:
                    self._in_flight = len(group)
            if group:
                records = self._admit(group)
                if records and self._call("write", records):
                    pending += len(records)
            if pending and time.monotonic() - last_flush >= interval:
                if self._call("flush"):
                    self._deliver(pending)
                pending = 0
                last_flush = time.monotonic()
        if pending:
            if self._call("flush"):
                self._deliver(pending)
            pending = 0
        with lock:
            dropped = self._dropped
        self._call("close", dropped_batches=dropped)


def _callable_name(factory: Callable[..., object]) -> str:
    module = getattr(factory, "__module__", None) or "?"
    name = getattr(factory, "__qualname__", None) or repr(factory)
    return f"{module}:{name}"
