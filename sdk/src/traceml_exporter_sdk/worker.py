"""``ExportWorker``: drives one exporter exactly as TraceML's aggregator does.

The producer side (``submit``) never blocks: a bounded queue of payload batches,
and a full queue drops the batch and counts it. One background thread applies
the stream selection, then calls ``open`` once, ``write``/``flush`` as batches
arrive and the flush interval passes, and ``close`` once at shutdown, never
overlapping. After any exporter method raises, the worker calls nothing more
on it (not even ``close``), keeps admitting and counting batches, and records
the loss in ``<session_root>/aggregator/finalization_warning.json``.

Accounting: a record is *delivered* once a later ``flush`` or ``close``
returned normally. ``failed_records`` is every admitted record that was not
delivered: after a failure midway, the records written since the last good
flush, those in the failing call and everything admitted afterwards.
"""

from __future__ import annotations

import collections
import logging
import operator
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from .context import ExporterContext
from .exporter import Exporter
from .factory import FactoryFailure, call_factory, load_exporter
from .mapping import records_from_payload
from .records import ExportRecord

__all__ = ["WARNING_FILE", "ExportFailure", "ExportReport", "ExportWorker"]

LOG = logging.getLogger("traceml_exporter_sdk")
WARNING_FILE = "finalization_warning.json"

_stream_of = operator.attrgetter("STREAM")

Method = Literal["factory", "open", "write", "flush", "close"]


@dataclass(frozen=True, slots=True)
class ExportFailure:
    """The one failure that stopped export: which call, and what it raised."""

    method: Method
    error: str


@dataclass(frozen=True)
class ExportReport:
    """What a finished worker accounts for; the figures of ``finalization_warning.json``."""

    exporter: str
    admitted_records: int
    delivered_records: int
    dropped_batches: int
    skipped_units: int
    admitted_by_stream: dict[str, int] = field(default_factory=dict)
    failure: ExportFailure | None = None
    timed_out: bool = False
    warning_path: Path | None = None

    @property
    def failed_records(self) -> int:
        """Admitted records never delivered (0 for a healthy exporter that finished)."""
        return self.admitted_records - self.delivered_records

    @property
    def exporter_failed(self) -> bool:
        return self.failure is not None

    def warning_block(self) -> dict[str, Any]:
        """The ``export`` block written to ``finalization_warning.json``."""
        return {
            "exporter": self.exporter,
            "exporter_failed": self.exporter_failed,
            "failed_method": self.failure.method if self.failure else None,
            "error": self.failure.error if self.failure else None,
            "admitted_records": self.admitted_records,
            "failed_records": self.failed_records,
            "dropped_batches": self.dropped_batches,
            "timed_out": self.timed_out,
        }


