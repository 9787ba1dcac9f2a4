"""The follower's test writer makes the tables TraceML 0.5.0 makes (its own init_schema)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
from traceml_ai.aggregator.sqlite_writers import (
    process,
    runtime_environment,
    stdout_stderr,
    step_memory,
    step_time,
    system,
)
from traceml_exporter_sdk._bridge.sqlite_source import TABLE_BY_STREAM
from writer050 import Writer050

WRITERS = [runtime_environment, system, process, step_time, step_memory, stdout_stderr]


def columns(db: Path) -> dict[str, list[tuple[str, str, int]]]:
    with contextlib.closing(sqlite3.connect(db)) as connection:
        tables = [
            r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        ]
        return {
            table: [(r[1], r[2], r[3]) for r in connection.execute(f"PRAGMA table_info({table})")]
            for table in tables
            if table != "sqlite_sequence"
        }


def test_the_writer_makes_the_tables_of_traceml_0_5_0(tmp_path: Path) -> None:
    reference = tmp_path / "reference.db"
    with contextlib.closing(sqlite3.connect(reference)) as connection:
        for writer in WRITERS:
            writer.init_schema(connection)
    ours = Writer050(tmp_path / "run")
    ours.close()
    expected = columns(reference)
    assert set(expected) == set(TABLE_BY_STREAM.values())
    assert columns(ours.database) == expected


@pytest.mark.parametrize("status", ["complete", None])
def test_close_checkpoints_and_marks_the_manifest_as_the_aggregator_does(
    tmp_path: Path, status: str | None
) -> None:
    run = Writer050(tmp_path / "run")
    assert run.close(status=status)[0] == 0
    manifest = (run.root / "manifest.json").read_text()
    assert ('"telemetry_status": "complete"' in manifest) == (status == "complete")
