"""What the checks share: a recording proxy and two drivers (resources: ``_resources``).

The proxy wraps the author's factory and exporter, and logs every call
(method, thread, batch, timing, error) before handing it on unchanged, so a
check sees what really happened on which thread. It relies only on the four
method names; records are passed through untouched, whatever their class.

Two drivers move an exporter through its lifecycle:

* ``run_worker`` uses the SDK's ``ExportWorker`` (a real dedicated thread that
  behaves like TraceML's export worker). It is the driver for every check that
  the worker can express.
* ``run_script`` plays a fixed call sequence on one dedicated thread, for the
  legal sequences the worker never produces on its own (``flush`` with nothing
  written, two ``flush`` calls in a row, ``close`` with records never flushed,
  ``close(dropped_batches=3)``). Like the worker it calls the factory on the
  calling thread and stops at the first method that raises.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..context import ExporterContext
from ..worker import ExportReport, ExportWorker
from ._records import snapshots
from ._resources import Snapshot

__all__ = [
    "Call",
    "CallLog",
    "RecordingExporter",
    "Run",
    "Snapshot",
    "recording_factory",
    "run_script",
    "run_worker",
]

Factory = Callable[[ExporterContext], Any]
METHODS = ("open", "write", "flush", "close")
DRIVER_THREAD = "traceml-conformance-driver"
WORKER_THREAD = "traceml-conformance-worker"


# -- the recording proxy -------------------------------------------------------


@dataclass
class Call:
    """One call the proxy saw: which method, on which thread, with what, and how it ended."""

    method: str
    thread_id: int
    thread_name: str
    start: float
    records: Sequence[Any] | None = None
    """The records as handed to ``write`` (the exporter may have changed them since)."""
    snapshot: Sequence[Any] | None = None
    """Copies of ``records`` taken before the exporter saw them: what expected values use."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    end: float | None = None
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.end is not None

    @property
    def ok(self) -> bool:
        return self.end is not None and self.error is None


class CallLog:
    """The calls of one run, in order (appends are atomic, so any thread may log)."""

    def __init__(self, keep_records: bool = True, *, snapshot: bool = True) -> None:
        self.keep_records = keep_records
        self.snapshot = snapshot
        """Copy each batch before the exporter sees it (off where only counts matter)."""
        self.calls: list[Call] = []
        # The exporters made, kept alive for the whole check: a leak must not be
        # hidden by the garbage collector closing what the exporter left open.
        self.exporters: list[Any] = []
        self.sched_open: tuple[int, int] | None = None
        self.sched_close: tuple[int, int] | None = None

    def runqueue_wait_s(self) -> float:
        """Seconds the exporter's thread waited for a CPU between open and close (Linux)."""
        if self.sched_open is None or self.sched_close is None:
            return 0.0
        return max(0, self.sched_close[1] - self.sched_open[1]) / 1e9

    def start(self, method: str, records: Sequence[Any] | None = None, **kwargs: Any) -> Call:
        thread = threading.current_thread()
        call = Call(
            method,
            threading.get_ident(),
            thread.name,
            time.perf_counter(),
            records=records if self.keep_records else None,
            snapshot=(
                snapshots(records)
                if self.snapshot and self.keep_records and records is not None
                else None
            ),
            kwargs=kwargs,
        )
        self.calls.append(call)
        return call

    def methods(self) -> list[str]:
        """The method names in call order, the factory included."""
        return [c.method for c in self.calls]

    def exporter_calls(self) -> list[Call]:
        return [c for c in self.calls if c.method in METHODS]

    def written(self) -> list[Any]:
        """Every record handed to a ``write`` that returned normally, in order, as it was
        before the exporter saw it (its snapshot)."""
        out: list[Any] = []
        for call in self.calls:
            kept = call.snapshot if call.snapshot is not None else call.records
            if call.method == "write" and call.ok and kept is not None:
                out.extend(kept)
        return out

    def handed(self) -> list[tuple[Any, Any]]:
        """``(record as handed over, its snapshot)`` for every record given to ``write``."""
        out: list[tuple[Any, Any]] = []
        for call in self.calls:
            if call.method == "write" and call.records is not None and call.snapshot is not None:
                out.extend(zip(call.records, call.snapshot, strict=True))
        return out

    def describe(self, limit: int = 12) -> str:
        """``open@traceml-...-worker, write(37)@..., ...`` for messages."""
        parts = []
        for call in self.calls[:limit]:
            label = call.method
            if call.method == "write" and call.records is not None:
                label += f"({len(call.records)})"
            if call.kwargs:
                label += "(" + ", ".join(f"{k}={v!r}" for k, v in call.kwargs.items()) + ")"
            if call.error:
                label += " RAISED"
            parts.append(f"{label}@{call.thread_name}")
        if len(self.calls) > limit:
            parts.append(f"... {len(self.calls) - limit} more")
        return ", ".join(parts)


