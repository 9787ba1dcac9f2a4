"""The MLflow sink's test interface: a real MLflow server, and reading back what it holds.

The peer is PyPI's ``mlflow server`` (``mlflow_server.py``), started once per test
process. The autouse ``mlflow_peer`` fixture points MLflow's variables at it for one
test, with an experiment of the test's own, and restores them after.

MLflow holds metric points and tags, not records, so the suite's record-level
data-fidelity checks cannot apply (``SKIP_CHECKS`` says why, and ``suite_read_back``
turns the suite's read-back off); ``read_export`` reads the points and tags back
through the server's REST API and ``expected_export`` computes, independently of the
package, what they must be for the records written: the shared and the sink's own
tests compare the two exactly.
"""

from __future__ import annotations

import atexit
import math
import os
import re
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from mlflow_server import MlflowServer, MlflowUnavailableError, free_port, require_mlflow
from traceml_exporter_sdk import ExporterContext, ExportRecord
from traceml_exporter_sdk.testing import ReadBackNotImplementedError

from {{ cookiecutter.package_name }}.exporter import session_key

__all__ = [
    "MAX_EXAMPLES",
    "SKIP_CHECKS",
    "break_sink",
    "broken_context",
    "expected_export",
    "mlflow_peer",
    "read_export",
    "server",
    "start_server",
    "suite_read_back",
]

_RECORD_LEVEL = (
    "every_record_once",
    "per_stream_order",
    "duplicates_kept",
    "values_equal_to_dict",
    "hostname_dropped_by_default",
    "hostname_kept_when_enabled",
)
SKIP_CHECKS = {
    **dict.fromkeys(
        _RECORD_LEVEL,
        (
            "MLflow keeps metric points and tags, not records "
            "(stdout_stderr is not exported, an identical point is stored once); "
            "tests/test_conformance.py and tests/test_exporter.py compare the points and tags "
            "read back from the server with the records written, exactly"
        ),
    ),
    "records_per_second": (
        "bound by the MLflow server itself (a few thousand "
        "points/s on sqlite); tests/benchmarks/bench_mlflow.py measures the exporter "
        "against the server's own ceiling"
    ),
}
"""The suite's checks this sink cannot pass by design, and why (the shared class reads it)."""

MAX_EXAMPLES = 6
"""Examples of the shared property test: each makes runs and reads every metric's history
back, a request apiece (the server's speed, not the exporter's, sets the time)."""
TEST_TIMEOUT_S = "30"
"""The deadline of each call in the tests: a server on a loaded 2-core CI machine can take
a second per request (idle, tens of milliseconds); the fault tests set their own."""
_SERVER: list[MlflowServer] = []
_MEASURES = ("duration_ms", "cpu_ms", "gpu_ms", "n_calls")
_FIELDS = {
    "step_memory": ("peak_alloc_bytes", "peak_reserved_bytes"),
    "system": ("cpu_percent", "ram_used_bytes", "ram_total_bytes", "gpu_available", "gpu_count"),
    "system_gpu": (
        "util",
        "mem_used_bytes",
        "mem_total_bytes",
        "temperature_c",
        "power_usage_w",
        "power_limit_w",
    ),
    "process": (
        "cpu_percent",
        "cpu_logical_core_count",
        "ram_used_bytes",
        "ram_total_bytes",
        "gpu_available",
        "gpu_count",
        "gpu_mem_used_bytes",
        "gpu_mem_reserved_bytes",
        "gpu_mem_total_bytes",
    ),
}
_KEY = re.compile(r"[^A-Za-z0-9_/.\- :]")
_MAX_DOUBLE = 1.7976931348623157e308


