"""{{ cookiecutter.exporter_class }}: export records as Prometheus series, over remote write 1.0.

Select it in TraceML with ``{{ cookiecutter.package_name }}.exporter:make_exporter``.

A record is an event, not a sample: the exporter folds records into cumulative
counters, histograms and last-value gauges per series (``_prometheus_series``;
the mapping is in the README) and writes one sample per series per flush, as a
snappy-compressed protobuf ``WriteRequest`` (``_prometheus_wire``) to any
remote-write receiver: Prometheus (``--web.enable-remote-write-receiver``),
VictoriaMetrics, Mimir, Thanos. Settings are ``PROMETHEUS_REMOTE_WRITE_*``
variables (``_prometheus_settings``).

Delivery:

* ``write`` only folds records in (memory is bounded by the number of series, not
  of records); ``flush`` and ``close`` send every series, and the records count as
  delivered only after the server's 2xx to every request of the flush.
* A request carries at most ``max_series_per_request`` series; within one, each
  series has one sample, and a flush's timestamp is always later than the last.
* Retried: 429, 5xx and connection errors, with backoff, waiting at least
  ``Retry-After`` and never past the call's deadline (``PROMETHEUS_REMOTE_WRITE_TIMEOUT``,
  default 5 s); any other answer is raised at once with the server's message (so is
  a refused replay: Prometheus keeps no samples older than about an hour or out of
  order, and one refused sample refuses the whole request). The HTTP client,
  retries and deadlines are the HTTP sinks' shared transport (``_http``).
* Each ``open()`` starts new series (a new ``instance`` label), so a reopened
  exporter never makes a counter go backwards.
* No secret (token, password, header values, URL credentials) is ever written into a
  message or the receipt: they are redacted.

The rules of TraceML's export contract this class keeps: the factory only copies
settings; the HTTP client (urllib3, one keep-alive connection, no thread) is made in
``open()``, which also sends an empty request, so a wrong URL or credential fails
there; records are told apart by ``record.STREAM``; a failing method closes the
client before it raises.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from operator import attrgetter
from pathlib import Path

from ._contract import ExporterContext, ExportRecord, releasing
from ._http import Answer, HttpError, HttpTransport
from ._prometheus_series import FAMILIES, MAX_SERIES, Aggregator, chunks
from ._prometheus_settings import PrometheusSettings, parse_settings, read_environment
from ._prometheus_wire import PROTOCOL_HEADERS, compress, encode_metadata, encode_request

__all__ = [  # noqa: RUF022 - the class name is a template variable, its place varies
    "JOB",
    "RECEIPT_FILE",
    "RETRYABLE_STATUSES",
    "PrometheusWriteError",
    "{{ cookiecutter.exporter_class }}",
    "make_exporter",
]

JOB = "traceml"
"""The ``job`` label of every series."""
RECEIPT_FILE = "prometheus_export.jsonl"
"""One JSON line per ``close()`` in ``export_dir``: what was delivered, where, by which instance."""
RETRYABLE_STATUSES = frozenset({429, *range(500, 600)})
"""Remote write: a receiver answers 5xx for what may succeed later, 4xx for what never will."""
MAX_SERIES_PER_REQUEST = 2000
_STREAM = attrgetter("STREAM")
_REFUSED_REPLAY = ("out of bounds", "out of order", "duplicate sample", "too old")


class PrometheusWriteError(HttpError):
    """The server did not take the samples (a permanent answer, or the deadline passed)."""


class {{ cookiecutter.exporter_class }}:
    """Fold every record into series; write them to the remote-write URL the settings name."""

    def __init__(  # noqa: PLR0913 - settings, three context facts, three tunables
        self,
        environment: Mapping[str, str],
        *,
        session_root: Path,
        export_dir: Path,
        include_hostname: bool = False,
        max_series_per_request: int = MAX_SERIES_PER_REQUEST,
        max_series: int = MAX_SERIES,
        backoff_s: tuple[float, float] = (0.2, 2.0),
    ) -> None:
        # Settings only: the client is made in open(), on the export worker's thread.
        self.environment = dict(environment)
        self.session_root = session_root
        self.export_dir = export_dir
        self.include_hostname = include_hostname
        self.max_series_per_request = max_series_per_request
        self.max_series = max_series
        self.backoff_s = backoff_s
        self.settings: PrometheusSettings | None = None
        self.instance_id = ""
        self.run_label = ""
        self._transport: HttpTransport | None = None
        self._series: Aggregator | None = None
        self._pending: Counter[str] = Counter()
        self._pending_observed_ns = 0
        self._delivered: Counter[str] = Counter()
        self._last_ms = 0
        self._metadata = b""
        self._samples = 0
        self.bytes_sent = 0
        """Compressed request bytes the server took (2xx), for the receipt's reader and benchmarks."""
        """Compressed request bytes sent (2xx answers only)."""
        self._state = "new"

    # -- the four methods ------------------------------------------------------------

    def open(self) -> None:
        """Validate the settings, make the HTTP client and send an empty request."""
        if self._state != "new":
            raise RuntimeError(f"open() called on a {self._state} exporter")
        self._state = "failed"  # until the server answered
        settings = self.settings = parse_settings(self.environment)
        self.instance_id = uuid.uuid4().hex[:16]
        self.run_label = settings.run or self.session_root.name
        base = {"job": JOB, "instance": self.instance_id, "run": self.run_label}
        self._series = Aggregator(
            base, include_hostname=self.include_hostname, max_series=self.max_series
        )
        self._metadata = encode_metadata(FAMILIES)
        self._transport = HttpTransport(
            settings.endpoint,
            peer="the remote-write server",
            timeout_s=settings.timeout_s,
            timeout_variable="PROMETHEUS_REMOTE_WRITE_TIMEOUT",
            headers={
                **PROTOCOL_HEADERS,
                "User-Agent": "{{ cookiecutter.package_name }} (urllib3)",
            },
            user_headers=settings.headers,
            headers_variable="PROMETHEUS_REMOTE_WRITE_HEADERS",
            secrets=settings.secrets,
            retryable=RETRYABLE_STATUSES,
            backoff_s=self.backoff_s,
            tls=settings.tls,
            error=PrometheusWriteError,
            describe=_server_message,
        )
        with releasing(self._abort):
            self._transport.post(compress(b""))
        self._state = "open"

    def write(self, records: Sequence[ExportRecord]) -> None:
        """Fold the records into their series; nothing is sent before ``flush``."""
        self._require("write")
        with releasing(self._abort):
            self._aggregator().add(records)
            self._pending.update(map(_STREAM, records))
            if records and self._settings().sample_time == "observed":
                newest = max(getattr(r, "observed_timestamp_unix_ns", 0) for r in records)
                self._pending_observed_ns = max(self._pending_observed_ns, newest)

    def flush(self) -> None:
        """Send every series; return once the server answered 2xx to all of it."""
        self._require("flush")
        with releasing(self._abort):
            self._deliver()

    def close(self, *, dropped_batches: int = 0) -> None:
        """Send what is new, add a line to ``prometheus_export.jsonl`` and close the client.

        ``dropped_batches`` (batches TraceML's worker never handed to ``write``)
        goes into that line.
        """
        self._require("close")
        with releasing(self._abort):
            self._deliver()
            self._write_receipt(dropped_batches)
        self._abort()
        self._state = "closed"

    # -- delivery --------------------------------------------------------------------

    def _timestamp_ms(self) -> int:
        """The flush's sample time: later than the last, so no series repeats a timestamp."""
        if self._settings().sample_time == "observed" and self._pending_observed_ns:
            wanted = self._pending_observed_ns // 1_000_000
        else:
            wanted = time.time_ns() // 1_000_000
        return max(wanted, self._last_ms + 1)

    def _deliver(self) -> None:
        if not self._pending:
            return
        transport = self._client()
        series = self._aggregator().snapshot()
        stamp = self._timestamp_ms()
        until = transport.until()
        for chunk in chunks(series, self.max_series_per_request):
            body = compress(encode_request(chunk, stamp, self._metadata))
            transport.post(body, until=until)
            self._metadata = b""  # the families are described once per exporter
            self._samples += len(chunk)
            self.bytes_sent += len(body)
        self._last_ms = stamp
        self._delivered.update(self._pending)
        self._pending = Counter()
        self._pending_observed_ns = 0

    # -- state -----------------------------------------------------------------------

    def _require(self, method: str) -> None:
        if self._state != "open":
            hint = "; call open() first" if self._state == "new" else ""
            raise RuntimeError(f"{method}() called on a {self._state} exporter{hint}")

    def _abort(self) -> None:
        """Drop what is pending and close the client (TraceML never calls again after a failure)."""
        self._state = "failed"
        self._pending = Counter()
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()

    def _client(self) -> HttpTransport:
        if self._transport is None:
            raise RuntimeError("the HTTP client is closed")
        return self._transport

    def _aggregator(self) -> Aggregator:
        if self._series is None:
            raise RuntimeError("the exporter is not open")
        return self._series

    def _settings(self) -> PrometheusSettings:
        if self.settings is None:
            raise RuntimeError("the settings were not read; call open() first")
        return self.settings

    def _write_receipt(self, dropped_batches: int) -> None:
        line = {
            "closed_unix_ns": time.time_ns(),
            "endpoint": self._settings().endpoint.url,
            "instance": self.instance_id,
            "delivered_records": dict(self._delivered),
            "series": self._aggregator().series,
            "samples": self._samples,
            "requests": self._client().requests,
            "dropped_batches": dropped_batches,
        }
        self.export_dir.mkdir(parents=True, exist_ok=True)
        with (self.export_dir / RECEIPT_FILE).open("a", encoding="utf-8") as file:
            file.write(json.dumps(line, sort_keys=True) + "\n")


def _server_message(answer: Answer) -> str:
    """The server's text, and what a refused old or out-of-order sample needs."""
    text = answer.body.decode("utf-8", "replace").strip()
    message = "".join(c if c.isprintable() else " " for c in text)[:500]
    if any(cause in message.lower() for cause in _REFUSED_REPLAY):
        message += (
            " (the server refused samples older than it accepts or out of order: Prometheus "
            "keeps no sample older than about an hour before its newest, nor out of order, "
            "unless storage.tsdb.out_of_order_time_window is set; VictoriaMetrics takes them. "
            "Replaying an old run with PROMETHEUS_REMOTE_WRITE_SAMPLE_TIME=observed needs one "
            "of those; the default, flush, stamps samples with the time they are sent)"
        )
    return message


def make_exporter(context: ExporterContext) -> {{ cookiecutter.exporter_class }}:
    """The factory TraceML calls as ``factory(context)``: copies the settings, no I/O."""
    return {{ cookiecutter.exporter_class }}(
        read_environment(),
        session_root=context.session_root,
        export_dir=context.export_dir,
        include_hostname=context.include_hostname,
    )
