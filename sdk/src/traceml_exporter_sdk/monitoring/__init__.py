"""A Grafana dashboard and Prometheus rules for ``traceml-exporter follow --metrics-port``.

``follow-dashboard.json`` and ``follow-rules.yml`` beside this module are what ``build()``
makes from the default :class:`Thresholds` (a test keeps them equal); other thresholds:
``python -m traceml_exporter_sdk.monitoring --out DIR --set lag_seconds=600``
(docs/follow.md, "Dashboard and alerts"). Standard library only.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["FILES", "HERE", "Thresholds", "build", "dashboard", "rules", "with_settings", "write"]

HERE = Path(__file__).parent
"""The folder holding the shipped files."""
FILES = ("follow-dashboard.json", "follow-rules.yml")
PREFIX = "traceml_exporter_follow"
FOLLOWER = "job, instance"
"""The labels that name one follow process (the scrape's)."""
_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@dataclass(frozen=True)
class Thresholds:
    """Every threshold of the alerts, in one place (docs/follow.md has the same table)."""

    sink_down_for: str = "5m"
    """A run's sink down (failing and retried) for this long."""
    lag_seconds: float = 300.0
    """The oldest row not yet acknowledged has waited longer than this ..."""
    lag_for: str = "10m"
    """... for this long."""
    hung_call_seconds: float = 120.0
    """One exporter call running longer than this (a hung sink)."""
    loss_window: str = "1h"
    """Rows pruned within this window alert (they are gone for good). Rows lost for other
    reasons are counted when a run's follow ends, and alert while their series stay."""


def _m(name: str, *matchers: str) -> str:
    chosen = ['instance=~"$instance"', 'run=~"$run"', *matchers]
    return _selector(f"{PREFIX}_{name}", *chosen)


def _selector(metric: str, *matchers: str) -> str:
    """``metric{a, b}`` (written without braces doubled in an f-string)."""
    return metric + "{" + ", ".join(matchers) + "}"


def _target(expr: str, legend: str, ref: int) -> dict[str, Any]:
    return {"refId": chr(ord("A") + ref), "datasource": _DATASOURCE, "expr": expr,
            "legendFormat": legend}  # fmt: skip


def _panel(
    title: str, unit: str, *targets: tuple[str, str], kind: str = "timeseries"
) -> dict[str, Any]:
    return {
        "type": kind,
        "title": title,
        "datasource": _DATASOURCE,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [_target(expr, legend, i) for i, (expr, legend) in enumerate(targets)],
    }


def _panels() -> list[dict[str, Any]]:
    per_run = "{{run}}"
    return [
        _panel(
            "Lag: rows not yet acknowledged", "short", (f"max by (run) ({_m('lag_rows')})", per_run)
        ),
        _panel(
            "Lag: age of the oldest row waiting",
            "s",
            (f"max by (run) ({_m('lag_seconds')})", per_run),
        ),
        _panel(
            "Records exported per second, per stream",
            "ops",
            (
                f"sum by (run, stream) (rate({_m('records_exported_total')}[$__rate_interval]))",
                "{{run}} {{stream}}",
            ),
        ),
        _panel("Sink down", "bool", (f"max by (run) ({_m('sink_down')})", per_run)),
        _panel(
            "Exporter failures and outages",
            "short",
            (
                f"sum by (run) (increase({_m('exporter_failures_total')}[$__rate_interval]))",
                "{{run}} failures",
            ),
            (
                f"sum by (run) (increase({_m('outages_total')}[$__rate_interval]))",
                "{{run}} outages",
            ),
            (
                f"sum by (run) (increase({_m('records_resent_total')}[$__rate_interval]))",
                "{{run}} resent",
            ),
        ),
        _panel(
            "Rows pruned before they were read, and rows lost",
            "short",
            (f"sum by (run) ({_m('rows_pruned_total')})", "{{run}} pruned"),
            (f"sum by (run, reason) ({_m('rows_lost_total')})", "{{run}} lost: {{reason}}"),
        ),
        _panel(
            "Runs by state",
            "short",
            (f"sum by (state) ({_m('state')})", "{{state}}"),
            kind="stat",
        ),
        _panel(
            "Exporter call in progress (a hung sink grows it)",
            "s",
            (f"max by (run) ({_m('exporter_call_seconds')})", per_run),
        ),
        _panel(
            "How runs ended",
            "short",
            (f"max by (run, end) ({_m('run_end')})", "{{run}}: {{end}}"),
            kind="stat",
        ),
    ]


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {"name": name, "label": label, "type": "query", "datasource": _DATASOURCE,
            "query": query, "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
            "current": {"text": "All", "value": "$__all"}, "sort": 1}  # fmt: skip


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard: data source, follow process (``instance``) and run as variables."""
    panels = _panels()
    chosen = _selector(f"{PREFIX}_state", 'instance=~"$instance"')
    for i, panel in enumerate(panels):
        panel["id"] = i + 1
        panel["gridPos"] = {"h": 8, "w": 12, "x": (i % 2) * 12, "y": (i // 2) * 8}
    return {
        "uid": "traceml-exporter-follow",
        "title": "TraceML exporter: follow",
        "description": "The lag, deliveries, outages and losses of traceml-exporter follow, "
        "from its --metrics-port.",
        "tags": ["traceml", "traceml-exporter"],
        "timezone": "browser",
        "editable": True,
        "schemaVersion": 39,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                },
                _variable("instance", "Follower", f"label_values({PREFIX}_state, instance)"),
                _variable("run", "Run", f"label_values({chosen}, run)"),
            ]
        },
        "panels": panels,
    }


def rules(thresholds: Thresholds | None = None) -> dict[str, Any]:
    """The recording and alert rules (a Prometheus rule file) for ``thresholds``."""
    t = thresholds or Thresholds()
    run = f"{FOLLOWER}, run"

    def alert(name: str, expr: str, wait: str, severity: str, summary: str) -> dict[str, Any]:
        return {"alert": name, "expr": expr, "for": wait, "labels": {"severity": severity},
                "annotations": {"summary": summary}}  # fmt: skip

    recording = [
        {"record": f"{PREFIX}:records_exported:rate5m",
         "expr": f"sum by ({run}, stream) (rate({PREFIX}_records_exported_total[5m]))"},
        {"record": f"{PREFIX}:runs:by_state",
         "expr": f"sum by ({FOLLOWER}, state) ({PREFIX}_state)"},
    ]  # fmt: skip
    lost = f"{PREFIX}_rows_lost_total"
    incomplete = _selector(f"{PREFIX}_run_end", 'end!="complete"')
    alerts = [
        alert("TraceMLFollowSinkDown", f"max by ({run}) ({PREFIX}_sink_down) == 1", t.sink_down_for,
              "critical", "follow {{ $labels.instance }}: the sink of run {{ $labels.run }} is down"),
        alert("TraceMLFollowLagging", f"max by ({run}) ({PREFIX}_lag_seconds) > {t.lag_seconds:g}",
              t.lag_for, "warning",
              "follow {{ $labels.instance }}: run {{ $labels.run }}'s oldest row waits "
              "{{ $value | humanizeDuration }}"),
        alert("TraceMLFollowExporterHung",
              f"max by ({run}) ({PREFIX}_exporter_call_seconds) > {t.hung_call_seconds:g}", "0m",
              "critical", "follow {{ $labels.instance }}: an exporter call of run "
              "{{ $labels.run }} has run {{ $value | humanizeDuration }}"),
        alert("TraceMLFollowRowsPruned",
              f"sum by ({run}) (increase({PREFIX}_rows_pruned_total[{t.loss_window}])) > 0", "0m",
              "critical", "run {{ $labels.run }}: TraceML's retention deleted rows before "
              "follow read them (lost)"),
        alert("TraceMLFollowRowsLost",
              f"max by ({run}, reason) ({lost}) > 0"
              f" or max by ({FOLLOWER}, reason) ({PREFIX}_deleted_rows_lost_total) > 0",
              "0m", "critical", "run {{ $labels.run }}: rows not exported ({{ $labels.reason }}); "
              "firing while the follower keeps the run's figures"),
        alert("TraceMLFollowRunIncomplete", f"max by ({run}, end) ({incomplete}) == 1",
              "0m", "warning", "run {{ $labels.run }} ended {{ $labels.end }}, not complete"),
    ]  # fmt: skip
    return {
        "groups": [
            {"name": "traceml-exporter-follow.rules", "rules": recording},
            {"name": "traceml-exporter-follow.alerts", "rules": alerts},
        ]
    }


def _rule_file(data: Mapping[str, Any]) -> str:
    """A rule file's groups as YAML; each value JSON-quoted (JSON's scalars are YAML's)."""
    out = ["groups:"]
    for group in data["groups"]:
        out += [f"  - name: {json.dumps(group['name'])}", "    rules:"]
        for rule in group["rules"]:
            lead = "      - "
            for key, value in rule.items():
                if isinstance(value, Mapping):
                    out.append(f"{lead}{key}:")
                    out += [f"          {k}: {json.dumps(v)}" for k, v in value.items()]
                else:
                    out.append(f"{lead}{key}: {json.dumps(value)}")
                lead = "        "
    return "\n".join(out) + "\n"


def build(thresholds: Thresholds | None = None) -> dict[str, str]:
    """File name -> text, for :data:`FILES`."""
    header = "# Made by `python -m traceml_exporter_sdk.monitoring`: see docs/follow.md\n"
    return {
        FILES[0]: json.dumps(dashboard(), indent=2) + "\n",
        FILES[1]: header + _rule_file(rules(thresholds)),
    }


def write(folder: Path, thresholds: Thresholds | None = None) -> list[Path]:
    """Write ``build(thresholds)`` into ``folder`` (made if missing); the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in build(thresholds).items():
        (folder / name).write_text(text, encoding="utf-8")
        written.append(folder / name)
    return written


def with_settings(settings: Mapping[str, str]) -> Thresholds:
    """The default thresholds with ``name=value`` over them; a ValueError names a bad one."""
    fields = {f.name: f for f in dataclasses.fields(Thresholds)}
    chosen: dict[str, Any] = {}
    for name, text in settings.items():
        if name not in fields:
            raise ValueError(f"no threshold {name!r}; the thresholds: {', '.join(fields)}")
        chosen[name] = float(text) if fields[name].type == "float" else text
    return Thresholds(**chosen)
