"""A generated exporter loads with PYTHONPATH alone, as TraceML's aggregator loads it:
no pip install, a fresh interpreter, the SDK's factory loader (``load_exporter``)."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from bake import bake
from template_helpers import ROOT, run

LOAD = r"""
import sys
from pathlib import Path
from traceml_exporter_sdk import ExporterContext, FactoryFailure, load_exporter

spec, root = sys.argv[1], Path(sys.argv[2])
exporter = load_exporter(spec, ExporterContext.create(root, export_streams="all"))
if isinstance(exporter, FactoryFailure):
    sys.exit(exporter.message)
module = sys.modules[spec.partition(":")[0]]
print(type(exporter).__name__, module.__file__)
"""


@pytest.fixture(scope="module")
def not_installed(sink: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A project baked under a package name that nothing installed: (its src, its spec)."""
    package = f"pythonpath_only_{sink}"
    project = bake(tmp_path_factory.mktemp("pythonpath"), sink=sink, package_name=package)
    return project / "src", f"{package}.exporter:make_exporter"


@pytest.fixture
def sink_env(sink: str, not_installed: tuple[Path, str]) -> Iterator[dict[str, str]]:
    """Environment a sink's peer needs: a throwaway PostgreSQL, the SDK's OTLP receiver, a
    throwaway Prometheus, or an MLflow server (the baked project's own test peer,
    ``tests/mlflow_server.py``)."""
    if sink == "postgres":
        from traceml_exporter_sdk.testing.postgres_server import postgres_server

        with postgres_server() as server:
            yield server.env()
    elif sink == "otlp":
        from traceml_exporter_sdk.testing.otlp_receiver import OtlpReceiver

        with OtlpReceiver() as peer:
            yield {"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": peer.endpoint}
            assert len(peer.log_records()) > 0, "the corpus never reached the receiver"
    elif sink == "prometheus":
        from traceml_exporter_sdk.testing.prometheus_server import prometheus_server

        with prometheus_server() as server:
            yield {"PROMETHEUS_REMOTE_WRITE_URL": server.write_url}
            assert server.samples('{job="traceml"}'), "the corpus never reached Prometheus"
    elif sink == "mlflow":
        sys.path.insert(0, str(not_installed[0].parent / "tests"))
        try:
            from mlflow_server import MlflowServer
        finally:
            sys.path.pop(0)
        server = MlflowServer().start()  # the run's shared server, when conftest has one
        experiment = f"replay-pythonpath-{uuid.uuid4().hex[:8]}"
        try:
            yield {"MLFLOW_TRACKING_URI": server.url, "MLFLOW_EXPERIMENT_NAME": experiment}
            found = server.call("GET", "experiments/get-by-name", {"experiment_name": experiment})
            ids = [found["experiment"]["experiment_id"]]
            runs = server.call("POST", "runs/search", {"experiment_ids": ids})
            assert runs.get("runs"), "the corpus never reached the MLflow server"
        finally:
            server.stop()
    else:
        yield {}


def fresh(
    args: list[str], cwd: Path, pythonpath: Path | None, extra_env: dict[str, str] | None = None
) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | (extra_env or {})
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    result = run([sys.executable, *args], cwd=cwd, env=env)
    return result.returncode, result.stdout + result.stderr


def test_not_importable_without_pythonpath(not_installed: tuple[Path, str], tmp_path: Path) -> None:
    _, spec = not_installed
    code, output = fresh(["-c", LOAD, spec, str(tmp_path)], tmp_path, None)
    assert code != 0
    assert "could not be loaded (import)" in output


def test_loaded_by_load_exporter_with_pythonpath_alone(
    not_installed: tuple[Path, str], tmp_path: Path
) -> None:
    src, spec = not_installed
    code, output = fresh(["-c", LOAD, spec, str(tmp_path)], tmp_path, src)
    assert code == 0, output
    class_name, module_file = output.split()
    assert class_name == "ExampleExporter"
    assert Path(module_file).is_relative_to(src)
    assert not (tmp_path / "aggregator").exists(), "the factory must not create anything"


def test_corpus_replayed_through_export_worker(
    not_installed: tuple[Path, str], tmp_path: Path, sink_env: dict[str, str]
) -> None:
    src, spec = not_installed
    replay = ROOT / "tests" / "template" / "replay_corpus.py"
    code, output = fresh([str(replay), spec, str(tmp_path / "run")], tmp_path, src, sink_env)
    assert code == 0, output
    assert "delivered" in output
    assert any((tmp_path / "run" / "aggregator" / "export").iterdir())
