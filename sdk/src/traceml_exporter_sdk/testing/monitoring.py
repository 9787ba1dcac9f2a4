"""Checking a Grafana dashboard and Prometheus rules the way a team would load them.

``validate_dashboard`` reads a dashboard through the types ``grafana-foundation-sdk``
generates from Grafana's own schema (Python 3.11+): a field the schema does not have, a
value not of its type, or a target that is not a Prometheus query is named.
``dashboard_queries`` and ``rule_queries`` extract every query from the file itself
(panels, query variables, rules), ``concrete`` fills in Grafana's variables and inlines
recording rules, ``unanswered`` runs them on a real server (``prometheus_server``) and
names those that error or return nothing, and ``promtool`` runs Prometheus' own checker
(``check rules``, ``test rules``), found where the servers are.
"""

from __future__ import annotations

import enum
import json
import math
import re
import subprocess
import typing
import urllib.error
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .peers.prometheus_server import HOW_TO_GET_A_SERVER, MetricsServer, find_binary

__all__ = [
    "DashboardSchemaError",
    "Query",
    "concrete",
    "dashboard_queries",
    "promtool",
    "promtool_test_rules",
    "rule_queries",
    "unanswered",
    "validate_dashboard",
]

GRAFANA_VARIABLES = {
    "__rate_interval": "5m",
    "__interval": "1m",
    "__range": "1h",
}
"""Grafana's built-in variables, as a query is run here (a 1 h dashboard, a 1 m step)."""
_LABEL_VALUES = re.compile(r"^label_values\((?:(?P<match>.+),\s*)?(?P<label>\w+)\)$", re.S)
_EVERY_SERIES = '{__name__=~".+"}'
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


class DashboardSchemaError(ValueError):
    """The dashboard does not fit Grafana's schema; the message lists every place."""