def start_server(*, auth: bool = False) -> MlflowServer:
    """A new server, stopped at exit; a test that cannot have one fails where
    ``TRACEML_EXPORTER_REQUIRE_MLFLOW`` is set (CI), else skips."""
    try:
        peer = MlflowServer(auth=auth).start()
    except MlflowUnavailableError as exc:
        if require_mlflow():
            pytest.fail(f"no MLflow server (TRACEML_EXPORTER_REQUIRE_MLFLOW is set): {exc}")
        pytest.skip(f"no MLflow server: {exc}")
    atexit.register(peer.stop)
    return peer


def server() -> MlflowServer:
    """The server shared by every test of the process, started on first use."""
    if not _SERVER:
        _SERVER.append(start_server())
    return _SERVER[0]


@pytest.fixture(autouse=True)
def mlflow_peer() -> Iterator[MlflowServer]:
    """The server, with MLflow's variables pointing at it (a new experiment) for this
    test only."""
    peer = server()
    names = ("MLFLOW_", "TRACEML_MLFLOW_")
    saved = {k: v for k, v in os.environ.items() if k.startswith(names)}
    for key in saved:
        del os.environ[key]
    os.environ["MLFLOW_TRACKING_URI"] = peer.url
    os.environ["MLFLOW_EXPERIMENT_NAME"] = f"test-{uuid.uuid4().hex[:12]}"
    os.environ["TRACEML_MLFLOW_TIMEOUT_S"] = TEST_TIMEOUT_S
    try:
        yield peer
    finally:
        for key in [k for k in os.environ if k.startswith(names)]:
            del os.environ[key]
        os.environ.update(saved)


def suite_read_back(context: ExporterContext) -> Any:  # noqa: ARG001 - the suite's signature
    """The suite's record-level read-back is off for this sink (see ``SKIP_CHECKS``)."""
    raise ReadBackNotImplementedError("MLflow holds metric points and tags, not records")


def broken_context(context: ExporterContext) -> ExporterContext:
    """The same context, with the server URL pointed at a closed port (until the test ends)."""
    os.environ["MLFLOW_TRACKING_URI"] = f"http://127.0.0.1:{free_port()}"
    os.environ["TRACEML_MLFLOW_TIMEOUT_S"] = "2"
    return context


def break_sink(context: ExporterContext) -> None:  # noqa: ARG001 - the suite's signature
    """Delete the test's experiment underneath the running exporter (its runs go with it)."""
    peer = server()
    name = os.environ["MLFLOW_EXPERIMENT_NAME"]
    found = peer.call("GET", "experiments/get-by-name", {"experiment_name": name})
    experiment_id = found["experiment"]["experiment_id"]
    peer.call("POST", "experiments/delete", {"experiment_id": experiment_id})


def _runs(context: ExporterContext) -> list[dict[str, Any]]:
    peer = server()
    name = os.environ["MLFLOW_EXPERIMENT_NAME"]
    try:
        found = peer.call("GET", "experiments/get-by-name", {"experiment_name": name})
    except OSError:
        return []
    where = f"tags.`traceml.session` = '{session_key(context.session_root)}'"
    body = {"experiment_ids": [found["experiment"]["experiment_id"]], "filter": where}
    runs: list[dict[str, Any]] = peer.call("POST", "runs/search", body).get("runs", [])
    return runs


def _value(value: Any) -> Any:
    """A metric value compared exactly: NaN as text (NaN != NaN)."""
    return "nan" if isinstance(value, float) and math.isnan(value) else value


def read_export(context: ExporterContext) -> dict[str, list[dict[str, Any]]]:
    """What the server holds for this context's session: each metric point (sorted) and,
    under runtime_environment, each rank's ``traceml.runtime.*`` tags."""
    peer = server()
    out: dict[str, list[dict[str, Any]]] = {}
    for run in _runs(context):
        run_id = run["info"]["run_id"]
        tags = {t["key"]: t["value"] for t in run["data"].get("tags", [])}
        rank = int(tags["traceml.rank"]) if "traceml.rank" in tags else None
        runtime = {k: v for k, v in tags.items() if k.startswith("traceml.runtime.")}
        if runtime:
            out.setdefault("runtime_environment", []).append({"rank": rank, "tags": runtime})
        for key in sorted({m["key"] for m in run["data"].get("metrics", [])}):
            history = peer.call(
                "GET",
                "metrics/get-history",
                {"run_id": run_id, "metric_key": key, "max_results": 100000},
            )
            for point in history.get("metrics", []):
                out.setdefault(key.split("/")[0], []).append(
                    {
                        "rank": rank,
                        "key": key,
                        "step": int(point.get("step", 0)),
                        "timestamp": int(point["timestamp"]),
                        "value": _value(float(point["value"])),
                    }
                )
    return {stream: sorted(rows, key=repr) for stream, rows in out.items()}


