"""Real Prometheus and VictoriaMetrics servers for the tests, and reading series back.

The servers are the SDK's ``prometheus_server()`` and ``victoria_metrics_server()``
(Debian's binaries, on 127.0.0.1 at free ports, storage in temporary folders),
each started once per test process on first use. The autouse ``prometheus_peer``
fixture points ``PROMETHEUS_REMOTE_WRITE_URL`` at Prometheus (the other
``PROMETHEUS_REMOTE_WRITE_*`` variables cleared, a 2 s deadline) for one test,
then restores the variables and restarts a server a test stopped. When a server
cannot be had the tests skip and say how to get one; with
``TRACEML_EXPORTER_REQUIRE_PROMETHEUS=1`` (CI) that is an error instead.

Rows cannot be read back from an aggregate, so the suite's row-level checks are
skipped by name (``SKIP_CHECKS``), and the shared round trips compare
``read_export(context)`` (every series' last value, read over the server's HTTP
API) with ``expected_export(records)`` (the same series computed here, plainly,
from the records' ``to_dict()``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from suite_helpers import RECORD_LEVEL_CHECKS, closed_port_url, only_variables
from traceml_exporter_sdk import ExporterContext, ExportRecord
from traceml_exporter_sdk.testing.prometheus_server import (
    MetricsServer,
    MetricsServerUnavailableError,
    Series,
    prometheus_server,
    victoria_metrics_server,
)

from traceml_exporter_example._prometheus_wire import label_text
from traceml_exporter_example.exporter import JOB, RECEIPT_FILE

__all__ = [
    "ENDPOINT_VARIABLE",
    "REQUIRE_ENV",
    "SKIP_CHECKS",
    "break_sink",
    "broken_context",
    "expected_export",
    "metrics_server",
    "prometheus_peer",
    "read_export",
    "repair_sink",
    "rows",
    "selector",
]

ENDPOINT_VARIABLE = "PROMETHEUS_REMOTE_WRITE_URL"
REQUIRE_ENV = "TRACEML_EXPORTER_REQUIRE_PROMETHEUS"
_NO_ROWS = (
    "rows cannot be read back from an aggregate (a metrics store keeps series, not "
    "records); test_conformance.py's round trips prove the aggregates instead"
)
SKIP_CHECKS = dict.fromkeys(RECORD_LEVEL_CHECKS, _NO_ROWS)
SKIP_CHECKS["permanent_fault_marked"] = (
    "the test Prometheus has no credentials to refuse and takes every well-formed write, "
    "so there is no break_sink_permanently; a refused bearer token (vmauth in front of "
    "VictoriaMetrics) raised marked permanent is tested in tests/test_exporter.py"
)
"""The suite's row-level data-fidelity checks and the permanent fault, skipped by name
with the reason."""

_SERVERS: dict[str, MetricsServer] = {}
_STACKS: list[Any] = []


def metrics_server(kind: str = "prometheus") -> MetricsServer:
    """The running server of ``kind`` (``prometheus``, ``victoria-metrics``), shared per process."""
    server = _SERVERS.get(kind)
    if server is None:
        start = prometheus_server if kind == "prometheus" else victoria_metrics_server
        manager = start()
        try:
            server = manager.__enter__()
        except MetricsServerUnavailableError as exc:
            message = f"no {kind} server for the tests: {exc}"
            if os.environ.get(REQUIRE_ENV, "").strip() not in {"", "0"}:
                pytest.fail(f"{message} ({REQUIRE_ENV} is set, so this is an error)")
            pytest.skip(message)
        _STACKS.append(manager)
        _SERVERS[kind] = server
    if not server.running:
        server.start()
    return server


def pytest_sessionfinish() -> None:
    """Stop the servers this process started."""
    while _STACKS:
        _STACKS.pop().__exit__(None, None, None)
    _SERVERS.clear()


@pytest.fixture(autouse=True)
def prometheus_peer() -> Iterator[MetricsServer]:
    """Prometheus, with the variables pointing at it for this test only; mended after."""
    server = metrics_server("prometheus")
    wanted = {ENDPOINT_VARIABLE: server.write_url, "PROMETHEUS_REMOTE_WRITE_TIMEOUT": "2"}
    try:
        with only_variables("PROMETHEUS_REMOTE_WRITE_", wanted):
            yield server
    finally:
        for started in _SERVERS.values():
            if not started.running:
                started.start()


def broken_context(context: ExporterContext) -> ExporterContext:
    """The same context, with the URL pointed at a closed port (until the test ends)."""
    os.environ[ENDPOINT_VARIABLE] = closed_port_url("/api/v1/write")
    return context


def break_sink(context: ExporterContext) -> None:  # noqa: ARG001 - the suite's signature
    """Stop Prometheus (the fixture starts it again after the test)."""
    metrics_server("prometheus").stop()


def repair_sink(context: ExporterContext) -> None:  # noqa: ARG001 - the suite's signature
    """Start Prometheus again."""
    metrics_server("prometheus")


# -- reading back, and what should be read ---------------------------------------------

_STREAM_OF = (
    ("traceml_step_memory_", "step_memory"),
    ("traceml_step", "step_time"),
    ("traceml_last_step", "step_time"),
    ("traceml_system_", "system"),
    ("traceml_gpu_", "system_gpu"),
    ("traceml_process_", "process"),
    ("traceml_runtime_info", "runtime_environment"),
    ("traceml_output_lines_total", "stdout_stderr"),
)
_OWN_LABELS = ("job", "instance", "run", "session_root")


def _stream(name: str) -> str:
    return next(stream for prefix, stream in _STREAM_OF if name.startswith(prefix))


def _series_key(name: str, labels: dict[str, str]) -> str:
    shown = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
    return name + "{" + shown + "}"


def selector(name: str, **labels: str | list[str]) -> str:
    """A PromQL selector: ``name{label="value",...}``; a list matches any of its values."""
    parts = [
        f"{k}=~{json.dumps('|'.join(v))}" if isinstance(v, list) else f"{k}={json.dumps(v)}"
        for k, v in labels.items()
    ]
    return name + "{" + ",".join(parts) + "}"


def rows(values: dict[str, float]) -> dict[str, list[dict[str, Any]]]:
    """``{series: value}`` grouped by the stream each series comes from, sorted; values to
    12 significant digits (over restarted instances a sum adds up in another order); a
    zero has no sign (the stores give back a sum of -0.0, e.g. a negative subnormal
    duration in seconds, as 0)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for series in sorted(values):
        stream = _stream(series.partition("{")[0])
        out.setdefault(stream, []).append(
            {"series": series, "value": f"{values[series] + 0.0:.12g}"}
        )
    return out


