"""follow's dashboard and rules (``traceml_exporter_sdk.monitoring``) against the real thing.

Two real followers serve ``--metrics-port`` to a real Prometheus that scrapes them every
second: one whose sink is down while TraceML's retention prunes rows, one whose sink
fails past ``--max-outage`` (its run ends ``exporter-failed``, rows lost). Every panel's,
variable's and rule's query, taken from the shipped files, must answer with series;
``promtool`` checks the rules and runs unit tests of the alerts; a planted broken query
and every planted wrong threshold fail.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from follow_helpers import finish, follow
from traceml_exporter_sdk.monitoring import FILES, HERE, Thresholds, build, rules
from traceml_exporter_sdk.testing.fault_proxy import unused_port
from traceml_exporter_sdk.testing.monitoring import (
    Query,
    concrete,
    dashboard_queries,
    promtool,
    promtool_test_rules,
    rule_queries,
    unanswered,
)
from traceml_exporter_sdk.testing.prometheus_server import MetricsServer, prometheus_server
from waiting import wait_for
from writer050 import Writer050, step_records

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="grafana-foundation-sdk (Grafana's schema) needs 3.11+"
)

FLAKY = "failing_exporter:make_flaky"
PREFIX = "traceml_exporter_follow"
VARIABLES = {"instance": ".*", "run": ".*", "datasource": "prometheus"}
FIRING = Thresholds(lag_seconds=0, hung_call_seconds=-1)
"""Thresholds every alert passes on the scraped data (no call hangs: -1 shows its 0 s)."""


def sel(metric: str, labels: str) -> str:
    """``metric{labels}``: a series as PromQL and promtool write it."""
    return metric + "{" + labels + "}"


def shipped_dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HERE / FILES[0]).read_text(encoding="utf-8"))
    return data


def shipped_rules() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((HERE / FILES[1]).read_text(encoding="utf-8"))
    return data


def recorded(rule_file: dict[str, Any]) -> dict[str, str]:
    return {
        r["record"]: r["expr"] for g in rule_file["groups"] for r in g["rules"] if "record" in r
    }


def alerts_of(rule_file: dict[str, Any]) -> list[Query]:
    return [q for q in rule_queries(rule_file) if ".alerts/" in q.where]


def answers(server: MetricsServer, expr: str) -> dict[frozenset[tuple[str, str]], float]:
    return server.query(expr)


def one(server: MetricsServer, expr: str) -> float | None:
    found = list(answers(server, expr).values())
    return found[0] if len(found) == 1 else None


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetricsServer]:
    """Prometheus holding what it scraped of the two followers, both still running."""
    tmp = tmp_path_factory.mktemp("monitoring")
    ports = [unused_port(), unused_port()]
    down_run = Writer050(tmp / "a" / "run1", session_id="run1")
    failed_run = Writer050(tmp / "b" / "run2", session_id="run2")
    fast = ["--runs-poll-interval", "0.2", "--retry-max-interval", "30"]
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(prometheus_server(scrape=[f"127.0.0.1:{p}" for p in ports]))
        followers = [
            follow(tmp / "a", "--metrics-port", str(ports[0]), *fast, where="--logs-dir",
                   spec=FLAKY, FAIL_INSTANCES="1000", FAIL_AFTER_RECORDS="50"),
            follow(tmp / "b", "--metrics-port", str(ports[1]), *fast, "--max-outage", "2",
                   where="--logs-dir", spec=FLAKY, FAIL_INSTANCES="1000", FAIL_AFTER_RECORDS="10"),
        ]  # fmt: skip
        try:
            exported = sel(f"{PREFIX}_records_exported_total", 'run="run1", stream="step_time"')
            down_run.flush(step_records(0, 50))
            wait_for(lambda: one(server, exported) == 50, "run1's 50 rows scraped", timeout=60)
            more = down_run.flush(step_records(50, 50))["step_time_samples"]
            wait_for(lambda: one(server, sel(f'{PREFIX}_sink_down', 'run="run1"')) == 1, "run1 down",
                     timeout=60)  # fmt: skip
            down_run.flush(step_records(100, 10), prune={"step_time_samples": more[29]})
            failed_run.flush(step_records(0, 10))
            wait_for(lambda: one(server, exported.replace("run1", "run2")) == 10,
                     "run2's 10 rows scraped", timeout=60)  # fmt: skip
            failed_run.flush(step_records(10, 20))  # its sink fails past --max-outage
            wait_for(lambda: one(server, sel(f'{PREFIX}_rows_pruned_total', 'run="run1"')) == 30,
                     "30 rows pruned, scraped", timeout=60)  # fmt: skip
            wait_for(lambda: answers(server, sel(f'{PREFIX}_run_end', 'run="run2"')),
                     "run2's end scraped", timeout=60)  # fmt: skip
            yield server
        finally:
            for follower in followers:
                follower.send_signal(signal.SIGTERM)
            for follower in followers:
                finish(follower)
            down_run.disconnect()
            failed_run.disconnect()


def test_the_shipped_files_are_what_the_defaults_build() -> None:
    for name, text in build().items():
        assert (HERE / name).read_text(encoding="utf-8") == text, (
            f"{name}: run python -m traceml_exporter_sdk.monitoring --out {HERE}"
        )


def test_the_generator_writes_other_thresholds_and_refuses_unknown_ones(tmp_path: Path) -> None:
    from traceml_exporter_sdk.monitoring.__main__ import main

    assert main(["--out", str(tmp_path), "--set", "lag_seconds=600"]) == 0
    assert "lag_seconds) > 600" in (tmp_path / FILES[1]).read_text()
    with pytest.raises(SystemExit) as exited:
        main(["--out", str(tmp_path), "--set", "lag=600"])
    assert exited.value.code == 2


FOLLOW_DOC = Path(__file__).parents[2] / "docs" / "follow.md"


def test_the_docs_name_every_threshold_with_its_default() -> None:
    text = FOLLOW_DOC.read_text(encoding="utf-8")
    for field in dataclasses.fields(Thresholds):
        default = f"{field.default:g}" if isinstance(field.default, float) else field.default
        assert f"`{field.name}` ({default})" in text, field.name


def test_promtool_finds_the_rules_clean() -> None:
    result = promtool("check", "rules", HERE / FILES[1])
    assert result.returncode == 0, result.stdout + result.stderr
    count = sum(len(g["rules"]) for g in shipped_rules()["groups"])
    assert f"SUCCESS: {count} rules found" in result.stdout


def test_every_dashboard_query_shows_series(scraped: MetricsServer) -> None:
    queries = dashboard_queries(shipped_dashboard())
    assert len(queries) >= 12
    assert unanswered(scraped, queries, VARIABLES) == []


def test_every_recording_rule_shows_series(scraped: MetricsServer) -> None:
    rule_file = shipped_rules()
    queries = [q for q in rule_queries(rule_file) if ".rules/" in q.where]
    assert len(queries) == len(recorded(rule_file))
    assert unanswered(scraped, queries, {}) == []


def test_every_alert_shows_series_at_thresholds_the_data_passes(scraped: MetricsServer) -> None:
    firing = rules(FIRING)
    assert [q.where for q in alerts_of(firing)] == [q.where for q in alerts_of(shipped_rules())]
    assert unanswered(scraped, alerts_of(firing), {}) == []


def test_the_shipped_alerts_say_what_happened(scraped: MetricsServer) -> None:
    """Run1's sink is down, rows were pruned and its rows wait (they were received, by
    their stamps, in 2025: far past 5 minutes); run2 ended failed, its rows lost (and left
    waiting); no call hangs."""
    fired = {
        q.where.split("/")[1]: answers(scraped, concrete(q, {})) for q in alerts_of(shipped_rules())
    }
    assert {name for name, found in fired.items() if found} == {
        "TraceMLFollowSinkDown",
        "TraceMLFollowLagging",
        "TraceMLFollowRowsPruned",
        "TraceMLFollowRowsLost",
        "TraceMLFollowRunIncomplete",
    }
    (labels,) = fired["TraceMLFollowRunIncomplete"]
    assert dict(labels)["end"] == "exporter-failed"
    assert {dict(labels)["run"] for labels in fired["TraceMLFollowSinkDown"]} == {"run1"}
    assert {dict(labels)["run"] for labels in fired["TraceMLFollowLagging"]} == {"run1", "run2"}


def test_a_planted_broken_query_fails(scraped: MetricsServer) -> None:
    queries = dashboard_queries(shipped_dashboard()) + rule_queries(shipped_rules())
    misspelt = [Query(q.where, q.expr.replace(PREFIX, PREFIX + "x")) for q in queries]
    assert len(unanswered(scraped, misspelt, VARIABLES, patience=0)) == len(queries)
    (problem,) = unanswered(scraped, [Query("planted", queries[0].expr + " )")], VARIABLES)
    assert "failed, 400" in problem


# -- promtool's unit tests of the alerts ----------------------------------------------

FOLLOWER = 'job="follow", instance="host:9464"'


def _case(series: dict[str, str], at: str, alert: str, labels: dict[str, str] | None) -> Any:
    expected = []
    if labels is not None:
        base = {"job": "follow", "instance": "host:9464", "run": "run1"}
        severity = (
            "warning"
            if alert in ("TraceMLFollowLagging", "TraceMLFollowRunIncomplete")
            else "critical"
        )
        expected = [{"exp_labels": {"alertname": alert, "severity": severity, **base, **labels}}]
    return {
        "interval": "1m",
        "input_series": [{"series": f"{PREFIX}_{k}", "values": v} for k, v in series.items()],
        "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": expected}],
    }


RUN1 = f'{FOLLOWER}, run="run1"'
UNIT_TESTS = [
    # sink down from minute 2: pending, then firing after 5 minutes
    _case({sel("sink_down", RUN1): "0 0 1x20"}, "6m", "TraceMLFollowSinkDown", None),
    _case({sel("sink_down", RUN1): "0 0 1x20"}, "8m", "TraceMLFollowSinkDown", {}),
    # 400 s behind from minute 1 for 10 minutes; 250 s never
    _case({sel("lag_seconds", RUN1): "0 400x30"}, "9m", "TraceMLFollowLagging", None),
    _case({sel("lag_seconds", RUN1): "0 400x30"}, "13m", "TraceMLFollowLagging", {}),
    _case({sel("lag_seconds", RUN1): "0 250x30"}, "20m", "TraceMLFollowLagging", None),
    # a call running 150 s alerts at once; 100 s does not
    _case({sel("exporter_call_seconds", RUN1): "0 150"}, "1m", "TraceMLFollowExporterHung", {}),
    _case({sel("exporter_call_seconds", RUN1): "0 100"}, "1m", "TraceMLFollowExporterHung", None),
    # 30 rows pruned at minute 5: alerts for the loss window (1 h), then not
    _case({sel("rows_pruned_total", RUN1): "0x4 30x100"}, "50m", "TraceMLFollowRowsPruned", {}),
    _case({sel("rows_pruned_total", RUN1): "0x4 30x100"}, "70m", "TraceMLFollowRowsPruned", None),
    _case({sel("rows_pruned_total", RUN1): "0x100"}, "50m", "TraceMLFollowRowsPruned", None),
    # a loss counted once it is known (the series appears with it), and a deleted run's
    _case(
        {sel("rows_lost_total", f'{RUN1}, reason="gave_up"'): "_x3 12x10"},
        "5m",
        "TraceMLFollowRowsLost",
        {"reason": "gave_up"},
    ),
    _case(
        {sel("rows_lost_total", f'{RUN1}, reason="gave_up"'): "0x10"},
        "5m",
        "TraceMLFollowRowsLost",
        None,
    ),
    _case(
        {sel("deleted_rows_lost_total", f'{FOLLOWER}, reason="run_deleted"'): "_x3 50x10"},
        "5m",
        "TraceMLFollowRowsLost",
        {"run": None, "reason": "run_deleted"},
    ),
    # how a run ended
    _case(
        {sel("run_end", f'{RUN1}, end="aggregator-gone"'): "_x3 1x10"},
        "5m",
        "TraceMLFollowRunIncomplete",
        {"end": "aggregator-gone"},
    ),
    _case(
        {sel("run_end", f'{RUN1}, end="complete"'): "_x3 1x10"},
        "5m",
        "TraceMLFollowRunIncomplete",
        None,
    ),
]
"""Each alert at its threshold: fired just past it, quiet just before it (value or time)."""


def _drop_none(tests: list[Any]) -> list[Any]:
    for test in tests:
        for check in test["alert_rule_test"]:
            for alert in check["exp_alerts"]:
                alert["exp_labels"] = {
                    k: v for k, v in alert["exp_labels"].items() if v is not None
                }
    return tests


def promtool_test(folder: Path, rule_file: str) -> Any:
    return promtool_test_rules(folder, yaml.safe_load(rule_file), _drop_none(UNIT_TESTS))


def test_the_alerts_fire_and_stay_quiet_where_they_should(tmp_path: Path) -> None:
    result = promtool_test(tmp_path, (HERE / FILES[1]).read_text(encoding="utf-8"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


PLANTED_THRESHOLDS: list[dict[str, Any]] = [
    {"sink_down_for": "3m"},
    {"sink_down_for": "10m"},
    {"lag_seconds": 200},
    {"lag_seconds": 500},
    {"lag_for": "5m"},
    {"lag_for": "15m"},
    {"hung_call_seconds": 60},
    {"hung_call_seconds": 200},
    {"loss_window": "30m"},
    {"loss_window": "2h"},
]


def test_every_threshold_is_planted() -> None:
    planted = {name for change in PLANTED_THRESHOLDS for name in change}
    assert planted == {f.name for f in dataclasses.fields(Thresholds)}


@pytest.mark.parametrize(
    "change", PLANTED_THRESHOLDS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items())
)
def test_a_planted_wrong_threshold_fails_the_unit_tests(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    result = promtool_test(tmp_path, build(Thresholds(**change))[FILES[1]])
    assert result.returncode != 0, f"{change} passed the alert unit tests"
    assert "FAILED" in result.stdout + result.stderr
