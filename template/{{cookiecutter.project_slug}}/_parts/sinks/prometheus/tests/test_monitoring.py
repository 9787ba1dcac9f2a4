"""The shipped dashboard and rules (``monitoring/``) against the real thing.

The dashboard is read through Grafana's schema (``grafana-foundation-sdk``); every query
is taken from the shipped files and run on a fresh Prometheus and VictoriaMetrics this
sink fed with the corpus, and must answer with series; ``promtool`` checks the rules
and runs unit tests on the alerts, which fire and stay quiet where they should. A
planted broken query and every planted wrong threshold fail.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from traceml_exporter_sdk import ExporterContext, ExportRecord
from traceml_exporter_sdk.testing import corpus_records
from traceml_exporter_sdk.testing.monitoring import (
    DashboardSchemaError,
    Query,
    concrete,
    dashboard_queries,
    promtool,
    promtool_test_rules,
    rule_queries,
    unanswered,
    validate_dashboard,
)
from traceml_exporter_sdk.testing.prometheus_server import (
    MetricsServer,
    prometheus_server,
    victoria_metrics_server,
)

from traceml_exporter_example.exporter import ExampleExporter
from traceml_exporter_example.monitoring import HERE, Thresholds, build, rules
from traceml_exporter_example.monitoring.__main__ import main

if sys.version_info < (3, 11):  # grafana-foundation-sdk (Grafana's schema) needs 3.11
    pytestmark = pytest.mark.skip(reason="grafana-foundation-sdk needs Python 3.11+")

RUN = "dashboard_corpus"
KINDS = ("prometheus", "victoria-metrics")
STUCK_S = 4
FIRING = Thresholds(stuck_after=f"{STUCK_S}s", straggler_factor=0.0, memory_fraction=0.0)
"""Thresholds every alert passes on the fed data: its query must then show series."""
VARIABLES = {"run": re.escape(RUN), "node": ".*", "rank": ".*", "datasource": "prometheus"}


def sel(metric: str, labels: str) -> str:
    """``metric{labels}``: a series as PromQL and promtool write it."""
    return metric + "{" + labels + "}"


def shipped_dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HERE / "dashboard.json").read_text(encoding="utf-8"))
    return data


def shipped_rules() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((HERE / "rules.yml").read_text(encoding="utf-8"))
    return data


def recorded(rule_file: Mapping[str, Any]) -> dict[str, str]:
    """Recording rule name -> its expression (the servers queried run no rules)."""
    return {
        rule["record"]: rule["expr"]
        for group in rule_file["groups"]
        for rule in group["rules"]
        if "record" in rule
    }


class Fed(NamedTuple):
    servers: dict[str, MetricsServer]
    at: float
    """When every query is asked: just after the last flush, whenever a test runs."""


def _exporter(server: MetricsServer, root: Path) -> ExampleExporter:
    context = ExporterContext.create(root)
    environment = {
        "PROMETHEUS_REMOTE_WRITE_URL": server.write_url,
        "PROMETHEUS_REMOTE_WRITE_RUN": RUN,
    }
    return ExampleExporter(
        environment,
        session_root=context.session_root,
        export_dir=context.export_dir,
        include_hostname=context.include_hostname,
    )


def feed(servers: Sequence[MetricsServer], root: Path) -> float:
    """The corpus in three flushes a second apart, then, past ``STUCK_S``, two flushes of
    system and process snapshots only: a run whose steps stopped while TraceML still sends.
    Returns a moment just after the last flush."""
    records = corpus_records()
    exporters = [_exporter(server, root / server.kind) for server in servers]
    batches: list[Sequence[ExportRecord]] = [records[i::3] for i in range(3)]
    snapshots = [r for r in records if r.STREAM in ("system", "process", "runtime_environment")]
    for exporter in exporters:
        exporter.open()
    for i, batch in enumerate([*batches, snapshots, snapshots]):
        time.sleep(STUCK_S + 0.5 if i == 3 else 1.1 if i else 0)
        for exporter in exporters:
            exporter.write(batch)
            exporter.flush()
    last = time.time()
    for exporter in exporters:
        exporter.close()
    return last + 0.5


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fed]:
    """A fresh Prometheus and VictoriaMetrics holding only the fed corpus."""
    with contextlib.ExitStack() as stack:
        servers = {
            "prometheus": stack.enter_context(prometheus_server()),
            "victoria-metrics": stack.enter_context(victoria_metrics_server()),
        }
        at = feed(list(servers.values()), tmp_path_factory.mktemp("monitoring"))
        yield Fed(servers, at)


# -- the files ------------------------------------------------------------------------


def test_the_shipped_files_are_what_the_defaults_build() -> None:
    for name, text in build().items():
        assert (HERE / name).read_text(encoding="utf-8") == text, (
            f"run python -m ...monitoring: {name}"
        )


def test_the_generator_writes_other_thresholds_and_refuses_unknown_ones(tmp_path: Path) -> None:
    assert (
        main(["--out", str(tmp_path), "--set", "straggler_factor=2", "--set", "stuck_after=30m"])
        == 0
    )
    written = (tmp_path / "rules.yml").read_text(encoding="utf-8")
    assert "group_left () 2 * traceml:" in written
    assert "increase(traceml_steps_total[30m])" in written
    with pytest.raises(SystemExit) as exited:
        main(["--out", str(tmp_path), "--set", "factor=2"])
    assert exited.value.code == 2


def test_the_readme_names_every_threshold_with_its_default() -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    for field in dataclasses.fields(Thresholds):
        default = f"{field.default:g}" if isinstance(field.default, float) else field.default
        assert f"`{field.name}` ({default})" in readme, field.name


def test_the_dashboard_fits_grafanas_schema_and_has_every_query() -> None:
    data = shipped_dashboard()
    validate_dashboard(data)
    queries = dashboard_queries(data)
    assert len(queries) >= 20
    names = {v["name"] for v in data["templating"]["list"]}
    assert {"datasource", "run", "node", "rank"} <= names
    for query in queries:
        assert "traceml_" in query.expr, query


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("panels", 1, "gridPos", "h"), "8"),
        (("panels", 1, "targets", 0, "legendFormat"), 3),
        (("panels", 1, "targets", 0, "exprr"), "up"),
        (("templating", "list", 1, "type"), "querry"),
        (("panels", 1, "targets", 0, "expr"), " "),
    ],
)
def test_a_dashboard_off_the_schema_is_refused(where: tuple[Any, ...], value: object) -> None:
    data = shipped_dashboard()
    place: Any = data
    for key in where[:-1]:
        place = place[key]
    place[where[-1]] = value
    with pytest.raises(DashboardSchemaError, match=re.escape(str(where[-1])[:4]) + "|expr"):
        validate_dashboard(data)


def test_promtool_finds_the_rules_clean(tmp_path: Path) -> None:
    result = promtool("check", "rules", HERE / "rules.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    count = sum(len(group["rules"]) for group in shipped_rules()["groups"])
    assert f"SUCCESS: {count} rules found" in result.stdout
    broken = tmp_path / "rules.yml"
    broken.write_text((HERE / "rules.yml").read_text().replace("sum by", "sum bye", 1))
    assert promtool("check", "rules", broken).returncode != 0


# -- every query against the fed servers ----------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_every_dashboard_query_shows_series(fed: Fed, kind: str) -> None:
    queries = dashboard_queries(shipped_dashboard())
    assert unanswered(fed.servers[kind], queries, VARIABLES, at=fed.at) == []


@pytest.mark.parametrize("kind", KINDS)
def test_every_recording_rule_shows_series(fed: Fed, kind: str) -> None:
    rule_file = shipped_rules()
    queries = [q for q in rule_queries(rule_file) if q.where.startswith("traceml.rules/")]
    assert len(queries) == len(recorded(rule_file))
    assert unanswered(fed.servers[kind], queries, {}, recorded=recorded(rule_file), at=fed.at) == []


@pytest.mark.parametrize("kind", KINDS)
def test_every_alert_shows_series_at_thresholds_the_data_passes(fed: Fed, kind: str) -> None:
    shipped = shipped_rules()
    firing = rules(FIRING)
    names = [q.where for q in rule_queries(shipped)]
    assert names == [q.where for q in rule_queries(firing)]
    alerts = [q for q in rule_queries(firing) if q.where.startswith("traceml.alerts/")]
    assert unanswered(fed.servers[kind], alerts, {}, recorded=recorded(firing), at=fed.at) == []


@pytest.mark.parametrize("kind", KINDS)
def test_on_the_corpus_only_its_slowest_rank_straggles(fed: Fed, kind: str) -> None:
    """The shipped thresholds on the replay: no rank stuck, no memory near capacity; rank 3,
    the corpus' slowest, straggles (its last steps pass 50 ms, into the next bucket, so its
    p95 is about 1.8x the median rank's 49 ms)."""
    shipped = shipped_rules()
    alerts = [q for q in rule_queries(shipped) if q.where.startswith("traceml.alerts/")]
    server = fed.servers[kind]
    answers = {
        q.where: server.query(concrete(q, {}, recorded(shipped)), fed.at, until=bool, timeout=1.0)
        for q in alerts
    }
    assert {where for where, answer in answers.items() if answer} == {
        "traceml.alerts/TraceMLStraggler"
    }
    (labels,) = answers["traceml.alerts/TraceMLStraggler"]
    assert dict(labels)["rank"] == "3"


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_broken_query_fails(fed: Fed, kind: str) -> None:
    """Each query with a misspelt metric shows nothing; one with a syntax error errors."""
    queries = dashboard_queries(shipped_dashboard())
    misspelt = [Query(q.where, q.expr.replace("traceml_", "traceml_x", 1)) for q in queries]
    found = unanswered(fed.servers[kind], misspelt, VARIABLES, patience=0, at=fed.at)
    assert len(found) == len(queries), found
    syntax = [Query("planted", queries[0].expr + " )")]
    (problem,) = unanswered(fed.servers[kind], syntax, VARIABLES, patience=0, at=fed.at)
    assert "failed" in problem


