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
  drips its answer, gets only the time left: ``_otlp_deadline``).
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
import email.utils
import gzip
import json
import random
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import urllib3
from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

from ._contract import ExporterContext, ExportRecord
from ._otlp_deadline import DeadlineHTTPConnection, DeadlineHTTPSConnection, deadline
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

RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
MAX_REQUEST_BYTES = 4 * 1024 * 1024
MAX_BUFFER_BYTES = 16 * 1024 * 1024
RECEIPT_FILE = "otlp_export.jsonl"
"""One JSON line per ``close()`` in ``export_dir``: what was delivered, where, by which instance."""
SCOPE_NAME = "{{ cookiecutter.package_name }}"
_CONTENT_TYPE = "application/x-protobuf"


class OtlpExportError(RuntimeError):
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
        self._pool: urllib3.HTTPConnectionPool | None = None
        self._path = "/"
        self._headers: dict[str, str] = {}
        self._encoder = RecordEncoder(include_hostname=include_hostname)
        self._envelope = (b"", b"")
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._pending_streams: Counter[str] = Counter()
        self._delivered: Counter[str] = Counter()
        self._requests = 0
        self._random = random.Random()  # noqa: S311 - jitter, not cryptography
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
        url = urllib3.util.parse_url(settings.endpoint)
        self._path = url.request_uri
        self._headers = {
            "Content-Type": _CONTENT_TYPE,
            "User-Agent": f"{SCOPE_NAME}/{version or '0'} (urllib3)",
            **settings.headers,
        }
        if settings.gzip:
            self._headers["Content-Encoding"] = "gzip"
        tls = settings.tls if url.scheme == "https" else {}
        self._pool = urllib3.connection_from_url(
            settings.endpoint, maxsize=1, block=False, retries=False, **tls
        )
        https = url.scheme == "https"
        self._pool.ConnectionCls = DeadlineHTTPSConnection if https else DeadlineHTTPConnection
        try:
            self._post(self._request([]), time.monotonic() + settings.timeout_s)
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
        until = time.monotonic() + self._settings().timeout_s
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
        """POST one request, retrying what is transient, all before ``until`` (monotonic)."""
        settings, pool = self._settings(), self._pool
        if pool is None:
            raise RuntimeError("the HTTP client is closed")
        data = gzip.compress(body, compresslevel=1, mtime=0) if settings.gzip else body
        endpoint = settings.endpoint
        attempt = 0
        last = "no attempt was made"
        while True:
            remaining = until - time.monotonic()
            if remaining <= 0:
                raise OtlpExportError(
                    f"the collector at {endpoint} did not take the records within the "
                    f"{settings.timeout_s:g} s deadline (OTEL_EXPORTER_OTLP_TIMEOUT); "
                    f"last: {last}"
                )
            retry_after = 0.0
            try:
                with deadline(until):  # every socket wait, not only each one, ends by then
                    response = pool.urlopen(
                        "POST",
                        self._path,
                        body=data,
                        headers=self._headers,
                        retries=False,
                        redirect=False,
                        assert_same_host=False,
                        timeout=urllib3.Timeout(connect=remaining, read=remaining),
                    )
            except urllib3.exceptions.SSLError as exc:
                raise OtlpExportError(f"TLS with {endpoint} failed: {exc}") from exc
            except urllib3.exceptions.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                self._requests += 1
                status = response.status
                if 200 <= status < 300:
                    _check_success(endpoint, response.data)
                    return
                message = _collector_message(response)
                last = f"{status} {response.reason or ''}: {message}".strip()
                if status not in RETRYABLE_STATUSES:
                    raise OtlpExportError(f"the collector at {endpoint} answered {last}")
                retry_after = _retry_after(response.headers.get("Retry-After"))
            wait = max(self._backoff(attempt), retry_after)
            if time.monotonic() + wait > until:
                raise OtlpExportError(
                    f"the collector at {endpoint} did not take the records: {last}; retrying "
                    f"in {wait:.2f} s would pass the {settings.timeout_s:g} s deadline "
                    "(OTEL_EXPORTER_OTLP_TIMEOUT)"
                )
            time.sleep(wait)
            attempt += 1

    def _backoff(self, attempt: int) -> float:
        first, cap = self.backoff_s
        return min(cap, first * 2.0**attempt) * self._random.uniform(0.5, 1.5)

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
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def _settings(self) -> OtlpSettings:
        if self.settings is None:
            raise RuntimeError("the settings were not read; call open() first")
        return self.settings

    def _write_receipt(self, dropped_batches: int) -> None:
        line = {
            "closed_unix_ns": time.time_ns(),
            "endpoint": self._settings().endpoint,
            "service_instance_id": self.instance_id,
            "delivered_records": dict(self._delivered),
            "requests": self._requests,
            "dropped_batches": dropped_batches,
        }
        self.export_dir.mkdir(parents=True, exist_ok=True)
        with (self.export_dir / RECEIPT_FILE).open("a", encoding="utf-8") as file:
            file.write(json.dumps(line, sort_keys=True) + "\n")


def _version() -> str:
    with contextlib.suppress(metadata.PackageNotFoundError):
        return metadata.version("{{ cookiecutter.project_slug }}")
    return ""


def _check_success(endpoint: str, body: bytes) -> None:
    """A 2xx must carry an ExportLogsServiceResponse with nothing rejected."""
    try:
        answer = logs_service_pb2.ExportLogsServiceResponse.FromString(body)
    except DecodeError as exc:
        raise OtlpExportError(
            f"the collector at {endpoint} answered 2xx with a body that is not an "
            f"ExportLogsServiceResponse ({exc}): {body[:200]!r}"
        ) from None
    rejected = answer.partial_success.rejected_log_records
    if rejected:
        raise OtlpExportError(
            f"the collector at {endpoint} rejected {rejected} log record(s) "
            f"(partial_success): {answer.partial_success.error_message}"
        )


def _collector_message(response: urllib3.BaseHTTPResponse) -> str:
    """The message of an error answer: a google.rpc.Status, else the body as text."""
    body = response.data or b""
    if (response.headers.get("Content-Type") or "").startswith(_CONTENT_TYPE):
        with contextlib.suppress(DecodeError):
            return str(status_pb2.Status.FromString(body).message)
    return body.decode("utf-8", "replace").strip()[:500]


def _retry_after(value: str | None) -> float:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date); 0 if none."""
    if not value:
        return 0.0
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return 0.0
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, float((when - datetime.now(timezone.utc)).total_seconds()))


def make_exporter(context: ExporterContext) -> {{ cookiecutter.exporter_class }}:
    """The factory TraceML calls as ``factory(context)``: copies the settings, no I/O."""
    return {{ cookiecutter.exporter_class }}(
        read_environment(),
        session_root=context.session_root,
        export_dir=context.export_dir,
        include_hostname=context.include_hostname,
    )
