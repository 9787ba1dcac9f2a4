"""A million records from 64 ranks through ExportWorker into jsonl, every one accounted for."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
from runtime_helpers import T0, context, envelope
from traceml_exporter_sdk import ExporterContext, ExportWorker, JsonlExporter

RANKS = 64
TICKS = 125
STEPS, MEMORY, PROCESS, LINES = 100, 15, 5, 5  # records per rank per tick: 125
PER_STREAM = {
    "step_time": RANKS * TICKS * STEPS,
    "step_memory": RANKS * TICKS * MEMORY,
    "process": RANKS * TICKS * PROCESS,
    "stdout_stderr": RANKS * TICKS * LINES,
}
IN_FLIGHT = 40_000  # records the producer may be ahead of the exporter


def tick_payload(rank: int, tick: int) -> list[dict[str, Any]]:
    """One rank's tick, many rows per envelope; counters run on per rank across ticks."""
    # An events map on one step in 25 (decoding events is the mapper's dearest part).
    events = {"_traceml_internal:step_time": {"cpu": {"is_gpu": False, "cpu_ms": 1.0}}}
    none: dict[str, Any] = {}
    step0, mem0, proc0, line0 = tick * STEPS, tick * MEMORY, tick * PROCESS, tick * LINES
    return [
        envelope(
            rank=rank,
            sampler="StepTimeSampler",
            table="StepTimeTable",
            rows=[
                {"seq": tick, "timestamp": T0 + s, "step": s, "events": none if s % 25 else events}
                for s in range(step0, step0 + STEPS)
            ],
        ),
        envelope(
            rank=rank,
            sampler="StepMemorySampler",
            table="step_memory",
            rows=[
                {"seq": tick, "ts": T0 + s, "device": "cuda:0", "step": s, "peak_alloc": 1e9}
                for s in range(mem0, mem0 + MEMORY)
            ],
        ),
        envelope(
            rank=rank,
            sampler="ProcessSampler",
            table="ProcessTable",
            rows=[{"seq": s, "ts": T0 + s, "cpu": 99.5} for s in range(proc0, proc0 + PROCESS)],
        ),
        envelope(
            rank=rank,
            sampler="Stdout/Stderr",
            table="stdout_stderr",
            rows=[{"line": f"rank {rank} line {i}"} for i in range(line0, line0 + LINES)],
        ),
    ]


class PacedJsonl(JsonlExporter):
    """The jsonl exporter, telling the producer how far it got (so memory stays small)."""

    def __init__(self, ctx: ExporterContext, progress: threading.Condition) -> None:
        super().__init__(ctx)
        self.progress = progress
        self.written = 0

    def write(self, records: Sequence[Any]) -> None:
        super().write(records)
        with self.progress:
            self.written += len(records)
            self.progress.notify()


def test_a_million_records_over_64_ranks_are_all_accounted_for(tmp_path: Path) -> None:
    ctx = context(tmp_path, "all")
    progress = threading.Condition()
    exporters: list[PacedJsonl] = []

    def factory(c: ExporterContext) -> PacedJsonl:
        exporters.append(PacedJsonl(c, progress))
        return exporters[0]

    def wait_until_written(count: int) -> None:
        with progress:
            assert progress.wait_for(lambda: exporters[0].written >= count, timeout=120)

    worker = ExportWorker(factory, ctx, queue_size=RANKS * TICKS)
    worker.start()
    submitted = 0
    for tick in range(TICKS):
        for rank in range(RANKS):
            wait_until_written(submitted - IN_FLIGHT)
            assert worker.submit(tick_payload(rank, tick))
            submitted += STEPS + MEMORY + PROCESS + LINES
    report = worker.shutdown(timeout=None)

    assert submitted == 1_000_000
    assert report.failure is None
    assert report.dropped_batches == 0
    assert report.skipped_units == 0
    assert report.admitted_records == report.delivered_records == 1_000_000
    assert report.admitted_by_stream == PER_STREAM
    assert report.warning_path is None

    for stream, expected in PER_STREAM.items():
        lines = (ctx.export_dir / f"{stream}.jsonl").read_bytes().splitlines()
        assert len(lines) == expected + 1
        assert orjson.loads(lines[-1]) == {
            "stream": stream,
            "closing": True,
            "written_records": expected,
            "dropped_batches": 0,
        }
        # Order kept per rank: each rank's counter runs 0, 1, 2, ... in file order.
        field = {"step_time": "step", "step_memory": "step", "process": "seq"}.get(stream)
        seen = [0] * RANKS
        for line in lines[:-1]:
            record = orjson.loads(line)
            rank = record["rank"]
            if field is None:
                assert record["line"] == f"rank {rank} line {seen[rank]}"
            else:
                assert record[field] == seen[rank]
            seen[rank] += 1
        assert seen == [expected // RANKS] * RANKS
    # A selected stream that got no record (system, runtime_environment...) has no file.
    assert sorted(p.name for p in ctx.export_dir.iterdir()) == sorted(
        f"{s}.jsonl" for s in PER_STREAM
    )