# -- promtool's unit tests of the alerts ----------------------------------------------

IDENTITY = 'job="traceml", run="r1", session_root="/runs/r1", instance="i1"'


def _rank(rank: int, labels: str = "") -> str:
    return f'{IDENTITY}, node="0", rank="{rank}"{labels}'


def _bucket(rank: int, le: str) -> str:
    phase = ', phase="_traceml_internal:step_time", device="cuda:0"'
    return sel("traceml_step_phase_seconds_bucket", f'{_rank(rank, phase)}, le="{le}"')


def straggler_case(fast_share: float, at: str, fires: bool) -> dict[str, Any]:
    """Ranks 0-2 take under 1 s a step, rank 3 ``fast_share`` of its steps (its p95 in
    (1, 2] s: 1.75 s at 0.8, 1.29 s at 0.93; the median rank's 0.95 s)."""
    series = []
    for rank in range(4):
        share = fast_share if rank == 3 else 1.0
        for le, per_min in (("1", round(100 * share)), ("2", 100), ("+Inf", 100)):
            series.append({"series": _bucket(rank, le), "values": f"0+{per_min}x30"})
    labels = {
        "alertname": "TraceMLStraggler",
        "severity": "warning",
        "job": "traceml",
        "run": "r1",
        "session_root": "/runs/r1",
        "node": "0",
        "rank": "3",
    }
    expected = [{"exp_labels": labels}] if fires else []
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {"eval_time": at, "alertname": "TraceMLStraggler", "exp_alerts": expected}
        ],
    }