def _key(key: str) -> str:
    parts = _KEY.sub("_", key).split("/")
    key = "/".join("_" if part in ("", ".", "..") else part for part in parts)
    for size in (250, 249):
        parts = key[:size].split("/")
        cut = "/".join("_" if part in ("", ".", "..") else part for part in parts)
        if len(cut) <= 250:
            return cut
    return cut


def _expected_value(value: float) -> Any:
    try:
        number = float(value)
    except OverflowError:
        number = math.copysign(math.inf, value)
    if math.isinf(number):  # MLflow stores ±inf as the largest double
        number = math.copysign(_MAX_DOUBLE, number)
    return _value(number)


def _int64(value: int) -> int:
    return max(-(2**63), min(value, 2**63 - 1))


def expected_export(
    records: Iterable[ExportRecord], *, include_hostname: bool = False
) -> dict[str, list[dict[str, Any]]]:
    """What ``read_export`` must find for these records, computed from the README's mapping."""
    points: dict[str, set[tuple[Any, ...]]] = {}
    runtime: dict[int | None, dict[str, str]] = {}
    for record in records:
        data = record.to_dict()
        if not include_hostname:
            data.pop("hostname", None)
        stream = record.STREAM
        rank = data.get("rank")
        rank = data.get("global_rank") if rank is None else rank
        if stream == "runtime_environment":
            skip = ("stream", "schema_version", "observed_timestamp_unix_ns", "timestamp_unix_ns")
            tags = runtime.setdefault(rank, {})
            for name, value in data.items():
                if name not in skip and value is not None:
                    text = str(value).encode("utf-8", "backslashreplace").decode()
                    tags[_key(f"traceml.runtime.{name}")] = text[:8000]
            continue
        stamp = data.get("timestamp_unix_ns")
        stamp = data["observed_timestamp_unix_ns"] if stamp is None else stamp
        step = data.get("step") if stream in ("step_time", "step_memory") else None
        step = data.get("seq") if step is None else step
        step = 0 if step is None else _int64(step)
        measures: list[tuple[str, Any]] = []
        if stream == "step_time":
            for event, devices in data["events"].items():
                for device, stats in devices.items():
                    measures += [
                        (f"step_time/{event}/{device}/{m}", stats.get(m)) for m in _MEASURES
                    ]
        elif stream in _FIELDS:
            part = {"step_memory": "device", "system_gpu": "gpu_idx"}.get(stream)
            base = stream if part is None else f"{stream}/{data[part]}"
            measures += [(f"{base}/{name}", data[name]) for name in _FIELDS[stream]]
        for key, value in measures:
            if value is None or isinstance(value, bool):
                continue
            point = (
                rank,
                _key(key),
                step,
                max(0, _int64(stamp // 1_000_000)),
                _expected_value(value),
            )
            points.setdefault(stream, set()).add(point)
    out: dict[str, list[dict[str, Any]]] = {
        stream: sorted(
            (
                {"rank": r, "key": k, "step": s, "timestamp": t, "value": v}
                for r, k, s, t, v in found
            ),
            key=repr,
        )
        for stream, found in points.items()
    }
    if runtime:
        out["runtime_environment"] = sorted(
            ({"rank": rank, "tags": tags} for rank, tags in runtime.items() if tags), key=repr
        )
    return out
