"""The SDK's OTLP/HTTP logs receiver is a faithful, strict peer.

Faithful: what the official ``opentelemetry-exporter-otlp-proto-http``
``OTLPLogExporter`` (a client nobody here wrote) sends is decoded back to
exactly what was emitted, plain and gzipped. Strict: path, content type,
encoding, size and body are enforced as a collector does, and the scripted
faults are what a real client sees on the socket.
"""

from __future__ import annotations

import gzip
import http.client
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from google.rpc import status_pb2
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from traceml_exporter_sdk.testing.otlp_receiver import Fault, OtlpReceiver

NS = 1_712_345_678_901_234_567


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver(max_body=64 * 1024) as peer:
        yield peer


@pytest.fixture(autouse=True)
def _clean(receiver: OtlpReceiver) -> Iterator[None]:
    receiver.reset()
    yield
    receiver.reset()


def emit(endpoint: str, *, compression: Compression = Compression.NoCompression) -> None:
    """Emit two log records through the official SDK, synchronously, then shut it down."""
    exporter = OTLPLogExporter(endpoint=endpoint, compression=compression, timeout=5)
    provider = LoggerProvider(resource=Resource.create({"service.name": "peer-test", "k": 7}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = provider.get_logger("peer.scope", "1.2.3")
    logger.emit(
        LogRecord(
            timestamp=NS,
            observed_timestamp=NS + 1,
            body={"nested": {"list": [1, 2.5, "x", True]}, "raw": b"\x00\xff"},
            attributes={"i": -(2**63), "big": 2**63 - 1, "f": 0.0, "b": False, "s": "é\u2028"},
            event_name="traceml.test",
        )
    )
    logger.emit(LogRecord(timestamp=NS + 2, body="second", attributes={"seq": [1, 2, 3]}))
    provider.shutdown()


def expected_records() -> list[dict[str, Any]]:
    return [
        {
            "time_unix_nano": NS,
            "observed_time_unix_nano": NS + 1,
            "event_name": "traceml.test",
            "body": {"nested": {"list": [1, 2.5, "x", True]}, "raw": b"\x00\xff"},
            "attributes": {"i": -(2**63), "big": 2**63 - 1, "f": 0.0, "b": False, "s": "é\u2028"},
        },
        {
            "time_unix_nano": NS + 2,
            "event_name": "",
            "body": "second",
            "attributes": {"seq": [1, 2, 3]},
        },
    ]


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_official_exporter_round_trips(receiver: OtlpReceiver, compression: Compression) -> None:
    emit(receiver.endpoint, compression=compression)
    got = receiver.log_records()
    assert len(got) == 2
    for record, want in zip(got, expected_records(), strict=True):
        assert {k: record[k] for k in want} == want
        assert record["resource"]["service.name"] == "peer-test"
        assert record["resource"]["k"] == 7
        assert (record["scope"], record["scope_version"]) == ("peer.scope", "1.2.3")
    requests = receiver.requests()
    assert [r["status"] for r in requests] == [200, 200]
    assert {r["records"] for r in requests} == {1}
    wanted = "gzip" if compression is Compression.Gzip else None
    assert {r["content_encoding"] for r in requests} == {wanted}
    assert receiver.bytes_received == sum(r["wire_bytes"] for r in requests) > 0


def test_official_exporter_sees_retry_then_success(receiver: OtlpReceiver) -> None:
    receiver.set_faults(Fault.http(503, times=1, retry_after=0))
    emit(receiver.endpoint)
    statuses = [r["status"] for r in receiver.requests()]
    assert statuses[0] == 503
    assert statuses.count(200) == 2
    assert len(receiver.log_records()) == 2


def test_official_exporter_gives_up_on_400(receiver: OtlpReceiver) -> None:
    receiver.set_faults(Fault.http(400, times=None, message="bad attribute"))
    emit(receiver.endpoint)
    assert [r["status"] for r in receiver.requests()] == [400, 400]
    assert receiver.log_records() == []


def post(
    receiver: OtlpReceiver,
    body: bytes,
    *,
    path: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 5,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=timeout)
    try:
        sent = {"Content-Type": "application/x-protobuf", **(headers or {})}
        conn.request("POST", path or receiver.path, body=body, headers=sent)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def one_record_request() -> bytes:
    request = logs_service_pb2.ExportLogsServiceRequest()
    log = request.resource_logs.add().scope_logs.add().log_records.add()
    log.time_unix_nano = NS
    log.attributes.add(key="k").value.int_value = 1
    return request.SerializeToString()


@pytest.mark.parametrize(
    ("path", "headers", "body", "status", "message"),
    [
        ("/v1/traces", {}, b"", 404, "no such path"),
        (None, {"Content-Type": "application/json"}, b"{}", 415, "application/x-protobuf"),
        (None, {"Content-Encoding": "br"}, b"", 415, "gzip or none"),
        (None, {"Content-Encoding": "gzip"}, b"not gzip", 400, "gzip"),
        (None, {}, b"\xff\xff\xff", 400, "not an ExportLogsServiceRequest"),
        (None, {}, b"x" * (64 * 1024 + 1), 413, "over the limit"),
    ],
)
def test_strict_refusals_carry_a_status(
    receiver: OtlpReceiver,
    path: str | None,
    headers: dict[str, str],
    body: bytes,
    status: int,
    message: str,
) -> None:
    code, answer_headers, answer = post(receiver, body, path=path, headers=headers)
    assert code == status
    assert answer_headers["Content-Type"] == "application/x-protobuf"
    decoded = status_pb2.Status.FromString(answer)
    assert message in decoded.message
    assert receiver.log_records() == []


def test_gzip_and_plain_bodies_are_accepted(receiver: OtlpReceiver) -> None:
    body = one_record_request()
    assert post(receiver, body)[0] == 200
    code, _, answer = post(receiver, gzip.compress(body), headers={"Content-Encoding": "gzip"})
    assert code == 200
    assert logs_service_pb2.ExportLogsServiceResponse.FromString(answer) == (
        logs_service_pb2.ExportLogsServiceResponse()
    )
    assert [r["attributes"] for r in receiver.log_records()] == [{"k": 1}, {"k": 1}]


def test_faults_play_in_order_then_accept(receiver: OtlpReceiver) -> None:
    receiver.set_faults(
        Fault.http(429, times=2, retry_after=3), Fault.partial(1, message="one dropped")
    )
    body = one_record_request()
    first = post(receiver, body)
    assert first[0] == 429
    assert first[1]["Retry-After"] == "3"
    assert post(receiver, body)[0] == 429
    code, _, answer = post(receiver, body)
    assert code == 200
    partial = logs_service_pb2.ExportLogsServiceResponse.FromString(answer).partial_success
    assert (partial.rejected_log_records, partial.error_message) == (1, "one dropped")
    assert post(receiver, body)[0] == 200
    assert [r["status"] for r in receiver.requests()] == [429, 429, 200, 200]


def test_raw_answers_are_sent_as_given(receiver: OtlpReceiver) -> None:
    receiver.set_faults(Fault.raw(200, "<html>proxy</html>"))
    code, _, answer = post(receiver, one_record_request())
    assert (code, answer) == (200, b"<html>proxy</html>")
    assert receiver.log_records() == []


def test_drip_sends_a_good_answer_slowly(receiver: OtlpReceiver) -> None:
    receiver.set_faults(Fault.drip(0.01))
    start = time.monotonic()
    code, _, answer = post(receiver, one_record_request())
    assert code == 200
    assert logs_service_pb2.ExportLogsServiceResponse.FromString(answer).ByteSize() == 0
    assert time.monotonic() - start > 0.5  # about 80 bytes of head, 10 ms each
    assert len(receiver.log_records()) == 1


def test_drop_closes_the_connection_without_an_answer(receiver: OtlpReceiver) -> None:
    receiver.set_faults(Fault.drop())
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        post(receiver, one_record_request())
    assert post(receiver, one_record_request())[0] == 200
    assert [r["status"] for r in receiver.requests()] == ["dropped", 200]
    assert len(receiver.log_records()) == 1


def test_tarpit_never_answers_until_released(receiver: OtlpReceiver) -> None:
    receiver.set_faults(Fault.tarpit())
    start = time.monotonic()
    with pytest.raises(socket.timeout):
        post(receiver, one_record_request(), timeout=0.5)
    assert 0.4 < time.monotonic() - start < 3
    assert receiver.requests()[0]["status"] == "tarpit"
    assert receiver.log_records() == []
    receiver.release()


def test_stop_ends_the_process(tmp_path: Any) -> None:
    peer = OtlpReceiver().start()
    proc = peer._proc
    assert proc is not None
    assert peer.running
    peer.stop()
    assert proc.returncode is not None
    assert not peer.running
    with pytest.raises(RuntimeError, match="not running"):
        peer.requests()


def test_default_imports_never_load_protobuf() -> None:
    code = (
        "import sys, traceml_exporter_sdk, traceml_exporter_sdk.testing;"
        "from traceml_exporter_sdk.testing import otlp_receiver;"
        "bad = [m for m in sys.modules if m.startswith(('opentelemetry', 'google'))];"
        "assert not bad, bad"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
