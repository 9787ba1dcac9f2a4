"""The pytest plugin of the conformance suite (entry point ``pytest11: traceml_exporter``).

Installed with the SDK it is active in every pytest run, so it stays cheap: it
adds two options, a terminal summary line and a root-cause section (both only when
there is something to show), and imports the suite only when
``--traceml-exporter`` is given::

    pytest --traceml-exporter my_pkg.exporter:make_exporter
    pytest -p traceml_exporter_sdk.testing.plugin --traceml-exporter jsonl

``--traceml-exporter SPEC`` collects the full suite for ``SPEC`` (a
``module:factory`` value, or ``jsonl``) with no test file; with no path on the
command line it collects nothing else. ``--traceml-read-back MODULE:FUNCTION``
names a ``read_back(context)`` function that turns the data-fidelity checks on
(the built-in jsonl exporter has one already).
"""

from __future__ import annotations

import re
import types
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from .keys import (
    CHECK_MARKER,
    ENTRY_POINT_NAME,
    EXPORTER_OPTION,
    READ_BACK_OPTION,
    THROUGHPUT_FLOOR_PROPERTY,
    THROUGHPUT_PROPERTY,
)

__all__ = ["ENTRY_POINT_NAME", "THROUGHPUT_PROPERTY"]

_SUITE_MODULE = "traceml_exporter_conformance"
_ROOT_CAUSES = "traceml_exporter_root_causes"


def pytest_plugin_registered(plugin: object, plugin_name: str, manager: Any) -> None:
    """Keep ``-p traceml_exporter_sdk.testing.plugin`` working beside the entry point.

    ``-p`` registers this module under its module name before pytest loads the
    ``pytest11`` entry points; registering the same module again under the
    entry point's name would fail, so block that name instead.
    """
    if (
        plugin is _this_module()
        and plugin_name != ENTRY_POINT_NAME
        and not manager.has_plugin(ENTRY_POINT_NAME)
        and not manager.is_blocked(ENTRY_POINT_NAME)
    ):
        manager.set_blocked(ENTRY_POINT_NAME)


def _this_module() -> types.ModuleType:
    import sys

    return sys.modules[__name__]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("traceml-exporter", "TraceML exporter conformance suite")
    group.addoption(
        "--traceml-exporter",
        action="store",
        dest=EXPORTER_OPTION,
        default=None,
        metavar="SPEC",
        help="run the exporter conformance suite against SPEC, a 'module:factory' value "
        "(or 'jsonl'), with no test file",
    )
    group.addoption(
        "--traceml-read-back",
        action="store",
        dest=READ_BACK_OPTION,
        default=None,
        metavar="MODULE:FUNCTION",
        help="a read_back(context) function for --traceml-exporter; turns the "
        "data-fidelity checks on",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{CHECK_MARKER}: a check of the exporter conformance suite")
    if not config.pluginmanager.has_plugin(_ROOT_CAUSES):
        config.pluginmanager.register(_RootCauses(), _ROOT_CAUSES)
    spec = config.getoption(EXPORTER_OPTION)
    if not spec:
        if config.getoption(READ_BACK_OPTION):
            raise pytest.UsageError("--traceml-read-back needs --traceml-exporter SPEC")
        return
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        # Only the suite for SPEC: do not also collect the current directory.
        config.args = []


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    spec = config.getoption(EXPORTER_OPTION)
    if not spec:
        return
    from .conformance import spec_test_class

    read_back = config.getoption(READ_BACK_OPTION)
    try:
        cls = spec_test_class(spec, read_back=read_back)
    except (TypeError, ValueError) as exc:
        raise pytest.UsageError(f"--traceml-exporter {spec!r}: {exc}") from None
    module = _SpecModule.from_parent(
        session,
        path=Path(__file__),
        name=f"traceml-exporter[{spec}]",
        nodeid=f"traceml-exporter[{spec}]",
    )
    module.spec_class = cls
    items[:0] = list(session.genitems(module))


class _SpecModule(pytest.Module):
    """A test module with no file: one ``TestExporter`` class for the given spec."""

    spec_class: type[Any]

    def _getobj(self) -> types.ModuleType:
        module = types.ModuleType(_SUITE_MODULE, "The conformance suite for --traceml-exporter.")
        module.TestExporter = self.spec_class  # type: ignore[attr-defined]
        self.spec_class.__module__ = _SUITE_MODULE
        return module

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        self.session._fixturemanager.parsefactories(self)
        return [pytest.Class.from_parent(self, name="TestExporter", obj=self.spec_class)]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line per throughput check: the exporter's records/s and the floor."""
    lines = []
    for key in ("passed", "failed"):
        for report in terminalreporter.stats.get(key, []):
            props = dict(getattr(report, "user_properties", ()) or ())
            if THROUGHPUT_PROPERTY in props and getattr(report, "when", "call") == "call":
                figure = props[THROUGHPUT_PROPERTY]
                floor = props.get(THROUGHPUT_FLOOR_PROPERTY)
                lines.append(f"{report.nodeid}: {figure:,.0f} records/s (floor {floor:,})")
    if lines:
        terminalreporter.section("TraceML exporter throughput")
        for line in lines:
            terminalreporter.write_line(line)


_CONFORMANCE_ID = re.compile(r"^(?P<owner>.+)::test_[a-z_]+\[[a-z_0-9]+\]$")


class _RootCauses:
    """Prints the root cause of a cascade of failed checks before pytest reports them.

    A plugin object of its own: its hook wraps pytest's terminal summary (so it
    comes first), while the throughput lines stay a plain hook of this module.
    pytest's FAILURES section and short summary follow unchanged, for CI logs.
    """

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Generator[None, None, None]:
        lines = _root_cause_lines(terminalreporter.stats)
        if lines:
            terminalreporter.section("TraceML exporter: root cause", sep="=", red=True, bold=True)
            for line in lines:
                terminalreporter.write_line(line)
        return (yield)


def _root_cause_lines(stats: dict[str, list[Any]]) -> list[str]:
    """For each conformance class with a cascade: its cause, the checks it explains, the rest."""
    by_owner: dict[str, list[Any]] = {}
    for key in ("failed", "error"):
        for report in stats.get(key, []):
            match = _CONFORMANCE_ID.match(getattr(report, "nodeid", ""))
            if match is not None and report.failed:
                by_owner.setdefault(match["owner"], []).append(report)
    if not any(len(reports) > 1 for reports in by_owner.values()):
        return []
    from ._causes import check_name, report_message, root_cause

    lines = []
    for owner, reports in by_owner.items():
        cause = root_cause([(r.nodeid, report_message(r)) for r in reports])
        if cause is None:
            continue
        explained = set(cause.explained)
        lines.append(cause.line)
        lines.append(f"  in {owner}: {', '.join(map(check_name, cause.explained))}")
        rest = [check_name(r.nodeid) for r in reports if r.nodeid not in explained]
        if rest:
            lines.append(f"  failed for other reasons: {', '.join(rest)}")
    return lines
