"""What ``follow`` says agrees with what it did (issue 39): no "complete" over unacknowledged
rows, a hung sink seen and left behind at SIGTERM, a failed run said to be failed, an
orphaned or deleted run named, and the smaller counts right. Each test failed before the
fix it names; ``tests/chaos`` checks the same invariants over random fault schedules."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from follow_files import bookmark, status
from follow_helpers import (
    EXIT_EXPORT,
    EXIT_INCOMPLETE,
    EXIT_PERMANENT,
    catches,
    finish,
    follow,
    orphan_launcher,
    steps,
)
from traceml_exporter_sdk import ExporterContext, ExportWorker
from traceml_exporter_sdk._bridge.follow.follower import Follower
from traceml_exporter_sdk._bridge.follow.run import RunFolder
from traceml_exporter_sdk.jsonl import make_exporter as make_jsonl
from traceml_exporter_sdk.records import StepTimeRecord
from waiting import wait_for
from writer050 import Writer050, step_records

HANGING = "hanging_exporter:make_hanging"
FLAKY = "failing_exporter:make_flaky"
SERVICE = ["--runs-poll-interval", "0.2", "--metrics-port", "0"]


def feed(run: Writer050, start: int, count: int, per_flush: int = 25) -> None:
    for i in range(start, start + count, per_flush):
        run.flush(step_records(i, per_flush, observed=time.time_ns()))
        time.sleep(0.01)


def metrics_port(process: subprocess.Popen[str]) -> int:
    assert process.stderr is not None
    line = process.stderr.readline()
    return int(re.search(r"127\.0\.0\.1:(\d+)/metrics", line)[1])  # type: ignore[index]


def scrape(port: int, path: str = "/metrics") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def value(text: str, series: str) -> float | None:
    """The value of one series (``name{labels}``) in a scrape, None when absent."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


def acked(root: Path) -> int:
    return int((bookmark(root) or {}).get("last_id", {}).get("step_time_samples", 0))


def last_lines(err: str, run: str = "run1") -> list[str]:
    return [line for line in err.splitlines() if line.startswith(f"follow {run}:")]


# -- 1. rows lost are never recorded as complete -----------------------------------------


@pytest.mark.parametrize("where", ["--session-root", "--logs-dir"])
def test_a_drain_past_the_shutdown_timeout_is_not_complete_and_is_resumed(
    run: Writer050, tmp_path: Path, where: str
) -> None:
    flag = tmp_path / "hang"
    flag.touch()
    target = run.root if where == "--session-root" else run.root.parent
    follower = follow(
        target, "--shutdown-timeout", "1", "--progress-interval", "0.2", *SERVICE,
        spec=HANGING, where=where, HANG_FLAG=str(flag), HANG_AFTER_RECORDS="100",
    )  # fmt: skip
    port = metrics_port(follower)
    feed(run, 0, 100)
    wait_for(lambda: (bookmark(run.root) or {}).get("last_id", {}).get("step_time_samples") == 100)
    feed(run, 100, 100)  # the sink hangs in its next write
    run.close()
    wait_for(lambda: status(run.root).get("end"), "the follow's end", timeout=30)
    final = status(run.root)
    assert final["end"] != "complete", final
    assert final["lost"].get("timed_out") == 100, final
    if where == "--logs-dir":  # a follow of one run has ended with it
        text = scrape(port)[1]
        lost = 'traceml_exporter_follow_rows_lost_total{reason="timed_out",run="run1"}'
        assert value(text, lost) == 100
        follower.send_signal(signal.SIGTERM)
    code, out, err = finish(follower)
    assert code == EXIT_EXPORT, (out, err)
    done = [line for line in last_lines(err) if ": done" in line or "NOT" in line]
    assert done, err
    assert "complete" not in done[-1].split(";")[0].replace("NOT complete", ""), err
    warning = json.loads((run.root / "aggregator/follow/finalization_warning.json").read_text())
    assert warning["follow"]["lost"] == {"timed_out": 100}
    flag.unlink()  # the sink answers again: the run is resumed, not skipped
    again = follow(target, *SERVICE, spec=HANGING, where=where, HANG_FLAG=str(flag))
    metrics_port(again)
    wait_for(lambda: status(run.root).get("end") == "complete", "the resumed end", timeout=30)
    if where == "--logs-dir":
        again.send_signal(signal.SIGTERM)
    code, out, err = finish(again)
    assert code == 0, (out, err)
    assert "exported already" not in err
    assert set(steps(run.root)) == set(range(200)), "rows were left behind"