@dataclass(frozen=True)
class Query:
    """One query of a dashboard or rule file: where it is (for the message) and its text."""

    where: str
    expr: str


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` (as read from JSON) is of the annotated ``hint``."""
    if hint is Any or hint is object:
        return True
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union:
        return any(_fits(value, arg) for arg in args)
    if origin is typing.Literal:
        return any(value == arg and type(value) is type(arg) for arg in args)
    if origin is list:
        return isinstance(value, list) and all(_fits(item, args[0]) for item in value)
    if origin is dict:
        return isinstance(value, dict) and all(_fits(v, args[1]) for v in value.values())
    if hint is type(None):
        return value is None
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return value in {member.value for member in hint} or isinstance(value, hint)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _typed(model: Any, where: str) -> Iterator[str]:
    """Every attribute of ``model`` (and of the models in it) not of its annotated type."""
    if isinstance(model, list):
        for i, item in enumerate(model):
            yield from _typed(item, f"{where}[{i}]")
        return
    if not callable(getattr(model, "to_json", None)) or isinstance(model, type):
        return
    try:
        hints = typing.get_type_hints(type(model))
    except (NameError, TypeError):
        hints = {}
    for name, hint in hints.items():
        value = getattr(model, name, None)
        if value is not None and not _fits(value, hint):
            yield f"{where}.{name}: {value!r} is not {hint}"
        yield from _typed(value, f"{where}.{name}")


def _left_out(given: Any, read: Any, where: str) -> Iterator[str]:
    """Where ``read`` (the model written back) lost or changed what ``given`` had."""
    if isinstance(given, dict) and isinstance(read, dict):
        for key, value in given.items():
            if key not in read:
                yield f"{where}.{key}: not in Grafana's schema"
            else:
                yield from _left_out(value, read[key], f"{where}.{key}")
    elif isinstance(given, list) and isinstance(read, list) and len(given) == len(read):
        for i, (a, b) in enumerate(zip(given, read, strict=True)):
            yield from _left_out(a, b, f"{where}[{i}]")
    elif given != read:
        yield f"{where}: {given!r} reads back as {read!r}"


def validate_dashboard(data: Mapping[str, Any]) -> None:
    """Raise :class:`DashboardSchemaError` unless ``data`` fits Grafana's dashboard schema.

    Read with ``grafana_foundation_sdk.models.dashboard.Dashboard.from_json`` (panel
    options and queries by their plugins' types), then every value is checked against
    its generated annotation and the model written back must hold everything given.
    """
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models import prometheus
    from grafana_foundation_sdk.models.dashboard import Dashboard, Panel, RowPanel

    register_default_plugins()
    model = Dashboard.from_json(dict(data))
    problems = list(_typed(model, "dashboard"))
    problems += _left_out(dict(data), json.loads(JSONEncoder().encode(model)), "dashboard")
    for i, panel in enumerate(model.panels or []):
        inner = panel.panels if isinstance(panel, RowPanel) else [panel]
        for j, one in enumerate(inner or []):
            if not isinstance(one, Panel):
                continue
            for k, target in enumerate(one.targets or []):
                where = f"dashboard.panels[{i}]/{j}.targets[{k}]"
                source = getattr(target, "datasource", None)
                kind = source.get("type") if isinstance(source, dict) else None
                if not isinstance(target, prometheus.Dataquery) or kind not in (None, "prometheus"):
                    problems.append(f"{where}: not a Prometheus query")
                elif not target.expr.strip():
                    problems.append(f"{where}: no expr")
    if not model.panels:
        problems.append("dashboard.panels: none")
    if problems:
        raise DashboardSchemaError("; ".join(problems))


def _panels(data: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for panel in data.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def dashboard_queries(data: Mapping[str, Any]) -> list[Query]:
    """Every panel target's ``expr`` and every query variable's query, validated first."""
    validate_dashboard(data)
    queries = [
        Query(f"panel {panel.get('title')!r} {target.get('refId')}", target["expr"])
        for panel in _panels(data)
        for target in panel.get("targets", [])
    ]
    for variable in data.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            text = variable["query"]
            text = text.get("query", "") if isinstance(text, dict) else text
            queries.append(Query(f"variable {variable['name']!r}", text))
    return queries


def rule_queries(rules: Mapping[str, Any]) -> list[Query]:
    """Every rule's ``expr`` in a rule file's ``groups``, named by group and rule."""
    return [
        Query(f"{group['name']}/{rule.get('record') or rule.get('alert')}", rule["expr"])
        for group in rules["groups"]
        for rule in group["rules"]
    ]


def _inline(expr: str, recorded: Mapping[str, str]) -> str:
    """``expr`` with each recording rule's name replaced by its own (inlined) expression."""
    for _ in range(10):
        before = expr
        for name, body in recorded.items():
            if re.search(rf"(?<![\w:]){re.escape(name)}\s*[{{\[]", expr):
                raise ValueError(f"{name} is used with matchers or a range: cannot be inlined")
            pieces = re.split(rf"(?<![\w:]){re.escape(name)}(?![\w:])", expr)
            expr = f"({body})".join(pieces)
        if expr == before:
            return expr
    raise ValueError("recording rules refer to each other in a loop")


def concrete(
    query: Query,
    variables: Mapping[str, str],
    recorded: Mapping[str, str] | None = None,
) -> str:
    """``query`` as Grafana sends it: its variables filled in (``variables`` over Grafana's
    own), ``label_values(match, label)`` as ``group by (label) (match)``, and recording
    rules (``record: expr``) inlined, since the server queried evaluates no rules."""
    values = {**GRAFANA_VARIABLES, **variables}

    def fill(found: re.Match[str]) -> str:
        name = found.group(1) or found.group(2)
        if name not in values:
            raise ValueError(f"{query.where}: no value for the variable ${name}")
        return values[name]

    expr = _VARIABLE.sub(fill, query.expr.strip())
    found = _LABEL_VALUES.match(expr)
    if found:
        expr = f"group by ({found['label']}) ({found['match'] or _EVERY_SERIES})"
    return _inline(expr, recorded or {})


def unanswered(
    server: MetricsServer,
    queries: Sequence[Query],
    variables: Mapping[str, str],
    *,
    recorded: Mapping[str, str] | None = None,
    at: float | None = None,
    patience: float = 3.0,
) -> list[str]:
    """The queries that fail or return no series (or only NaN) on ``server`` at ``at``;
    [] when all answer. An empty answer is asked again for up to ``patience`` seconds
    (VictoriaMetrics shows a write after about a second)."""
    problems = []
    for query in queries:
        try:
            expr = concrete(query, variables, recorded)
            answer = server.query(expr, at, until=bool, timeout=patience)
        except urllib.error.HTTPError as error:
            said = error.read().decode("utf-8", "replace")[:500]
            problems.append(f"{query.where}: failed, {error.code} from {server.kind}: {said}")
            continue
        except (AssertionError, ValueError, OSError) as error:
            problems.append(f"{query.where}: failed: {error}")
            continue
        if not answer or all(math.isnan(value) for value in answer.values()):
            problems.append(f"{query.where}: no series (or only NaN) from {expr}")
    return problems


def promtool(*args: str | Path, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run Debian's ``promtool`` (found like the servers) with ``args``; output as text."""
    binary = find_binary("promtool")
    if binary is None:
        from .peers.prometheus_server import MetricsServerUnavailableError

        raise MetricsServerUnavailableError(f"no promtool binary found; {HOW_TO_GET_A_SERVER}")
    return subprocess.run(
        [str(binary), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def promtool_test_rules(
    folder: Path, rule_file: Mapping[str, Any], tests: Sequence[Mapping[str, Any]]
) -> subprocess.CompletedProcess[str]:
    """``promtool test rules`` of ``tests`` (its unit tests, ``evaluation_interval`` 1m) on
    ``rule_file`` without its annotations: their text is for people (``promtool check
    rules`` reads their templates); the tests judge when each alert fires. Both files are
    written into ``folder`` as JSON, which is YAML too."""
    bare = json.loads(json.dumps(rule_file))
    for group in bare["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (folder / "rules.yml").write_text(json.dumps(bare, indent=1), encoding="utf-8")
    unit = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": list(tests)}
    (folder / "rules_test.yml").write_text(json.dumps(unit, indent=1), encoding="utf-8")
    return promtool("test", "rules", folder / "rules_test.yml")
