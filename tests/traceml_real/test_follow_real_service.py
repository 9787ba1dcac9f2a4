"""``follow --logs-dir`` left running beside real ``traceml run`` jobs (TraceML 0.5.0).

One logs folder, one follower started before any run, two runs side by side: ``paused``
stops training after step ``PAUSE_AT`` until the test resumes it, more than twice
``IDLE_TIMEOUT`` later (TraceML goes on writing system and process snapshots then, so the
follower takes the step streams only, which the pause silences); ``steady`` trains on.
Mid-run ``/metrics`` is scraped, a second follower of one run is refused (exit 8), and
the ``--logs-dir`` follower is killed with SIGKILL during the pause and started again:
both runs are followed to their end, every row of the selected streams is exported,
those acknowledged before the kill once, and SIGTERM ends it with exit 0. The scenario
runs beside the others of conftest's ``real_scenarios``; ``nox -s traceml_real``.
"""

from __future__ import annotations

import itertools
import signal
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from follow_files import bookmark, status
from realrun import (
    EXIT_LOCKED,
    EXIT_OK,
    Follow,
    Outcome,
    Run,
    assert_traceml_outcome,
    database_rows,
    exported,
    free_port,
    real_outcome,
    scrape,
    training,
)
from realsinks import assert_every_row_once_or_resent
from waiting import wait_for

IDLE_TIMEOUT = 6.0
PAUSE_AT = 60
QUIET_AFTER_RESTART_S = 2 * IDLE_TIMEOUT
"""How long the paused run stays quiet after the follower is started again (the pause
is longer: from the 60th step to the kill, and this)."""
SELECTED = ("step_time", "step_memory")
Scenarios = dict[str, Future[Outcome]]


def follow_logs(logs: Path, port: int) -> Follow:
    args = ("--idle-timeout", f"{IDLE_TIMEOUT:g}", "--runs-poll-interval", "0.5")
    args += ("--metrics-port", str(port))
    return Follow(logs, args=args, streams=",".join(SELECTED), logs_dir=True).start()


def step_rows(run: Run) -> int:
    return int((bookmark(run.root) or {}).get("last_id", {}).get("step_time_samples") or 0)


def scenario_logs_dir(tmp: Path) -> Outcome:
    logs = tmp / "logs"
    logs.mkdir()
    port = free_port()
    first = follow_logs(logs, port)
    pause = {"TRAIN_PAUSE_AT": str(PAUSE_AT), "TRAIN_PAUSE_S": "240"}
    paused = Run(logs, "paused", 2 * PAUSE_AT, env=pause).start()
    steady = Run(logs, "steady", 3000, step_sleep=0.1).start()
    runs = [paused, steady]
    extra: dict[str, Any] = {}
    wait_for(
        lambda: step_rows(paused) >= PAUSE_AT and training(steady) and training(paused),
        "paused in its pause, steady training, the rows before acknowledged",
        180,
        every=0.1,
    )
    extra["metrics"] = scrape(port)
    extra["healthz"] = scrape(port, "/healthz")
    second = Follow(paused.root).start()
    second.finish(timeout=60)
    assert training(paused), "paused trains (in its pause) at the kill"
    assert training(steady), "steady trains at the kill"
    extra["at_kill"] = {run.name: bookmark(run.root)["last_id"] for run in runs}  # type: ignore[index]
    first.kill9()
    extra["restarted"] = time.time()
    again = follow_logs(logs, free_port())
    time.sleep(QUIET_AFTER_RESTART_S)
    paused.resume()
    steady.stop_training()
    for run in runs:
        run.wait()
        assert_traceml_outcome(run, tmp / "alone" / run.name)
    wait_for(
        lambda: all(status(run.root).get("end") for run in runs),
        "both follows to end",
        60,
        every=0.1,
    )
    extra["took"] = again.signal(signal.SIGTERM)
    return Outcome(runs, [first, second, again], extra)


def scenario_quiet_end(tmp: Path) -> Outcome:
    """``--streams step_time --idle-timeout 3``: after the last step TraceML takes
    seconds to finish (no step row then), longer than the idle timeout."""
    run = Run(tmp / "logs", "quiet_end", 100).start()
    follow = Follow(run.root, streams="step_time", args=("--idle-timeout", "3")).start()
    run.wait()
    follow.finish(timeout=60)
    assert_traceml_outcome(run, tmp / "alone")
    return Outcome([run], [follow])