_ADDED = ("_total", "_bucket", "_count", "_sum")
_LARGEST = ("traceml_step_memory_peak_allocated_bytes", "traceml_step_memory_peak_reserved_bytes")
_IDENTITY = ("node", "rank", "hostname")


def last_values(series: Sequence[Series]) -> dict[str, float]:
    """Each live series' last sample, keyed by name and labels but job, instance, run and
    session_root, merged over exporter instances as a query over a restarted run would.

    Every flush writes every live series, so the live ones are those with a sample at
    their exporter instance's last timestamp (a series that ended, such as a replaced
    ``traceml_runtime_info``, stopped before it). Each ``open()`` starts new series (a
    new ``instance``), so over instances counters, histograms and summaries add up
    (``sum without (instance)``), the peak-memory gauges take the largest, other gauges
    the newest instance's value, and a rank's ``traceml_runtime_info`` is its newest
    instance's.
    """
    newest: dict[str, int] = {}
    for item in series:
        instance = item.labels.get("instance", "")
        newest[instance] = max(newest.get(instance, 0), *item.timestamps_ms)
    out: dict[str, float] = {}
    latest: dict[str, tuple[int, str, float]] = {}  # key: (stamp, series, value)
    for item in series:
        last = max(range(len(item.timestamps_ms)), key=item.timestamps_ms.__getitem__)
        stamp = item.timestamps_ms[last]
        if stamp != newest[item.labels.get("instance", "")]:
            continue
        labels = {k: v for k, v in item.labels.items() if k not in (*_OWN_LABELS, "__name__")}
        key, value = _series_key(item.name, labels), item.values[last]
        if item.name.endswith(_ADDED):
            out[key] = out.get(key, 0.0) + value
        elif item.name in _LARGEST:
            out[key] = max(out.get(key, value), value)
        else:
            slot = key
            if item.name == "traceml_runtime_info":  # one per rank: its labels change
                slot = _series_key(item.name, {k: labels.get(k, "") for k in _IDENTITY})
            if slot not in latest or stamp > latest[slot][0]:
                latest[slot] = (stamp, key, value)
    out.update({key: value for _, key, value in latest.values()})
    return out


