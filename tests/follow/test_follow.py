"""``traceml-exporter follow`` against a writer of TraceML 0.5.0's database (``writer050``).

The follower runs as its own process, as a user runs it beside ``traceml run``, so
it can be killed with SIGKILL and started again; the writer is this test.
``tests/traceml_real/test_follow_real.py`` runs the same scenarios against the real TraceML.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from follow_files import bookmark, status
from follow_helpers import (
    EXIT_INCOMPLETE,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_PERMANENT,
    expected,
    exported,
    finish,
    follow,
    orphan_launcher,
)
from waiting import wait_for
from writer050 import Writer050, corpus_records_050, step_records


def test_every_row_of_a_live_run_reaches_the_exporter_once(run: Writer050) -> None:
    """Flushes arrive while the follower runs; it ends by itself at the manifest's
    ``complete``; every row, all seven streams, equals the record of its payload."""
    batches = corpus_records_050()
    follower = follow(run.root)
    for batch in batches:
        run.flush(batch)
        time.sleep(0.005)
    busy, _, _ = run.close()
    code, out, err = finish(follower)
    assert (code, err) == (0, ""), out
    assert busy == 0, "the closing checkpoint gave up: the follower held a snapshot"
    assert exported(run.root) == expected(batches)
    assert "run                        complete" in out
    assert "table layout               TraceML 0.5.0's" in out
    folder = sorted(p.name for p in (run.root / "aggregator").iterdir())
    assert folder == ["export", "follow", "telemetry"], "the run folder holds only ours beside it"
    follow_dir = sorted(os.listdir(run.root / "aggregator" / "follow"))
    assert follow_dir == ["bookmark.json", "lock", "status.json"]
    assert status(run.root)["state"] == "done"
    assert status(run.root)["end"] == "complete"


READER = """
import sqlite3, sys
connection = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
connection.execute("SELECT count(*) FROM step_time_samples").fetchall()
print(flush=True)
sys.stdin.readline()
connection.close()
"""


@contextlib.contextmanager
def overlapping_read(database: Path) -> Iterator[None]:
    """Another process has the database open (a follower's read under way) until the block ends."""
    with subprocess.Popen(
        [sys.executable, "-c", READER, str(database)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as reader:
        assert reader.stdout is not None
        reader.stdout.readline()
        try:
            yield
        finally:
            reader.communicate("\n", timeout=30)


def test_a_read_overlapping_traceml_close_leaves_no_wal_behind(run: Writer050) -> None:
    """TraceML's closing checkpoint runs whole, but a read open at its close keeps SQLite
    from removing the then empty ``-wal``: the follower removes it as that close would,
    without touching the ``telemetry`` file."""
    records = step_records(0, 40)
    run.flush(records)
    with overlapping_read(run.database):
        busy, _, _ = run.close()
    wal = run.database.with_name("telemetry-wal")
    assert (busy, wal.stat().st_size) == (0, 0), "the overlap was not reproduced"
    before = run.database.read_bytes(), run.database.stat().st_mtime_ns
    code, out, err = finish(follow(run.root))
    assert (code, err) == (0, ""), out
    assert exported(run.root) == expected([records])
    assert sorted(p.name for p in (run.root / "aggregator").iterdir()) == [
        "export",
        "follow",
        "telemetry",
    ]
    assert (run.database.read_bytes(), run.database.stat().st_mtime_ns) == before


def test_a_wal_with_content_after_the_run_is_left_as_it_is(run: Writer050) -> None:
    """An aggregator whose last close did not checkpoint (another reader held the file)
    leaves rows only in the ``-wal``: the follower reads them and leaves the file be."""
    records = step_records(0, 40)
    run.flush(records)
    with overlapping_read(run.database):
        run.disconnect()
    run.write_manifest("complete", 0)
    wal = run.database.with_name("telemetry-wal")
    size = wal.stat().st_size
    assert size > 0, "the writer's close checkpointed after all"
    code, out, err = finish(follow(run.root))
    assert (code, err) == (0, ""), out
    assert exported(run.root) == expected([records])
    assert wal.stat().st_size == size


def test_started_before_the_run_it_waits_and_creates_nothing(tmp_path: Path) -> None:
    root = tmp_path / "logs" / "run1"
    follower = follow(root)
    assert follower.stderr is not None
    assert follower.stderr.readline() == f"follow: waiting up to 20 s for the run {root}\n"
    time.sleep(0.5)
    assert not root.exists(), "TraceML refuses a --run-name folder that already exists"
    run = Writer050(root, tables=("step_time",))
    records = step_records(0, 50)
    run.flush(records)
    run.close()
    code, out, err = finish(follower)
    assert (code, err) == (0, ""), out
    assert exported(root) == expected([records])


def test_tables_created_after_the_follower_started_are_read(run: Writer050) -> None:
    """0.5.0 creates its tables one by one: a follower may see five of seven."""
    run.connection.execute("DROP TABLE step_memory_samples")  # type: ignore[union-attr]
    from traceml_exporter_sdk.records import StepMemoryRecord

    follower = follow(run.root)
    time.sleep(0.5)
    run.create(StepMemoryRecord)
    batches = corpus_records_050()
    for batch in batches:
        run.flush(batch)
    run.close()
    code, out, err = finish(follower)
    assert (code, err) == (0, ""), out
    assert exported(run.root) == expected(batches)


def test_killed_and_started_again_it_loses_nothing_and_repeats_only_the_unacknowledged(
    run: Writer050,
) -> None:
    first = follow(run.root)
    for i in range(20):
        run.flush(step_records(i * 25, 25, observed=i))
        time.sleep(0.02)
    wait_for(lambda: (bookmark(run.root) or {}).get("last_id", {}).get("step_time_samples"))
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=10)
    acknowledged = bookmark(run.root)["last_id"]["step_time_samples"]  # type: ignore[index]
    for i in range(20, 40):
        run.flush(step_records(i * 25, 25, observed=i))
    second = follow(run.root)
    time.sleep(0.3)
    run.close()
    code, out, err = finish(second)
    assert (code, err) == (0, ""), out
    assert "resumed from the bookmark" in out
    steps = Counter(line["step"] for line in exported(run.root)["step_time"])
    assert set(steps) == set(range(1000)), "a row was lost"
    repeated = {step for step, count in steps.items() if count > 1}
    assert all(count <= 2 for count in steps.values())
    assert all(step >= acknowledged for step in repeated), "an acknowledged row came twice"


def test_an_exporter_failing_permanently_is_recorded_and_ends_the_follow(run: Writer050) -> None:
    follower = follow(
        run.root, spec="failing_exporter:make_exporter", FAIL_AFTER_WRITES="2", FAIL_PERMANENT="1"
    )
    run.flush(step_records(0, 10))
    wait_for(lambda: (bookmark(run.root) or {}).get("last_id", {}).get("step_time_samples"))
    for i in range(1, 30):
        run.flush(step_records(i * 10, 10, observed=i))
        time.sleep(0.02)
    code, out, err = finish(follower)
    busy, _, _ = run.close()
    assert code == EXIT_PERMANENT, out
    assert "failed in write: SinkRefusedError" in err
    assert "follow/finalization_warning.json" in err
    assert "failed permanently" in out
    warning = json.loads((run.root / "aggregator/follow/finalization_warning.json").read_text())
    assert warning["export"]["failed_method"] == "write"
    assert warning["follow"]["run_end"] == "exporter-failed"
    assert warning["follow"]["permanent_failure"] is True
    assert bookmark(run.root)["last_id"]["step_time_samples"] == 10, "only the flushed rows"  # type: ignore[index]
    assert not (run.root / "aggregator" / "finalization_warning.json").exists(), (
        "TraceML's own finalization_warning.json is TraceML's"
    )
    assert busy == 0


def test_a_run_whose_aggregator_died_ends_unfinished(run: Writer050) -> None:
    follower = follow(run.root)
    records = step_records(0, 100)
    run.flush(records)
    time.sleep(0.3)
    run.disconnect()  # no checkpoint, no manifest update: killed
    code, out, err = finish(follower)
    assert code == EXIT_INCOMPLETE, out
    assert "the aggregator is gone" in out
    assert "export is incomplete" in err
    assert exported(run.root) == expected([records]), "what was there is exported all the same"
    warning = json.loads((run.root / "aggregator/follow/finalization_warning.json").read_text())
    assert warning["follow"]["run_end"] == "aggregator-gone"


def test_a_run_its_launcher_marks_after_the_aggregator_exited_is_complete(run: Writer050) -> None:
    """TraceML's launcher marks the manifest only after its aggregator exited: a follower
    that sees the aggregator gone first waits for the mark (here 3 s after the exit)."""
    follower = follow(run.root)
    records = step_records(0, 100)
    run.flush(records)
    time.sleep(0.3)
    run.close(status=None)  # the aggregator's own end, no mark yet
    time.sleep(3.0)  # past the follower's 2 s look at the aggregator
    run.write_manifest("complete", 0)
    code, out, err = finish(follower)
    assert code == 0, (out, err)
    assert "NOT FINISHED" not in out
    assert exported(run.root) == expected([records])


HOLDER = """
import subprocess, sys
code = "import sys, time; f = open(sys.argv[1], 'rb'); print(flush=True); time.sleep(600)"
child = subprocess.Popen([sys.executable, "-c", code, sys.argv[1]], stdout=sys.stdout)
child.wait()
"""


def test_a_whole_run_killed_ends_without_waiting_for_a_mark(run: Writer050) -> None:
    """An aggregator (the child of a launcher) has the database open; both are killed:
    no launcher is left to mark the manifest, so the follow ends at its next look."""
    records = step_records(0, 50)
    run.flush(records)
    run.disconnect()
    launcher = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run.database)],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert launcher.stdout is not None
        launcher.stdout.readline()  # the aggregator has the database open
        follower = follow(run.root)
        wait_for(lambda: (bookmark(run.root) or {}).get("last_id", {}).get("step_time_samples"))
        os.killpg(launcher.pid, signal.SIGKILL)
        killed = time.monotonic()
        code, out, _err = finish(follower)
        took = time.monotonic() - killed
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)
        launcher.communicate()
    assert code == EXIT_INCOMPLETE, out
    assert "the aggregator is gone" in out
    assert took < 10, f"the follow waited {took:.1f} s for a mark no one was left to write"
    assert exported(run.root) == expected([records])