REAL_SCENARIOS = {"logs_dir": scenario_logs_dir, "quiet_end": scenario_quiet_end}
REAL_NEEDS = {
    "test_a_run_quiet_past_the_idle_timeout_at_its_end_is_complete": ("quiet_end",),
    "test_logs_dir_serves_metrics_mid_run_with_every_documented_series_per_run": ("logs_dir",),
    "test_a_second_follower_of_a_run_the_logs_dir_follower_holds_is_refused": ("logs_dir",),
    "test_a_run_paused_past_the_idle_timeout_is_followed_to_its_end": ("logs_dir",),
    "test_logs_dir_follower_killed_and_restarted_loses_nothing_and_ends_on_sigterm": ("logs_dir",),
}


def test_logs_dir_serves_metrics_mid_run_with_every_documented_series_per_run(
    real_scenarios: Scenarios,
) -> None:
    outcome = real_outcome(real_scenarios, "logs_dir")
    metrics = outcome.extra["metrics"]
    assert outcome.extra["healthz"] == "ok\n"
    prefix = "traceml_exporter_follow_"
    for run in ("paused", "steady"):
        for name in ("lag_rows", "lag_seconds", "sink_down", "exporter_failures_total",
                     "rows_pruned_total", "records_resent_total", "outages_total"):  # fmt: skip
            assert f'{prefix}{name}{{run="{run}"}}' in metrics, (name, run, metrics)
        assert f'{prefix}sink_down{{run="{run}"}} 0.0' in metrics, metrics
        assert f'{prefix}state{{run="{run}",state="following"}} 1.0' in metrics, metrics
        assert f'{prefix}records_exported_total{{run="{run}",stream="step_time"}}' in metrics


def test_a_second_follower_of_a_run_the_logs_dir_follower_holds_is_refused(
    real_scenarios: Scenarios,
) -> None:
    outcome = real_outcome(real_scenarios, "logs_dir")
    second = outcome.follows[1]
    assert second.returncode == EXIT_LOCKED, second.report()
    assert "is already being followed" in second.err, second.report()
    assert second.err.count("\n") == 1, "refused in one line"
    assert second.out == "", "nothing followed"


def test_a_run_paused_past_the_idle_timeout_is_followed_to_its_end(
    real_scenarios: Scenarios,
) -> None:
    outcome = real_outcome(real_scenarios, "logs_dir")
    paused = outcome.runs[0]
    final = status(paused.root)
    assert (final["end"], final["state"]) == ("complete", "done"), final
    rows = database_rows(paused.database)["step_time"]
    stamps = [r["observed_timestamp_unix_ns"] for _, r in rows]
    gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(stamps)]
    assert max(gaps) >= 2 * IDLE_TIMEOUT, (
        f"no pause in the step rows: longest gap {max(gaps):.1f} s"
    )
    resumed_at = stamps[gaps.index(max(gaps)) + 1] / 1e9
    assert resumed_at - outcome.extra["restarted"] > IDLE_TIMEOUT, (
        "the restarted follower did not sit through a quiet longer than --idle-timeout: "
        f"training resumed {resumed_at - outcome.extra['restarted']:.1f} s after it started"
    )


def test_logs_dir_follower_killed_and_restarted_loses_nothing_and_ends_on_sigterm(
    real_scenarios: Scenarios,
) -> None:
    outcome = real_outcome(real_scenarios, "logs_dir")
    first, again = outcome.follows[0], outcome.follows[2]
    assert first.returncode == -9, first.report()
    assert again.returncode == EXIT_OK, again.report()
    assert outcome.extra["took"] < 10, f"SIGTERM took {outcome.extra['took']:.1f} s"
    assert "2 run(s) followed" in again.out, again.report()
    print(f"--logs-dir follower: SIGTERM ended it in {outcome.extra['took']:.1f} s")
    for run in outcome.runs:
        final = status(run.root)
        assert final["end"] == "complete", final
        assert final["exporter_failures"] == 0, final
        every = database_rows(run.database)
        rows = {s: every[s] for s in SELECTED}
        got = exported(run.root)
        assert set(got) == set(SELECTED), f"{run.name}: streams not selected were exported"
        at_kill = outcome.extra["at_kill"][run.name]
        assert_every_row_once_or_resent(rows, got, acknowledged=at_kill, at_most=2)


def test_a_run_quiet_past_the_idle_timeout_at_its_end_is_complete(
    real_scenarios: Scenarios,
) -> None:
    """The aggregator exits after a quiet longer than ``--idle-timeout``: its launcher marks
    the run complete, so the follow is complete too (exit 0), not given up as idle."""
    outcome = real_outcome(real_scenarios, "quiet_end")
    (run,), (follow,) = outcome.runs, outcome.follows
    assert follow.returncode == EXIT_OK, follow.report()
    assert "run                        complete" in follow.out, follow.report()
    final = status(run.root)
    last = database_rows(run.database)["step_time"][-1][1]["observed_timestamp_unix_ns"] / 1e9
    assert final["since"] - last > 3, "no quiet longer than the idle timeout before the end"
