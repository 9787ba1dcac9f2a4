"""``replay`` stops early without losing track: a stalled exporter, Ctrl-C, --shutdown-timeout.

Each subprocess has a timeout, so a hang fails the test instead of blocking it.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from cli_helpers import (
    CLI,
    all_stream_payloads,
    cli_env,
    create_tables,
    error_lines,
    insert_rows,
    read_export,
    run_cli,
    step_time_payload,
    write_jsonl,
)
from traceml_exporter_sdk import records_from_payload

WARNING = Path("aggregator") / "finalization_warning.json"

STALLING = """
import threading

class Stalling:
    def open(self):
        pass
    def write(self, records):
        threading.Event().wait()  # never returns
    def flush(self):
        pass
    def close(self, *, dropped_batches=0):
        pass

def make(context):
    return Stalling()
"""


def _lines(payloads: int) -> bytes:
    return b"".join(orjson.dumps(step_time_payload(0, s)) + b"\n" for s in range(payloads))


# -- a stalled exporter (2) ---------------------------------------------------------


def test_a_stalled_exporter_ends_the_replay_within_the_shutdown_timeout(tmp_path: Path) -> None:
    (tmp_path / "stalling.py").write_text(STALLING)
    path = write_jsonl(tmp_path / "p.jsonl", [step_time_payload(0, s) for s in range(200)])
    started = time.monotonic()
    result = run_cli(
        "replay",
        "stalling:make",
        "--payloads",
        str(path),
        "--session-root",
        "r",
        "--shutdown-timeout",
        "1",
        cwd=tmp_path,
        pythonpath=[tmp_path],
        timeout=60,
    )
    assert time.monotonic() - started < 30
    assert result.returncode == 4, result.stderr
    [line] = error_lines(result)
    assert line.startswith(
        "traceml-exporter: error: exporter 'stalling:make' stalled: the exporter took no "
        "batch for 1 s (--shutdown-timeout); reading stopped after "
    )
    assert "the rest of the input was not replayed" in line
    assert line.endswith(f"the loss is recorded in {(tmp_path / 'r' / WARNING).resolve()}")
    data = json.loads((tmp_path / "r" / WARNING).read_text())
    assert data["export"]["timed_out"] is True
    assert data["export"]["dropped_batches"] > 0
    assert data["replay"]["stopped"] == "stalled"
    assert 0 < data["replay"]["submitted_items"] < 200


def test_a_stalled_exporter_ends_a_sqlite_backfill_too(tmp_path: Path) -> None:
    (tmp_path / "stalling.py").write_text(STALLING)
    db = tmp_path / "run.sqlite"
    create_tables(db, ["process"])
    record = next(
        r for p in all_stream_payloads() for r in records_from_payload(p).records
        if r.STREAM == "process"
    )  # fmt: skip
    row = {k: v for k, v in record.to_dict().items() if k not in ("stream", "schema_version")}
    insert_rows(db, "process", [row])
    columns = ", ".join(row)
    with sqlite3.connect(db) as conn:
        for _ in range(16):  # 65,536 rows: 33 batches of 2,000, more than the queue holds
            conn.execute(
                f"INSERT INTO process_samples ({columns}) SELECT {columns} FROM process_samples"
            )
    conn.close()
    result = run_cli(
        "replay", "stalling:make", "--sqlite", str(db), "--streams", "process",
        "--session-root", "r", "--shutdown-timeout", "1",
        cwd=tmp_path, pythonpath=[tmp_path], timeout=60,
    )  # fmt: skip
    assert result.returncode == 4, result.stderr
    [line] = error_lines(result)
    assert "stalled: the exporter took no batch for 1 s (--shutdown-timeout)" in line
    assert "of 65,536; the rest of the input was not replayed" in line
    data = json.loads((tmp_path / "r" / WARNING).read_text())
    assert data["replay"]["stopped"] == "stalled"
    assert data["replay"]["stopped_at"].startswith("at row ")


# -- Ctrl-C (12) ---------------------------------------------------------------------


def test_a_cli_child_of_the_tests_takes_ctrl_c_however_the_runner_was_started() -> None:
    """tests/conftest.py undoes an ignored SIGINT inherited from a background runner:
    without it the Ctrl-C tests below hang instead of testing anything."""
    check = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    done = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, check=True, timeout=30
    )
    assert done.stdout.strip() == "True", done.stdout


def test_ctrl_c_mid_replay_drains_what_was_read_closes_and_records_it(tmp_path: Path) -> None:
    """The payloads come through a FIFO that stays open, so the replay is mid-run
    (waiting for more) when SIGINT arrives."""
    fifo = tmp_path / "payloads.fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [*CLI, "replay", "jsonl", "--payloads", str(fifo), "--session-root", "r"],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    writer = fifo.open("wb", buffering=0)
    try:
        writer.write(_lines(40))
        export = tmp_path / "r" / "aggregator" / "export" / "step_time.jsonl"
        deadline = time.monotonic() + 30
        # The worker flushes every second: wait until all 40 are in the file.
        while not (export.exists() and export.read_bytes().count(b"\n") >= 40):
            assert time.monotonic() < deadline, "the replay did not export the first payloads"
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        writer.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    records, closing = read_export(tmp_path / "r", "step_time")
    assert len(records) == 40
    assert closing == [
        {"stream": "step_time", "closing": True, "written_records": 40, "dropped_batches": 0}
    ]
    [line] = [ln for ln in stderr.splitlines() if ln.strip()]
    assert line.startswith(
        "traceml-exporter: error: interrupted (Ctrl-C); reading stopped after 40 items"
    )
    assert line.endswith(f"this is recorded in {(tmp_path / 'r' / WARNING).resolve()}")
    assert "exporter                   ok (delivered 40 of 40 records)" in stdout
    data = json.loads((tmp_path / "r" / WARNING).read_text())
    assert data["replay"]["stopped"] == "interrupted"
    assert data["replay"]["submitted_items"] == 40
    assert data["export"]["failed_records"] == 0


STUCK_AT_CLOSE = """
import threading
from pathlib import Path

