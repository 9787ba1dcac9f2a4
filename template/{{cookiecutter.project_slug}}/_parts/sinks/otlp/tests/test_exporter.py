"""The OTLP sink against the real peer: mapping, settings, and delivery under network faults.

The peer (``sink_support``) is a separate process decoding with
``opentelemetry-proto``; faults are played on the socket, never mocked in the
exporter's client.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import ssl
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from exporter_calls import (
    is_permanent,
    one_folder_named_two_ways,
    run,
    written,
)
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from sink_support import ENDPOINT_VARIABLE, read_export
from suite_helpers import closed_port_url
from traceml_exporter_sdk import (
    ExporterContext,
    ExportRecord,
    ExportWorker,
    StdoutStderrRecord,
    StepTimeRecord,
)
from traceml_exporter_sdk.testing import corpus_records, expected_by_stream
from traceml_exporter_sdk.testing.otlp_receiver import Fault, OtlpReceiver

from traceml_exporter_example._http import _bind, deadline
from traceml_exporter_example.exporter import (
    RECEIPT_FILE,
    ExampleExporter,
    OtlpExportError,
    make_exporter,
)

ByStream = dict[str, list[dict[str, Any]]]


def exporter_for(context: ExporterContext, **options: Any) -> ExampleExporter:
    """The exporter with test-sized options, settings from the environment as the factory's."""
    options.setdefault("backoff_s", (0.05, 0.2))
    return ExampleExporter(
        {k: v for k, v in os.environ.items() if k.startswith("OTEL_")},
        session_root=context.session_root,
        export_dir=context.export_dir,
        include_hostname=context.include_hostname,
        **options,
    )


def statuses(peer: OtlpReceiver) -> list[Any]:
    return [r["status"] for r in peer.requests() if r["records"]]


@pytest.fixture
def deadline_1s() -> None:
    os.environ["OTEL_EXPORTER_OTLP_TIMEOUT"] = "1000"


# -- mapping -------------------------------------------------------------------------


def test_factory_only_copies_settings(context: ExporterContext, otlp_peer: OtlpReceiver) -> None:
    exporter = make_exporter(context)
    assert exporter.settings is None
    assert exporter.environment[ENDPOINT_VARIABLE] == otlp_peer.endpoint
    assert otlp_peer.requests() == []
    assert not context.session_root.exists()


