"""``traceml-exporter follow`` and ``replay --sqlite`` against real ``traceml run`` jobs (0.5.0).

Each scenario is a real run of ``train_tiny.py`` on CPU torch, 1 or 2 ranks, with the
follower attached as a user attaches it. The runs take most of the time, so the
scenarios start together when the module starts (a few at once, in threads: two
cores) and each test waits for its own and asserts on what it left. A scenario
that fails raises in its test; nothing here skips. ``nox -s traceml_real`` runs it.

``test_follow.py`` (tests/follow) runs the same scenarios against a writer of the
project's own, in a second.
"""

from __future__ import annotations

import json
import pickle
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from follow_files import bookmark
from realrun import (
    CAPTURE,
    EXIT_INCOMPLETE,
    EXIT_INPUT,
    EXIT_OK,
    STREAMS,
    TABLE_BY_STREAM,
    Follow,
    Run,
    assert_traceml_outcome,
    database_rows,
    exported,
    highest_ids,
    kill_tree,
    run_files,
    same,
    traceml_binary,
)
from traceml_exporter_sdk import records_from_payload
from waiting import wait_for

STEPS = 200
"""A few hundred steps: 15-45 s a run on two cores, depending on what else runs."""
AT_ONCE = 3
"""Scenarios (runs) at once: a 1-rank run keeps about one core busy."""


@dataclass
class Outcome:
    """What a scenario left for its test."""

    run: Run
    follows: list[Follow] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def rows_by_key(rows: list[tuple[int, dict[str, Any]]]) -> dict[str, int]:
    """A row's content (sorted JSON) -> its id; contents must be unique to tell rows apart."""
    keys = {json.dumps(r, sort_keys=True): row_id for row_id, r in rows}
    assert len(keys) == len(rows), "two rows of one table with the same content"
    return keys


# -- the scenarios (each runs in a thread; the tests below assert on their outcome) ------


def scenario_baseline(tmp: Path) -> Outcome:
    """No follower; the aggregator's projection input captured for the differential test."""
    capture = tmp / "envelopes.pkl"
    run = Run(
        tmp / "logs",
        "baseline",
        STEPS,
        env={"PYTHONPATH": str(CAPTURE), "TRACEML_CAPTURE_ENVELOPES": str(capture)},
    ).start()
    run.wait()
    assert_traceml_outcome(run, tmp / "alone")
    return Outcome(run, extra={"capture": capture})


def scenario_clean(tmp: Path) -> Outcome:
    """The follower started just before the run, left alone to the end."""
    run = Run(tmp / "logs", "clean", STEPS)
    follow = Follow(run.root).start()
    time.sleep(0.5)
    run.start()
    run.wait()
    follow.finish()
    counts = assert_traceml_outcome(run, tmp / "alone")
    return Outcome(run, [follow], {"counts": counts})


def scenario_kill_restart(tmp: Path) -> Outcome:
    """Two ranks; the follower is killed with SIGKILL mid-run and started again."""
    run = Run(tmp / "logs", "restart", STEPS, nproc=2).start()
    first = Follow(run.root).start()
    wait_for(
        lambda: any((bookmark(run.root) or {}).get("last_id", {}).values()),
        "a first bookmark",
        120,
        every=0.1,
    )
    assert run.process is not None
    assert run.process.poll() is None, "the run ended before the kill"
    first.kill9()
    at_kill = (bookmark(run.root) or {}).get("last_id", {})
    second = Follow(run.root).start()
    run.wait()
    second.finish()
    assert_traceml_outcome(run, tmp / "alone")
    return Outcome(run, [first, second], {"at_kill": at_kill})


def scenario_failing_exporter(tmp: Path) -> Outcome:
    """A sink outage mid-run: the exporter fails once 300 records were written, and the
    next three exporters fail in ``open`` (the sink still down); the fifth works."""
    run = Run(tmp / "logs", "failing", STEPS).start()
    follow = Follow(
        run.root,
        "failing_exporter:make_flaky",
        args=("--retry-max-interval", "2"),
        env={"FAIL_AFTER_RECORDS": "300", "FAIL_INSTANCES": "4"},
    ).start()
    follow.finish(timeout=180)
    run.wait()
    assert_traceml_outcome(run, tmp / "alone")
    return Outcome(run, [follow])