class StuckAtClose:
    def __init__(self, context):
        self.marker = context.session_root / "closing"
    def open(self):
        pass
    def write(self, records):
        pass
    def flush(self):
        pass
    def close(self, *, dropped_batches=0):
        self.marker.write_text("")
        threading.Event().wait()  # never returns

def make(context):
    return StuckAtClose(context)
"""


def test_ctrl_c_while_waiting_for_the_exporter_stops_the_wait_and_records_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "stuck.py").write_text(STUCK_AT_CLOSE)
    path = write_jsonl(tmp_path / "p.jsonl", [step_time_payload(0, s) for s in range(5)])
    proc = subprocess.Popen(
        [*CLI, "replay", "stuck:make", "--payloads", str(path), "--session-root", "r"],
        cwd=tmp_path,
        env={**cli_env(), "PYTHONPATH": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "r" / "closing").exists():
            assert time.monotonic() < deadline, "the replay never reached close"
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)  # the default shutdown timeout is 60 s
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    [line] = [ln for ln in stderr.splitlines() if ln.strip()]
    assert line.startswith(
        "traceml-exporter: error: interrupted (Ctrl-C) while waiting for the exporter to "
        "finish; the whole input was read"
    )
    assert "TIMED OUT at shutdown" in stdout, stdout
    data = json.loads((tmp_path / "r" / WARNING).read_text())
    assert data["export"]["timed_out"] is True
    assert data["replay"]["stopped"] == "interrupted"
    assert data["replay"]["submitted_items"] is None


# -- --shutdown-timeout ----------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "0", "-1"])
def test_a_shutdown_timeout_that_is_not_positive_is_exit_2(tmp_path: Path, value: str) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [step_time_payload(0, 1)])
    result = run_cli(
        "replay", "jsonl", "--payloads", str(path), "--shutdown-timeout", value, cwd=tmp_path
    )
    assert result.returncode == 2
    assert error_lines(result) == [
        "traceml-exporter: error: --shutdown-timeout must be a positive number of seconds "
        "(inf: wait as long as the exporter takes)"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.jsonl"]


def test_an_infinite_shutdown_timeout_waits_for_the_exporter(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [step_time_payload(0, s) for s in range(3)])
    result = run_cli(
        "replay", "jsonl", "--payloads", str(path), "--shutdown-timeout", "inf",
        "--session-root", "r", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "ok (delivered 3 of 3 records)" in result.stdout
