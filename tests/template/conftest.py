"""Fixtures for the template tests: which sink kinds to test, and baked projects.

``nox -s template`` runs this folder once per sink kind with ``--sink=<kind>``
and ``--baked=<project>`` (a project it baked and installed, with its
dependency groups, into the session's venv). Run alone, with no options, the
tests bake their own projects and cover every sink kind; the generated
projects' dependencies (the SDK, orjson, pytest, ruff, mypy) must then be
importable from this interpreter.

Tests marked ``sink_independent`` (hooks, licenses, cruft) run only in the run
that covers the default sink, so the per-sink runs do not repeat them.

The mlflow sink's tests share one ``mlflow server`` (the template's own test peer,
started before the first of them): ``TRACEML_MLFLOW_PEER_URL`` names it to every baked
suite they run and to ``sink_env``, and each test keeps to an experiment of its own.
A fresh server spends most of a minute migrating its databases, three times a run
otherwise; the basic-auth server the baked suite needs is still its own.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bake import bake
from template_helpers import DEFAULT_SINK, PARTS, SINKS

MLFLOW_PEER_ENV = "TRACEML_MLFLOW_PEER_URL"
MLFLOW_SERVER_MODULE = PARTS / "sinks" / "mlflow" / "tests" / "mlflow_server.py"
_MLFLOW_TRIED = pytest.StashKey[bool]()


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
    yield bake(tmp_path_factory.mktemp(f"baked-{sink}"), sink=sink)


def pytest_runtest_setup(item: pytest.Item) -> None:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("sink") == "mlflow":
        shared_mlflow_server(item.config)


def shared_mlflow_server(config: pytest.Config) -> None:
    """Start the run's one MLflow server on first use, stopped at the end of the run;
    ``TRACEML_MLFLOW_PEER_URL`` names it meanwhile. A URL already set is used as is.
    Where none can be started the tests start their own (and skip, or fail in CI)."""
    if os.environ.get(MLFLOW_PEER_ENV) or config.stash.get(_MLFLOW_TRIED, False):
        return
    config.stash[_MLFLOW_TRIED] = True
    name = "template_mlflow_server"
    spec = importlib.util.spec_from_file_location(name, MLFLOW_SERVER_MODULE)
    assert spec is not None
    assert spec.loader is not None
    module: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        server = module.MlflowServer().start()
    except module.MlflowUnavailableError:
        if module.require_mlflow():
            raise
        return

    def stop() -> None:
        os.environ.pop(MLFLOW_PEER_ENV, None)
        server.stop()

    config.add_cleanup(stop)
    os.environ[MLFLOW_PEER_ENV] = server.url