def scenario_killed_run(tmp: Path) -> Outcome:
    """The whole run killed with SIGKILL (launcher, aggregator, ranks): no end is written."""
    run = Run(tmp / "logs", "killed", 100_000).start()
    follow = Follow(run.root).start()
    try:
        wait_for(
            lambda: (bookmark(run.root) or {}).get("last_id", {}).get("step_time_samples"),
            "step rows exported (training under way)",
            120,
            every=0.1,
        )
        assert run.process is not None
        killed = kill_tree(run.process.pid)
        run.process.wait(30)
    finally:
        if run.process is not None and run.process.poll() is None:
            kill_tree(run.process.pid)
    started = time.monotonic()
    follow.finish(timeout=60)
    return Outcome(run, [follow], {"killed": killed, "follow_end_s": time.monotonic() - started})


def scenario_retention(tmp: Path) -> Outcome:
    """``--history-retention 5s``, steps spread over about 12 s; the follower starts only
    after the run ended. (0.5.0 prunes at its first flush, every 60 s, and at the end:
    in a run this short only the end's prune deletes, so a live follower would have
    read every row first.)"""
    run = Run(tmp / "logs", "retention", 300, retention="5s", step_sleep=0.04).start()
    run.wait()
    assert_traceml_outcome(run, tmp / "alone")
    follow = Follow(run.root).start()
    follow.finish()
    return Outcome(run, [follow])


SCENARIOS: dict[str, Callable[[Path], Outcome]] = {
    # longest first
    "kill_restart": scenario_kill_restart,
    "baseline": scenario_baseline,
    "clean": scenario_clean,
    "failing_exporter": scenario_failing_exporter,
    "killed_run": scenario_killed_run,
    "retention": scenario_retention,
}


NEEDS = {
    "test_every_row_reaches_the_exporter_once_and_traceml_is_undisturbed": ("clean", "baseline"),
    "test_killed_follower_restarted_loses_nothing_and_repeats_only_after_its_bookmark": (
        "kill_restart",
    ),
    "test_a_sink_outage_mid_run_is_ridden_out_and_every_row_arrives": ("failing_exporter",),
    "test_a_killed_run_ends_the_follow_by_itself_as_not_finished": ("killed_run",),
    "test_rows_pruned_before_they_were_read_are_counted": ("retention",),
    "test_a_bookmark_of_another_run_in_the_folder_is_refused_in_one_line": ("clean", "baseline"),
    "test_records_backfilled_from_the_database_equal_the_mapper_on_the_captured_payloads": (
        "baseline",
    ),
}
"""The scenarios each test asserts on: only those of the selected tests run."""


@pytest.fixture(scope="module")
def scenarios(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[Outcome]]]:
    traceml_binary()  # fails every test at once when TraceML is not installed
    selected = {item.originalname for item in request.session.items}  # type: ignore[attr-defined]
    wanted = {name for test in selected & NEEDS.keys() for name in NEEDS[test]}
    pool = ThreadPoolExecutor(AT_ONCE, thread_name_prefix="scenario")
    futures = {
        name: pool.submit(make, tmp_path_factory.mktemp(name))
        for name, make in SCENARIOS.items()
        if name in wanted
    }
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


def outcome(scenarios: dict[str, Future[Outcome]], name: str) -> Outcome:
    assert name in scenarios, f"scenario {name!r} was not started: list it in NEEDS"
    return scenarios[name].result(timeout=600)


# -- the tests ----------------------------------------------------------------------------


def test_every_row_reaches_the_exporter_once_and_traceml_is_undisturbed(
    scenarios: dict[str, Future[Outcome]],
) -> None:
    clean = outcome(scenarios, "clean")
    (follow,) = clean.follows
    assert follow.returncode == EXIT_OK, follow.report()
    said = [line for line in follow.err.splitlines() if not line.startswith("follow: waiting ")]
    assert said == [], follow.report()  # only the wait for the run, when it started first
    assert "run                        complete" in follow.out, follow.report()
    assert "table layout               TraceML 0.5.0's" in follow.out, follow.report()
    rows = database_rows(clean.run.database)
    assert exported(clean.run.root) == {s: [r for _, r in rows[s]] for s in rows}, (
        "the export is not the final database, row for row"
    )
    assert set(rows) >= {"step_time", "step_memory", "system", "process", "runtime_environment"}
    # The same files as a run without a follower, plus the exporter's and the follower's own.
    baseline = outcome(scenarios, "baseline")
    assert run_files(clean.run.root) == run_files(baseline.run.root)
    assert {p.name for p in (clean.run.root / "aggregator").iterdir()} - {
        p.name for p in (baseline.run.root / "aggregator").iterdir()
    } == {"export", "follow"}
    assert sorted(p.name for p in (clean.run.root / "aggregator/follow").iterdir()) == [
        "bookmark.json",
        "lock",
        "status.json",
    ]


