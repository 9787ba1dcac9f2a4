"""ExampleExporter: export records as OpenTelemetry logs, over OTLP/HTTP.

Select it in TraceML with ``traceml_exporter_example.exporter:make_exporter``.

Every record becomes one structured LogRecord (``event_name`` ``traceml.<STREAM>``,
its fields as typed attributes; the mapping is in ``_otlp_wire`` and the README),
sent as ``application/x-protobuf`` to any OTLP collector. Settings are the
standard ``OTEL_EXPORTER_OTLP_*`` variables (``_otlp_settings``).

Delivery:

* ``write`` encodes and buffers; ``flush`` and ``close`` send, and records count as
  delivered only after the collector's 2xx. When the buffer reaches
  ``max_buffer_bytes``, ``write`` sends it first, so memory stays bounded; if the
  collector cannot take it, ``write`` raises (nothing is dropped silently).
* A request carries at most ``max_request_bytes``; a larger batch is split.
* Retried: 429, 502, 503, 504 and connection errors, with exponential backoff and
  jitter, waiting at least ``Retry-After``, never past the call's deadline
  (``OTEL_EXPORTER_OTLP_TIMEOUT``, default 5 s for the whole call, retries
  included). A wait that would end past the deadline gives up at once.
* Raised at once, with the status and the collector's message: any other status
  (400, 401, 403, 404, 413, 500, ...), a ``partial_success`` with rejected
  records, an answer that is not an ``ExportLogsServiceResponse``, a TLS error,
  or no answer before the deadline (every socket wait, even on a collector that
  drips its answer, gets only the time left). A redirect is not followed: its
  ``Location`` is in the message. The HTTP client, retries and deadlines are
  the HTTP sinks' shared transport (``_http``).
* Credentials in the endpoint URL (``http://user:password@host``) are sent as
  basic auth. No secret (those credentials, ``OTEL_EXPORTER_OTLP_HEADERS``
  values) is ever written into a message or the receipt: they are redacted.
* Delivery is at least once: a retry after a connection lost mid-request may
  repeat records the collector had taken.
* Permanent (``_contract`` rule 8: ``traceml-exporter follow`` ends at once rather
  than wait): a bad setting, a 4xx other than 408 and 429, a ``partial_success`` with
  rejected records, a 2xx that is not an ``ExportLogsServiceResponse``. Everything
  else raised (5xx, connection errors, TLS errors, the deadline) is transient.
* The resource attribute ``traceml.session_root`` is the run's key (rule 9): its
  folder, absolute and resolved.

The rules of TraceML's export contract this class keeps: the factory only copies
settings; the HTTP client (urllib3, one keep-alive connection, no thread) is
made in ``open()``, which also sends an empty request, so a wrong endpoint,
path or credential fails there; records are told apart by ``record.STREAM``;
a failing method closes the client before it raises.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from importlib import metadata

from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

from ._contract import ExporterContext, ExportRecord, run_key
from ._http import RETRYABLE_STATUSES, Answer, HttpError, HttpTransport
from ._http_exporter import HttpExporter
from ._otlp_settings import OtlpSettings, parse_settings, read_environment
from ._otlp_wire import (
    EVENT_PREFIX,
    RecordEncoder,
    encode_request,
    encode_resource,
    encode_scope,
    request_overhead,
)

__all__ = [  # noqa: RUF022 - the class name is a template variable, its place varies
    "EVENT_PREFIX",
    "RECEIPT_FILE",
    "RETRYABLE_STATUSES",
    "OtlpExportError",
    "ExampleExporter",
    "make_exporter",
]

MAX_REQUEST_BYTES = 4 * 1024 * 1024
MAX_BUFFER_BYTES = 16 * 1024 * 1024
RECEIPT_FILE = "otlp_export.jsonl"
"""JSON lines in ``export_dir``: one per ``open()`` (the instance's id, so what an instance
that failed sent can still be found) and one per ``close()`` (what was delivered)."""
SCOPE_NAME = "traceml_exporter_example"
_CONTENT_TYPE = "application/x-protobuf"


class OtlpExportError(HttpError):
    """The collector did not take the records: an error answer, or the deadline passed."""


class ExampleExporter(
    HttpExporter[OtlpSettings],
    receipt=(RECEIPT_FILE, "service_instance_id"),
):
    """Send every record as one OTLP LogRecord to the collector the settings name."""

    max_request_bytes = MAX_REQUEST_BYTES
    """The largest request; a larger batch is split."""
    max_buffer_bytes = MAX_BUFFER_BYTES
    """What ``write`` buffers before it sends."""
    _envelope = (b"", b"")
    _encoder: RecordEncoder
    _pending: list[bytes]
    _pending_bytes: int
    _pending_streams: Counter[str]

    def _parse(self, environment: Mapping[str, str]) -> OtlpSettings:
        return parse_settings(environment)

    def _connect(self, settings: OtlpSettings) -> HttpTransport:
        self.instance_id = str(uuid.uuid4())
        self._encoder = RecordEncoder(include_hostname=self.include_hostname)
        resource = {
            **settings.resource_attributes,
            "service.name": settings.service_name,
            "service.instance.id": self.instance_id,
            "traceml.session_root": run_key(self.session_root),
        }
        version = _version()
        self._envelope = (encode_resource(resource), encode_scope(SCOPE_NAME, version))
        protocol = {
            "Content-Type": _CONTENT_TYPE,
            "User-Agent": f"{SCOPE_NAME}/{version or '0'} (urllib3)",
        }
        if settings.gzip:
            protocol["Content-Encoding"] = "gzip"
        return HttpTransport(
            settings.endpoint,
            peer="the collector",
            timeout_s=settings.timeout_s,
            timeout_variable=settings.timeout_variable,
            headers=protocol,
            user_headers=settings.headers,
            headers_variable=settings.headers_variable,
            backoff_s=self.backoff_s,
            tls=settings.tls,
            error=OtlpExportError,
            describe=_collector_message,
        )

    def _greet(self) -> None:
        self._post(self._request([]), self._client().until())

    def _add(self, records: Sequence[ExportRecord]) -> None:
        """Encode and buffer; send first when the buffer reaches ``max_buffer_bytes``."""
        encoded = self._encoder.encode_many(records)
        self._pending.extend(encoded)
        self._pending_bytes += sum(map(len, encoded))
        self._pending_streams.update(record.STREAM for record in records)
        if self._pending_bytes >= self.max_buffer_bytes:
            self._deliver()

    def _deliver(self) -> None:
        if not self._pending:
            return
        until = self._client().until()
        for chunk in self._chunks(self._pending):
            self._post(self._request(chunk), until)
        self._delivered.update(self._pending_streams)
        self._drop()

    def _drop(self) -> None:
        self._pending = []
        self._pending_bytes = 0
        self._pending_streams = Counter()

    def _chunks(self, records: list[bytes]) -> Iterator[list[bytes]]:
        """Consecutive runs of records whose request stays within ``max_request_bytes``.

        A single record larger than that goes alone (the collector may refuse it
        with 413, which is raised).
        """
        resource, scope = self._envelope
        budget = self.max_request_bytes - request_overhead(resource, scope, self.max_request_bytes)
        chunk: list[bytes] = []
        size = 0
        for record in records:
            if chunk and size + len(record) > budget:
                yield chunk
                chunk, size = [], 0
            chunk.append(record)
            size += len(record)
        if chunk:
            yield chunk

    def _request(self, records: list[bytes]) -> bytes:
        return encode_request(*self._envelope, records) if records else b""

    def _post(self, body: bytes, until: float) -> None:
        """POST one request (retried by the transport until ``until``); check its answer."""
        transport = self._client()
        data = gzip.compress(body, compresslevel=1, mtime=0) if self._settings().gzip else body
        answer = transport.post(data, until=until)
        _check_success(transport, answer.body)


def _version() -> str:
    with contextlib.suppress(metadata.PackageNotFoundError):
        return metadata.version("traceml-exporter-example")
    return ""


def _check_success(transport: HttpTransport, body: bytes) -> None:
    """A 2xx must carry an ExportLogsServiceResponse with nothing rejected."""
    endpoint = transport.endpoint.url
    try:
        answer = logs_service_pb2.ExportLogsServiceResponse.FromString(body)
    except DecodeError as exc:
        raise OtlpExportError(
            transport.redact(
                f"the collector at {endpoint} answered 2xx with a body that is not an "
                f"ExportLogsServiceResponse ({exc}): {body[:200]!r}"
            ),
            permanent=True,  # not a collector, or not its logs path
        ) from None
    rejected = answer.partial_success.rejected_log_records
    if rejected:
        raise OtlpExportError(
            transport.redact(
                f"the collector at {endpoint} rejected {rejected} log record(s) "
                f"(partial_success): {answer.partial_success.error_message}"
            ),
            permanent=True,  # the specification: a partial success is never retried
        )


def _collector_message(answer: Answer) -> str:
    """The message of an error answer, read as OTLP/HTTP allows: a ``google.rpc.Status`` or
    an ``ExportLogsServiceResponse`` with ``partial_success`` (protobuf or JSON), else text."""
    body = answer.body
    kind = (answer.headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if kind == "application/json":
        with contextlib.suppress(ValueError, AttributeError):
            return _json_message(json.loads(body))
    elif kind.endswith("protobuf") or not _is_text(body):
        with contextlib.suppress(DecodeError):
            status = status_pb2.Status.FromString(body)
            if status.message:
                return str(status.message)
        with contextlib.suppress(DecodeError):
            partial = logs_service_pb2.ExportLogsServiceResponse.FromString(body).partial_success
            if partial.error_message or partial.rejected_log_records:
                return _partial_message(partial.error_message, partial.rejected_log_records)
    text = body.decode("utf-8", "replace").strip()
    return "".join(c if c.isprintable() else " " for c in text)[:500]


def _json_message(answer: dict[str, object]) -> str:
    """``message`` of a JSON Status, or ``partialSuccess`` of a JSON response."""
    if answer.get("message"):
        return str(answer["message"])
    partial = answer.get("partialSuccess") or answer.get("partial_success")
    if isinstance(partial, dict):
        message = partial.get("errorMessage") or partial.get("error_message") or ""
        rejected = partial.get("rejectedLogRecords") or partial.get("rejected_log_records") or 0
        return _partial_message(str(message), int(rejected))
    return json.dumps(answer)[:500]


def _partial_message(message: str, rejected: int) -> str:
    return f"{message or '(no error_message)'} (partial_success: {rejected} log record(s) rejected)"


def _is_text(body: bytes) -> bool:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(c.isprintable() or c.isspace() for c in text)


def make_exporter(context: ExporterContext) -> ExampleExporter:
    """The factory TraceML calls as ``factory(context)``: copies the settings, no I/O."""
    return ExampleExporter.for_context(context, read_environment())