def stuck_case(info_until: int, at: str, fires: bool) -> dict[str, Any]:
    """Steps every minute for 10 minutes, then none; runtime_info sent until ``info_until``."""
    series = [
        {"series": sel("traceml_steps_total", _rank(0)), "values": "0+60x10 600x30"},
        {
            "series": sel("traceml_runtime_info", f'{_rank(0)}, topology="single"'),
            "values": f"1x{info_until}",
        },
    ]
    labels = {
        "alertname": "TraceMLRunStuck",
        "severity": "critical",
        "job": "traceml",
        "run": "r1",
        "session_root": "/runs/r1",
        "node": "0",
        "rank": "0",
    }
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {
                "eval_time": at,
                "alertname": "TraceMLRunStuck",
                "exp_alerts": [{"exp_labels": labels}] if fires else [],
            }
        ],
    }


def memory_case(fraction: float, at: str, fires: bool) -> dict[str, Any]:
    """A rank's reserved and a GPU's used memory at ``fraction`` of 80 GB from minute 0."""
    total = 80_000_000_000
    rank = _rank(1)
    gpu = f'{IDENTITY}, node="0", gpu="1"'
    series = [
        {
            "series": sel("traceml_process_gpu_memory_reserved_bytes", rank),
            "values": f"{total * fraction:.0f}x20",
        },
        {"series": sel("traceml_process_gpu_memory_total_bytes", rank), "values": f"{total}x20"},
        {
            "series": sel("traceml_gpu_memory_used_bytes", gpu),
            "values": f"{total * fraction:.0f}x20",
        },
        {"series": sel("traceml_gpu_memory_total_bytes", gpu), "values": f"{total}x20"},
    ]
    tests = []
    for alert, labels in (
        ("TraceMLRankMemoryNearCapacity", {"rank": "1", "node": "0"}),
        ("TraceMLGpuMemoryNearCapacity", {"gpu": "1", "node": "0"}),
    ):
        exp = {
            "alertname": alert,
            "severity": "warning",
            **dict(re.findall(r'(\w+)="([^"]*)"', IDENTITY)),
            **labels,
        }
        tests.append(
            {
                "eval_time": at,
                "alertname": alert,
                "exp_alerts": [{"exp_labels": exp}] if fires else [],
            }
        )
    return {"interval": "1m", "input_series": series, "alert_rule_test": tests}


