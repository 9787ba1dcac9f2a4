"""``replay --sqlite``: a finished run's projection tables, in id order, through the exporter."""

from __future__ import annotations

import dataclasses
import json
import random
import sqlite3
import typing
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import create_tables, error_lines, insert_rows, read_export, run_cli
from traceml_exporter_sdk import RECORD_TYPES
from traceml_exporter_sdk.streams import ALL_STREAMS

NON_NULL = {"observed_timestamp_unix_ns", "gpu_idx", "line", "events"}
INTS = [0, 1, -3, 7, 1_760_000_000_123_456_789, 2**63 - 1]
FLOATS = [0.0, 1.5, -2.25, 1e300, 123456.789]
STRS = ["", "node-a", "héllo \u2028 wörld\n", "x" * 300]


def _value(rng: random.Random, name: str, hint: Any) -> Any:
    members = set(typing.get_args(hint) or (hint,))
    if name == "events":
        return (
            {
                "_traceml_internal:forward_time": {
                    "cpu": {
                        "is_gpu": False,
                        "duration_ms": rng.choice(FLOATS),
                        "cpu_ms": 1.0,
                        "gpu_ms": None,
                        "n_calls": 1,
                    },
                    "cuda:0": {
                        "is_gpu": True,
                        "duration_ms": None,
                        "cpu_ms": None,
                        "gpu_ms": 0.0,
                        "n_calls": None,
                    },
                }
            }
            if rng.random() < 0.8
            else {}
        )
    if name == "line":
        return rng.choice(STRS[1:])
    if type(None) in members and name not in NON_NULL and rng.random() < 0.3:
        return None
    if int in members:
        if name in ("gpu_available", "distributed_initialized"):
            return rng.choice([0, 1])
        return (
            rng.choice(INTS[:5])
            if name != "observed_timestamp_unix_ns"
            else INTS[4] + rng.randrange(10**6)
        )
    if float in members:
        return rng.choice(FLOATS)
    return rng.choice(STRS)