_Batch = tuple[Literal["payload", "records"], Any]


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
        thread_name: str = "traceml-export-worker",
    ) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size must be at least 1, got {queue_size}")
        if flush_interval_s <= 0:
            raise ValueError(f"flush_interval_s must be positive, got {flush_interval_s}")
        self._setting = exporter
        self.label = exporter if isinstance(exporter, str) else _callable_name(exporter)
        self.context = context
        self._selected = frozenset(context.streams)
        self._streams = context.streams
        self._queue_size = queue_size
        self._flush_interval = flush_interval_s
        self._thread_name = thread_name
        self._queue: collections.deque[_Batch] = collections.deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._abandoned = False
        self._started = False
        self._report: ExportReport | None = None
        self._thread: threading.Thread | None = None
        self._exporter: Exporter | None = None
        self._failure: ExportFailure | None = None
        self._dropped = 0
        self._skipped = 0
        self._admitted = 0
        self._delivered = 0
        self._by_stream: collections.Counter[str] = collections.Counter()

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
            self._fail("factory", loaded.error)
        else:
            self._exporter = loaded
        self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        self._thread.start()
        return self

    def submit(self, payload: Any) -> bool:
        """Queue one telemetry payload; False when the queue was full and it was dropped."""
        return self._put(("payload", payload))

    def submit_records(self, records: Sequence[ExportRecord]) -> bool:
        """Queue ready records (of any class with ``STREAM``); same selection and accounting."""
        return self._put(("records", records))

    def _put(self, batch: _Batch) -> bool:
        with self._cond:
            if self._stopping:
                raise RuntimeError("ExportWorker is shut down; submit before shutdown()")
            if len(self._queue) >= self._queue_size:
                self._dropped += 1
                return False
            self._queue.append(batch)
            self._cond.notify()
            return True

    def shutdown(self, timeout: float | None = 30.0) -> ExportReport:
        """Drain the queue, flush, close; write the warning file if anything was lost.

        After ``timeout`` seconds the batches still queued count as dropped and
        the report is made from what was delivered by then.
        """
        if self._report is not None:
            return self._report
        if not self._started:
            self.start()
        assert self._thread is not None
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout)
        timed_out = self._thread.is_alive()
        with self._cond:
            if timed_out:
                self._abandoned = True
                self._dropped += len(self._queue)
                self._queue.clear()
            report = ExportReport(
                exporter=self.label,
                admitted_records=self._admitted,
                delivered_records=self._delivered,
                dropped_batches=self._dropped,
                skipped_units=self._skipped,
                admitted_by_stream=dict(self._by_stream),
                failure=self._failure,
                timed_out=timed_out,
            )
        if report.exporter_failed or report.dropped_batches or report.timed_out:
            path = _write_warning(self.context.session_root, report)
            report = _with_path(report, path)
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
    def failure(self) -> ExportFailure | None:
        """The failure that stopped export so far, if any."""
        return self._failure

    # -- worker thread ---------------------------------------------------------

    def _fail(self, method: Method, error: str) -> None:
        self._failure = ExportFailure(method, error)
        self._exporter = None
        LOG.error(
            "[TraceML] exporter %r failed in %s: %s; export stopped for this run, "
            "the loss is recorded in %s",
            self.label,
            method,
            error,
            WARNING_FILE,
        )

    def _call(self, method: Method, *args: Any, **kwargs: Any) -> bool:
        exporter = self._exporter
        if exporter is None:
            return False
        try:
            getattr(exporter, method)(*args, **kwargs)
        except BaseException as exc:  # any raise stops export; the run goes on
            self._fail(method, f"{type(exc).__name__}: {exc}")
            return False
        return True

    def _select(self, batch: _Batch) -> list[Any]:
        kind, value = batch
        if kind == "payload":
            mapped = records_from_payload(value, streams=self._streams)
            self._skipped += mapped.skipped
            records: list[Any] = mapped.records
        else:
            selected = self._selected
            records = [r for r in value if r.STREAM in selected]
        if records:
            self._admitted += len(records)
            self._by_stream.update(map(_stream_of, records))
        return records

    def _run(self) -> None:
        if self._exporter is not None:
            self._call("open")
        pending = 0
        last_flush = time.monotonic()
        interval = self._flush_interval
        cond = self._cond
        queue = self._queue
        while True:
            with cond:
                while not queue and not self._stopping:
                    if pending and self._exporter is not None:
                        remaining = interval - (time.monotonic() - last_flush)
                        if remaining <= 0 or not cond.wait(remaining):
                            break
                    else:
                        cond.wait()
                if self._abandoned:
                    break
                batch = queue.popleft() if queue else None
                if batch is None and self._stopping:
                    break
            if batch is not None:
                records = self._select(batch)
                if records and self._call("write", records):
                    pending += len(records)
            if pending and time.monotonic() - last_flush >= interval:
                if self._call("flush"):
                    self._delivered += pending
                pending = 0
                last_flush = time.monotonic()
        if pending and self._call("flush"):
            self._delivered += pending
            pending = 0
        with cond:
            dropped = self._dropped
        if self._call("close", dropped_batches=dropped):
            self._delivered += pending


def _callable_name(factory: Callable[..., object]) -> str:
    module = getattr(factory, "__module__", None) or "?"
    name = getattr(factory, "__qualname__", None) or repr(factory)
    return f"{module}:{name}"


def _write_warning(session_root: Path, report: ExportReport) -> Path | None:
    path = session_root / "aggregator" / WARNING_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_bytes(
            orjson.dumps({"export": report.warning_block()}, option=orjson.OPT_INDENT_2)
        )
        os.replace(tmp, path)
    except OSError as exc:
        LOG.error("[TraceML] could not write %s: %s", path, exc)
        return None
    return path


def _with_path(report: ExportReport, path: Path | None) -> ExportReport:
    from dataclasses import replace

    return replace(report, warning_path=path)