class RecordingExporter:
    """Forward the four methods to the author's exporter, logging each call.

    A missing method raises ``AttributeError`` when it is called, exactly as
    it would inside TraceML's worker.
    """

    def __init__(self, inner: Any, log: CallLog) -> None:
        self.inner = inner
        self.log = log

    def open(self) -> None:
        self._forward("open", None, {})

    def write(self, records: Sequence[Any]) -> None:
        self._forward("write", records, {})

    def flush(self) -> None:
        self._forward("flush", None, {})

    def close(self, *, dropped_batches: int = 0) -> None:
        self._forward("close", None, {"dropped_batches": dropped_batches})

    def _forward(self, method: str, records: Sequence[Any] | None, kwargs: dict[str, Any]) -> None:
        if method == "open":
            self.log.sched_open = thread_schedstat()
        call = self.log.start(method, records, **kwargs)
        try:
            target = getattr(self.inner, method)
            if records is not None:
                target(records, **kwargs)
            else:
                target(**kwargs)
        except BaseException as exc:
            call.error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            call.end = time.perf_counter()
            if method == "close":
                self.log.sched_close = thread_schedstat()


def thread_schedstat() -> tuple[int, int] | None:
    """(CPU ns, run-queue wait ns) of the calling thread, from Linux's schedstat."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as handle:
            fields = handle.read().split()
        return int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        return None


def recording_factory(factory: Factory, log: CallLog) -> Callable[[ExporterContext], Any]:
    """Wrap ``factory`` so the call and the exporter it returns are logged."""

    def make(context: ExporterContext) -> Any:
        call = log.start("factory")
        try:
            exporter = factory(context)
        except BaseException as exc:
            call.error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            call.end = time.perf_counter()
        if exporter is None:
            return None
        log.exporters.append(exporter)
        return RecordingExporter(exporter, log)

    make.__name__ = make.__qualname__ = getattr(factory, "__qualname__", "factory")
    make.__module__ = getattr(factory, "__module__", None) or __name__
    return make


# -- drivers -------------------------------------------------------------------------


@dataclass
class Run:
    """What one driven lifecycle left behind."""

    log: CallLog
    before: Snapshot
    report: ExportReport | None = None
    thread: threading.Thread | None = None
    worker: ExportWorker | None = None

    @property
    def failure(self) -> str | None:
        """``method: error`` of the call that stopped the run, if any."""
        if self.report is not None and self.report.failure is not None:
            return f"{self.report.failure.method}: {self.report.failure.error}"
        for call in self.log.calls:
            if call.error is not None:
                return f"{call.method}: {call.error}"
        return None

    @property
    def failed_method(self) -> str | None:
        if self.report is not None and self.report.failure is not None:
            return self.report.failure.method
        for call in self.log.calls:
            if call.error is not None:
                return call.method
        return None

    @property
    def timed_out(self) -> bool:
        if self.report is not None:
            return self.report.timed_out
        return self.thread is not None and self.thread.is_alive()


def run_worker(
    factory: Factory,
    context: ExporterContext,
    batches: Iterable[Sequence[Any]] = (),
    *,
    payloads: Iterable[Any] = (),
    flush_interval_s: float = 3600.0,
    timeout: float = 30.0,
    keep_records: bool = True,
    log: CallLog | None = None,
    before: Snapshot | None = None,
    pace: bool = False,
    after_flush: Callable[[int], None] | None = None,
) -> Run:
    """Drive the exporter through ``ExportWorker``: records batches, then payloads, then shutdown.

    The queue is sized so nothing is dropped; ``flush_interval_s`` picks how
    often the worker flushes (tiny: after every write; large: once, before
    ``close``). The worker may hand several queued batches to one ``write``;
    ``pace`` submits the next records batch only once a flush has followed
    the previous one, so each batch gets its own write and flush; then
    ``after_flush(n)`` (if given) runs on the calling thread while the worker
    waits for batch ``n + 1``, the exporter open and idle.
    """
    log = log if log is not None else CallLog(keep_records)
    batches = list(batches)
    payloads = list(payloads)
    before = before if before is not None else Snapshot.take()
    worker = ExportWorker(
        recording_factory(factory, log),
        context,
        queue_size=len(batches) + len(payloads) + 1,
        flush_interval_s=flush_interval_s,
        thread_name=WORKER_THREAD,
    )
    worker.start()
    for index, batch in enumerate(batches, start=1):
        worker.submit_records(batch)
        if pace:
            _wait_for(partial(_paced, log, worker, index))
            if after_flush is not None and worker.failure is None:
                after_flush(index)
    for payload in payloads:
        worker.submit(payload)
    report = worker.shutdown(timeout)
    return Run(log, before, report=report, thread=worker.thread, worker=worker)


def _paced(log: CallLog, worker: ExportWorker, batches: int) -> bool:
    """True once ``batches`` flushes returned, or the worker stopped using the exporter."""
    flushes = sum(1 for c in log.calls if c.method == "flush" and c.done)
    return flushes >= batches or worker.failure is not None


def _wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def run_script(
    factory: Factory,
    context: ExporterContext,
    steps: Sequence[tuple[str, Any]],
    *,
    timeout: float = 30.0,
    keep_records: bool = True,
    at_pause: Callable[[], None] | None = None,
) -> Run:
    """Call the factory here, then play ``steps`` on one dedicated thread.

    A step is ``("open", None)``, ``("write", records)``, ``("flush", None)``
    or ``("close", dropped_batches)``. The first method that raises ends the
    script, and nothing more is called, as in TraceML's worker. A ``("pause",
    None)`` step holds the driver while ``at_pause()`` runs on the calling
    thread (the main thread, where the suite breaks a sink).
    """
    log = CallLog(keep_records)
    before = Snapshot.take()
    try:
        exporter = recording_factory(factory, log)(context)
    except Exception:
        return Run(log, before)
    if exporter is None:
        log.calls[-1].error = "the factory returned None"
        return Run(log, before)

    reached, resume = threading.Event(), threading.Event()

    def play() -> None:
        for method, arg in steps:
            try:
                if method == "pause":
                    reached.set()
                    resume.wait(timeout)
                elif method == "write":
                    exporter.write(arg)
                elif method == "close":
                    exporter.close(dropped_batches=arg or 0)
                else:
                    getattr(exporter, method)()
            except BaseException:
                return

    thread = threading.Thread(target=play, name=DRIVER_THREAD, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    if any(method == "pause" for method, _ in steps):
        while thread.is_alive() and not reached.wait(0.01) and time.monotonic() < deadline:
            pass
        try:
            if reached.is_set() and at_pause is not None:
                at_pause()
        finally:
            resume.set()
    thread.join(max(0.0, deadline - time.monotonic()))
    return Run(log, before, thread=thread)