def test_records_round_trip_without_hostname(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(context, records[:4], records[4:])
    assert written(context) == expected_by_stream(records)


def test_records_round_trip_with_hostname(
    hostname_context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(hostname_context, records)
    expected = expected_by_stream(records, include_hostname=True)
    assert written(hostname_context) == expected


def test_corpus_round_trips(context: ExporterContext) -> None:
    records = corpus_records()
    run(context, records)
    assert written(context) == expected_by_stream(records)


def test_log_record_layout(
    hostname_context: ExporterContext, otlp_peer: OtlpReceiver, records: list[ExportRecord]
) -> None:
    """event_name, the two timestamps, semantic-convention keys, and None left out."""
    run(hostname_context, [records[0], records[8]])
    step, line = otlp_peer.log_records()
    assert step["event_name"] == "traceml.step_time"
    assert step["time_unix_nano"] == records[0].to_dict()["timestamp_unix_ns"]
    assert step["observed_time_unix_nano"] == records[0].to_dict()["observed_timestamp_unix_ns"]
    assert step["attributes"]["host.name"] == "node-a"
    assert step["attributes"]["traceml.step"] == 7
    assert step["attributes"]["traceml.schema_version"] == 1
    gpu_ms = step["attributes"]["traceml.events"]["_traceml_internal:step_time"]["cpu"]["gpu_ms"]
    assert gpu_ms is None  # a None inside the events map is kept as an empty value
    assert line["event_name"] == "traceml.stdout_stderr"
    assert line["time_unix_nano"] == 0  # timestamp_unix_ns was None
    assert set(line["attributes"]) == {"traceml.schema_version", "traceml.rank", "traceml.line"}
    assert step["scope"] == "traceml_exporter_example"


def test_resource_headers_and_gzip_from_the_standard_variables(
    context: ExporterContext, otlp_peer: OtlpReceiver, records: list[ExportRecord]
) -> None:
    del os.environ[ENDPOINT_VARIABLE]
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp_peer.base_url + "/"
    os.environ["OTEL_EXPORTER_OTLP_HEADERS"] = "api-key=s%3Dcret, x-tenant = ml "
    os.environ["OTEL_EXPORTER_OTLP_LOGS_COMPRESSION"] = "gzip"
    os.environ["OTEL_SERVICE_NAME"] = "trainer"
    os.environ["OTEL_RESOURCE_ATTRIBUTES"] = "deployment.environment=prod,team=ml%20infra"
    run(context, records)
    requests = otlp_peer.requests()
    assert {r["path"] for r in requests} == {"/v1/logs"}
    assert {r["content_encoding"] for r in requests} == {"gzip"}
    assert {r["headers"]["api-key"] for r in requests} == {"s=cret"}
    assert {r["headers"]["x-tenant"] for r in requests} == {"ml"}
    resource = otlp_peer.log_records()[0]["resource"]
    assert resource["service.name"] == "trainer"
    assert resource["deployment.environment"] == "prod"
    assert resource["team"] == "ml infra"
    assert resource["traceml.session_root"] == str(context.session_root.resolve())
    assert resource["service.instance.id"]
    assert sum(len(rows) for rows in read_export(context).values()) == len(records)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "ftp://collector:4318/v1/logs"),
        ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://:4318"),
        ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://localhost:99999/v1/logs"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "ten"),
        ("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "-5"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "no-equals-sign"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "bad header=1"),
        ("OTEL_RESOURCE_ATTRIBUTES", "=value"),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/no/such/ca.pem"),
    ],
)
def test_a_bad_setting_fails_open_naming_the_variable(
    context: ExporterContext, variable: str, value: str
) -> None:
    os.environ[variable] = value
    exporter = make_exporter(context)  # the factory never raises
    with pytest.raises(ValueError, match=variable) as raised:
        exporter.open()
    assert is_permanent(raised.value)  # no wait fixes a setting: follow ends at once
    report = ExportWorker(make_exporter, context).start().shutdown(10)
    assert report.failure is not None
    assert report.failure.method == "open"
    assert variable in str(report.failure.error)


def test_wrong_path_fails_open_with_the_collectors_message(
    context: ExporterContext, otlp_peer: OtlpReceiver
) -> None:
    os.environ[ENDPOINT_VARIABLE] = otlp_peer.base_url + "/v1/traces"
    with pytest.raises(OtlpExportError, match=r"404.*no such path"):
        make_exporter(context).open()


def test_lone_surrogates_are_sent_and_read_back_exactly(
    hostname_context: ExporterContext, otlp_peer: OtlpReceiver
) -> None:
    hostile = [
        StdoutStderrRecord(1, 0, 2, "bad byte \udcff here"),
        StdoutStderrRecord(1, 0, 3, "\ud800 lone high"),
        StdoutStderrRecord(1, 0, 4, "nul \x00 and \u2028"),
    ]
    run(hostname_context, hostile)
    values = [log["attributes"]["traceml.line"] for log in otlp_peer.log_records()]
    assert values == ["bad byte \udcff here".encode("utf-8", "surrogatepass"),
                      "\ud800 lone high".encode("utf-8", "surrogatepass"),
                      "nul \x00 and \u2028"]  # fmt: skip
    expected = expected_by_stream(hostile, include_hostname=True)
    assert written(hostname_context) == expected


