"""Crash safety: SIGKILL mid-run loses nothing that was flushed and shows no torn file."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from crash_driver import flushed, kill_mid_run
from sink_support import query
from traceml_exporter_sdk import ExporterContext

from traceml_exporter_example.exporter import make_exporter

STREAMS = ("step_memory", "step_time")


@pytest.mark.parametrize("trial", range(4))
def test_sigkill_mid_run_keeps_every_flushed_record_once(tmp_path: Path, trial: int) -> None:
    rng = random.Random(trial)  # noqa: S311 - kill timing, not a secret
    session, progress = tmp_path / "session", tmp_path / "progress.jsonl"
    kill_mid_run(session, progress, flushes=20 + 15 * trial, rng=rng)
    done = flushed(progress)
    assert done, "no flush completed before the kill"
    export_dir = ExporterContext.create(session, export_streams="all").export_dir
    for stream in STREAMS:
        files = sorted((export_dir / stream).glob("*.parquet"))
        assert files
        assert not [f.name for f in files if f.name.startswith(".")]
        steps: list[Any] = [
            s for f in files for s in pq.read_table(f, columns=["step"])["step"].to_pylist()
        ]
        assert sorted(steps) == list(range(len(steps))), "a record twice, or a gap"
        assert len(steps) >= done[stream], f"{stream}: a flushed record is missing"
        glob = f"{export_dir / stream}/*.parquet"
        (row,) = query(f"SELECT count(*) AS n FROM read_parquet('{glob}')")  # noqa: S608
        assert row["n"] == len(steps)


def test_the_next_run_clears_what_the_kill_left(tmp_path: Path) -> None:
    session, progress = tmp_path / "session", tmp_path / "progress.jsonl"
    kill_mid_run(session, progress, flushes=30, rng=random.Random(7))  # noqa: S311
    context = ExporterContext.create(session, export_streams="all")
    before = {s: len(pq.read_table(context.export_dir / s)) for s in STREAMS}
    exporter = make_exporter(context)
    exporter.open()
    exporter.write([])
    exporter.flush()
    exporter.close()
    for stream in STREAMS:
        assert len(pq.read_table(context.export_dir / stream)) == before[stream]
    hidden = [p for p in context.export_dir.rglob(".*") if p.is_file()]
    assert hidden == [], "a temporary file outlived the next run"