# -- 2. a hung sink is seen, and SIGTERM does not wait for it ---------------------------


@pytest.mark.parametrize(
    ("where", "method"),
    [
        ("--session-root", "write"),
        ("--session-root", "flush"),
        ("--logs-dir", "open"),
        ("--logs-dir", "write"),
    ],
)
def test_a_hung_sink_shows_and_sigterm_ends_within_the_shutdown_timeout(
    run: Writer050, tmp_path: Path, where: str, method: str
) -> None:
    flag = tmp_path / "hang"
    flag.touch()
    # hang once the first 50 rows were acknowledged (in their flush's case, just after)
    after = {"open": "0", "write": "50", "flush": "51"}[method]
    target = run.root if where == "--session-root" else run.root.parent
    follower = follow(
        target, "--shutdown-timeout", "2", "--stuck-after", "0.5", "--progress-interval", "0.2",
        *SERVICE, spec=HANGING, where=where, HANG_FLAG=str(flag), HANG_IN=method,
        HANG_AFTER_RECORDS=after,
    )  # fmt: skip
    port = metrics_port(follower)
    feed(run, 0, 50)
    if method != "open":  # all 50 acknowledged before a write or flush of more hangs
        wait_for(lambda: acked(run.root) == 50)
    feed(run, 50, 50)
    series = '{run="run1"}'
    call = f"traceml_exporter_follow_exporter_call_seconds{series}"
    lag = f"traceml_exporter_follow_lag_seconds{series}"
    first = wait_for(lambda: (v := value(scrape(port)[1], call)) and v > 0.2 and scrape(port)[1])
    time.sleep(1.0)
    second = scrape(port)[1]
    assert value(second, call) >= value(first, call) + 0.8  # type: ignore[operator]
    assert value(second, lag) >= value(first, lag) + 0.8, (first, second)  # type: ignore[operator]
    assert value(second, 'traceml_exporter_follow_state{run="run1",state="stuck"}') == 1.0
    health, body = scrape(port, "/healthz")
    assert health == 503, body
    assert "run1" in body, body
    wait_for(lambda: catches(follower, signal.SIGTERM))
    started = time.monotonic()
    follower.send_signal(signal.SIGTERM)
    code, out, err = finish(follower)
    took = time.monotonic() - started
    assert took < 2 + 5, f"SIGTERM took {took:.1f} s with --shutdown-timeout 2"
    assert "SIGTERM" in out + err
    assert code == EXIT_EXPORT, (out, err)
    delivered = 0 if method == "open" else 50
    assert acked(run.root) == delivered
    final = status(run.root)
    assert final["lost"] == {"timed_out": 100 - delivered}, final
    assert any("lag" in line for line in last_lines(err))
    run.close()
    flag.unlink()


# -- 3. a permanent failure in --logs-dir ----------------------------------------------


