"""Fixtures for the template tests: which sink kinds to test, and baked projects.

``nox -s template`` runs this folder once per sink kind with ``--sink=<kind>``
and ``--baked=<project>`` (a project it baked and installed, with its
dependency groups, into the session's venv). Run alone, with no options, the
tests bake their own projects and cover every sink kind; the generated
projects' dependencies (the SDK, orjson, pytest, ruff, mypy) must then be
importable from this interpreter.

Tests marked ``sink_independent`` (hooks, licenses, cruft) run only in the run
that covers the default sink, so the per-sink runs do not repeat them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from template_helpers import DEFAULT_SINK, SINKS, bake


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("template")
    group.addoption(
        "--sink",
        action="append",
        choices=SINKS,
        help="sink kind to test (repeatable; default: every kind in template/cookiecutter.json)",
    )
    group.addoption(
        "--baked",
        type=Path,
        help="an already baked and installed project of the single --sink, to test in place",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "sink_independent: run once, in the run that covers the default sink"
    )


def selected_sinks(config: pytest.Config) -> list[str]:
    return config.getoption("--sink") or SINKS


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "sink" in metafunc.fixturenames:
        metafunc.parametrize("sink", selected_sinks(metafunc.config), scope="session")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if DEFAULT_SINK in selected_sinks(config):
        return
    skip = pytest.mark.skip(reason=f"sink-independent: runs with --sink={DEFAULT_SINK}")
    for item in items:
        if item.get_closest_marker("sink_independent"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def baked(
    request: pytest.FixtureRequest, sink: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The default project for ``sink``: the one nox baked and installed, or a fresh bake."""
    given: Path | None = request.config.getoption("--baked")
    if given is not None:
        if selected_sinks(request.config) != [sink]:
            raise pytest.UsageError("--baked needs exactly one --sink, the one it was baked with")
        yield given.resolve()
        return
    yield bake(tmp_path_factory.mktemp(f"baked-{sink}"), f"sink={sink}")