def test_killed_follower_restarted_loses_nothing_and_repeats_only_after_its_bookmark(
    scenarios: dict[str, Future[Outcome]],
) -> None:
    restart = outcome(scenarios, "kill_restart")
    first, second = restart.follows
    assert first.returncode == -9, first.report()
    assert second.returncode == EXIT_OK, second.report()
    assert "resumed from the bookmark" in second.out, second.report()
    at_kill: dict[str, int] = restart.extra["at_kill"]
    rows = database_rows(restart.run.database)
    got = exported(restart.run.root)
    assert {r["rank"] for _, r in rows["step_time"]} == {0, 1}, "two ranks"
    repeated = 0
    for stream, stream_rows in rows.items():
        keys = rows_by_key(stream_rows)
        counts = Counter(json.dumps(r, sort_keys=True) for r in got.get(stream, []))
        assert set(counts) == set(keys), f"{stream}: rows lost or made up"
        acknowledged = at_kill.get(TABLE_BY_STREAM[stream], 0)
        for key, row_id in keys.items():
            if row_id <= acknowledged:
                assert counts[key] == 1, f"{stream} id {row_id}: acknowledged, exported twice"
            else:
                assert counts[key] <= 2, f"{stream} id {row_id}: exported {counts[key]} times"
                repeated += counts[key] - 1
    restart.extra["repeated"] = repeated


def test_a_sink_outage_mid_run_is_ridden_out_and_every_row_arrives(
    scenarios: dict[str, Future[Outcome]],
) -> None:
    failing = outcome(scenarios, "failing_exporter")
    (follow,) = failing.follows
    assert follow.returncode == EXIT_OK, follow.report()
    assert "4 exporter failures" in follow.out, follow.report()
    status = json.loads((failing.run.root / "aggregator/follow/status.json").read_text())
    assert (status["end"], status["exporter_failures"], status["outages_total"]) == (
        "complete", 4, 1,
    ), status  # fmt: skip
    rows = database_rows(failing.run.database)
    got = exported(failing.run.root)
    assert set(got) == set(rows)
    for stream, stream_rows in rows.items():
        want = {json.dumps(r, sort_keys=True) for _, r in stream_rows}
        have = [json.dumps(r, sort_keys=True) for r in got[stream]]
        assert set(have) == want, f"{stream}: not every row of the database, or another"
        assert len(have) - len(want) <= status["resent_records"], "an acknowledged row came twice"
    assert not (failing.run.root / "aggregator/follow/finalization_warning.json").exists()
    assert not (failing.run.root / "aggregator/finalization_warning.json").exists(), (
        "TraceML's own finalization_warning.json is TraceML's"
    )


def test_a_killed_run_ends_the_follow_by_itself_as_not_finished(
    scenarios: dict[str, Future[Outcome]],
) -> None:
    killed = outcome(scenarios, "killed_run")
    (follow,) = killed.follows
    assert killed.extra["follow_end_s"] < 30, "it should end by itself soon after the kill"
    assert follow.returncode == EXIT_INCOMPLETE, follow.report()
    assert "NOT FINISHED: the aggregator is gone" in follow.out, follow.report()
    assert "the export is incomplete" in follow.err, follow.report()
    assert killed.run.manifest().get("telemetry_status") == "running", "the run was not killed"
    warning = json.loads(
        (killed.run.root / "aggregator/follow/finalization_warning.json").read_text()
    )
    assert warning["follow"]["run_end"] == "aggregator-gone", warning
    rows = database_rows(killed.run.database, finished=False)
    assert exported(killed.run.root) == {s: [r for _, r in rows[s]] for s in rows}, (
        "what the killed run committed is exported all the same, once"
    )