def test_a_lone_surrogate_in_a_map_key_is_sent_escaped_and_read_back_exactly(
    context: ExporterContext, otlp_peer: OtlpReceiver
) -> None:
    stats = {"cpu": {"cpu_ms": 1.5, "n_calls": 1}}
    events: dict[str, Any] = {"bad \udcff phase": stats, "\\x": stats, "plain \\u": stats}
    record = StepTimeRecord(1, 0, 0, 0, 1, 1, 0, None, 2, 0, 0, events)
    run(context, [record])
    (log,) = otlp_peer.log_records()
    assert log["attributes"]["traceml.events"] == {
        "\\bad \\udcff phase": stats,
        "\\\\\\x": stats,
        "plain \\u": stats,
    }
    assert written(context) == expected_by_stream([record])


# -- delivery ------------------------------------------------------------------------


def test_nothing_is_sent_before_flush_and_flush_waits_for_the_2xx(
    context: ExporterContext, otlp_peer: OtlpReceiver, records: list[ExportRecord]
) -> None:
    exporter = make_exporter(context)
    exporter.open()
    exporter.write(records)
    assert statuses(otlp_peer) == []
    exporter.flush()
    assert statuses(otlp_peer) == [200]
    exporter.close()


def test_transient_failures_then_success_lose_and_duplicate_nothing(
    context: ExporterContext, otlp_peer: OtlpReceiver, records: list[ExportRecord]
) -> None:
    otlp_peer.set_faults(Fault.http(503, retry_after=0))
    exporter = exporter_for(context)
    exporter.open()  # the empty request at open is retried too
    otlp_peer.set_faults(
        Fault.http(503, times=2, retry_after=0),
        Fault.drop(),
        Fault.http(429),
        Fault.http(502),
        Fault.http(504),
    )
    exporter.write(records)
    exporter.flush()
    exporter.close()
    assert [r["status"] for r in otlp_peer.requests()] == [
        503, 200, 503, 503, "dropped", 429, 502, 504, 200
    ]  # fmt: skip
    assert sum(len(rows) for rows in read_export(context).values()) == len(records)


def test_retry_after_is_honoured(
    context: ExporterContext, otlp_peer: OtlpReceiver, records: list[ExportRecord]
) -> None:
    exporter = exporter_for(context)
    exporter.open()
    otlp_peer.set_faults(Fault.http(429, retry_after=1))
    exporter.write(records)
    start = time.monotonic()
    exporter.flush()
    assert 1.0 <= time.monotonic() - start < 2.5
    exporter.close()
    assert statuses(otlp_peer) == [429, 200]


@pytest.mark.usefixtures("deadline_1s")
@pytest.mark.parametrize("retry_after", ["30", "Wed, 21 Oct 2099 07:28:00 GMT"])
def test_retry_after_past_the_deadline_gives_up_at_once(
    context: ExporterContext, otlp_peer: OtlpReceiver, records: list[ExportRecord],
    retry_after: str,
) -> None:  # fmt: skip
    exporter = exporter_for(context)
    exporter.open()
    otlp_peer.set_faults(Fault.http(503, times=None, retry_after=retry_after))
    exporter.write(records)
    start = time.monotonic()
    with pytest.raises(OtlpExportError, match=r"503.*would pass the 1 s deadline"):
        exporter.flush()
    assert time.monotonic() - start < 0.5
    with pytest.raises(RuntimeError, match="failed exporter"):
        exporter.close()


@pytest.mark.usefixtures("deadline_1s")
def test_503_forever_raises_within_the_deadline(
    context: ExporterContext, otlp_peer: OtlpReceiver, records: list[ExportRecord]
) -> None:
    exporter = exporter_for(context)
    exporter.open()
    otlp_peer.set_faults(Fault.http(503, times=None))
    exporter.write(records)
    start = time.monotonic()
    with pytest.raises(OtlpExportError, match="503") as raised:
        exporter.flush()
    assert time.monotonic() - start < 1.5
    assert len(statuses(otlp_peer)) >= 3  # it did retry, with backoff
    assert not is_permanent(raised.value)  # the follower tries again later


