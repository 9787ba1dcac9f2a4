"""Shared helpers of the runtime tests: payloads, a recording exporter, jsonl reading."""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from payloads import envelope as build_envelope
from traceml_exporter_sdk import ExporterContext

T0 = 1_750_000_000_000_000_000
"""A 19-digit Unix-nanosecond time, as 0.5.1+ ranks send."""

EVENT = "_traceml_internal:forward_time"


envelope = functools.partial(
    build_envelope, ranks_per_node=8, world_size=64, hostname="node-a", timestamp=T0
)
"""An envelope of this suite's cluster: 64 ranks, 8 a node, every one on host ``node-a``
(``omit=("hostname",)``: a rank that sends none)."""


def step_rows(first_step: int, count: int, *, events: Any = None) -> list[dict[str, Any]]:
    """``count`` step_time rows with steps ``first_step ..``; one event unless given."""
    if events is None:
        events = {
            EVENT: {
                "cuda:0": {
                    "is_gpu": True,
                    "duration_ms": 1.5,
                    "cpu_ms": 1.25,
                    "gpu_ms": 1.5,
                    "n_calls": 1,
                }
            }
        }
    return [
        {"seq": step, "timestamp": T0 + step, "step": step, "events": events}
        for step in range(first_step, first_step + count)
    ]


def step_payload(rank: int, first_step: int, count: int, **meta_kw: Any) -> list[dict[str, Any]]:
    """One rank's tick carrying ``count`` steps: ``count`` StepTimeRecords."""
    return [
        envelope(
            rank=rank,
            sampler="StepTimeSampler",
            table="StepTimeTable",
            rows=step_rows(first_step, count),
            **meta_kw,
        )
    ]


def all_streams_payload(rank: int, **meta_kw: Any) -> list[dict[str, Any]]:
    """One envelope per sampler: one record of each of the seven streams (two GPUs: 8 records)."""
    return [
        envelope(
            rank=rank,
            sampler="RuntimeEnvironmentSampler",
            table="RuntimeEnvironmentTable",
            rows=[
                {
                    "ts": T0,
                    "seq": 0,
                    "topology": "single_node_multi_process",
                    "distributed_initialized": True,
                    "distributed_backend": "gloo",
                    "training_strategy": "ddp",
                    "strategy_source": "runtime_model",
                    "strategy_confidence": "high",
                }
            ],
            **meta_kw,
        ),
        envelope(
            rank=rank,
            sampler="SystemSampler",
            table="SystemTable",
            rows=[
                {
                    "seq": 1,
                    "ts": T0 + 1,
                    "cpu": 12.5,
                    "ram_used": 1e9,
                    "ram_total": 8e9,
                    "gpu_available": True,
                    "gpu_count": 2,
                    "gpus": [
                        [50.0, 1e9, 8e9, 60.0, 100.0, 300.0],
                        [0.0, 0.0, 8e9, 40.0, 0.0, 300.0],
                    ],
                }
            ],
            **meta_kw,
        ),
        envelope(
            rank=rank,
            sampler="ProcessSampler",
            table="ProcessTable",
            rows=[
                {
                    "seq": 1,
                    "ts": T0 + 2,
                    "cpu": 150.0,
                    "cpu_cores": 8,
                    "ram_used": 5e8,
                    "ram_total": 8e9,
                    "gpu_available": True,
                    "gpu_count": 2,
                    "gpu": {"device": 0, "mem_used": 1e9, "mem_reserved": 2e9, "mem_total": 8e9},
                }
            ],
            **meta_kw,
        ),
        envelope(
            rank=rank,
            sampler="StepTimeSampler",
            table="StepTimeTable",
            rows=step_rows(0, 1),
            **meta_kw,
        ),
        envelope(
            rank=rank,
            sampler="StepMemorySampler",
            table="step_memory",
            rows=[
                {
                    "seq": 1,
                    "ts": T0 + 3,
                    "device": "cuda:0",
                    "step": 0,
                    "peak_alloc": 1e9,
                    "peak_resv": 2e9,
                }
            ],
            **meta_kw,
        ),
        envelope(
            rank=rank,
            sampler="Stdout/Stderr",
            table="stdout_stderr",
            rows=[{"line": "epoch 1 loss=0.5"}],
            **meta_kw,
        ),
    ]


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(record lines, closing lines) of one jsonl file, split on ``\\n`` only."""
    records: list[dict[str, Any]] = []
    closing: list[dict[str, Any]] = []
    with path.open(encoding="utf-8", newline="\n") as handle:
        for line in handle:
            assert line.endswith("\n"), f"{path}: last line has no newline"
            data = json.loads(line)
            (closing if "closing" in data else records).append(data)
    return records, closing


def context(root: Path, streams: str | None = None, *, hostname: bool = False) -> ExporterContext:
    return ExporterContext.create(root / "session", streams, hostname)


def warning_of(ctx: ExporterContext) -> dict[str, Any]:
    """The ``export`` block of ``finalization_warning.json``."""
    path = ctx.session_root / "aggregator" / "finalization_warning.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    assert set(data) == {"export"}
    block: dict[str, Any] = data["export"]
    return block


@dataclass
class Call:
    method: str
    thread: int
    at: float
    records: int = 0
    dropped_batches: int | None = None


@dataclass
class Recorder:
    """Everything that happened to one exporter, shared with the test."""

    calls: list[Call] = field(default_factory=list)
    written: list[Any] = field(default_factory=list)
    factory_thread: int | None = None
    overlaps: int = 0

    def methods(self) -> list[str]:
        return [call.method for call in self.calls]


class RecordingExporter:
    """Records every call (thread, time, size) and detects overlapping calls.

    ``fail`` maps a method name to the 1-based call number that raises
    (``{"write": 2}``: the second write raises). ``block`` maps a method name to
    an Event that call waits on; ``entered`` is set when a blocking call starts.
    ``busy_s`` keeps each call running a little, so an overlapping call would be
    seen by the ``busy`` lock.
    """

    def __init__(
        self,
        recorder: Recorder,
        *,
        fail: dict[str, int] | None = None,
        block: dict[str, threading.Event] | None = None,
        busy_s: float = 0.0,
    ) -> None:
        self.recorder = recorder
        self._fail = fail or {}
        self._block = block or {}
        self._busy_s = busy_s
        self._busy = threading.Lock()
        self._counts: dict[str, int] = {}
        self.entered = threading.Event()

    def _enter(self, method: str, **info: Any) -> None:
        if not self._busy.acquire(blocking=False):
            self.recorder.overlaps += 1
            self._busy.acquire()
        try:
            self.recorder.calls.append(
                Call(method, threading.get_ident(), time.monotonic(), **info)
            )
            count = self._counts[method] = self._counts.get(method, 0) + 1
            if method in self._block:
                self.entered.set()
                self._block[method].wait()
            if self._busy_s:
                time.sleep(self._busy_s)
            if self._fail.get(method) == count:
                raise RuntimeError(f"{method} failed on purpose (call {count})")
        finally:
            self._busy.release()

    def open(self) -> None:
        self._enter("open")

    def write(self, records: Sequence[Any]) -> None:
        self._enter("write", records=len(records))
        self.recorder.written.extend(records)

    def flush(self) -> None:
        self._enter("flush")

    def close(self, *, dropped_batches: int = 0) -> None:
        self._enter("close", dropped_batches=dropped_batches)


def recording_factory(
    recorder: Recorder, **kwargs: Any
) -> Callable[[ExporterContext], RecordingExporter]:
    """A factory that notes the thread it runs on and returns a RecordingExporter."""

    def make(_context: ExporterContext) -> RecordingExporter:
        recorder.factory_thread = threading.get_ident()
        return RecordingExporter(recorder, **kwargs)

    return make


def count_records(payloads: Iterable[Any], streams: Sequence[str]) -> int:
    from traceml_exporter_sdk import records_from_payload

    return sum(len(records_from_payload(p, streams=streams).records) for p in payloads)


# -- exporter modules -------------------------------------------------------------

WriteModule = Callable[[str, str], str]

GOOD = """
import threading

