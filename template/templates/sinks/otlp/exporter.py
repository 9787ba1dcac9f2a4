"""{{ cookiecutter.exporter_class }}: export records as OpenTelemetry logs, over OTLP/HTTP.

Select it in TraceML with ``{{ cookiecutter.package_name }}.exporter:make_exporter``.

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
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from importlib import metadata
from pathlib import Path

from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

from ._contract import ExporterContext, ExportRecord
from ._http import RETRYABLE_STATUSES, Answer, HttpError, HttpTransport
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
    "{{ cookiecutter.exporter_class }}",
    "make_exporter",
]

MAX_REQUEST_BYTES = 4 * 1024 * 1024
MAX_BUFFER_BYTES = 16 * 1024 * 1024
RECEIPT_FILE = "otlp_export.jsonl"
"""One JSON line per ``close()`` in ``export_dir``: what was delivered, where, by which instance."""
SCOPE_NAME = "{{ cookiecutter.package_name }}"
_CONTENT_TYPE = "application/x-protobuf"


class OtlpExportError(HttpError):
    """The collector did not take the records (a permanent answer, or the deadline passed)."""


class {{ cookiecutter.exporter_class }}:
    """Send every record as one OTLP LogRecord to the collector the settings name."""

    def __init__(  # noqa: PLR0913 - settings, three context facts, three tunables
        self,
        environment: Mapping[str, str],
        *,
        session_root: Path,
        export_dir: Path,
        include_hostname: bool = False,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        max_buffer_bytes: int = MAX_BUFFER_BYTES,
        backoff_s: tuple[float, float] = (0.2, 2.0),
    ) -> None:
        # Settings only: the client is made in open(), on the export worker's thread.
        self.environment = dict(environment)
        self.session_root = session_root
        self.export_dir = export_dir
        self.include_hostname = include_hostname
        self.max_request_bytes = max_request_bytes
        self.max_buffer_bytes = max_buffer_bytes
        self.backoff_s = backoff_s
        self.settings: OtlpSettings | None = None
        self.instance_id = ""
        self._transport: HttpTransport | None = None
        self._encoder = RecordEncoder(include_hostname=include_hostname)
        self._envelope = (b"", b"")
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._pending_streams: Counter[str] = Counter()
        self._delivered: Counter[str] = Counter()
        self._state = "new"

    # -- the four methods ------------------------------------------------------------

    def open(self) -> None:
        """Validate the settings, make the HTTP client and send an empty request."""
        if self._state != "new":
            raise RuntimeError(f"open() called on a {self._state} exporter")
        self._state = "failed"  # until the collector answered
        settings = self.settings = parse_settings(self.environment)
        self.instance_id = str(uuid.uuid4())
        resource = {
            **settings.resource_attributes,
            "service.name": settings.service_name,
            "service.instance.id": self.instance_id,
            "traceml.session_root": str(self.session_root),
        }
        version = _version()
        self._envelope = (encode_resource(resource), encode_scope(SCOPE_NAME, version))
        protocol = {
            "Content-Type": _CONTENT_TYPE,
            "User-Agent": f"{SCOPE_NAME}/{version or '0'} (urllib3)",
        }
        if settings.gzip:
            protocol["Content-Encoding"] = "gzip"
        self._transport = HttpTransport(
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
        try:
            self._post(self._request([]), self._client().until())
        except BaseException:
            self._abort()
            raise
        self._state = "open"

    def write(self, records: Sequence[ExportRecord]) -> None:
        """Encode and buffer; send first when the buffer reaches ``max_buffer_bytes``."""
        self._require("write")
        try:
            encoded = self._encoder.encode_many(records)
            self._pending.extend(encoded)
            self._pending_bytes += sum(map(len, encoded))
            self._pending_streams.update(record.STREAM for record in records)
            if self._pending_bytes >= self.max_buffer_bytes:
                self._deliver()
        except BaseException:
            self._abort()
            raise

    def flush(self) -> None:
        """Send everything buffered; return once the collector answered 2xx to all of it."""
        self._require("flush")
        try:
            self._deliver()
        except BaseException:
            self._abort()
            raise

    def close(self, *, dropped_batches: int = 0) -> None:
        """Send what is left, add a line to ``otlp_export.jsonl`` and close the client.

        ``dropped_batches`` (batches TraceML's worker never handed to ``write``)
        goes into that line.
        """
        self._require("close")
        try:
            self._deliver()
            self._write_receipt(dropped_batches)
        except BaseException:
            self._abort()
            raise
        self._abort()
        self._state = "closed"

    # -- delivery --------------------------------------------------------------------

    def _deliver(self) -> None:
        if not self._pending:
            return
        until = self._client().until()
        for chunk in self._chunks(self._pending):
            self._post(self._request(chunk), until)
        self._delivered.update(self._pending_streams)
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

    def _client(self) -> HttpTransport:
        if self._transport is None:
            raise RuntimeError("the HTTP client is closed")
        return self._transport

    # -- state -----------------------------------------------------------------------

    def _require(self, method: str) -> None:
        if self._state != "open":
            hint = "; call open() first" if self._state == "new" else ""
            raise RuntimeError(f"{method}() called on a {self._state} exporter{hint}")

    def _abort(self) -> None:
        """Drop the buffer and close the client (after a failure TraceML never calls again)."""
        self._state = "failed"
        self._pending = []
        self._pending_bytes = 0
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()

    def _settings(self) -> OtlpSettings:
        if self.settings is None:
            raise RuntimeError("the settings were not read; call open() first")
        return self.settings

    def _write_receipt(self, dropped_batches: int) -> None:
        line = {
            "closed_unix_ns": time.time_ns(),
            "endpoint": self._settings().endpoint.url,
            "service_instance_id": self.instance_id,
            "delivered_records": dict(self._delivered),
            "requests": self._client().requests,
            "dropped_batches": dropped_batches,
        }
        self.export_dir.mkdir(parents=True, exist_ok=True)
        with (self.export_dir / RECEIPT_FILE).open("a", encoding="utf-8") as file:
            file.write(json.dumps(line, sort_keys=True) + "\n")


def _version() -> str:
    with contextlib.suppress(metadata.PackageNotFoundError):
        return metadata.version("{{ cookiecutter.project_slug }}")
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
            )
        ) from None
    rejected = answer.partial_success.rejected_log_records
    if rejected:
        raise OtlpExportError(
            transport.redact(
                f"the collector at {endpoint} rejected {rejected} log record(s) "
                f"(partial_success): {answer.partial_success.error_message}"
            )
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


def make_exporter(context: ExporterContext) -> {{ cookiecutter.exporter_class }}:
    """The factory TraceML calls as ``factory(context)``: copies the settings, no I/O."""
    return {{ cookiecutter.exporter_class }}(
        read_environment(),
        session_root=context.session_root,
        export_dir=context.export_dir,
        include_hostname=context.include_hostname,
    )