def test_a_permanent_failure_in_a_logs_folder_is_its_own_state_and_the_exit_code(
    run: Writer050,
) -> None:
    follower = follow(
        run.root.parent, *SERVICE, spec="failing_exporter:make_exporter", where="--logs-dir",
        FAIL_AFTER_WRITES="1", FAIL_PERMANENT="1",
    )  # fmt: skip
    port = metrics_port(follower)
    feed(run, 0, 100)
    wait_for(lambda: status(run.root).get("state") == "failed", "the failed state")
    text = scrape(port)[1]
    assert value(text, 'traceml_exporter_follow_exporter_failures_total{run="run1"}') == 1
    assert value(text, 'traceml_exporter_follow_state{run="run1",state="failed"}') == 1
    assert (value(text, 'traceml_exporter_follow_lag_rows{run="run1"}') or 0) > 0
    lost = 'traceml_exporter_follow_rows_lost_total{reason="permanent_failure",run="run1"}'
    assert (value(text, lost) or 0) > 0
    final = status(run.root)
    assert final["exporter_failures"] == 1, final
    assert final["lag_rows"] > 0, final
    assert final["lost"]["permanent_failure"] == final["lag_rows"]
    wait_for(lambda: catches(follower, signal.SIGTERM))
    follower.send_signal(signal.SIGTERM)
    code, out, err = finish(follower)
    assert code == EXIT_PERMANENT, (out, err)
    run.close()
    # fixed and started again, the service resumes the failed run
    again = follow(run.root.parent, *SERVICE, where="--logs-dir")
    metrics_port(again)
    wait_for(lambda: status(run.root).get("end") == "complete", "the resumed end", timeout=30)
    again.send_signal(signal.SIGTERM)
    assert finish(again)[0] == 0
    assert set(steps(run.root)) == set(range(100))


# -- 4. orphans and the dead -------------------------------------------------------------


@pytest.mark.parametrize("seen", [True, False], ids=["launcher-seen", "never-seen"])
def test_after_a_restart_an_orphaned_run_ends_unfinished(run: Writer050, seen: bool) -> None:
    """The follower is killed, then TraceML's launcher; the follower started again finds
    the aggregator alive, adopted by init: quiet past --idle-timeout, it is NOT FINISHED."""
    run.flush(step_records(0, 10))
    run.disconnect()
    with orphan_launcher(run.root / "aggregator/telemetry") as launcher:
        if seen:
            first = follow(run.root, "--idle-timeout", "1.5")
            wait_for(lambda: (bookmark(run.root) or {}).get("last_id", {}).get("step_time_samples"))
            first.send_signal(signal.SIGKILL)
            first.communicate(timeout=10)
        launcher.kill()
        launcher.wait(10)
        code, out, _err = finish(follow(run.root, "--idle-timeout", "1.5"), timeout=30)
    assert code == EXIT_INCOMPLETE, out
    assert "NOT FINISHED" in out
    assert set(steps(run.root)) == set(range(10))