@pytest.mark.parametrize("status", [400, 401, 403, 404, 408, 413, 500])
def test_statuses_not_retried_raise_at_once_with_the_collectors_message(
    context: ExporterContext, otlp_peer: OtlpReceiver, records: list[ExportRecord], status: int
) -> None:
    exporter = exporter_for(context)
    exporter.open()
    otlp_peer.set_faults(Fault.http(status, times=None, message=f"refused: reason {status}"))
    exporter.write(records)
    start = time.monotonic()
    with pytest.raises(
        OtlpExportError, match=rf"answered {status} .*refused: reason {status}"
    ) as raised:
        exporter.flush()
    assert time.monotonic() - start < 0.5
    assert statuses(otlp_peer) == [status]  # never retried
    assert is_permanent(raised.value) == (status not in (408, 500))  # a 4xx but 408


def test_partial_success_raises(
    context: ExporterContext, otlp_peer: OtlpReceiver, records: list[ExportRecord]
) -> None:
    exporter = exporter_for(context)
    exporter.open()
    otlp_peer.set_faults(Fault.partial(2, message="attribute too long"))
    exporter.write(records)
    with pytest.raises(OtlpExportError, match=r"rejected 2 .*attribute too long") as raised:
        exporter.flush()
    assert is_permanent(raised.value)  # never retried, as the specification says


def test_an_answer_that_is_no_response_message_raises(
    context: ExporterContext, otlp_peer: OtlpReceiver, records: list[ExportRecord]
) -> None:
    exporter = exporter_for(context)
    exporter.open()
    otlp_peer.set_faults(Fault.raw(200, "\xff\xff\xff not protobuf"))
    exporter.write(records)
    with pytest.raises(OtlpExportError, match="not an ExportLogsServiceResponse") as raised:
        exporter.flush()
    assert is_permanent(raised.value)  # not a collector's logs path


@pytest.mark.usefixtures("deadline_1s")
@pytest.mark.parametrize("method", ["flush", "close"])
def test_a_collector_that_never_answers_cannot_hang_flush_or_close(
    context: ExporterContext, otlp_peer: OtlpReceiver, records: list[ExportRecord], method: str
) -> None:
    exporter = exporter_for(context)
    exporter.open()
    otlp_peer.set_faults(Fault.tarpit())
    exporter.write(records)
    start = time.monotonic()
    with pytest.raises(OtlpExportError, match="1 s deadline") as raised:
        getattr(exporter, method)()
    assert 0.9 <= time.monotonic() - start < 2.0
    assert not is_permanent(raised.value)
    otlp_peer.release()


@pytest.mark.usefixtures("deadline_1s")
def test_a_collector_that_drips_its_answer_cannot_stretch_a_call(
    context: ExporterContext, otlp_peer: OtlpReceiver, records: list[ExportRecord]
) -> None:
    """urllib3 times each socket read; the call's deadline bounds them all together."""
    exporter = exporter_for(context)
    exporter.open()
    otlp_peer.set_faults(Fault.drip(0.2))  # each byte well inside a read timeout
    exporter.write(records)
    start = time.monotonic()
    with pytest.raises(OtlpExportError, match="1 s deadline"):
        exporter.flush()
    assert time.monotonic() - start < 1.6


def test_every_socket_kind_gets_a_deadline_bound_twin() -> None:
    """Plain and TLS sockets alike (an https collector) can be bound in place."""
    with socket.socket() as plain:
        _bind(plain)
        assert isinstance(plain, socket.socket)
        assert type(plain).__name__ == "Deadlinesocket"
    context = ssl.create_default_context()
    with context.wrap_socket(socket.socket(), server_hostname="collector") as tls:
        _bind(tls)
        assert isinstance(tls, ssl.SSLSocket)
        assert type(tls).__name__ == "DeadlineSSLSocket"
        with deadline(time.monotonic() - 1), pytest.raises(TimeoutError, match="deadline"):
            tls.recv(1)


