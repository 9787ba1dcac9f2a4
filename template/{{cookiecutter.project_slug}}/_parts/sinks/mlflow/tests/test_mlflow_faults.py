"""The real MLflow server driven into faults: 503s, a tarpit, a stopped server, a bad
token, an experiment deleted underneath. Transient faults are retried within the
deadline and lose nothing; permanent ones raise at once with MLflow's message."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest
from exporter_calls import is_permanent, run, written
from mlflow_server import ADMIN, MlflowServer
from sink_support import expected_export, start_server
from traceml_exporter_sdk import ExporterContext, ExportRecord
from traceml_exporter_sdk.testing.fault_proxy import FaultProxy

from traceml_exporter_example.exporter import MlflowExportError, make_exporter

DEADLINE_S = 3.0
UNAVAILABLE = b'{"error_code": "TEMPORARILY_UNAVAILABLE", "message": "overloaded"}'
SLACK_S = 2.0
"""How far past its deadline a failing call may end (a busy machine's scheduling)."""


@pytest.fixture
def proxy(mlflow_peer: MlflowServer) -> Iterator[FaultProxy]:
    """The exporter talks to the server through a fault proxy, with a short deadline."""
    fault = FaultProxy(mlflow_peer.port)
    os.environ["MLFLOW_TRACKING_URI"] = fault.url
    os.environ["TRACEML_MLFLOW_TIMEOUT_S"] = str(DEADLINE_S)
    try:
        yield fault
    finally:
        fault.close()


def _raises_in_time(call: object, match: str) -> MlflowExportError:
    start = time.monotonic()
    with pytest.raises(MlflowExportError, match=match) as caught:
        call()  # type: ignore[operator]
    assert time.monotonic() - start < DEADLINE_S + SLACK_S
    return caught.value


def test_503s_are_retried_and_nothing_is_lost(
    proxy: FaultProxy, context: ExporterContext, records: list[ExportRecord]
) -> None:
    exporter = make_exporter(context)
    exporter.open()
    exporter.write(records)
    proxy.fail(3, retry_after="0", body=UNAVAILABLE, content_type="application/json")
    seen = proxy.seen
    exporter.flush()
    exporter.close()
    assert proxy.seen - seen >= 4, "three 503s, then the request that went through"
    assert written(context) == expected_export(records)


def test_503_for_ever_raises_by_the_deadline(
    proxy: FaultProxy, context: ExporterContext, records: list[ExportRecord]
) -> None:
    exporter = make_exporter(context)
    exporter.open()
    exporter.write(records)
    proxy.fail(10**9, retry_after="1", body=UNAVAILABLE, content_type="application/json")
    error = _raises_in_time(exporter.flush, "503 Service Unavailable")
    assert "TEMPORARILY_UNAVAILABLE: overloaded" in str(error)
    assert not is_permanent(error)  # the follower tries again later
    with pytest.raises(RuntimeError, match="not open"):
        exporter.flush()


def test_a_tarpit_raises_by_the_deadline(
    proxy: FaultProxy, context: ExporterContext, records: list[ExportRecord]
) -> None:
    exporter = make_exporter(context)
    exporter.open()
    exporter.write(records)
    proxy.tarpit()
    error = _raises_in_time(exporter.flush, "did not answer within the 3 s deadline|would pass")
    assert not is_permanent(error)


def test_a_server_stopped_mid_run(
    proxy: FaultProxy, context: ExporterContext, records: list[ExportRecord]
) -> None:
    """Stopped for a moment: retried, nothing lost. Stopped for good: raised by the deadline."""
    exporter = make_exporter(context)
    exporter.open()
    exporter.write(records[:4])
    proxy.stop_listening()
    threading.Timer(0.5, proxy.listen).start()
    exporter.flush()
    exporter.write(records[4:])
    proxy.stop_listening()
    error = _raises_in_time(exporter.close, "did not answer|would pass|did not take")
    assert not is_permanent(error)  # a server stopped: the follower waits for it
    proxy.listen()
    assert written(context) == expected_export(records[:4])


@pytest.fixture(scope="module")
def auth_server() -> Iterator[MlflowServer]:
    """A second server, with MLflow's basic-auth app, for the bad-credential tests."""
    peer = start_server(auth=True)
    yield peer
    peer.stop()


def test_bad_credentials_raise_at_once(
    auth_server: MlflowServer, context: ExporterContext, records: list[ExportRecord]
) -> None:
    """The right password works (the app checks a slow hash per request: the fixture's
    long deadline); a wrong token or password is a 401, raised at once."""
    os.environ["MLFLOW_TRACKING_URI"] = auth_server.url
    os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"] = ADMIN
    run(context, records)
    assert auth_server.call("POST", "runs/search", {"experiment_ids": ["1"]})["runs"]
    os.environ["TRACEML_MLFLOW_TIMEOUT_S"] = str(DEADLINE_S)
    del os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"]
    os.environ["MLFLOW_TRACKING_TOKEN"] = "not-the-token-1234"  # noqa: S105 - a wrong one
    error = _raises_in_time(make_exporter(context).open, "answered 401")
    assert error.status == 401
    assert is_permanent(error)  # a refused credential: follow ends at once
    assert "not-the-token-1234" not in str(error)
    del os.environ["MLFLOW_TRACKING_TOKEN"]
    os.environ["MLFLOW_TRACKING_USERNAME"] = ADMIN[0]
    os.environ["MLFLOW_TRACKING_PASSWORD"] = "wrong-password"  # noqa: S105 - a wrong one
    error = _raises_in_time(make_exporter(context).open, "answered 401")
    assert "wrong-password" not in str(error)


def test_an_experiment_deleted_underneath(
    mlflow_peer: MlflowServer, context: ExporterContext, records: list[ExportRecord]
) -> None:
    exporter = make_exporter(context)
    exporter.open()
    exporter.write(records[:4])
    exporter.flush()
    name = os.environ["MLFLOW_EXPERIMENT_NAME"]
    found = mlflow_peer.call("GET", "experiments/get-by-name", {"experiment_name": name})
    experiment_id = found["experiment"]["experiment_id"]
    mlflow_peer.call("POST", "experiments/delete", {"experiment_id": experiment_id})
    exporter.write(records[4:])
    error = _raises_in_time(exporter.flush, "must be in the 'active' state")
    assert error.status == 400
    assert "INVALID_PARAMETER_VALUE" in str(error)
    assert is_permanent(error)
    error = _raises_in_time(make_exporter(context).open, f"experiment '{name}' .* is deleted")
    assert is_permanent(error)