def test_an_orphaned_aggregator_quiet_past_the_idle_timeout_ends_unfinished(
    run: Writer050,
) -> None:
    """kill -9 of TraceML's launcher leaves its aggregator alive but orphaned: the idle rule
    applies to it (a run whose launcher lives is only quiet, see test_follow_service)."""
    run.flush(step_records(0, 10))
    run.disconnect()
    with orphan_launcher(run.root / "aggregator/telemetry") as launcher:
        follower = follow(run.root, "--idle-timeout", "1.5")
        # once a flush returned, it has read rows and noted the aggregator and its launcher
        wait_for(lambda: (bookmark(run.root) or {}).get("last_id", {}).get("step_time_samples"))
        launcher.kill()
        launcher.wait(10)
        code, out, _err = finish(follower)
    assert code == EXIT_INCOMPLETE, out
    assert "no new row for --idle-timeout" in out
    assert len(exported(run.root)["step_time"]) == 10


def test_rows_pruned_before_they_were_read_are_counted(run: Writer050) -> None:
    """Retention deleted rows a late follower never saw: an id gap, counted and recorded."""
    ids = run.flush(step_records(0, 100))["step_time_samples"]
    run.flush(step_records(100, 50), prune={"step_time_samples": ids[59]})
    run.close()
    code, out, err = finish(follow(run.root))
    assert code == EXIT_INCOMPLETE, out
    assert "pruned before read         60 rows" in out
    assert "60 rows were pruned by retention" in err
    assert len(exported(run.root)["step_time"]) == 90
    warning = json.loads((run.root / "aggregator/follow/finalization_warning.json").read_text())
    assert warning["follow"]["pruned_rows"] == {"step_time_samples": 60}