def test_the_worker_never_waits_past_the_deadline_at_exit(
    context: ExporterContext, otlp_peer: OtlpReceiver, records: list[ExportRecord]
) -> None:
    """Default settings, TraceML's worker, a tarpit: shutdown ends with the loss recorded."""
    worker = ExportWorker(make_exporter, context, flush_interval_s=3600).start()
    worker.submit_records(records)
    time.sleep(0.2)
    otlp_peer.set_faults(Fault.tarpit())
    start = time.monotonic()
    report = worker.shutdown(30)
    assert time.monotonic() - start < 7  # the 5 s default deadline, plus slack
    assert not report.timed_out
    assert report.failure is not None
    assert report.failed_records == len(records)
    otlp_peer.release()


@pytest.mark.usefixtures("deadline_1s")
def test_with_the_collector_down_memory_stays_under_the_cap_and_write_raises(
    context: ExporterContext,
) -> None:
    cap = 256 * 1024
    with OtlpReceiver() as collector:
        os.environ[ENDPOINT_VARIABLE] = collector.endpoint
        exporter = exporter_for(context, max_buffer_bytes=cap)
        exporter.open()
    batch = corpus_records()  # the collector is gone now: connections are refused
    writes = 0

    def fill() -> None:
        nonlocal writes
        for _ in range(10_000):
            exporter.write(batch)
            writes += 1

    tracemalloc.start()
    try:
        start = time.monotonic()
        with pytest.raises(OtlpExportError, match="1 s deadline"):
            fill()
        elapsed = time.monotonic() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert writes > 3  # it buffered up to the cap first
    assert peak < 3 * cap, f"peak {peak} bytes with a cap of {cap}"
    assert elapsed < 2.0


def test_an_oversized_batch_is_split_never_dropped(
    context: ExporterContext, otlp_peer: OtlpReceiver
) -> None:
    limit = 16 * 1024
    records = corpus_records() * 3
    exporter = exporter_for(context, max_request_bytes=limit)
    exporter.open()
    exporter.write(records)
    exporter.close()
    sizes = [r["body_bytes"] for r in otlp_peer.requests() if r["records"]]
    assert len(sizes) > 3
    assert max(sizes) <= limit
    assert sum(r["records"] for r in otlp_peer.requests()) == len(records)
    assert written(context) == expected_by_stream(records)


def test_a_collector_limit_below_the_request_size_is_raised(context: ExporterContext) -> None:
    with OtlpReceiver(max_body=2048) as small:
        os.environ[ENDPOINT_VARIABLE] = small.endpoint
        exporter = exporter_for(context)
        exporter.open()
        exporter.write(corpus_records())
        with pytest.raises(OtlpExportError, match="413"):
            exporter.flush()


def test_a_failed_method_closes_the_client(
    context: ExporterContext, otlp_peer: OtlpReceiver, records: list[ExportRecord]
) -> None:
    fds_before = len(os.listdir("/proc/self/fd"))
    exporter = exporter_for(context)
    exporter.open()
    otlp_peer.set_faults(Fault.http(400))
    exporter.write(records)
    with pytest.raises(OtlpExportError):
        exporter.flush()
    assert len(os.listdir("/proc/self/fd")) <= fds_before
    with pytest.raises(RuntimeError, match="failed exporter"):
        exporter.write(records)


def test_open_and_close_note_the_run_in_the_receipt(
    context: ExporterContext, records: list[ExportRecord], otlp_peer: OtlpReceiver
) -> None:
    """Open notes the instance (so a failed one's records can be found), close what it sent."""
    run(context, records, dropped=3)
    lines = (context.export_dir / RECEIPT_FILE).read_text("utf-8").splitlines()
    opened, closed = map(json.loads, lines)
    assert set(opened) == {"opened_unix_ns", "endpoint", "service_instance_id"}
    assert opened["service_instance_id"] == closed["service_instance_id"]
    receipt = closed
    assert receipt["dropped_batches"] == 3
    assert receipt["endpoint"] == otlp_peer.endpoint
    assert sum(receipt["delivered_records"].values()) == len(records)
    assert receipt["delivered_records"]["step_time"] == 3
    ids = {log["resource"]["service.instance.id"] for log in otlp_peer.log_records()}
    assert ids == {receipt["service_instance_id"]}


