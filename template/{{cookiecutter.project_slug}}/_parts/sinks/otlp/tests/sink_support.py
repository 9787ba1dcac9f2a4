"""The OTLP sink's test interface: a real OTLP/HTTP peer, and reading back what it got.

The peer is the SDK's ``OtlpReceiver``: its own process on 127.0.0.1, decoding
with ``opentelemetry-proto`` (never with this package's encoder), started once
per test process. The autouse ``otlp_peer`` fixture points
``OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`` at it (other ``OTEL_*`` variables cleared)
for one test, so any exporter the factory makes sends there, then restores the
variables and clears the peer's records and faults.

``read_export(context)`` decodes what the peer accepted from that context's
exporters: by the ``service.instance.id`` each ``open()`` noted in
``otlp_export.jsonl`` (a failed instance's too), or, with no receipt, by the
``traceml.session_root`` resource attribute.
"""

from __future__ import annotations

import atexit
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from suite_helpers import closed_port_url, only_variables
from traceml_exporter_sdk import ExporterContext
from traceml_exporter_sdk.records import RECORD_TYPE_BY_STREAM
from traceml_exporter_sdk.testing.otlp_receiver import Fault, OtlpReceiver

from traceml_exporter_example._contract import run_key
from traceml_exporter_example._otlp_wire import EVENT_PREFIX, attribute_key, key_from_wire
from traceml_exporter_example.exporter import RECEIPT_FILE

__all__ = [
    "ENDPOINT_VARIABLE",
    "break_sink",
    "broken_context",
    "otlp_peer",
    "peer",
    "read_export",
    "record_from_log",
]

ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"
_PEER: list[OtlpReceiver] = []


def peer() -> OtlpReceiver:
    """The receiver shared by every test of the process, started on first use."""
    if not _PEER:
        receiver = OtlpReceiver().start()
        atexit.register(receiver.stop)
        _PEER.append(receiver)
    return _PEER[0]


@pytest.fixture(autouse=True)
def otlp_peer() -> Iterator[OtlpReceiver]:
    """The peer, with the OTel variables pointing at it for this test only; cleared after."""
    receiver = peer()
    try:
        with only_variables("OTEL_", {ENDPOINT_VARIABLE: receiver.endpoint}):
            yield receiver
    finally:
        receiver.reset()


def broken_context(context: ExporterContext) -> ExporterContext:
    """The same context, with the endpoint pointed at a closed port (until the test ends)."""
    os.environ[ENDPOINT_VARIABLE] = closed_port_url("/v1/logs")
    return context


def break_sink(context: ExporterContext) -> None:  # noqa: ARG001 - the suite's signature
    """The collector answers 503 for ever (with ``Retry-After: 1``) from now on."""
    peer().set_faults(Fault.http(503, times=None, retry_after=1, message="overloaded"))


def repair_sink(context: ExporterContext) -> None:  # noqa: ARG001 - the suite's signature
    """The collector accepts again (what it received is kept)."""
    peer().set_faults()


def break_sink_permanently(context: ExporterContext) -> None:  # noqa: ARG001
    """The collector refuses the exporter's credentials (401) for ever from now on."""
    peer().set_faults(Fault.http(401, times=None, message="credentials refused"))


def _instances(context: ExporterContext) -> set[str]:
    receipt = context.export_dir / RECEIPT_FILE
    if not receipt.exists():
        return set()
    lines = receipt.read_text("utf-8").splitlines()
    return {json.loads(line)["service_instance_id"] for line in lines if line.strip()}


def _text(value: Any) -> Any:
    """Undo the sink's text rules: WTF-8 bytes back to the exact str, escaped map keys."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogatepass")
    if isinstance(value, dict):
        return {key_from_wire(k): _text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_text(v) for v in value]
    return value


def record_from_log(log: Mapping[str, Any], *, include_hostname: bool) -> dict[str, Any]:
    """One decoded LogRecord back to the record's ``to_dict()``; strict about extras."""
    event = str(log["event_name"])
    if not event.startswith(EVENT_PREFIX):
        raise AssertionError(f"event_name {event!r} does not start with {EVENT_PREFIX!r}")
    stream = event.removeprefix(EVENT_PREFIX)
    attributes = dict(log["attributes"])
    data: dict[str, Any] = {
        "stream": stream,
        "schema_version": attributes.pop(attribute_key("schema_version"), None),
    }
    for name in RECORD_TYPE_BY_STREAM[stream].COLUMNS:
        if name == "hostname" and not include_hostname:
            continue
        if name == "timestamp_unix_ns":
            data[name] = log["time_unix_nano"] or None
        elif name == "observed_timestamp_unix_ns":
            data[name] = log["observed_time_unix_nano"]
        else:
            data[name] = _text(attributes.pop(attribute_key(name), None))
    if attributes:
        raise AssertionError(f"attributes that are no field of {stream}: {sorted(attributes)}")
    return data


def read_export(context: ExporterContext) -> dict[str, list[dict[str, Any]]]:
    """What the peer accepted from this context's exporters, per stream, as ``to_dict()``s."""
    instances = _instances(context)
    root = run_key(context.session_root)
    out: dict[str, list[dict[str, Any]]] = {stream: [] for stream in context.streams}
    for log in peer().log_records():
        resource = log["resource"]
        mine = (
            resource.get("service.instance.id") in instances
            if instances
            else resource.get("traceml.session_root") == root
        )
        if mine:
            data = record_from_log(log, include_hostname=context.include_hostname)
            out.setdefault(data["stream"], []).append(data)
    return out
