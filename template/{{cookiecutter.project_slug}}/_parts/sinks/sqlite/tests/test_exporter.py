"""Unit tests of the SQLite layout and its guarantees (the suite checks the contract)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any, ClassVar

import pytest
from exporter_calls import StrayRecord, is_permanent, refusal, run, written
from sink_support import read_export
from traceml_exporter_sdk import ExporterContext, ExportRecord, StdoutStderrRecord
from traceml_exporter_sdk.testing import expected_by_stream

from traceml_exporter_example.exporter import (
    DATABASE_FILE,
    ROW_ID,
    RUNS_TABLE,
    ExampleExporter,
    make_exporter,
    quote,
)


def database(context: ExporterContext) -> Path:
    return context.export_dir / DATABASE_FILE


def connect(context: ExporterContext) -> closing[sqlite3.Connection]:
    """A second connection, closed on exit (``with sqlite3.connect()`` only commits)."""
    return closing(sqlite3.connect(database(context)))


def count(context: ExporterContext, stream: str) -> int:
    """Rows of ``stream`` that another connection sees, i.e. committed ones."""
    return len(read_export(context)[stream])


def test_factory_only_stores_settings(context: ExporterContext) -> None:
    exporter = make_exporter(context)
    assert isinstance(exporter, ExampleExporter)
    assert not context.session_root.exists()


def test_wal_and_one_table_per_stream_from_columns(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(context, records)
    with connect(context) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        info = conn.execute('PRAGMA table_info("step_time")').fetchall()
    step_columns = tuple(c for c in records[0].COLUMNS if c != "hostname")
    assert tuple(row[1] for row in info) == (ROW_ID, "schema_version", *step_columns)
    assert {row[1]: row[2] for row in info}["events"] == "TEXT"
    assert set(written(context)) == {r.STREAM for r in records}


def test_rows_are_to_dict_without_hostname(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(context, records[:4], records[4:])
    assert written(context) == expected_by_stream(records)


def test_hostname_kept_when_asked(
    hostname_context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(hostname_context, records)
    assert written(hostname_context) == expected_by_stream(records, include_hostname=True)


def test_events_are_json_text(context: ExporterContext, records: list[ExportRecord]) -> None:
    run(context, records[:1])
    with connect(context) as conn:
        (text,) = conn.execute('SELECT events FROM "step_time"').fetchone()
    assert json.loads(text) == records[0].to_dict()["events"]


def test_a_lone_surrogate_is_stored_as_a_blob(context: ExporterContext) -> None:
    """SQLite text must be UTF-8: such a ``str`` is stored as its bytes and read back."""
    line = "lone \udcff, NUL \x00, U+2028 \u2028"
    run(context, [StdoutStderrRecord(1, 0, None, line), StdoutStderrRecord(2, 0, None, "ok")])
    with connect(context) as conn:
        stored = conn.execute('SELECT typeof(line) FROM "stdout_stderr" ORDER BY 1').fetchall()
    assert stored == [("blob",), ("text",)]
    assert [row["line"] for row in written(context)["stdout_stderr"]] == [line, "ok"]


def test_writes_are_committed_by_flush(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    exporter = make_exporter(context)
    exporter.open()
    exporter.write(records)
    exporter.write(records)
    assert count(context, "step_time") == 0
    exporter.flush()
    assert count(context, "step_time") == 6
    exporter.close()


def test_a_failure_rolls_back_to_the_last_flush_and_closes(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    class Broken:
        STREAM: ClassVar[str] = "step_time"
        SCHEMA_VERSION: ClassVar[int] = 1
        COLUMNS: ClassVar[tuple[str, ...]] = records[0].COLUMNS

        def to_dict(self) -> dict[str, Any]:
            raise RuntimeError("unreadable record")

    broken: ExportRecord = Broken()
    exporter = make_exporter(context)
    exporter.open()
    exporter.write(records[:1])
    exporter.flush()
    exporter.write(records[1:4])  # never flushed: TraceML counts these as failed
    with pytest.raises(RuntimeError, match="unreadable"):
        exporter.write([records[6], broken])
    assert {stream: len(rows) for stream, rows in written(context).items()} == {"step_time": 1}
    with pytest.raises(RuntimeError, match="not open"):
        exporter.close()


def test_close_commits_unflushed_writes_and_logs_the_run(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(context, records, dropped=3, flush=False)  # the suite reads the rows back
    with connect(context) as conn:
        runs = conn.execute(f"SELECT dropped_batches, written_records FROM {quote(RUNS_TABLE)}")  # noqa: S608
        ((dropped, per_stream),) = runs.fetchall()
    assert dropped == 3
    assert json.loads(per_stream)["step_time"] == 3


def test_an_older_table_is_widened(context: ExporterContext, records: list[ExportRecord]) -> None:
    database(context).parent.mkdir(parents=True)
    with connect(context) as conn:
        conn.execute('CREATE TABLE "stdout_stderr" (schema_version, rank, line)')
    run(context, records[6:7])
    (row,) = written(context)["stdout_stderr"]
    assert row == {**records[6].to_dict(), "stream": "stdout_stderr"}


def test_a_stream_no_table_may_be_named_after_is_refused_for_good(
    context: ExporterContext,
) -> None:
    error = refusal(context, StrayRecord())
    assert "refusing to use it as a table" in str(error)
    assert is_permanent(error)  # the same record is refused again: follow ends at once


def test_the_names_the_readme_gives_are_the_ones_written(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    """A reader follows the README: ``records.sqlite3``, its ``_export_runs`` and ``_row_id``."""
    run(context, records)
    assert (context.export_dir / "records.sqlite3").is_file()
    with connect(context) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert "_export_runs" in tables
        (stream, *_) = sorted(tables - {"_export_runs"})
        assert "_row_id" in {row[1] for row in conn.execute(f"PRAGMA table_info({stream})")}


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
def test_no_database_file_is_opened_through_a_planted_link(
    context: ExporterContext, suffix: str
) -> None:
    """Another user's link at the database's name or its journal's is refused: SQLite
    would follow it and write wherever it points."""
    context.export_dir.mkdir(parents=True)
    victim = context.session_root / "victim"
    victim.write_bytes(b"precious")
    (context.export_dir / f"{DATABASE_FILE}{suffix}").symlink_to(victim)
    with pytest.raises(OSError, match="symbolic link"):
        make_exporter(context).open()
    assert victim.read_bytes() == b"precious"


def test_every_commit_is_synced(context: ExporterContext) -> None:
    """synchronous=FULL: in WAL mode NORMAL would lose an acknowledged flush to a power
    cut (a setting of the connection, so it is read on the exporter's own)."""
    exporter = make_exporter(context)
    exporter.open()
    try:
        conn = exporter._conn
        assert conn is not None
        assert conn.execute("PRAGMA synchronous").fetchone() == (2,)
    finally:
        exporter.close()