@pytest.mark.usefixtures("deadline_1s")
def test_open_against_a_closed_port_fails_within_the_deadline(context: ExporterContext) -> None:
    os.environ[ENDPOINT_VARIABLE] = closed_port_url("/v1/logs")
    start = time.monotonic()
    with pytest.raises(OtlpExportError, match=r"Connection refused|NewConnectionError") as raised:
        exporter_for(context).open()
    assert time.monotonic() - start < 1.5
    assert not is_permanent(raised.value)  # a collector down: the follower waits for it


def test_the_resource_names_the_run_by_its_resolved_folder(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    otlp_peer: OtlpReceiver,
    records: list[ExportRecord],
) -> None:
    """``traceml.session_root`` is the run's key: one for ``run1`` named relatively or
    absolutely, another for another folder named run1."""
    keys = []
    for context in one_folder_named_two_ways(tmp_path, monkeypatch):
        run(context, records[:1])
        keys.append({log["resource"]["traceml.session_root"] for log in otlp_peer.log_records()})
        otlp_peer.reset()
    folders = [str((tmp_path / name / "run1").resolve()) for name in ("logs", "elsewhere")]
    assert keys == [{folders[0]}, {folders[0]}, {folders[1]}]


@pytest.fixture(autouse=True)
def _release_tarpits(otlp_peer: OtlpReceiver) -> Iterator[None]:
    yield
    otlp_peer.release()


# -- credentials, secrets and messages that keep their cause (issue 20, defects 5 and 6) --


