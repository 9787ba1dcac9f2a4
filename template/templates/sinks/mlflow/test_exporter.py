"""Unit tests of the MLflow mapping, runs and batching, against the real server (the suite
checks the contract; ``test_mlflow_faults.py`` drives the server into faults)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from exporter_calls import run, written
from mlflow_server import MlflowServer
from sink_support import expected_export, read_export
from traceml_exporter_sdk import (
    ExporterContext,
    ExportRecord,
    RuntimeEnvironmentRecord,
    StdoutStderrRecord,
    StepTimeRecord,
)

from {{ cookiecutter.package_name }}.exporter import (
    RECEIPT_FILE,
    {{ cookiecutter.exporter_class }},
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
    assert isinstance(exporter, {{ cookiecutter.exporter_class }})
    assert not context.session_root.exists()
    with pytest.raises(ValueError, match="MLFLOW_TRACKING_URI is not set"):
        exporter.open()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("MLFLOW_TRACKING_URI", "file:///tmp/mlruns", "has the scheme 'file'"),
        ("TRACEML_MLFLOW_TIMEOUT_S", "soon", "is not a number of seconds"),
        ("TRACEML_MLFLOW_TIMEOUT_S", "0", "is not a number of seconds"),
    ],
)
def test_bad_settings_fail_open_with_one_line(
    context: ExporterContext, variable: str, value: str, message: str
) -> None:
    os.environ[variable] = value
    with pytest.raises(ValueError, match=message):
        make_exporter(context).open()


def test_metrics_tags_and_runs_as_the_readme_maps_them(
    mlflow_peer: MlflowServer, context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(context, records[:4], records[4:])
    back = written(context)
    assert back == expected_export(records)
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


def test_reopening_the_session_finds_its_runs_again(
    mlflow_peer: MlflowServer, context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(context, records)
    first = sorted(r["info"]["run_id"] for r in runs_of(mlflow_peer, context))
    run(context, records)
    assert sorted(r["info"]["run_id"] for r in runs_of(mlflow_peer, context)) == first
    assert written(context) == expected_export(records), "a re-sent point is stored once"


def test_the_runs_go_under_the_users_run(
    mlflow_peer: MlflowServer, context: ExporterContext, records: list[ExportRecord]
) -> None:
    name = os.environ["MLFLOW_EXPERIMENT_NAME"]
    experiment = mlflow_peer.call("POST", "experiments/create", {"name": name})
    user = mlflow_peer.call(
        "POST", "runs/create", {"experiment_id": experiment["experiment_id"], "run_name": "mine"}
    )["run"]["info"]["run_id"]
    os.environ["MLFLOW_RUN_ID"] = user
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
    run(context, steps)
    assert receipt(context)["requests"] >= 3
    assert written(context) == expected_export(steps)


def test_keys_follow_mlflows_rules(context: ExporterContext) -> None:
    long_name = "x" * 300
    events: Any = {
        "a name/with ../dots, 'quotes' & \u00e9//": {"cuda:0": {"cpu_ms": 1.0}},
        long_name: {"cpu": {"n_calls": 2}},
    }
    record = StepTimeRecord(NS, 0, 0, 0, 1, 1, 0, None, None, 1, 1, events)
    run(context, [record])
    keys = {p["key"] for p in written(context)["step_time"]}
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
    run(context, [env, *lines])
    back = written(context)
    assert back == expected_export([env, *lines])
    (tags,) = back["runtime_environment"]
    assert tags["rank"] == 1
    assert tags["tags"]["traceml.runtime.training_strategy"] == "ddp"
    assert "traceml.runtime.hostname" not in tags["tags"]
    assert receipt(context)["written_records"] == {"runtime_environment": 1, "stdout_stderr": 2}


def test_calls_out_of_order_raise(context: ExporterContext, records: list[ExportRecord]) -> None:
    exporter = make_exporter(context)
    with pytest.raises(RuntimeError, match="not open"):
        exporter.write(records)
    exporter.open()
    exporter.close()
    with pytest.raises(RuntimeError, match="not open"):
        exporter.flush()


def test_the_receipt_names_the_runs(context: ExporterContext, records: list[ExportRecord]) -> None:
    run(context, records, dropped=2)
    data = receipt(context)
    assert data["dropped_batches"] == 2
    assert sorted(data["rank_run_ids"]) == ["0", "1"]
    assert data["tracking_uri"] == os.environ["MLFLOW_TRACKING_URI"]
    assert "password" not in json.dumps(data).lower()
    assert Path(context.export_dir / RECEIPT_FILE).is_file()
    assert read_export(context) == expected_export(records)