CALLS = []


class Exporter:
    def open(self): pass
    def write(self, records): pass
    def flush(self): pass
    def close(self, *, dropped_batches=0): pass


def make_exporter(context):
    CALLS.append((threading.get_ident(), context))
    return Exporter()
"""


# Each failure the contract lists: (module source or None for no module, attribute, kind, text).
FAILURES: dict[str, tuple[str | None, str, str, str]] = {
    "module_not_found": (None, "make_exporter", "import", "No module named"),
    "import_error_inside": (
        "import rt_dependency_that_is_not_installed\n",
        "make_exporter",
        "import",
        "rt_dependency_that_is_not_installed",
    ),
    "missing_attribute": (GOOD, "make_exporterr", "attribute", "has no attribute 'make_exporterr'"),
    "exception_at_import": (
        "raise RuntimeError('bad config at import')\n",
        "make",
        "exception",
        "bad config at import",
    ),
    "system_exit_at_import": ("import sys\nsys.exit(3)\n", "make", "system_exit", "SystemExit(3)"),
    "exception_in_factory": (
        "def make(context):\n    raise KeyError('no endpoint')\n",
        "make",
        "exception",
        "no endpoint",
    ),
    "system_exit_in_factory": (
        "import sys\ndef make(context):\n    sys.exit('bye')\n",
        "make",
        "system_exit",
        "SystemExit('bye')",
    ),
    "factory_returns_none": (
        "def make(context):\n    return None\n",
        "make",
        "none",
        "returned None",
    ),
    "attribute_not_callable": ("make = 42\n", "make", "exception", "not callable"),
    "module_getattr_raises": (
        "def __getattr__(name):\n    raise RuntimeError('lazy attribute failed')\n",
        "make",
        "exception",
        "lazy attribute failed",
    ),
}


def failing_setting(write_module: WriteModule, case: str) -> tuple[str, str, str]:
    """Write the module of a FAILURES case; return (setting, kind, text)."""
    source, attribute, kind, text = FAILURES[case]
    name = "rt_module_that_does_not_exist" if source is None else write_module(case, source)
    return f"{name}:{attribute}", kind, text