class ScriptedPeer:
    """A misbehaving HTTP server on 127.0.0.1: answers every request with ``answer`` (raw
    bytes) and keeps each request's raw head, so duplicate headers can be seen."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.heads: list[bytes] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.getsockname()[1]}/v1/logs"

    @classmethod
    @contextlib.contextmanager
    def running(cls, answer: bytes) -> Iterator[ScriptedPeer]:
        peer = cls(answer)
        peer._thread.start()
        try:
            yield peer
        finally:
            peer._stop.set()
            peer._thread.join(5)
            peer._server.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(
                    (int(line.split(b":")[1]) for line in head.split(b"\r\n")
                     if line.lower().startswith(b"content-length:")),
                    0,
                )  # fmt: skip
                while len(body) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    body += chunk
                self.heads.append(head)
                conn.sendall(self.answer)


def http_answer(status: str, body: bytes, *headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", "Connection: close", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def files_holding(root: Path, secret: str) -> list[str]:
    return [
        str(path)
        for path in root.rglob("*")
        if path.is_file() and secret.encode() in path.read_bytes()
    ]


def test_url_credentials_are_sent_as_basic_auth_and_never_written(
    context: ExporterContext,
    otlp_peer: OtlpReceiver,
    records: list[ExportRecord],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    password, token = "pw-7f3c9e", "tok-51b2d8aa"
    base = otlp_peer.endpoint.replace("http://", f"http://trainer:{password}@")
    os.environ[ENDPOINT_VARIABLE] = base
    os.environ["OTEL_EXPORTER_OTLP_HEADERS"] = f"x-api-key={token}"
    run(context, records)  # a good run: its receipt names the endpoint
    (request, *_) = otlp_peer.requests()
    expected = base64.b64encode(f"trainer:{password}".encode()).decode()
    assert request["headers"]["authorization"] == f"Basic {expected}"
    for line in (context.export_dir / RECEIPT_FILE).read_text("utf-8").splitlines():
        assert json.loads(line)["endpoint"] == otlp_peer.endpoint
    # a failing run: the collector refuses, echoing the key; the loss is recorded
    otlp_peer.set_faults(Fault.http(401, times=None, message=f"bad key {token} for trainer"))
    worker = ExportWorker(make_exporter, context).start()
    worker.submit_records(records)
    report = worker.shutdown(10)
    assert report.failure is not None
    assert "401" in report.failure.error
    assert "bad key <redacted>" in report.failure.error
    assert report.warning_path is not None
    assert report.warning_path.is_file()
    shown = caplog.text + "".join(capfd.readouterr()) + report.failure.error
    for secret in (password, token, expected):
        assert files_holding(context.session_root, secret) == []
        assert secret not in shown


def test_url_credentials_beside_an_authorization_header_are_refused(
    context: ExporterContext, otlp_peer: OtlpReceiver
) -> None:
    os.environ[ENDPOINT_VARIABLE] = otlp_peer.endpoint.replace("http://", "http://u:pw-8d1e@")
    os.environ["OTEL_EXPORTER_OTLP_HEADERS"] = "Authorization=Bearer tok-0a9c33"
    with pytest.raises(ValueError, match="give only one of them") as raised:
        make_exporter(context).open()
    assert "pw-8d1e" not in str(raised.value)
    assert "tok-0a9c33" not in str(raised.value)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-unit=%E2%82%AC", "x-unit.*outside Latin-1"),
        ("OTEL_EXPORTER_OTLP_LOGS_HEADERS", "x-a=1%0D%0Ax-b: 2", "x-a.*line break"),
        ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://[::1:4318/v1/logs", r"IPv6.*'\]'"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://my host:4318", "space in its host"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "content-type=text/plain", "sets itself"),
    ],
)
def test_a_bad_header_or_host_names_its_variable_and_cause(
    context: ExporterContext, variable: str, value: str, message: str
) -> None:
    if variable == "OTEL_EXPORTER_OTLP_ENDPOINT":
        del os.environ[ENDPOINT_VARIABLE]  # the logs variable would win
    os.environ[variable] = value
    with pytest.raises(ValueError, match=f"{variable}.*{message}"):
        make_exporter(context).open()


def test_a_content_type_header_from_the_settings_is_sent_once(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    ok = logs_service_pb2.ExportLogsServiceResponse().SerializeToString()
    with ScriptedPeer.running(
        http_answer("200 OK", ok, "Content-Type: application/x-protobuf")
    ) as peer:
        os.environ[ENDPOINT_VARIABLE] = peer.endpoint
        os.environ["OTEL_EXPORTER_OTLP_HEADERS"] = "content-type=application/x-protobuf"
        run(context, records)
    assert peer.heads
    for head in peer.heads:
        assert head.lower().count(b"\r\ncontent-type:") == 1, head


def test_a_redirect_names_its_location_and_is_not_followed(context: ExporterContext) -> None:
    answer = http_answer("307 Temporary Redirect", b"", "Location: http://elsewhere:4318/v1/logs")
    with ScriptedPeer.running(answer) as peer:
        os.environ[ENDPOINT_VARIABLE] = peer.endpoint
        with pytest.raises(OtlpExportError) as raised:
            make_exporter(context).open()
    text = str(raised.value)
    assert "307" in text
    assert "http://elsewhere:4318/v1/logs" in text
    assert "not followed" in text
    assert len(peer.heads) == 1


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        (
            "application/x-protobuf",
            logs_service_pb2.ExportLogsServiceResponse(
                partial_success=logs_service_pb2.ExportLogsPartialSuccess(
                    rejected_log_records=3, error_message="attrs too long"
                )
            ).SerializeToString(),
        ),
        (
            "application/protobuf",
            status_pb2.Status(code=3, message="attrs too long").SerializeToString(),
        ),
        ("application/json", b'{"code": 3, "message": "attrs too long"}'),
    ],
)
def test_a_400_shows_the_message_of_its_body(
    context: ExporterContext, content_type: str, body: bytes
) -> None:
    answer = http_answer("400 Bad Request", body, f"Content-Type: {content_type}")
    with ScriptedPeer.running(answer) as peer:
        os.environ[ENDPOINT_VARIABLE] = peer.endpoint
        with pytest.raises(OtlpExportError, match="400 Bad Request: attrs too long"):
            make_exporter(context).open()