def test_a_bookmark_of_another_run_is_refused(run: Writer050, tmp_path: Path) -> None:
    run.flush(step_records(0, 10))
    run.close()
    assert finish(follow(run.root))[0] == 0
    other = Writer050(tmp_path / "logs" / "run2", session_id="run2")
    other.flush(step_records(0, 10))
    other.close()
    state = other.root / "aggregator" / "follow"
    state.mkdir(parents=True)
    (state / "bookmark.json").write_bytes(
        (run.root / "aggregator/follow/bookmark.json").read_bytes()
    )
    code, _out, err = finish(follow(other.root))
    assert code == EXIT_INPUT
    assert err.count("\n") == 1, err
    assert "is of another run" in err, err


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda root: None, "no such folder"),
        (lambda root: root.mkdir(parents=True), "not a TraceML run (no readable manifest.json)"),
    ],
)
def test_bad_run_folders_get_one_line(tmp_path: Path, make: Any, message: str) -> None:
    root = tmp_path / "logs" / "nope"
    make(root)
    code, _out, err = finish(follow(root, "--wait", "0.2"))
    assert code == EXIT_INPUT
    waiting, error = err.splitlines()  # the wait said at once, then one line of error
    assert waiting == f"follow: waiting up to 0.2 s for the run {root}", err
    assert message in error, err


def test_a_database_of_an_unknown_layout_gets_one_line(tmp_path: Path) -> None:
    run = Writer050(tmp_path / "run", tables=())
    run.connection.execute("CREATE TABLE step_time_samples (id INTEGER PRIMARY KEY, x)")  # type: ignore[union-attr]
    run.close()
    code, out, err = finish(follow(run.root, "--streams", "step_time"))
    assert code == EXIT_INPUT, (code, out, err)
    assert err.count("\n") == 1, err
    assert "lacks columns" in err, err
    assert "TraceML 0.5.0's" in err, err


def test_ctrl_c_drains_saves_the_bookmark_and_exits_130(run: Writer050) -> None:
    follower = follow(run.root)
    run.flush(step_records(0, 200))
    wait_for(lambda: (bookmark(run.root) or {}).get("last_id", {}).get("step_time_samples") == 200)
    follower.send_signal(signal.SIGINT)
    code, out, _err = finish(follower)
    assert code == EXIT_INTERRUPTED, out
    assert len(exported(run.root)["step_time"]) == 200
