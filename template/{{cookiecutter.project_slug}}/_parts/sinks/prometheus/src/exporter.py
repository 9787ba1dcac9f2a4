"""ExampleExporter: export records as Prometheus series, over remote write 1.0.

Select it in TraceML with ``traceml_exporter_example.exporter:make_exporter``.

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
* Permanent (``_contract`` rule 8: ``traceml-exporter follow`` ends at once rather
  than wait): a bad setting, a 4xx other than 408 and 429 (a refused token, a refused
  old or out-of-order sample), a ``CardinalityError``. 429, 5xx, connection errors and
  the deadline are transient.
* Every series carries ``session_root``, the run's key (rule 9: its folder, absolute
  and resolved), beside ``run``, its short name.
* No secret (token, password, header values, URL credentials) is ever written into a
  message or the receipt: they are redacted.

The rules of TraceML's export contract this class keeps: the factory only copies
settings; the HTTP client (urllib3, one keep-alive connection, no thread) is made in
``open()``, which also sends an empty request, so a wrong URL or credential fails
there; records are told apart by ``record.STREAM``; a failing method closes the
client before it raises.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from operator import attrgetter

from ._contract import ExporterContext, ExportRecord, run_key
from ._http import Answer, HttpError, HttpTransport
from ._http_exporter import HttpExporter
from ._prometheus_series import FAMILIES, MAX_SERIES, Aggregator, chunks
from ._prometheus_settings import PrometheusSettings, parse_settings, read_environment
from ._prometheus_wire import (
    PROTOCOL_HEADERS,
    compress,
    encode_metadata,
    encode_request,
    label_text,
)

__all__ = [  # noqa: RUF022 - the class name is a template variable, its place varies
    "JOB",
    "RECEIPT_FILE",
    "RETRYABLE_STATUSES",
    "PrometheusWriteError",
    "ExampleExporter",
    "make_exporter",
]

JOB = "traceml"
"""The ``job`` label of every series."""
RECEIPT_FILE = "prometheus_export.jsonl"
"""JSON lines in ``export_dir``: one per ``open()`` (the instance's ``instance`` label, so
the series of an instance that failed can still be found) and one per ``close()``."""
RETRYABLE_STATUSES = frozenset({429, *range(500, 600)})
"""Remote write: a receiver answers 5xx for what may succeed later, 4xx for what never will."""
MAX_SERIES_PER_REQUEST = 2000
_STREAM = attrgetter("STREAM")
_REFUSED_REPLAY = ("out of bounds", "out of order", "duplicate sample", "too old")


class PrometheusWriteError(HttpError):
    """The server did not take the samples (an error answer, or the deadline passed);
    ``permanent`` says whether waiting could change that."""


class ExampleExporter(
    HttpExporter[PrometheusSettings],
    receipt=(RECEIPT_FILE, "instance"),
):
    """Fold every record into series; write them to the remote-write URL the settings name."""

    max_series_per_request = MAX_SERIES_PER_REQUEST
    max_series = MAX_SERIES
    """Series kept at most; more raise (a label with unbounded values)."""
    run_label = ""
    bytes_sent = 0
    """Compressed request bytes the server took (2xx), for the receipt's reader and benchmarks."""
    _series: Aggregator | None = None
    _last_ms = 0
    _metadata = b""
    _samples = 0
    _pending: Counter[str]
    _pending_observed_ns: int

    def _parse(self, environment: Mapping[str, str]) -> PrometheusSettings:
        return parse_settings(environment)

    def _connect(self, settings: PrometheusSettings) -> HttpTransport:
        self.instance_id = uuid.uuid4().hex[:16]
        self.run_label = label_text(settings.run or self.session_root.name)
        base = {
            "job": JOB,
            "instance": self.instance_id,
            "run": self.run_label,
            "session_root": label_text(run_key(self.session_root)),
        }
        self._series = Aggregator(
            base, include_hostname=self.include_hostname, max_series=self.max_series
        )
        self._metadata = encode_metadata(FAMILIES)
        return HttpTransport(
            settings.endpoint,
            peer="the remote-write server",
            timeout_s=settings.timeout_s,
            timeout_variable="PROMETHEUS_REMOTE_WRITE_TIMEOUT",
            headers={
                **PROTOCOL_HEADERS,
                "User-Agent": "traceml_exporter_example (urllib3)",
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

    def _greet(self) -> None:
        self._client().post(compress(b""))

    def _add(self, records: Sequence[ExportRecord]) -> None:
        """Fold the records into their series; nothing is sent before ``flush``."""
        self._aggregator().add(records)
        self._pending.update(map(_STREAM, records))
        if records and self._settings().sample_time == "observed":
            newest = max(getattr(r, "observed_timestamp_unix_ns", 0) for r in records)
            self._pending_observed_ns = max(self._pending_observed_ns, newest)

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
        self._drop()

    def _drop(self) -> None:
        self._pending = Counter()
        self._pending_observed_ns = 0

    def _closing_facts(self) -> dict[str, object]:
        return {"series": self._aggregator().series, "samples": self._samples}

    def _aggregator(self) -> Aggregator:
        return self._held(self._series)


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


def make_exporter(context: ExporterContext) -> ExampleExporter:
    """The factory TraceML calls as ``factory(context)``: copies the settings, no I/O."""
    return ExampleExporter.for_context(context, read_environment())