def test_a_deleted_run_is_named_once_counted_and_leaves_the_metrics(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    done = Writer050(logs / "run1", session_id="run1")
    live = Writer050(logs / "run2", session_id="run2")
    follower = follow(
        logs, *SERVICE, "--progress-interval", "0.3", *["--retry-max-interval", "0.2"],
        spec=FLAKY, where="--logs-dir", FAIL_INSTANCES="1000", FAIL_AFTER_RECORDS="100",
    )  # fmt: skip
    port = metrics_port(follower)
    feed(done, 0, 50)
    done.close()
    feed(live, 0, 100)
    wait_for(lambda: acked(live.root) == 100)
    feed(live, 100, 50)  # the sink is down from its 100th record on: these 50 wait
    wait_for(lambda: status(done.root).get("end") == "complete")
    waiting = 'traceml_exporter_follow_lag_rows{run="run2"}'
    wait_for(lambda: value(scrape(port)[1], waiting) == 50, "run2's 50 rows waiting")
    live.disconnect()
    for root in (done.root, live.root):
        # as ``rm -rf`` would: the follower may write a status file into the folder meanwhile
        wait_for(
            lambda root=root: not shutil.rmtree(root, ignore_errors=True) and not root.exists()
        )
    wait_for(lambda: 'run="run1"' not in (t := scrape(port)[1]) and 'run="run2"' not in t,
             "the deleted runs' series to go", timeout=30)  # fmt: skip
    text = scrape(port)[1]
    assert value(text, "traceml_exporter_follow_runs_deleted_total") == 2
    lost = 'traceml_exporter_follow_deleted_rows_lost_total{reason="run_deleted"}'
    assert value(text, lost) == 50
    time.sleep(1)
    assert not done.root.exists(), "a deleted run folder came back"
    # (a retried exporter of run2 may make its own files there again: the exporter's doing)
    assert not (live.root / "aggregator/follow").exists(), "the follower wrote into it again"
    wait_for(lambda: catches(follower, signal.SIGTERM))
    follower.send_signal(signal.SIGTERM)
    code, out, err = finish(follower)
    assert code == EXIT_INCOMPLETE, (out, err)
    for name in ("run1", "run2"):
        named = [line for line in last_lines(err, name) if "deleted" in line]
        assert len(named) == 1, err
    assert "50 run_deleted" in next(line for line in last_lines(err, "run2") if "deleted" in line)


def test_a_finished_run_says_done_once(run: Writer050) -> None:
    follower = follow(run.root.parent, "--progress-interval", "0.2", "--runs-poll-interval",
                      "0.2", where="--logs-dir")  # fmt: skip
    feed(run, 0, 50)
    run.close()
    wait_for(lambda: status(run.root).get("end") == "complete")
    time.sleep(2)
    follower.send_signal(signal.SIGTERM)
    code, out, err = finish(follower)
    assert code == 0, (out, err)
    done = [line for line in last_lines(err) if ": done" in line]
    assert len(done) == 1, err
    assert "complete" in done[0]


# -- 5. the smaller ones -----------------------------------------------------------------


def test_rows_pruned_during_an_outage_are_counted_while_the_sink_is_down(run: Writer050) -> None:
    """Between two tries of a sink that stays down the follower reads nothing; TraceML's
    retention prunes meanwhile: the count rises at once, not when the sink is back."""
    follower = follow(
        run.root, *SERVICE, "--retry-max-interval", "30",
        spec=FLAKY, FAIL_INSTANCES="1000", FAIL_AFTER_RECORDS="50",
    )  # fmt: skip
    port = metrics_port(follower)
    run.flush(step_records(0, 50))
    wait_for(lambda: (bookmark(run.root) or {}).get("last_id", {}).get("step_time_samples") == 50)
    more = run.flush(step_records(50, 50))["step_time_samples"]
    failures = 'traceml_exporter_follow_exporter_failures_total{run="run1"}'
    # four tries (0.5 + 1 + 2 s of backoff): the next is 4 to 12 s away
    wait_for(lambda: (value(scrape(port)[1], failures) or 0) >= 4, "four tries", timeout=30)
    run.flush(step_records(100, 10), prune={"step_time_samples": more[29]})  # 30 rows pruned
    pruned = 'traceml_exporter_follow_rows_pruned_total{run="run1"}'
    wait_for(lambda: value(scrape(port)[1], pruned) == 30, "rows_pruned_total 30", timeout=2)
    assert value(scrape(port)[1], 'traceml_exporter_follow_sink_down{run="run1"}') == 1
    follower.send_signal(signal.SIGTERM)
    finish(follower)


def test_a_setting_that_cannot_be_parsed_is_permanent(run: Writer050) -> None:
    follower = follow(run.root, spec="hanging_exporter:make_bad_port")
    feed(run, 0, 50)
    code, out, err = finish(follower, timeout=30)
    assert code == EXIT_PERMANENT, (out, err)
    assert "ValueError" in err


def test_a_permanent_failure_in_open_is_not_a_timeout_and_names_no_missing_bookmark(
    run: Writer050,
) -> None:
    follower = follow(run.root, spec=FLAKY, FAIL_IN="open", FAIL_PERMANENT="1")
    feed(run, 0, 50)
    code, out, err = finish(follower, timeout=30)
    assert code == EXIT_PERMANENT, (out, err)
    warning = json.loads((run.root / "aggregator/follow/finalization_warning.json").read_text())
    assert warning["export"]["failed_method"] == "open"
    assert warning["export"]["timed_out"] is False
    assert not (run.root / "aggregator/follow/bookmark.json").exists()
    assert "bookmark.json" not in out, out
    assert warning["follow"]["bookmark"] is None


def test_the_rows_read_are_distinct_rows_not_reads(run: Writer050) -> None:
    feed(run, 0, 300, per_flush=100)
    # the first three exporters fail in their first write: the rows are read four times
    follower = follow(run.root, "--retry-max-interval", "0.1", spec=FLAKY, FAIL_INSTANCES="3")
    run.close()
    code, out, err = finish(follower)
    assert code == 0, (out, err)
    assert "3 exporter failures" in out, out
    assert "step_time_samples (300 rows)" in out, out
    assert "(300 rows read" in out, out


# -- 6. what the random fault schedules found (tests/chaos) ------------------------------


def test_rows_of_tables_made_after_the_database_was_opened_are_counted_at_a_stop(
    tmp_path: Path,
) -> None:
    """Chaos seeds 145 and 27: the follower opened a new run's database before TraceML
    made its tables, and a stop came before a pass read them: the rows left were counted
    over the tables planned at the open (none), ``lag_rows 0, lost {}``."""
    writer = Writer050(tmp_path / "run1", tables=())
    try:
        folder = RunFolder.at(writer.root)
        context = ExporterContext.create(folder.root, None, False)
        stop = threading.Event()
        follower = Follower(
            folder, lambda: ExportWorker(make_jsonl, context), poll_interval=0.01, stop=stop
        )
        source, resumed = follower.open_source()
        assert not source.tables
        writer.create(StepTimeRecord)
        writer.flush(step_records(0, 5))
        stop.set()  # SIGTERM, before the loop's first pass
        follower.start()
        result = follower.run(source, resumed)
    finally:
        writer.disconnect()
    assert result.end == "interrupted"
    assert result.left_rows == 5
    assert result.lost == {"interrupted": 5}
    final = follower.status.snapshot()
    assert final["lag_rows"] == 5, final
    assert final["lost"] == {"interrupted": 5}, final


@pytest.mark.parametrize("hung", [False, True], ids=["read-through", "hung-call"])
def test_a_logs_folder_stopped_by_sigterm_says_rows_pruned_in_its_exit_code(
    run: Writer050, tmp_path: Path, hung: bool
) -> None:
    """Chaos seed 9: rows pruned before they were read (during a hung call: never read),
    then SIGTERM: ``--logs-dir`` exited 0, the run's interruption hiding that the rows are
    gone for good, counted only in its status."""
    flag = tmp_path / "hang"
    flag.touch()
    follower = follow(
        run.root.parent, "--shutdown-timeout", "5", *SERVICE, spec=HANGING, where="--logs-dir",
        HANG_FLAG=str(flag), HANG_AFTER_RECORDS="50" if hung else "1000000",
    )  # fmt: skip
    port = metrics_port(follower)
    feed(run, 0, 50)
    wait_for(lambda: acked(run.root) == 50, "the first 50 rows acknowledged")
    table = "step_time_samples"
    if hung:
        run.flush(step_records(50, 10))  # read, and the sink hangs in their write
        call = 'traceml_exporter_follow_exporter_call_seconds{run="run1"}'
        wait_for(lambda: (value(scrape(port)[1], call) or 0) > 0.2, "the hung call")
        run.flush(step_records(60, 50), prune={table: 110})  # 50 written and pruned unread
    else:
        run.flush(step_records(50, 60), prune={table: 100})  # 50 pruned before read
        wait_for(lambda: acked(run.root) == 110, "the rows after the gap acknowledged")
    wait_for(lambda: catches(follower, signal.SIGTERM))
    follower.send_signal(signal.SIGTERM)
    flag.unlink()  # the hung call returns within --shutdown-timeout: the drain finishes
    code, out, err = finish(follower)
    final = status(run.root)
    assert final["end"] == "interrupted", final
    assert final["lost"] == {"pruned": 50}, final
    assert code == EXIT_INCOMPLETE, (out, err)
    assert "run1: exit 6" in out, out