def instances(context: ExporterContext) -> list[str]:
    """The ``instance`` label of every exporter that opened on this context (the receipt
    has a line per ``open()`` and per ``close()``)."""
    receipt = context.export_dir / RECEIPT_FILE
    if not receipt.exists():
        return []
    lines = receipt.read_text("utf-8").splitlines()
    return list(dict.fromkeys(json.loads(line)["instance"] for line in lines))  # in open order


def read_values(context: ExporterContext, kind: str = "prometheus") -> dict[str, float]:
    """Every series the context's exporters wrote to server ``kind``: its last value."""
    ids = instances(context)
    if not ids:
        return {}
    match = selector("", job=JOB, instance=ids)
    return last_values(metrics_server(kind).samples(match))


def read_export(context: ExporterContext) -> dict[str, list[dict[str, Any]]]:
    """What Prometheus holds from this context's exporters, per stream (``rows``)."""
    return rows(read_values(context))


_LE = (
    (1.0, "0.001"), (2.5, "0.0025"), (5.0, "0.005"), (10.0, "0.01"), (25.0, "0.025"),
    (50.0, "0.05"), (100.0, "0.1"), (250.0, "0.25"), (500.0, "0.5"), (1000.0, "1"),
    (2500.0, "2.5"), (5000.0, "5"), (10000.0, "10"), (math.inf, "+Inf"),
)  # fmt: skip
_INFO = (
    "global_rank", "local_rank", "world_size", "local_world_size", "pid", "topology",
    "distributed_initialized", "distributed_backend", "training_strategy", "strategy_source",
    "strategy_confidence",
)  # fmt: skip
_GAUGES = {
    "system": ("traceml_system_snapshots_total", {
        "cpu_percent": "traceml_system_cpu_percent",
        "ram_used_bytes": "traceml_system_memory_used_bytes",
        "ram_total_bytes": "traceml_system_memory_total_bytes",
        "gpu_available": "traceml_system_gpu_available",
        "gpu_count": "traceml_system_gpus",
    }),
    "system_gpu": ("traceml_gpu_snapshots_total", {
        "util": "traceml_gpu_utilization_percent",
        "mem_used_bytes": "traceml_gpu_memory_used_bytes",
        "mem_total_bytes": "traceml_gpu_memory_total_bytes",
        "temperature_c": "traceml_gpu_temperature_celsius",
        "power_usage_w": "traceml_gpu_power_watts",
        "power_limit_w": "traceml_gpu_power_limit_watts",
    }),
    "process": ("traceml_process_snapshots_total", {
        "cpu_percent": "traceml_process_cpu_percent",
        "cpu_logical_core_count": "traceml_process_cpu_logical_cores",
        "ram_used_bytes": "traceml_process_memory_used_bytes",
        "ram_total_bytes": "traceml_process_memory_total_bytes",
        "gpu_available": "traceml_process_gpu_available",
        "gpu_count": "traceml_process_gpus",
        "gpu_device_index": "traceml_process_gpu_device_index",
        "gpu_mem_used_bytes": "traceml_process_gpu_memory_used_bytes",
        "gpu_mem_reserved_bytes": "traceml_process_gpu_memory_reserved_bytes",
        "gpu_mem_total_bytes": "traceml_process_gpu_memory_total_bytes",
    }),
}  # fmt: skip


