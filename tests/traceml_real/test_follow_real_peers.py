"""``follow`` into the template's real sinks while their real servers go down mid-run.

Each scenario is a real ``traceml run`` (TraceML 0.5.0, CPU torch) with ``follow`` and a
baked sink beside it (``realsinks.py``), and a server stopped or killed for
``OUTAGE_S`` while the run trains: PostgreSQL (``pg_ctl stop``, then started again on
the same data and port), Prometheus (SIGTERM, then started again on the same TSDB and
port) and an ``mlflow server`` (SIGKILL, then started again on the same database, which
takes it 10-20 s more to answer). Each follower must ride the outage out, end by
itself with exit 0, and leave the outage in ``status.json``; the sink must hold every
row of the run's database (read back as the baked project's tests read it). A second
PostgreSQL run's follower gets SIGTERM during the outage and is started again after it.
The scenarios run at once (conftest's ``real_scenarios``); ``nox -s traceml_real``.
"""

from __future__ import annotations

import re
import signal
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from follow_files import bookmark, status
from psycopg import sql
from realrun import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    Follow,
    Outcome,
    Run,
    assert_traceml_outcome,
    database_rows,
    real_outcome,
    training,
)
from realsinks import (
    MlflowPeer,
    as_records,
    assert_every_row_once_or_resent,
    context_of,
    mlflow_reader,
    postgres_env,
    postgres_rows,
    prometheus_expected,
    prometheus_monitoring,
    prometheus_values,
    same_values,
    spec,
)
from traceml_exporter_sdk.testing.postgres_server import postgres_server
from traceml_exporter_sdk.testing.prometheus_server import prometheus_server
from waiting import wait_for

OUTAGE_S = 30.0
"""How long each server is down (the issue's 30 s)."""
TRAINING_AFTER_S = 10.0
"""The runs train on this long into the outage, then stop (``Run.stop_training``)."""
STEPS, STEP_SLEEP = 3000, 0.1
"""Ten steps a second until the test stops training (300 s at most)."""
RETRY = ("--retry-max-interval", "2")
"""The follower tries the sink every 2 s at most, so it sees the server back soon."""
DEADLINES = {"postgres": 8.0, "prometheus": 5.0, "mlflow": 10.0}
"""Each sink's deadline of one call (its default; MLflow's raised for a loaded machine)."""
MLFLOW_ENV = {"MLFLOW_EXPERIMENT_NAME": "traceml-real", "TRACEML_MLFLOW_TIMEOUT_S": "10"}
DATABASE = "traceml_real"
Scenarios = dict[str, Future[Outcome]]


def down_then_up(runs: list[Run], stop: Any, start: Any) -> dict[str, float]:
    """Once ``runs`` train with rows acknowledged: ``stop()``; the runs stop training
    ``TRAINING_AFTER_S`` later (and end); ``start()`` ``OUTAGE_S`` after ``stop()``.
    Returns the Unix times the outage began and the start began."""
    for run in runs:
        wait_for(
            lambda run=run: training(run), f"{run.name} to train, rows acknowledged", 180, every=0.1
        )
    down = time.time()
    stop()
    time.sleep(max(0.0, down + TRAINING_AFTER_S - time.time()))
    for run in runs:
        assert run.process is not None
        assert run.process.poll() is None, f"{run.name} ended before the test stopped it"
        run.stop_training()
    time.sleep(max(0.0, down + OUTAGE_S - time.time()))
    up = time.time()
    start()
    return {"down": down, "up": up, "back": time.time()}


# -- the scenarios ----------------------------------------------------------------------


def scenario_postgres(tmp: Path) -> Outcome:
    """Two runs into one PostgreSQL: ``ride``'s follower rides the outage out; ``term``'s
    gets SIGTERM a few seconds into it and is started again once the server is back."""
    with postgres_server() as server:
        server.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
        env = postgres_env(server, DATABASE)
        ride = Run(tmp / "logs", "ride", STEPS, step_sleep=STEP_SLEEP).start()
        ride_follow = Follow(ride.root, spec("postgres"), RETRY, env).start()
        term = Run(tmp / "logs", "term", STEPS, step_sleep=STEP_SLEEP).start()
        term_follow = Follow(term.root, spec("postgres"), RETRY, env).start()
        extra: dict[str, Any] = {}

        def stop() -> None:
            server.stop()
            wait_for(
                lambda: status(term.root).get("state") == "sink-down",
                "term: sink-down",
                60,
                every=0.1,
            )
            time.sleep(3)  # in the backoff, or a try of the sink's
            extra["term_took"] = term_follow.signal(signal.SIGTERM)
            extra["term_bookmark"] = bookmark(term.root)
            extra["term_status"] = status(term.root)

        extra.update(down_then_up([ride, term], stop, server.start))
        ride.wait()
        term.wait()
        ride_follow.finish(timeout=180)
        resumed = Follow(term.root, spec("postgres"), RETRY, env).start()
        resumed.finish(timeout=120)
        for run in (ride, term):
            assert_traceml_outcome(run, tmp / "alone" / run.name)
            extra[run.name] = postgres_rows(server, DATABASE, run.root)
    return Outcome([ride, term], [ride_follow, term_follow, resumed], extra)


