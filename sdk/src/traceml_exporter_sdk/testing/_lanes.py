"""Several exporter instances at once, as ``follow --logs-dir`` runs them, and whose run a
read-back record came from.

A ``Lane`` is one instance on an ``ExportWorker`` of its own, its factory called on a
job thread of its own (``follow --logs-dir`` starts each run's follower so), fed one
batch at a time: the checks interleave lanes' calls batch by batch. Each lane's
records carry their own ``observed_timestamp_unix_ns`` range, so a record read back
names the lane that wrote it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from ..context import ExporterContext
from ..worker import ExportReport, ExportWorker
from . import _compare as cmp
from ._harness import WORKER_THREAD, CallLog, Factory, _paced, _wait_for, recording_factory
from .corpus import OBSERVED_BASE_NS, corpus_batches
from .environment import Env

__all__ = [
    "SPAN_NS",
    "Lane",
    "as_traceml_run",
    "lane_base",
    "lane_batches",
    "lane_of",
    "lanes_delivered_problems",
    "origins",
    "run_problems",
]

SPAN_NS = 1_000_000
"""Each lane's records are stamped within ``[base, base + SPAN_NS)``."""


def lane_base(index: int) -> int:
    """The first ``observed_timestamp_unix_ns`` of lane ``index``'s records."""
    return OBSERVED_BASE_NS + (index + 1) * 1_000_000_000


def lane_batches(index: int, streams: Iterable[str] | None = None) -> list[list[Any]]:
    """The sample corpus, stamped in lane ``index``'s own range."""
    return corpus_batches(
        None if streams is None else tuple(streams), observed_base_ns=lane_base(index)
    )


def origins(actual: cmp.ReadBack, lanes: Mapping[int, str]) -> Counter[str]:
    """How many read-back records each lane wrote (by lane label); ``"?"``: none did."""
    found: Counter[str] = Counter()
    for rows in actual.values():
        for row in rows:
            stamp = row.get("observed_timestamp_unix_ns")
            index = None
            if type(stamp) is int and stamp >= OBSERVED_BASE_NS + 1_000_000_000:
                index, offset = divmod(stamp - OBSERVED_BASE_NS, 1_000_000_000)
                index = index - 1 if offset < SPAN_NS else None
            found[lanes.get(index, "?") if index is not None else "?"] += 1
    return found


def lane_of(row: Mapping[str, Any], lanes: Mapping[int, str]) -> str:
    """The label of the lane that wrote ``row`` (``"?"``: none)."""
    return next(iter(origins({"": [dict(row)]}, lanes)))


def lanes_delivered_problems(
    env: Env,
    context: ExporterContext,
    required: Sequence[Any],
    actual: cmp.ReadBack,
    lanes: Mapping[int, str],
    dropped: str,
) -> list[str]:
    """How ``actual`` differs from ``required``, leaving out rows of the lanes labelled
    ``dropped`` (what an instance that failed or was killed may or may not have written);
    where the sink stamps its own observed time, only that nothing is missing."""
    if origins(actual, lanes).get("?"):
        expected = env.expected(required, context)
        return [
            f"{stream}: wrote {len(rows)} records, read back {len(actual.get(stream, []))}"
            for stream, rows in expected.items()
            if len(actual.get(stream, [])) < len(rows)
        ]
    kept = {
        stream: [row for row in rows if lane_of(row, lanes) != dropped]
        for stream, rows in actual.items()
    }
    return env.delivery_problems(required, context, kept)


def run_problems(
    env: Env, run: str, context: ExporterContext, own: Sequence[Any], lanes: Mapping[int, str]
) -> list[str]:
    """How run ``run``'s read-back differs from exactly ``own`` (its instances' records),
    in the reader's terms: another run's records in it, its own missing."""
    actual = env.read_back(context)
    if actual is None:
        return []
    if env.aggregating:
        problems = env.delivery_problems(own, context, actual)
        return (
            [f"run {run}'s export is not exactly its own records:", *problems] if problems else []
        )
    found = origins(actual, lanes)  # a sink that stamps its own observed time: all "?"
    out = [
        f"run {other}'s records are in run {run}'s export ({count} of them)"
        for other, count in sorted(found.items())
        if other not in (run, "?")
    ]
    if not out:
        problems = env.delivery_problems(own, context, actual)
        if problems:
            out = [f"run {run}'s export lacks some of its own records:", *problems]
    return out


def as_traceml_run(context: ExporterContext) -> ExporterContext:
    """``context``, its folder laid out as a TraceML 0.5.0 run that ``follow`` follows: its
    manifest, its database and the follower's own folder are there before the exporter."""
    root = context.session_root
    (root / "manifest.json").write_text('{"telemetry_status": "running"}\n', "utf-8")
    (root / "aggregator" / "follow").mkdir(parents=True)
    (root / "aggregator" / "telemetry").write_bytes(b"")
    return context


class Lane:
    """One exporter instance on its own worker thread, started from its own job thread."""

    def __init__(self, factory: Factory, context: ExporterContext, label: str) -> None:
        self.label = label
        self.context = context
        self.log = CallLog()
        self.worker = ExportWorker(
            recording_factory(factory, self.log),
            context,
            queue_size=4096,
            flush_interval_s=1e-9,
            thread_name=f"{WORKER_THREAD}-{label}",
        )
        self.sent = 0
        self.report: ExportReport | None = None
        job = threading.Thread(target=self.worker.start, name=f"traceml-conformance-job-{label}")
        job.start()
        job.join(30)
        _wait_for(self._opened)  # the lanes' calls interleave in a fixed order, opens too

    def _opened(self) -> bool:
        done = any(call.method == "open" and call.done for call in self.log.calls)
        return done or self.worker.failure is not None or not self.worker.thread

    @property
    def failure(self) -> str | None:
        failure = self.worker.failure
        return None if failure is None else f"{failure.method}: {failure.error}"

    def send(self, batch: Sequence[Any]) -> bool:
        """Hand over one batch and wait until it was written and flushed; False once the
        instance failed (nothing more is called on it)."""
        if self.worker.failure is not None or self.report is not None:
            return False
        self.worker.submit_records(batch)
        self.sent += 1
        _wait_for(partial(_paced, self.log, self.worker, self.sent))
        return self.worker.failure is None

    def finish(self, timeout: float = 30.0) -> ExportReport:
        """Shut the worker down (close, unless the instance failed)."""
        if self.report is None:
            self.report = self.worker.shutdown(timeout)
        return self.report

    def delivered(self) -> list[Any]:
        """Every record a flush that returned acknowledged (as snapshots)."""
        out: list[Any] = []
        pending: list[Any] = []
        for call in self.log.calls:
            if call.method == "write" and call.ok and call.snapshot is not None:
                pending.extend(call.snapshot)
            elif call.method in ("flush", "close") and call.ok:
                out += pending
                pending = []
        return out