def test_rows_pruned_before_they_were_read_are_counted(
    scenarios: dict[str, Future[Outcome]],
) -> None:
    retention = outcome(scenarios, "retention")
    (follow,) = retention.follows
    assert follow.returncode == EXIT_INCOMPLETE, follow.report()
    assert "rows were pruned by retention before they were read" in follow.err, follow.report()
    warning = json.loads(
        (retention.run.root / "aggregator/follow/finalization_warning.json").read_text()
    )
    pruned: dict[str, int] = warning["follow"]["pruned_rows"]
    assert pruned.get("step_time_samples", 0) > 0, f"retention pruned no step row: {pruned}"
    got = exported(retention.run.root)
    highest = highest_ids(retention.run.database)
    for stream in STREAMS:
        table = TABLE_BY_STREAM[stream]
        assert pruned.get(table, 0) + len(got.get(stream, [])) == highest.get(table, 0), (
            f"{table}: pruned {pruned.get(table, 0)} + exported {len(got.get(stream, []))} "
            f"!= highest id {highest.get(table, 0)}"
        )
    assert f"{sum(pruned.values()):,} rows were pruned" in follow.err, follow.report()


def test_a_bookmark_of_another_run_in_the_folder_is_refused_in_one_line(
    scenarios: dict[str, Future[Outcome]], tmp_path: Path
) -> None:
    clean, baseline = outcome(scenarios, "clean"), outcome(scenarios, "baseline")
    reused = tmp_path / "logs" / "baseline"
    shutil.copytree(baseline.run.root, reused)
    state = reused / "aggregator" / "follow"
    state.mkdir(parents=True)
    shutil.copyfile(clean.run.root / "aggregator/follow/bookmark.json", state / "bookmark.json")
    follow = Follow(reused).start()
    assert follow.finish() == EXIT_INPUT, follow.report()
    assert follow.err.count("\n") == 1, follow.report()
    assert "is of another run" in follow.err, follow.report()
    assert not (reused / "aggregator" / "export").exists(), "nothing exported into the other run"


def test_records_backfilled_from_the_database_equal_the_mapper_on_the_captured_payloads(
    scenarios: dict[str, Future[Outcome]],
) -> None:
    """The differential test on real 0.5.0 telemetry: what the aggregator built its rows
    from (each envelope and its ``recv_ts_ns``, captured in the aggregator by
    ``capture/sitecustomize.py``) through ``records_from_payload``, against
    ``backfill.open_database(...).batches()`` of the run's database, field by field."""
    baseline = outcome(scenarios, "baseline")
    captured: list[tuple[int | None, Any]] = []
    with open(baseline.extra["capture"], "rb") as fh:
        while True:
            try:
                captured.append(pickle.load(fh))
            except EOFError:
                break
    assert captured, "nothing captured: the sitecustomize hook did not run in the aggregator"
    expected: dict[str, list[dict[str, Any]]] = {}
    for recv_ts_ns, envelope in captured:
        if recv_ts_ns is None:
            batch = records_from_payload(envelope)
            assert not batch.records, f"records from an envelope no writer took: {envelope}"
            continue
        batch = records_from_payload(envelope, observed_timestamp_unix_ns=recv_ts_ns)
        assert batch.skipped == 0, envelope
        for record in batch.records:
            expected.setdefault(record.STREAM, []).append(record.to_dict())
    rows = database_rows(baseline.run.database)
    backfilled = {s: [r for _, r in rows[s]] for s in rows}
    assert set(backfilled) == set(expected)
    differences: dict[tuple[str, str], list[tuple[int, Any, Any]]] = {}
    for stream, want in expected.items():
        have = backfilled[stream]
        assert len(have) == len(want), f"{stream}: {len(have)} rows, {len(want)} records"
        for index, (row, record) in enumerate(zip(have, want, strict=True)):
            assert row.keys() == record.keys(), stream
            for name in row:
                if not same(row[name], record[name]):
                    differences.setdefault((stream, name), []).append(
                        (index, row[name], record[name])
                    )
    report = {
        f"{stream}.{name}": f"{len(cases)} rows differ, first (index, row, record): {cases[0]}"
        for (stream, name), cases in differences.items()
    }
    assert not differences, json.dumps(report, indent=2, default=str)
    assert sum(map(len, backfilled.values())) > 300, "a run of a few hundred steps"