def expected_values(  # noqa: PLR0912, PLR0915 - one plain branch per stream
    records: Sequence[ExportRecord], *, include_hostname: bool = False
) -> dict[str, float]:
    """The series the README's mapping makes of ``records``: ``{series: value}``."""
    values: dict[str, float] = {}
    sums: dict[str, float] = {}  # sums of milliseconds, in seconds at the end

    def key(name: str, labels: dict[str, Any]) -> str:
        shown = {k: label_text(str(v)) for k, v in labels.items() if v is not None}
        return _series_key(name, {k: v for k, v in shown.items() if v})

    def identity(data: dict[str, Any], *, rank: bool = True) -> dict[str, Any]:
        labels = {"node": data.get("node_rank")}
        if rank:
            labels["rank"] = data.get("rank")
        if include_hostname:
            labels["hostname"] = data.get("hostname")
        return labels

    def add(series: str, amount: float) -> None:
        values[series] = values.get(series, 0.0) + amount

    infos: dict[str, str] = {}
    for record in records:
        data = record.to_dict()
        stream = data["stream"]
        if stream == "step_time":
            add(key("traceml_steps_total", identity(data)), 1.0)
            if data["step"] is not None:
                values[key("traceml_last_step", identity(data))] = float(data["step"])
            for phase, devices in data["events"].items():
                for device, stats in devices.items():
                    labels = {**identity(data), "phase": phase, "device": device}
                    duration = stats.get("duration_ms")
                    for bound, le in _LE:
                        counted = duration is not None and (le == "+Inf" or duration <= bound)
                        add(key("traceml_step_phase_seconds_bucket", {**labels, "le": le}),
                            1.0 if counted else 0.0)  # fmt: skip
                    for stat, family in (("duration_ms", "traceml_step_phase_seconds"),
                                         ("cpu_ms", "traceml_step_phase_cpu_seconds"),
                                         ("gpu_ms", "traceml_step_phase_gpu_seconds")):  # fmt: skip
                        value = stats.get(stat)
                        add(key(f"{family}_count", labels), 0.0 if value is None else 1.0)
                        total = key(f"{family}_sum", labels)
                        sums[total] = sums.get(total, 0.0) + (value or 0.0)
                    add(key("traceml_step_phase_calls_total", labels), stats.get("n_calls") or 0)
        elif stream == "step_memory":
            labels = {**identity(data), "device": data["device"]}
            add(key("traceml_step_memory_records_total", labels), 1.0)
            for field, name in (
                ("peak_alloc_bytes", "allocated"),
                ("peak_reserved_bytes", "reserved"),
            ):
                series = key(f"traceml_step_memory_peak_{name}_bytes", labels)
                value = data[field]
                if value is not None and (series not in values or value > values[series]):
                    values[series] = value
        elif stream in _GAUGES:
            counter, gauges = _GAUGES[stream]
            labels = identity(data, rank=stream == "process")
            if stream == "system_gpu":
                labels["gpu"] = data["gpu_idx"]
            add(key(counter, labels), 1.0)
            for field, name in gauges.items():
                if data[field] is not None:
                    values[key(name, labels)] = float(data[field])
        elif stream == "runtime_environment":
            ident = key("traceml_runtime_info", identity(data))
            infos[ident] = key(
                "traceml_runtime_info", {**identity(data), **{f: data[f] for f in _INFO}}
            )
        elif stream == "stdout_stderr":
            add(key("traceml_output_lines_total", {"rank": data["rank"]}), 1.0)
    values.update((series, total / 1000) for series, total in sums.items())
    values.update((series, 1.0) for series in infos.values())
    return values


def expected_export(
    records: Sequence[ExportRecord], *, include_hostname: bool = False
) -> dict[str, list[dict[str, Any]]]:
    """What ``read_export`` should find after ``records`` were written (``rows``)."""
    return rows(expected_values(records, include_hostname=include_hostname))