def _rows(stream: str, count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    [cls] = [t for t in RECORD_TYPES if stream == t.STREAM]
    hints = typing.get_type_hints(cls)
    return [
        {f.name: _value(rng, f.name, hints[f.name]) for f in dataclasses.fields(cls)}
        for _ in range(count)
    ]


def _as_exported(stream: str, row: dict[str, Any]) -> dict[str, Any]:
    return {"stream": stream, "schema_version": 1, **row}


def _run(db: Path, tmp_path: Path, *extra: str) -> Any:
    return run_cli(
        "replay",
        "jsonl",
        "--sqlite",
        str(db),
        "--session-root",
        str(tmp_path / "run"),
        *extra,
        cwd=tmp_path,
    )


def test_every_table_exported_in_id_order_equal_to_the_rows(tmp_path: Path) -> None:
    db = tmp_path / "run.sqlite"
    create_tables(db, ALL_STREAMS)
    rows = {stream: _rows(stream, 40 + i, seed=i) for i, stream in enumerate(ALL_STREAMS)}
    for stream, stream_rows in rows.items():
        insert_rows(db, stream, stream_rows)
    # ids are not the insertion order once rows are deleted and re-added: id order rules.
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM step_time_samples WHERE id = 3")
    conn.close()
    del rows["step_time"][2]
    result = _run(db, tmp_path, "--streams", "all", "--hostname")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    for stream in ALL_STREAMS:
        records, closing = read_export(tmp_path / "run", stream)
        assert records == [_as_exported(stream, row) for row in rows[stream]], stream
        assert closing[0]["written_records"] == len(rows[stream])
    lines = result.stdout.splitlines()
    assert lines[0] == f"backfill of {db} ({sum(map(len, rows.values()))} rows) into jsonl"
    for stream in ALL_STREAMS:
        assert f"  {stream:<24} {len(rows[stream])}" in lines
    assert "missing tables" not in result.stdout
    assert "skipped units              0" in lines
    assert "exporter                   ok (delivered " in result.stdout


def test_hostname_dropped_unless_asked(tmp_path: Path) -> None:
    db = tmp_path / "run.sqlite"
    create_tables(db, ["process"])
    rows = _rows("process", 5, seed=9)
    insert_rows(db, "process", rows)
    result = _run(db, tmp_path, "--streams", "process")
    assert result.returncode == 0, result.stderr
    records, _ = read_export(tmp_path / "run", "process")
    expected = [_as_exported("process", row) for row in rows]
    for record in expected:
        del record["hostname"]
    assert records == expected


def test_missing_tables_export_what_is_there(tmp_path: Path) -> None:
    db = tmp_path / "partial.sqlite"
    create_tables(db, ["step_time", "process", "stdout_stderr"])
    rows = {s: _rows(s, 6, seed=1) for s in ("step_time", "process", "stdout_stderr")}
    for stream, stream_rows in rows.items():
        insert_rows(db, stream, stream_rows)
    result = _run(db, tmp_path, "--streams", "all")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert (
        "missing tables             step_memory_samples, system_samples, system_gpu_samples, "
        "runtime_environment" in lines
    )
    assert (
        "tables read                step_time_samples (6 rows), process_samples (6 rows), "
        "stdout_stderr_samples (6 rows)" in lines
    )
    for stream in ("step_time", "process", "stdout_stderr"):
        records, _ = read_export(tmp_path / "run", stream)
        assert len(records) == 6
        assert f"  {stream:<24} 6" in lines
    for stream in ("step_memory", "system", "system_gpu", "runtime_environment"):
        # The jsonl exporter makes a stream's file with its first record.
        assert not (tmp_path / "run" / "aggregator" / "export" / f"{stream}.jsonl").exists()
        assert f"  {stream:<24} 0" in lines


def test_only_selected_streams_are_read_and_reported(tmp_path: Path) -> None:
    db = tmp_path / "partial.sqlite"
    create_tables(db, ["step_time"])
    insert_rows(db, "step_time", _rows("step_time", 3, seed=2))
    result = _run(db, tmp_path)  # default export_streams: step_time
    assert result.returncode == 0, result.stderr
    assert "missing tables" not in result.stdout
    assert "  step_time                3" in result.stdout


def test_no_table_of_the_selected_streams_exit_3(tmp_path: Path) -> None:
    db = tmp_path / "other.sqlite"
    create_tables(db, ["process"])
    result = _run(db, tmp_path, "--streams", "system")
    assert result.returncode == 3
    assert error_lines(result) == [
        f"traceml-exporter: error: {db} has no readable table of the selected streams "
        "(system, system_gpu): system_samples, system_gpu_samples"
    ]
    assert not (tmp_path / "run").exists()


def test_bad_events_json_is_a_skipped_unit_with_its_id(tmp_path: Path) -> None:
    db = tmp_path / "run.sqlite"
    create_tables(db, ["step_time"])
    rows = _rows("step_time", 4, seed=3)
    insert_rows(db, "step_time", rows)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE step_time_samples SET events_json = '{oops' WHERE id = 2")
        conn.execute("UPDATE step_time_samples SET events_json = '[1]' WHERE id = 4")
    conn.close()
    result = _run(db, tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "skipped units              2" in lines
    assert any(
        line.startswith("  step_time_samples id 2: events_json is not valid JSON") for line in lines
    )
    assert "  step_time_samples id 4: events_json is a JSON list, not an object" in lines
    records, _ = read_export(tmp_path / "run", "step_time")
    assert len(records) == 2


def test_table_lacking_columns_is_reported(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    create_tables(db, ["step_time"])
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE process_samples (id INTEGER PRIMARY KEY AUTOINCREMENT, recv_ts_ns INTEGER)"
        )
    conn.close()
    insert_rows(db, "step_time", _rows("step_time", 2, seed=4))
    result = _run(db, tmp_path, "--streams", "step_time,process")
    assert result.returncode == 0, result.stderr
    [line] = [ln for ln in result.stdout.splitlines() if ln.startswith("unreadable table")]
    assert line.startswith(
        "unreadable table           process_samples (lacks columns observed_timestamp_unix_ns, rank,"
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "database not found: {db}"),
        (lambda p: p.write_text("hello, not sqlite"), "{db} is not a SQLite database"),
        (lambda p: p.mkdir(), "{db} is a directory, not a SQLite database"),
    ],
    ids=["missing", "not-sqlite", "directory"],
)
def test_unusable_database_exit_3(make: Any, message: str, tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    make(db)
    result = _run(db, tmp_path)
    assert result.returncode == 3
    assert error_lines(result) == ["traceml-exporter: error: " + message.format(db=db)]


def test_empty_file_has_no_tables(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.write_bytes(b"")
    result = _run(db, tmp_path)
    assert result.returncode == 3
    assert error_lines(result) == [
        f"traceml-exporter: error: {db} has no readable table of the selected streams "
        "(step_time): step_time_samples"
    ]


def test_database_is_not_modified(tmp_path: Path) -> None:
    db = tmp_path / "run.sqlite"
    create_tables(db, ["step_time"])
    insert_rows(db, "step_time", _rows("step_time", 3, seed=5))
    before = db.read_bytes()
    assert _run(db, tmp_path).returncode == 0
    assert db.read_bytes() == before


# -- issue 9 items 4-6: coerced as the payload path, one bad row never stops the rest ----


def _step_db(tmp_path: Path, rows: int = 4) -> Path:
    db = tmp_path / "run.sqlite"
    create_tables(db, ["step_time"])
    insert_rows(db, "step_time", _rows("step_time", rows, seed=11))
    return db


def test_dynamic_sqlite_types_are_coerced_as_the_payload_path(tmp_path: Path) -> None:
    db = _step_db(tmp_path)
    events = '{"fwd":{"cpu":{"is_gpu":1,"duration_ms":2,"cpu_ms":"x","n_calls":' + "9" * 30 + "}}}"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE step_time_samples SET step = x'00ff', rank = '7', global_rank = 'seven', "
            "timestamp_unix_ns = 1700000000.25, seq = 2.5, hostname = 5, events_json = ? WHERE id = 2",
            (events,),
        )
    conn.close()
    result = _run(db, tmp_path, "--hostname")
    assert result.returncode == 0, result.stderr
    export = tmp_path / "run" / "aggregator" / "export" / "step_time.jsonl"
    records = [json.loads(line) for line in export.read_text().splitlines()][:-1]  # json: exact
    assert len(records) == 4
    row = records[1]
    assert row["step"] is None  # a BLOB is not an int
    assert row["rank"] == 7  # an identity int parses text, as the payload path's meta
    assert row["global_rank"] is None
    assert row["timestamp_unix_ns"] is None  # float seconds or REAL: not integer ns
    assert row["seq"] is None
    assert row["hostname"] == "5"
    assert row["events"] == {
        "fwd": {
            "cpu": {
                "is_gpu": None,
                "duration_ms": 2.0,
                "cpu_ms": None,
                "gpu_ms": None,
                "n_calls": int("9" * 30),
            }
        }
    }


def test_deeply_nested_events_json_is_one_skipped_row(tmp_path: Path) -> None:
    db = _step_db(tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE step_time_samples SET events_json = ? WHERE id = 3",
            ("[" * 100_000 + "]" * 100_000,),
        )
        conn.execute(
            "UPDATE step_time_samples SET events_json = ? WHERE id = 1",
            ('{"a":' * 100_000 + "1" + "}" * 100_000,),
        )
    conn.close()
    result = _run(db, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "skipped units              2" in result.stdout.splitlines()
    records, _ = read_export(tmp_path / "run", "step_time")
    assert len(records) == 2


def test_rows_that_cannot_be_records_are_skipped_with_their_ids(tmp_path: Path) -> None:
    db = tmp_path / "run.sqlite"
    create_tables(db, ["system_gpu", "stdout_stderr"])
    insert_rows(db, "system_gpu", _rows("system_gpu", 3, seed=12))
    insert_rows(db, "stdout_stderr", _rows("stdout_stderr", 3, seed=13))
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE system_gpu_samples SET gpu_idx = 'one' WHERE id = 2")
        conn.execute("UPDATE stdout_stderr_samples SET line = '' WHERE id = 1")
        conn.execute(
            "UPDATE stdout_stderr_samples SET observed_timestamp_unix_ns = NULL WHERE id = 3"
        )
    conn.close()
    result = _run(db, tmp_path, "--streams", "all")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "skipped units              3" in lines
    assert "  system_gpu_samples id 2: gpu_idx is str, not an integer" in lines
    assert "  stdout_stderr_samples id 1: line is empty" in lines
    assert (
        "  stdout_stderr_samples id 3: observed_timestamp_unix_ns is NULL, not an integer" in lines
    )
    assert len(read_export(tmp_path / "run", "system_gpu")[0]) == 2
    assert len(read_export(tmp_path / "run", "stdout_stderr")[0]) == 1


def _corrupt_overflow_page(db: Path, marker: bytes) -> None:
    """Point the overflow chain of the row holding ``marker`` at a page that is not there."""
    data = bytearray(db.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    first = data.index(marker)
    # The marker's second page is an overflow page: its first 4 bytes are the next page.
    page = (first // page_size + 1) * page_size
    data[page : page + 4] = (0x7FFFFFF0).to_bytes(4, "big")
    db.write_bytes(bytes(data))


def test_corrupt_page_midway_marks_the_export_partial(tmp_path: Path) -> None:
    db = tmp_path / "run.sqlite"
    create_tables(db, ["step_time"])
    rows = _rows("step_time", 3000, seed=14)
    big = {"big": {"cpu": {"is_gpu": False, "x": "Q" * 20_000}}}
    rows[2500]["events"] = big
    insert_rows(db, "step_time", rows)
    _corrupt_overflow_page(db, b"QQQQQQQQ")
    result = _run(db, tmp_path)
    assert result.returncode == 3
    [error] = error_lines(result)
    warning = tmp_path / "run" / "aggregator" / "finalization_warning.json"
    assert error.endswith(f"the export is partial (recorded in {warning})"), error
    block = json.loads(warning.read_text())["backfill"]
    assert block["partial"] is True
    assert block["rows_total"] == 3000
    assert 0 < block["rows_read"] < 3000
    assert "malformed" in block["error"] or "corrupt" in block["error"]