def scenario_prometheus(tmp: Path) -> Outcome:
    """Prometheus stopped (SIGTERM) mid-run and started again on its TSDB and port."""
    with prometheus_server() as server:
        run = Run(tmp / "logs", "prom", STEPS, step_sleep=STEP_SLEEP).start()
        env = {"PROMETHEUS_REMOTE_WRITE_URL": server.write_url}
        follow = Follow(run.root, spec("prometheus"), RETRY, env).start()
        extra = down_then_up([run], server.stop, server.start)
        run.wait()
        follow.finish(timeout=180)
        assert_traceml_outcome(run, tmp / "alone")
        values = prometheus_values(server, run.root)
    return Outcome([run], [follow], {**extra, "values": values})


def scenario_prometheus_dashboard(tmp: Path) -> Outcome:
    """A run followed into Prometheus with no outage (an outage's catch-up sends a series
    once per exporter, too few samples for a rate), then the shipped dashboard's queries."""
    with prometheus_server() as server:
        run = Run(tmp / "logs", "dash", STEPS, step_sleep=STEP_SLEEP).start()
        env = {"PROMETHEUS_REMOTE_WRITE_URL": server.write_url}
        follow = Follow(run.root, spec("prometheus"), RETRY, env).start()
        wait_for(lambda: training(run), "dash to train, rows acknowledged", 180, every=0.1)
        time.sleep(TRAINING_AFTER_S)  # steps flushed a second apart: a rate has samples
        run.stop_training()
        run.wait()
        follow.finish(timeout=180)
        assert_traceml_outcome(run, tmp / "alone")
        monitoring = prometheus_monitoring(server, run.root)
    return Outcome([run], [follow], {"monitoring": monitoring})


def scenario_mlflow(tmp: Path) -> Outcome:
    """An ``mlflow server`` killed with SIGKILL mid-run, started again after ``OUTAGE_S``."""
    peer = MlflowPeer()
    try:
        first_start = peer.start()
        run = Run(tmp / "logs", "mlflow", STEPS, step_sleep=STEP_SLEEP).start()
        env = {"MLFLOW_TRACKING_URI": peer.url, **MLFLOW_ENV}
        follow = Follow(run.root, spec("mlflow"), RETRY, env).start()
        extra: dict[str, Any] = down_then_up([run], peer.kill9, peer.start)
        run.wait()
        follow.finish(timeout=240)
        assert_traceml_outcome(run, tmp / "alone")
        with mlflow_reader(peer, MLFLOW_ENV["MLFLOW_EXPERIMENT_NAME"]) as sink:
            extra["read"] = sink.read_export(context_of(run.root))
            rows = database_rows(run.database)
            extra["expected"] = sink.expected_export(as_records(rows), include_hostname=True)
    finally:
        peer.stop()
    return Outcome([run], [follow], {**extra, "first_start": first_start})


REAL_SCENARIOS = {
    "mlflow": scenario_mlflow,
    "postgres": scenario_postgres,
    "prometheus": scenario_prometheus,
    "prometheus_dashboard": scenario_prometheus_dashboard,
}
REAL_NEEDS = {
    "test_postgres_stopped_mid_run_every_row_arrives_and_the_outage_is_in_the_status": (
        "postgres",
    ),
    "test_sigterm_while_postgres_is_down_ends_within_10s_and_a_restart_delivers_the_rest": (
        "postgres",
    ),
    "test_prometheus_stopped_mid_run_holds_what_every_row_aggregates_to": ("prometheus",),
    "test_prometheus_the_shipped_dashboard_and_rules_show_a_real_run": ("prometheus_dashboard",),
    "test_mlflow_killed_and_slow_to_come_back_holds_every_rows_points": ("mlflow",),
}


# -- the tests --------------------------------------------------------------------------


def assert_rode_out(outcome: Outcome, follow: Follow, run: Run, sink: str) -> dict[str, Any]:
    """``follow`` ended by itself, exit 0, the run complete, with the outage in its status:
    from after the server went to after it was started again, about as long."""
    assert follow.returncode == EXIT_OK, follow.report()
    assert "run                        complete" in follow.out, follow.report()
    assert re.search(r"sink outages +\d+ \(", follow.out), follow.report()
    final = status(run.root)
    assert (final["end"], final["state"]) == ("complete", "done"), final
    assert final["outages_total"] >= 1, final
    assert final["exporter_failures"] >= 1, final
    assert final["outage"] is None, final
    assert final["lag_rows"] == 0, final
    outages = final["outages"]
    down, up = outcome.extra["down"], outcome.extra["up"]
    assert outages[0]["started"] >= down, (down, outages)
    assert outages[-1]["ended"] >= up, (up, outages)
    length = sum(o["seconds"] for o in outages)
    assert length >= up - down - DEADLINES[sink] - 3, (up - down, outages)
    assert not (run.root / "aggregator/follow/finalization_warning.json").exists()
    print(  # shown with -rP
        f"{sink}: down {up - down:.1f} s, back (answering) {outcome.extra['back'] - up:.1f} s "
        f"later; outage in status {length:.1f} s, {final['exporter_failures']} failures, "
        f"{final['resent_records']} records resent; {final['exported_total']} exported"
    )
    return final