UNIT_TESTS = [
    straggler_case(0.8, "14m", fires=True),  # 1.84x the median for 10 m
    straggler_case(0.8, "9m", fires=False),  # not yet 10 m
    straggler_case(0.93, "25m", fires=False),  # 1.35x: under the factor
    stuck_case(40, "24m", fires=False),  # 14 m without a step
    stuck_case(40, "28m", fires=True),  # 18 m without a step
    stuck_case(10, "28m", fires=False),  # its series gone: not running, not stuck
    memory_case(0.97, "7m", fires=True),
    memory_case(0.97, "3m", fires=False),  # not yet 5 m
    memory_case(0.93, "15m", fires=False),
]
"""Each alert at its threshold: fired just past it, quiet just before it (value or time)."""


def promtool_test(folder: Path, rule_file: str) -> Any:
    return promtool_test_rules(folder, yaml.safe_load(rule_file), UNIT_TESTS)


def test_the_alerts_fire_and_stay_quiet_where_they_should(tmp_path: Path) -> None:
    result = promtool_test(tmp_path, (HERE / "rules.yml").read_text(encoding="utf-8"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


PLANTED_THRESHOLDS: list[dict[str, Any]] = [
    {"straggler_factor": 1.3},
    {"straggler_factor": 2.0},
    {"straggler_for": "5m"},
    {"straggler_for": "20m"},
    {"stuck_after": "10m"},
    {"stuck_after": "20m"},
    {"memory_fraction": 0.9},
    {"memory_fraction": 0.99},
    {"memory_for": "2m"},
    {"memory_for": "10m"},
]


def test_every_alert_threshold_is_planted() -> None:
    """Each threshold but the rate window has a planted wrong value, both ways."""
    planted = {name for change in PLANTED_THRESHOLDS for name in change}
    assert planted == {f.name for f in dataclasses.fields(Thresholds)} - {"window"}


@pytest.mark.parametrize(
    "change", PLANTED_THRESHOLDS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items())
)
def test_a_planted_wrong_threshold_fails_the_unit_tests(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    wrong = build(Thresholds(**change))["rules.yml"]
    result = promtool_test(tmp_path, wrong)
    assert result.returncode != 0, f"{change} passed the alert unit tests"
    assert "FAILED" in result.stdout + result.stderr
