"""Unit tests of the MLflow mapping, runs and batching, against the real server (the suite
checks the contract; ``test_mlflow_faults.py`` drives the server into faults)."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from exporter_calls import is_permanent, one_folder_named_two_ways, run, written
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mlflow_server import MlflowServer
from sink_support import end_of_run, expected_export, read_end_of_run, read_export
from traceml_exporter_sdk import (
    ExporterContext,
    ExportRecord,
    RuntimeEnvironmentRecord,
    StdoutStderrRecord,
    StepMemoryRecord,
    StepTimeRecord,
)

from traceml_exporter_example.exporter import (
    RECEIPT_FILE,
    ExampleExporter,
    make_exporter,
    session_key,
)

NS = 1_712_345_678_901_234_567


def runs_of(peer: MlflowServer, context: ExporterContext) -> list[dict[str, Any]]:
    name = os.environ["MLFLOW_EXPERIMENT_NAME"]
    experiment = peer.call("GET", "experiments/get-by-name", {"experiment_name": name})
    where = f"tags.`traceml.session` = '{session_key(context.session_root)}'"
    body = {"experiment_ids": [experiment["experiment"]["experiment_id"]], "filter": where}
    runs: list[dict[str, Any]] = peer.call("POST", "runs/search", body).get("runs", [])
    return runs


def tags_of(run: dict[str, Any]) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def receipt(context: ExporterContext) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((context.export_dir / RECEIPT_FILE).read_text("utf-8"))
    return data


def test_factory_only_stores_settings(context: ExporterContext) -> None:
    os.environ.pop("MLFLOW_TRACKING_URI")
    exporter = make_exporter(context)
    assert isinstance(exporter, ExampleExporter)
    assert not context.session_root.exists()
    with pytest.raises(ValueError, match="MLFLOW_TRACKING_URI is not set"):
        exporter.open()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("MLFLOW_TRACKING_URI", "file:///tmp/mlruns", "has the scheme 'file'"),
        ("TRACEML_MLFLOW_TIMEOUT_S", "soon", "is not a duration"),
        ("TRACEML_MLFLOW_TIMEOUT_S", "0", "is not a duration"),
        ("TRACEML_MLFLOW_RANK_RUNS", "0,fastest", "is not 'none', or 'all', 'slowest' and"),
        ("TRACEML_MLFLOW_RANK_RUNS", "-1", "is not 'none', or 'all', 'slowest' and"),
        ("TRACEML_MLFLOW_WAIT_STEPS", "0", "is not a whole number"),
    ],
)
def test_bad_settings_fail_open_with_one_line(
    context: ExporterContext, variable: str, value: str, message: str
) -> None:
    os.environ[variable] = value
    with pytest.raises(ValueError, match=message) as raised:
        make_exporter(context).open()
    assert is_permanent(raised.value)  # no wait fixes a setting: follow ends at once


def test_the_default_is_one_run_with_the_summary(
    mlflow_peer: MlflowServer, context: ExporterContext, records: list[ExportRecord]
) -> None:
    """No rank run: the session run has a step's cross-rank points, the snapshots, the
    process points of each rank under process/<rank>/, and the end-of-run summary."""
    run(context, records[:4], records[4:])
    back = written(context)
    assert back == expected_export(records)
    base = "step_time/_traceml_internal:forward_time/cuda:0/duration_ms"
    stamp = (NS + 7) // 1_000_000
    summary = {(p["key"], p["value"]) for p in back["step_time"] if p["step"] == 7}
    assert summary == {
        ("step_time/ranks", 2.0),
        (f"{base}/median", 12.5),
        (f"{base}/max", 12.5),
        (f"{base}/slowest_rank", 0.0),
    }
    assert {p["timestamp"] for p in back["step_time"]} == {stamp}
    assert {p["rank"] for ps in back.values() for p in ps if "rank" in p} == {None}
    assert {p["key"] for p in back["process"]} >= {"process/1/cpu_percent"}
    (session,) = runs_of(mlflow_peer, context)
    tags = tags_of(session)
    assert tags["traceml.not_exported.stdout_stderr"] == "2"
    assert tags["traceml.late.step_time"] == "1", "the duplicate came after its step was written"
    assert read_end_of_run(context) == end_of_run(records)
    assert json.loads(tags["traceml.summary"])["summary/step_time/steps"] == 1.0
    assert receipt(context)["summary_steps"] == {"step_time": 1, "step_memory": 0}


def test_rank_runs_get_every_record_of_their_rank(
    mlflow_peer: MlflowServer, context: ExporterContext, records: list[ExportRecord]
) -> None:
    os.environ["TRACEML_MLFLOW_RANK_RUNS"] = "all"
    run(context, records[:4], records[4:])
    back = written(context)
    assert back == expected_export(records, rank_runs=None)
    point = {
        "rank": 0,
        "key": "step_time/_traceml_internal:forward_time/cuda:0/duration_ms",
        "step": 7,
        "timestamp": (NS + 7) // 1_000_000,
        "value": 12.5,
    }
    assert point in back["step_time"]
    assert not [p for p in back["step_time"] if p["key"].endswith("cpu/duration_ms")]  # None
    assert "stdout_stderr" not in back
    runs = runs_of(mlflow_peer, context)
    parents = [r for r in runs if "traceml.rank" not in tags_of(r)]
    assert len(parents) == 1
    parent = parents[0]["info"]["run_id"]
    children = {tags_of(r)["traceml.rank"]: tags_of(r) for r in runs if r not in parents}
    assert sorted(children) == ["0", "1"]
    assert all(tags["mlflow.parentRunId"] == parent for tags in children.values())
    assert {r["info"]["status"] for r in runs} == {"FINISHED"}
    assert tags_of(parents[0])["traceml.not_exported.stdout_stderr"] == "2"
    assert receipt(context)["not_exported_records"] == {"stdout_stderr": 2}


def test_the_slowest_rank_run_follows_each_steps_slowest_rank(
    mlflow_peer: MlflowServer, context: ExporterContext
) -> None:
    """``0,slowest``: rank 0's run, and a "slowest rank" run with, per step, the rank
    whose durations add up to the most and those durations (NaN counts as -inf; a tie:
    the lowest rank). A second exporter on the session finds that run again."""
    os.environ["TRACEML_MLFLOW_RANK_RUNS"] = "0,slowest"
    nan_sum = (math.inf, -math.inf)
    durations: dict[int, list[tuple[float, float] | None]] = {
        0: [(5.0, 1.0), (2.0, 2.0), nan_sum],
        1: [(1.0, 9.0), (1.0, 1.0), (3.0, 1.0)],
        2: [(6.0, 0.5), None, (1.0, 3.0)],
    }

    def step(rank: int, number: int, fwd: float, bwd: float) -> StepTimeRecord:
        events: Any = {"fwd": {"cpu": {"duration_ms": fwd}}, "bwd": {"cpu": {"duration_ms": bwd}}}
        stamp = NS + (10 * rank + number) * 1_000_000
        return StepTimeRecord(NS, rank, rank, 0, 3, 1, 0, None, stamp, 1, number, events)

    records = [
        step(rank, number, *pair)
        for number in (0, 1, 2)
        for rank, pairs in durations.items()
        if (pair := pairs[number]) is not None
    ]
    run(context, records[:3])  # step 0, complete: its close makes the "slowest rank" run
    run(context, records[3:])  # step 2 complete; step 1 (no rank 2) written by this close
    back = written(context)
    assert back == expected_export(records, rank_runs=[0], slowest=True)
    slowest = {
        (p["step"], p["key"]): (p["value"], p["timestamp"])
        for p in back["step_time"]
        if p["rank"] == "slowest"
    }
    stamp = (NS + 10_000_000) // 1_000_000  # rank 1's step 0
    assert slowest == {
        (0, "step_time/rank"): (1.0, stamp),  # 10.0: rank 1 over rank 0's and 2's 6.0 and 6.5
        (0, "step_time/fwd/cpu/duration_ms"): (1.0, stamp),
        (0, "step_time/bwd/cpu/duration_ms"): (9.0, stamp),
        (1, "step_time/rank"): (0.0, stamp - 9),  # 4.0: rank 0 over rank 1's 2.0
        (1, "step_time/fwd/cpu/duration_ms"): (2.0, stamp - 9),
        (1, "step_time/bwd/cpu/duration_ms"): (2.0, stamp - 9),
        (2, "step_time/rank"): (1.0, stamp + 2),  # 4.0 twice: rank 1 of ranks 1 and 2
        (2, "step_time/fwd/cpu/duration_ms"): (3.0, stamp + 2),
        (2, "step_time/bwd/cpu/duration_ms"): (1.0, stamp + 2),
    }
    runs = runs_of(mlflow_peer, context)
    children = sorted(tags_of(r)["traceml.rank"] for r in runs if "traceml.rank" in tags_of(r))
    assert children == ["0", "slowest"]
    (run_,) = [r for r in runs if tags_of(r).get("traceml.rank") == "slowest"]
    assert run_["info"]["run_name"] == "slowest rank"
    assert run_["info"]["status"] == "FINISHED"
    assert sorted(receipt(context)["rank_run_ids"]) == ["0", "slowest"]


def test_reopening_the_session_finds_its_runs_again(
    mlflow_peer: MlflowServer, context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(context, records)
    first = sorted(r["info"]["run_id"] for r in runs_of(mlflow_peer, context))
    run(context, records)
    assert sorted(r["info"]["run_id"] for r in runs_of(mlflow_peer, context)) == first
    assert written(context) == expected_export(records), "a re-sent point is stored once"


def test_a_session_is_keyed_by_its_resolved_folder(
    mlflow_peer: MlflowServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    records: list[ExportRecord],
) -> None:
    """``run1`` named relatively, then absolutely, finds the same runs again; another
    folder named run1 gets runs of its own, of the same name."""
    relative, absolute, other = one_folder_named_two_ways(tmp_path, monkeypatch)
    assert session_key(relative.session_root) == session_key(absolute.session_root)
    ids = []
    for context in (relative, absolute, other):
        run(context, records)
        ids.append(sorted(r["info"]["run_id"] for r in runs_of(mlflow_peer, context)))
    assert ids[0] == ids[1]
    assert not set(ids[0]) & set(ids[2])
    for context, folder in ((relative, "logs"), (other, "elsewhere")):
        (parent,) = [r for r in runs_of(mlflow_peer, context) if "traceml.rank" not in tags_of(r)]
        tags = tags_of(parent)
        assert tags["traceml.session_root"] == str((tmp_path / folder / "run1").resolve())
        assert tags["mlflow.runName"] == "run1"


def test_the_runs_go_under_the_users_run(
    mlflow_peer: MlflowServer, context: ExporterContext, records: list[ExportRecord]
) -> None:
    name = os.environ["MLFLOW_EXPERIMENT_NAME"]
    experiment = mlflow_peer.call("POST", "experiments/create", {"name": name})
    user = mlflow_peer.call(
        "POST", "runs/create", {"experiment_id": experiment["experiment_id"], "run_name": "mine"}
    )["run"]["info"]["run_id"]
    os.environ["MLFLOW_RUN_ID"] = user
    os.environ["TRACEML_MLFLOW_RANK_RUNS"] = "0,1"
    run(context, records)
    children = runs_of(mlflow_peer, context)
    assert len(children) == 2
    assert {tags_of(r)["mlflow.parentRunId"] for r in children} == {user}
    mine = mlflow_peer.call("GET", "runs/get", {"run_id": user})["run"]
    assert mine["info"]["status"] == "RUNNING", "the user's run is theirs to end"
    assert tags_of(mine)["traceml.not_exported.stdout_stderr"] == "2"


def test_a_flush_is_split_within_mlflows_limits(context: ExporterContext) -> None:
    events: Any = {f"e{i}": {"cuda:0": {"is_gpu": True, "cpu_ms": 1.0 * i}} for i in range(60)}
    steps = [
        StepTimeRecord(NS, 0, 0, 0, 1, 1, 0, None, NS + s, s, s, events) for s in range(40)
    ]  # 2,400 points
    os.environ["TRACEML_MLFLOW_RANK_RUNS"] = "0"
    run(context, steps)
    assert receipt(context)["requests"] >= 3
    assert written(context) == expected_export(steps, rank_runs=[0])


def test_keys_follow_mlflows_rules(context: ExporterContext) -> None:
    long_name = "x" * 300
    events: Any = {
        "a name/with ../dots, 'quotes' & \u00e9//": {"cuda:0": {"cpu_ms": 1.0}},
        long_name: {"cpu": {"n_calls": 2}},
    }
    record = StepTimeRecord(NS, 0, 0, 0, 1, 1, 0, None, None, 1, 1, events)
    os.environ["TRACEML_MLFLOW_RANK_RUNS"] = "all"
    run(context, [record])
    keys = {p["key"] for p in written(context)["step_time"] if p["rank"] == 0}
    assert keys == {
        "step_time/a name/with ../dots_ _quotes_ _ _/_/_/cuda:0/cpu_ms",
        f"step_time/{long_name}/cpu/n_calls"[:250],
    }
    assert all(len(k) <= 250 and "/../" not in k for k in keys)


def test_runtime_environment_is_tags_and_text_is_not_exported(context: ExporterContext) -> None:
    env = RuntimeEnvironmentRecord(
        NS, 1, 1, 1, 2, 2, 0, "node-a", 42, None, 0, "single", 0, None, "ddp", "auto", "high"
    )
    lines = [StdoutStderrRecord(NS, 1, NS, "loss=0.1"), StdoutStderrRecord(NS, 1, None, "x")]
    os.environ["TRACEML_MLFLOW_RANK_RUNS"] = "1"
    run(context, [env, *lines])
    back = written(context)
    assert back == expected_export([env, *lines], rank_runs=[1])
    (tags,) = back["runtime_environment"]
    assert tags["rank"] == 1
    assert tags["tags"]["traceml.runtime.training_strategy"] == "ddp"
    assert "traceml.runtime.hostname" not in tags["tags"]
    assert receipt(context)["written_records"] == {"runtime_environment": 1, "stdout_stderr": 2}


def test_the_receipt_names_the_runs(context: ExporterContext, records: list[ExportRecord]) -> None:
    os.environ["TRACEML_MLFLOW_RANK_RUNS"] = "all"
    run(context, records, dropped=2)
    data = receipt(context)
    assert data["dropped_batches"] == 2
    assert sorted(data["rank_run_ids"]) == ["0", "1"]
    assert data["tracking_uri"] == os.environ["MLFLOW_TRACKING_URI"]
    assert "password" not in json.dumps(data).lower()
    assert Path(context.export_dir / RECEIPT_FILE).is_file()
    assert read_export(context) == expected_export(records, rank_runs=None)


# -- the cross-rank summary --------------------------------------------------------------

WAIT_STEPS = 2
_DURATIONS = st.one_of(
    st.none(),
    st.sampled_from([0.0, 1.5, 1.5, 2.25, math.nan, math.inf]),
    st.floats(min_value=0, max_value=1e6, allow_nan=False),
)


@st.composite
def rank_steps(draw: st.DrawFn) -> list[ExportRecord]:
    """step_time and step_memory records of up to 4 ranks and 5 steps in any order, with
    repeats, ranks missing, a world_size that may be wrong or None, no rank or no step."""
    world = draw(st.integers(1, 4))
    out: list[ExportRecord] = []
    for _ in range(draw(st.integers(1, 24))):
        rank = draw(st.one_of(st.integers(0, world - 1), st.just(None)))
        step = draw(st.one_of(st.integers(0, 4), st.just(None)))
        size = draw(st.sampled_from([world, world, world, world + 1, None]))
        stamp = NS + draw(st.integers(0, 5)) * 1_000_000
        if draw(st.booleans()):
            names = draw(st.sets(st.sampled_from(["fwd", "bwd", "a b", "a_b"]), max_size=3))
            events: Any = {
                event: {
                    device: {"duration_ms": draw(_DURATIONS), "is_gpu": True}
                    for device in draw(st.sets(st.sampled_from(["cuda:0", "cpu"]), min_size=1))
                }
                for event in names
            }
            out.append(StepTimeRecord(NS, rank, rank, 0, size, 1, 0, None, stamp, 1, step, events))
        else:
            device = draw(st.sampled_from(["cuda:0", "cuda:1", None]))
            peaks = (draw(_DURATIONS), draw(_DURATIONS))
            out.append(
                StepMemoryRecord(
                    NS, rank, rank, 0, size, 1, 0, None, stamp, 1, device, step, *peaks
                )
            )
    return out


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    records=rank_steps(),
    cuts=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    rank_runs=st.sampled_from(["none", "all", "1", "0,slowest"]),
)
def test_the_summary_is_what_the_readme_computes(
    records: list[ExportRecord], cuts: tuple[float, float], rank_runs: str
) -> None:
    """Records in three parts: the first flushed, the second written and not flushed
    before the process dies (so ``follow`` sends it again), the rest by a new exporter on
    the same folder. After its flush and after its close, the points read back equal the
    README's computation of the records (what waits for ranks is kept in the folder), and
    the end-of-run summary too; so are the rank runs' points (kept in the folder until a
    request is full)."""
    first, second = sorted(int(c * len(records)) for c in cuts)
    os.environ["TRACEML_MLFLOW_WAIT_STEPS"] = str(WAIT_STEPS)
    os.environ["TRACEML_MLFLOW_RANK_RUNS"] = rank_runs
    ranks = {"none": (), "all": None, "1": (1,), "0,slowest": (0,)}[rank_runs]
    with tempfile.TemporaryDirectory() as folder:
        context = ExporterContext.create(folder, export_streams="all")
        dying = make_exporter(context)
        dying.open()
        dying.write(records[:first])
        dying.flush()
        dying.write(records[first:second])  # then the process dies: no flush, no close
        dying._release()  # only its connection goes, as with the process
        exporter = make_exporter(context)
        exporter.open()
        exporter.write(records[first:])
        exporter.flush()
        want = expected_export(
            records, wait_steps=WAIT_STEPS, rank_runs=ranks, slowest="slowest" in rank_runs
        )
        assert written(context) == want
        exporter.close()
        assert written(context) == want
        assert read_end_of_run(context) == end_of_run(records, wait_steps=WAIT_STEPS)


def test_late_and_unplaced_records_are_counted_and_said(context: ExporterContext) -> None:
    """A step of two ranks written when a third step arrives (wait 1); rank 1's record of
    it after that is late; a record with no step is unplaced. Each is counted in the
    receipt and the session run's tags, never placed."""
    os.environ["TRACEML_MLFLOW_WAIT_STEPS"] = "1"
    events: Any = {"fwd": {"cpu": {"duration_ms": 1.0}}}

    def step(rank: int, number: int | None) -> StepTimeRecord:
        return StepTimeRecord(NS, rank, rank, 0, 2, 1, 0, None, NS, 1, number, events)

    records = [step(0, 0), step(0, 1), step(1, 0), step(0, None), step(1, 1)]
    run(context, records)
    counts = receipt(context)
    assert counts["late_records"] == {"step_time": 1, "step_memory": 0}
    assert counts["unplaced_records"] == {"step_time": 1, "step_memory": 0}
    assert counts["summary_steps_incomplete"] == {"step_time": 1, "step_memory": 0}
    back = written(context)
    assert back == expected_export(records, wait_steps=1)
    ranks = {p["step"]: p["value"] for p in back["step_time"] if p["key"] == "step_time/ranks"}
    assert ranks == {0: 1.0, 1: 2.0}
    assert read_end_of_run(context)["summary/step_time/late_records"] == 1.0
