"""A Grafana dashboard and Prometheus recording and alert rules for the series this sink writes.

``dashboard.json`` and ``rules.yml`` beside this module are what ``build()`` makes from
the default :class:`Thresholds` (a test keeps them equal). Other thresholds:
``python -m traceml_exporter_example.monitoring --out DIR --set straggler_factor=2``.
Standard library only; nothing here runs inside TraceML.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["HERE", "Thresholds", "build", "dashboard", "rules", "to_yaml", "with_settings", "write"]

HERE = Path(__file__).parent
"""The folder holding the shipped ``dashboard.json`` and ``rules.yml``."""
STEP = 'phase="_traceml_internal:step_time"'
WAIT = 'phase="_traceml_internal:dataloader_next"'
RUN = "job, run, session_root"
"""The labels that name a run (``session_root`` is its key, ``run`` its short name)."""
RANK = f"{RUN}, node, rank"


@dataclass(frozen=True)
class Thresholds:
    """Every threshold of the alerts, in one place (the README's table says the same)."""

    window: str = "5m"
    """The rate window of the recording rules."""
    stuck_after: str = "15m"
    """A run is stuck when a rank made no step for this long while its series are sent."""
    straggler_factor: float = 1.5
    """A rank straggles when its p95 step time is over this times the run's median rank."""
    straggler_for: str = "10m"
    """... for this long."""
    memory_fraction: float = 0.95
    """GPU memory near capacity: reserved (a rank) or used (a GPU) over this of its total."""
    memory_for: str = "5m"
    """... for this long."""


def _selector(metric: str, *matchers: str, rank: bool = True) -> str:
    chosen = ['run=~"$run"', 'node=~"$node"', *(['rank=~"$rank"'] if rank else []), *matchers]
    return metric + "{" + ", ".join(chosen) + "}"


def _quantile(q: float, by: str, *matchers: str, window: str = "$__rate_interval") -> str:
    bucket = _selector("traceml_step_phase_seconds_bucket", *matchers)
    return f"histogram_quantile({q}, sum by ({by}, le) (rate({bucket}[{window}])))"


def _rate_sum(by: str, metric: str, *matchers: str) -> str:
    return f"sum by ({by}) (rate({_selector(metric, *matchers)}[$__rate_interval]))"


def _mean_step(by: str) -> str:
    parts = [_rate_sum(by, f"traceml_step_phase_seconds_{kind}", STEP) for kind in ("sum", "count")]
    return " / ".join(parts)


_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _panel(
    title: str,
    targets: list[tuple[str, str]],
    unit: str,
    kind: str = "timeseries",
    *,
    table: bool = False,
) -> dict[str, Any]:
    return {
        "type": kind,
        "title": title,
        "datasource": _DATASOURCE,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": _DATASOURCE,
                "expr": expr,
                "legendFormat": legend,
                **({"format": "table", "instant": True} if table else {}),
            }
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def _gauges(
    title: str,
    unit: str,
    by: str,
    metrics: list[tuple[str, str]],
    *,
    rank: bool = True,
) -> dict[str, Any]:
    """A panel of the largest value ``by`` the labels given of each gauge (metric, label)."""
    legend = " ".join(label + " {{" + label + "}}" for label in by.split(", "))
    targets = [
        (f"max by ({by}) ({_selector(metric, rank=rank)})", f"{legend} {label}".strip())
        for metric, label in metrics
    ]
    return _panel(title, targets, unit)


def _panels() -> list[tuple[str, list[dict[str, Any]]]]:
    """The dashboard's rows and their panels."""
    per_rank = "rank {{rank}} {{phase}}"
    mean = _mean_step("run, rank")
    waited = _rate_sum("rank", "traceml_step_phase_seconds_sum", WAIT)
    stepped = _rate_sum("rank", "traceml_step_phase_seconds_sum", STEP)
    steps = [
        _panel(
            "Step time p50 per rank and phase", [(_quantile(0.5, "rank, phase"), per_rank)], "s"
        ),
        _panel(
            "Step time p95 per rank and phase", [(_quantile(0.95, "rank, phase"), per_rank)], "s"
        ),
        _panel(
            "Slowest rank (mean step time)",
            [(f"topk(1, {mean})", "{{run}} rank {{rank}}")],
            "s",
            "stat",
        ),
        _panel(
            "Slowest rank's lead over the median rank (mean step time)",
            [(f"max by (run) ({mean}) / on (run) quantile by (run) (0.5, {mean}) - 1", "{{run}}")],
            "percentunit",
            "stat",
        ),
        _panel(
            "Steps per second per rank",
            [
                (
                    f"sum by (rank) (rate({_selector('traceml_steps_total')}[$__rate_interval]))",
                    "rank {{rank}}",
                )
            ],
            "ops",
        ),
        _panel(
            "Input-wait share per rank (dataloader over step time)",
            [(f"{waited} / {stepped}", "rank {{rank}}")],
            "percentunit",
        ),
    ]
    reserved = _selector("traceml_process_gpu_memory_reserved_bytes")
    total = _selector("traceml_process_gpu_memory_total_bytes")
    memory = [
        _gauges(
            "Peak memory per rank and device",
            "bytes",
            "rank, device",
            [
                (f"traceml_step_memory_peak_{kind}_bytes", kind)
                for kind in ("allocated", "reserved")
            ],
        ),
        _panel(
            "GPU memory reserved per rank, of its device's capacity",
            [(f"max by (rank) ({reserved}) / max by (rank) ({total} > 0)", "rank {{rank}}")],
            "percentunit",
        ),
    ]
    node = {"rank": False}
    system = [
        _gauges("Host CPU", "percent", "node", [("traceml_system_cpu_percent", "")], **node),
        _gauges(
            "Host memory", "bytes", "node",
            [(f"traceml_system_memory_{kind}_bytes", kind) for kind in ("used", "total")], **node,
        ),
        _gauges(
            "GPU utilization", "percent", "node, gpu",
            [("traceml_gpu_utilization_percent", "")], **node,
        ),
        _gauges(
            "GPU memory", "bytes", "node, gpu",
            [(f"traceml_gpu_memory_{kind}_bytes", kind) for kind in ("used", "total")], **node,
        ),
        _gauges(
            "GPU temperature", "celsius", "node, gpu",
            [("traceml_gpu_temperature_celsius", "")], **node,
        ),
        _gauges(
            "GPU power", "watt", "node, gpu",
            [(f"traceml_gpu_{kind}_watts", kind) for kind in ("power", "power_limit")], **node,
        ),
        _gauges(
            "Process CPU per rank", "percent", "rank",
            [("traceml_process_cpu_percent", "")],
        ),
        _gauges(
            "Process memory per rank", "bytes", "rank",
            [("traceml_process_memory_used_bytes", "used"),
             ("traceml_process_gpu_memory_used_bytes", "GPU used")],
        ),
    ]  # fmt: skip
    environment = [
        _panel(
            "Runtime environment per rank",
            [(f"max without (instance, __name__) ({_selector('traceml_runtime_info')})", "")],
            "none",
            "table",
            table=True,
        )
    ]
    return [
        ("Step time", steps),
        ("Memory", memory),
        ("System and process", system),
        ("Runtime environment", environment),
    ]


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": _DATASOURCE,
        "query": query,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"text": "All", "value": "$__all"},
        "sort": 1,
    }


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard (JSON model): data source, run, host (node) and rank as variables."""
    panels: list[dict[str, Any]] = []
    y = 0
    for title, members in _panels():
        panels.append(
            {
                "type": "row",
                "title": title,
                "collapsed": False,
                "panels": [],
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
            }
        )
        y += 1
        for i, panel in enumerate(members):
            width = 24 if panel["type"] == "table" else 12
            panel["gridPos"] = {"h": 8, "w": width, "x": (i % 2) * 12, "y": y + (i // 2) * 8}
            panels.append(panel)
        y += ((len(members) + 1) // 2) * 8
    for number, panel in enumerate(panels, 1):
        panel["id"] = number
    return {
        "uid": "traceml-prometheus-sink",
        "title": "TraceML training runs",
        "description": "Step time, stragglers, input wait, memory and the environment of "
        "TraceML runs, from the series the traceml-exporter-example sink writes.",
        "tags": ["traceml", "pytorch", "training"],
        "timezone": "browser",
        "editable": True,
        "schemaVersion": 39,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                },
                _variable("run", "Run", 'label_values(traceml_steps_total{job="traceml"}, run)'),
                _variable(
                    "node", "Host (node)", 'label_values(traceml_steps_total{run=~"$run"}, node)'
                ),
                _variable(
                    "rank",
                    "Rank",
                    'label_values(traceml_steps_total{run=~"$run", node=~"$node"}, rank)',
                ),
            ]
        },
        "panels": panels,
    }


def rules(thresholds: Thresholds | None = None) -> dict[str, Any]:
    """The recording and alert rules (a Prometheus rule file) for ``thresholds``."""
    t = thresholds or Thresholds()
    w = t.window
    step = "traceml_step_phase_seconds_bucket{" + STEP + "}"
    waited = "traceml_step_phase_seconds_sum{" + WAIT + "}"
    stepped = "traceml_step_phase_seconds_sum{" + STEP + "}"
    recording = [
        {
            "record": "traceml:step_phase_seconds:p50",
            "expr": f"histogram_quantile(0.5, sum by ({RANK}, phase, le) (rate(traceml_step_phase_seconds_bucket[{w}])))",
        },
        {
            "record": "traceml:step_phase_seconds:p95",
            "expr": f"histogram_quantile(0.95, sum by ({RANK}, phase, le) (rate(traceml_step_phase_seconds_bucket[{w}])))",
        },
        {
            "record": "traceml:step_seconds:p95",
            "expr": f"histogram_quantile(0.95, sum by ({RANK}, le) (rate({step}[{w}])))",
        },
        {
            "record": "traceml:step_seconds_p95:median",
            "expr": f"quantile by ({RUN}) (0.5, traceml:step_seconds:p95)",
        },
        {
            "record": "traceml:steps:rate",
            "expr": f"sum by ({RANK}) (rate(traceml_steps_total[{w}]))",
        },
        {
            "record": "traceml:input_wait:ratio",
            "expr": f"sum by ({RANK}) (rate({waited}[{w}])) / sum by ({RANK}) (rate({stepped}[{w}]))",
        },
    ]
    alerts = [
        {
            "alert": "TraceMLRunStuck",
            "expr": f"sum by ({RANK}) (increase(traceml_steps_total[{t.stuck_after}])) == 0"
            f" and on ({RUN}, rank) traceml_runtime_info",
            "for": "1m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "Run {{ $labels.run }}: rank {{ $labels.rank }} made no step "
                f"for {t.stuck_after}",
                "description": "Its exporter still sends (its runtime_info series is there) "
                "but traceml_steps_total did not grow: a hung collective, a dead dataloader.",
            },
        },
        {
            "alert": "TraceMLStraggler",
            "expr": f"traceml:step_seconds:p95 > on ({RUN}) group_left ()"
            f" {t.straggler_factor:g} * traceml:step_seconds_p95:median",
            "for": t.straggler_for,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Run {{ $labels.run }}: rank {{ $labels.rank }} p95 step time "
                "{{ $value | humanizeDuration }}, over "
                f"{t.straggler_factor:g}x the median rank's",
                "description": "One rank is slower than the others: the rest wait for it.",
            },
        },
        {
            "alert": "TraceMLRankMemoryNearCapacity",
            "expr": "traceml_process_gpu_memory_reserved_bytes"
            f" / (traceml_process_gpu_memory_total_bytes > 0) > {t.memory_fraction:g}",
            "for": t.memory_for,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Run {{ $labels.run }}: rank {{ $labels.rank }} has reserved "
                "{{ $value | humanizePercentage }} of its GPU's memory",
                "description": "From the process snapshot (step_memory carries no capacity).",
            },
        },
        {
            "alert": "TraceMLGpuMemoryNearCapacity",
            "expr": "traceml_gpu_memory_used_bytes"
            f" / (traceml_gpu_memory_total_bytes > 0) > {t.memory_fraction:g}",
            "for": t.memory_for,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Run {{ $labels.run }}: node {{ $labels.node }} GPU "
                "{{ $labels.gpu }} uses {{ $value | humanizePercentage }} of its memory",
                "description": "From the system_gpu snapshot (mem_used_bytes over mem_total_bytes).",
            },
        },
    ]
    return {
        "groups": [
            {"name": "traceml.rules", "rules": recording},
            {"name": "traceml.alerts", "rules": alerts},
        ]
    }


def _scalar(value: object) -> str:
    """A YAML scalar: JSON's numbers, booleans and double-quoted strings are YAML's too."""
    return json.dumps(value, ensure_ascii=False)


def to_yaml(value: object, indent: str = "") -> str:
    """``value`` (dicts, lists, scalars) as block YAML, strings double-quoted."""
    lines: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(item, (Mapping, list)) and item:
                lines.append(f"{indent}{key}:")
                lines.append(to_yaml(item, indent + "  "))
            else:
                lines.append(f"{indent}{key}: {_scalar(item)}")
    elif isinstance(value, list):
        for item in value:
            text = to_yaml(item, indent + "  ")
            lines.append(f"{indent}- {text.lstrip()}")
    else:
        lines.append(f"{indent}{_scalar(value)}")
    return "\n".join(lines)


def build(thresholds: Thresholds | None = None) -> dict[str, str]:
    """File name -> text: ``dashboard.json`` and ``rules.yml``."""
    return {
        "dashboard.json": json.dumps(dashboard(), indent=2) + "\n",
        "rules.yml": "# Made by `python -m traceml_exporter_example.monitoring`: edit Thresholds\n"
        + to_yaml(rules(thresholds))
        + "\n",
    }


def write(folder: Path, thresholds: Thresholds | None = None) -> list[Path]:
    """Write ``build(thresholds)`` into ``folder``; the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in build(thresholds).items():
        (folder / name).write_text(text, encoding="utf-8")
        paths.append(folder / name)
    return paths


def with_settings(settings: Mapping[str, str]) -> Thresholds:
    """The default thresholds with ``name=value`` settings over them (numbers as numbers)."""
    fields = {f.name: f for f in dataclasses.fields(Thresholds)}
    values: dict[str, Any] = {}
    for name, text in settings.items():
        if name not in fields:
            raise ValueError(f"no threshold {name!r}; the thresholds: {', '.join(fields)}")
        values[name] = float(text) if fields[name].type == "float" else text
    return Thresholds(**values)