def test_postgres_stopped_mid_run_every_row_arrives_and_the_outage_is_in_the_status(
    real_scenarios: Scenarios,
) -> None:
    outcome = real_outcome(real_scenarios, "postgres")
    ride = outcome.runs[0]
    final = assert_rode_out(outcome, outcome.follows[0], ride, "postgres")
    rows = database_rows(ride.database)
    assert {"step_time", "step_memory", "system", "process"} <= set(rows)
    assert_every_row_once_or_resent(rows, outcome.extra["ride"], resent=final["resent_records"])


def test_sigterm_while_postgres_is_down_ends_within_10s_and_a_restart_delivers_the_rest(
    real_scenarios: Scenarios,
) -> None:
    outcome = real_outcome(real_scenarios, "postgres")
    term = outcome.runs[1]
    stopped, resumed = outcome.follows[1], outcome.follows[2]
    assert stopped.returncode == EXIT_INTERRUPTED, stopped.report()
    assert outcome.extra["term_took"] < 10, (
        f"{outcome.extra['term_took']:.1f} s\n{stopped.report()}"
    )
    assert "SIGTERM" in stopped.out + stopped.err, stopped.report()
    print(f"SIGTERM during the outage: follow ended in {outcome.extra['term_took']:.1f} s")
    at_stop = outcome.extra["term_status"]
    assert (at_stop["end"], at_stop["state"]) == ("interrupted", "done"), at_stop
    assert at_stop["exporter_failures"] >= 1, at_stop
    assert at_stop["lag_rows"] > 0, at_stop
    saved = outcome.extra["term_bookmark"]
    assert saved is not None
    assert saved["last_id"].get("step_time_samples"), saved
    assert resumed.returncode == EXIT_OK, resumed.report()
    assert "resumed from the bookmark" in resumed.out, resumed.report()
    final = status(term.root)
    assert final["end"] == "complete", final
    rows = database_rows(term.database)
    assert_every_row_once_or_resent(
        rows, outcome.extra["term"], acknowledged=saved["last_id"],
        resent=at_stop["resent_records"] + final["resent_records"],
    )  # fmt: skip


def test_prometheus_stopped_mid_run_holds_what_every_row_aggregates_to(
    real_scenarios: Scenarios,
) -> None:
    outcome = real_outcome(real_scenarios, "prometheus")
    (run,) = outcome.runs
    assert_rode_out(outcome, outcome.follows[0], run, "prometheus")
    rows = database_rows(run.database)
    have, want = outcome.extra["values"], prometheus_expected(rows)
    steps = [v for k, v in have.items() if k.startswith("traceml_steps_total{")]
    assert sum(steps) == len(rows["step_time"]), "every step row counted once, over the outage"
    assert same_values(have, want) == []


def test_prometheus_the_shipped_dashboard_and_rules_show_a_real_run(
    real_scenarios: Scenarios,
) -> None:
    """Every query of the baked sink's dashboard and recording rules whose selectors the
    run has answers with series. What a CPU run of TraceML 0.5.0 never has: GPU gauges,
    memory peaks (None on CPU) and phases but step_time (no dataloader_next: the
    input-wait share is the corpus' to show, in the sink's own tests)."""
    found = real_outcome(real_scenarios, "prometheus_dashboard").extra["monitoring"]
    assert found["problems"] == [], found
    assert found["checked"] >= 18, found
    unexpected = [s for s in found["unseen"] if not any(k in s for k in ("gpu", "peak", "phase="))]
    assert unexpected == [], found["unseen"]


def test_mlflow_killed_and_slow_to_come_back_holds_every_rows_points(
    real_scenarios: Scenarios,
) -> None:
    outcome = real_outcome(real_scenarios, "mlflow")
    (run,) = outcome.runs
    assert_rode_out(outcome, outcome.follows[0], run, "mlflow")
    read, expected = outcome.extra["read"], outcome.extra["expected"]
    assert set(read) == set(expected), (sorted(read), sorted(expected))
    for stream in expected:
        assert len(read[stream]) == len(expected[stream]), stream
        assert read[stream] == expected[stream], f"{stream}: the points differ"
    print(f"mlflow server: first start {outcome.extra['first_start']:.1f} s")
    steps = {r["step"] for _, r in database_rows(run.database)["step_time"]}
    assert {p["step"] for p in read["step_time"]} == steps, "a step of the run has no point"
