"""Crash safety: after SIGKILL, or with a torn last record, readers lose only that record."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from crash_driver import flushed, kill_mid_run
from exporter_calls import run
from sink_support import accumulator, log_root, read_records
from traceml_exporter_sdk import ExporterContext, StepTimeRecord

NS = 1_712_345_678_901_234_567
TAG = "step_time/fwd/cuda:0/n_calls"


@pytest.mark.parametrize("trial", range(3))
def test_sigkill_mid_run_keeps_every_flushed_record(tmp_path: Path, trial: int) -> None:
    rng = random.Random(trial)  # noqa: S311 - kill timing, not a secret
    session, progress = tmp_path / "session", tmp_path / "progress.jsonl"
    kill_mid_run(session, progress, flushes=10 + 10 * trial, rng=rng)
    done = flushed(progress).get("step_time", 0)
    assert done, "no flush completed before the kill"
    root = log_root(ExporterContext.create(session, export_streams="all"))
    steps = [row["step"] for row in read_records(root)["step_time"]]
    assert steps == list(range(len(steps))), "a record twice, or a gap"
    assert len(steps) >= done, "a flushed record is missing"
    points = accumulator(root / "rank_0").Scalars(TAG)
    assert [(p.step, p.value) for p in points] == [(s, float(s)) for s in steps]


def test_a_torn_last_record_loses_only_that_record(tmp_path: Path) -> None:
    """Cut the file anywhere inside its last record, as a crash mid-write leaves it."""
    context = ExporterContext.create(tmp_path / "session", export_streams="all")
    events = {"fwd": {"cuda:0": {"is_gpu": True, "cpu_ms": 0.5, "n_calls": 1}}}
    records = [
        StepTimeRecord(NS, 0, 0, 0, 1, 1, 0, None, NS, step, step, events)  # type: ignore[arg-type]
        for step in range(5)
    ]
    run(context, records[:4], records[4:])
    (path,) = log_root(context).glob("rank_0/events.out.tfevents.*")
    whole = path.read_bytes()
    last = len(whole) - _last_record_size(whole)
    for cut in sorted({last + 1, last + 8, last + 12, last + 40, len(whole) - 4, len(whole) - 1}):
        path.write_bytes(whole[:cut])
        steps = [row["step"] for row in read_records(log_root(context))["step_time"]]
        assert steps == [0, 1, 2, 3], f"cut at {cut} of {len(whole)}"
        points = accumulator(path.parent).Scalars(TAG)
        assert [p.step for p in points] == [0, 1, 2, 3]


def _last_record_size(data: bytes) -> int:
    offset = size = 0
    while offset < len(data):
        size = 16 + int.from_bytes(data[offset : offset + 8], "little")
        offset += size
    assert offset == len(data)
    return size
