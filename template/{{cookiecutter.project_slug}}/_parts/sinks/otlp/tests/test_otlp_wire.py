"""The direct wire encoding decodes, with ``opentelemetry-proto``, to exactly the messages
the official protobuf classes build from the same records (the mapping's reference)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from traceml_exporter_sdk import ExportRecord, StdoutStderrRecord, StepTimeRecord
from traceml_exporter_sdk.testing import corpus_records
from traceml_exporter_sdk.testing.strategies import record_batches

from traceml_exporter_example._otlp_wire import (
    RecordEncoder,
    attribute_key,
    encode_any,
    encode_request,
    encode_resource,
    encode_scope,
    field_name,
    key_from_wire,
    wire_key,
)

TIMESTAMPS = ("timestamp_unix_ns", "observed_timestamp_unix_ns")


def reference_value(target: common_pb2.AnyValue, value: Any) -> None:  # noqa: PLR0912
    """The mapping's value rules, with the protobuf classes (None: an empty AnyValue)."""
    if value is None:
        target.SetInParent()
        return
    if isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        if -(2**63) <= value < 2**63:
            target.int_value = value
        else:
            target.string_value = str(value)
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
            target.string_value = value
        except UnicodeEncodeError:
            target.bytes_value = value.encode("utf-8", "surrogatepass")
    elif isinstance(value, bytes):
        target.bytes_value = value
    elif isinstance(value, dict):
        target.kvlist_value.SetInParent()
        for key, item in value.items():
            pair = target.kvlist_value.values.add(key=wire_key(key))
            reference_value(pair.value, item)
    elif isinstance(value, list):
        target.array_value.SetInParent()
        for item in value:
            reference_value(target.array_value.values.add(), item)
    else:
        raise TypeError(value)


def reference_request(
    records: Sequence[ExportRecord], include_hostname: bool
) -> logs_service_pb2.ExportLogsServiceRequest:
    request = logs_service_pb2.ExportLogsServiceRequest()
    resource_logs = request.resource_logs.add()
    for key, value in {"service.name": "svc", "n": 3}.items():
        reference_value(resource_logs.resource.attributes.add(key=key).value, value)
    scope_logs = resource_logs.scope_logs.add()
    scope_logs.scope.name = "scope"
    scope_logs.scope.version = "1.0"
    for record in records:
        data = record.to_dict()
        log = scope_logs.log_records.add()
        log.time_unix_nano = data.get("timestamp_unix_ns") or 0
        log.observed_time_unix_nano = data["observed_timestamp_unix_ns"]
        log.event_name = f"traceml.{record.STREAM}"
        for name in ("schema_version", *record.COLUMNS):
            if name in TIMESTAMPS or (name == "hostname" and not include_hostname):
                continue
            if data[name] is not None:
                reference_value(log.attributes.add(key=attribute_key(name)).value, data[name])
    return request


def encoded_request(
    records: Sequence[ExportRecord], include_hostname: bool
) -> logs_service_pb2.ExportLogsServiceRequest:
    encoder = RecordEncoder(include_hostname=include_hostname)
    body = encode_request(
        encode_resource({"service.name": "svc", "n": 3}),
        encode_scope("scope", "1.0"),
        encoder.encode_many(records),
    )
    return logs_service_pb2.ExportLogsServiceRequest.FromString(body)


@pytest.mark.parametrize("include_hostname", [False, True])
def test_corpus_encodes_to_the_reference_messages(include_hostname: bool) -> None:
    records = corpus_records()
    assert encoded_request(records, include_hostname) == reference_request(
        records, include_hostname
    )


@settings(max_examples=150, deadline=None)
@given(batch=record_batches(max_size=8), include_hostname=st.booleans())
def test_any_batch_encodes_to_the_reference_messages(
    batch: list[ExportRecord], include_hostname: bool
) -> None:
    assert encoded_request(batch, include_hostname) == reference_request(batch, include_hostname)


HOSTILE = ["\udcff", "bad \udc80 byte", "\ud800", "\ud83d\ude00 pair of lone halves", "\x00 nul"]


@pytest.mark.parametrize("line", HOSTILE)
def test_hostile_text_encodes_as_bytes_and_decodes_back(line: str) -> None:
    record = StdoutStderrRecord(1, 0, None, line)
    message = encoded_request([record], False)
    assert message == reference_request([record], False)
    (log,) = message.resource_logs[0].scope_logs[0].log_records
    (value,) = [kv.value for kv in log.attributes if kv.key == "traceml.line"]
    if value.WhichOneof("value") == "bytes_value":
        assert "\x00" not in line  # only text that is not valid Unicode goes as bytes
        assert value.bytes_value.decode("utf-8", "surrogatepass") == line
    else:
        assert value.string_value == line == "\x00 nul"


@pytest.mark.parametrize(
    "number", [0, 255, 256, 300, 2**31, 2**63 - 1, 2**63, -1, -(2**63), -(2**63) - 1]
)
def test_int_fields_of_every_size_match_the_reference(number: int) -> None:
    events: dict[str, Any] = {"e": {"cpu": {"n_calls": number}}}
    record = StepTimeRecord(1, number, number, 0, 1, 1, 0, None, 2, number, number, events)
    assert encoded_request([record], False) == reference_request([record], False)


VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    127,
    128,
    -1,
    -(2**63),
    2**63 - 1,
    2**63,
    -(2**63) - 1,
    0.0,
    -0.0,
    1e-300,
    math.inf,
    -math.inf,
    "",
    "é\u2028\n",
    b"\x00\xff",
    {},
    {"a": None, "b": {"c": [1, 2.5, "x", None]}},
    [],
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_every_value_kind_matches_the_reference(value: Any) -> None:
    want = common_pb2.AnyValue()
    reference_value(want, value)
    assert common_pb2.AnyValue.FromString(encode_any(value)) == want


def test_nan_stays_nan() -> None:
    decoded = common_pb2.AnyValue.FromString(encode_any(math.nan))
    assert math.isnan(decoded.double_value)


def test_values_of_other_types_are_refused_with_their_type() -> None:
    with pytest.raises(TypeError, match="set"):
        encode_any({1, 2})


def test_attribute_keys_round_trip() -> None:
    assert attribute_key("hostname") == "host.name"
    assert attribute_key("pid") == "process.pid"
    assert attribute_key("step") == "traceml.step"
    for name in ("hostname", "pid", "step", "events", "schema_version"):
        assert field_name(attribute_key(name)) == name


@given(st.text(st.sampled_from(["a", "\\", "u", "d", "8", "0", "\udcff", "\ud800", "\u2028"])))
def test_any_map_key_round_trips_and_is_valid_utf8(key: str) -> None:
    """Every key is sent as valid UTF-8 and read back exactly; plain keys go as they are."""
    sent = wire_key(key)
    sent.encode("utf-8")
    assert key_from_wire(sent) == key
    if not key.startswith("\\") and not any("\ud800" <= c <= "\udfff" for c in key):
        assert sent == key
