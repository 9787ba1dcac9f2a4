"""The follower's own ``/metrics`` (Prometheus text, through ``prometheus_client``) and
``/healthz``, on 127.0.0.1 unless told otherwise.

A custom collector reads each run's status when scraped, so nothing is counted twice
and a finished run keeps its last figures. Every series has a ``run`` label (the run
folder's name).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

__all__ = ["MetricsServer", "serve_metrics"]

Statuses = Callable[[], Iterable[dict[str, Any]]]
PREFIX = "traceml_exporter_follow"


def _families(statuses: Statuses) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    def gauge(name: str, help_text: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(f"{PREFIX}_{name}", help_text, labels=["run"])

    lag_rows = gauge("lag_rows", "Rows in the run's database not yet acknowledged by the sink.")
    lag_seconds = gauge("lag_seconds", "How long the oldest unacknowledged row has waited.")
    sink_down = gauge("sink_down", "1 while the exporter is failing and being retried.")
    state = GaugeMetricFamily(
        f"{PREFIX}_state", "1 for the run's current state.", labels=["run", "state"]
    )
    exported = CounterMetricFamily(
        f"{PREFIX}_records_exported",
        "Records the sink acknowledged (a flush returned).",
        labels=["run", "stream"],
    )
    failures = CounterMetricFamily(
        f"{PREFIX}_exporter_failures", "Exporter failures (each one retried unless permanent).",
        labels=["run"],
    )  # fmt: skip
    pruned = CounterMetricFamily(
        f"{PREFIX}_rows_pruned", "Rows TraceML's retention deleted before they were read.",
        labels=["run"],
    )  # fmt: skip
    resent = CounterMetricFamily(
        f"{PREFIX}_records_resent", "Records sent again after a failure (never acknowledged).",
        labels=["run"],
    )  # fmt: skip
    outages = CounterMetricFamily(f"{PREFIX}_outages", "Sink outages ridden out.", labels=["run"])
    for status in statuses():
        run = status["run"].rsplit("/", 1)[-1]
        lag_rows.add_metric([run], status["lag_rows"])
        lag_seconds.add_metric([run], status["lag_seconds"])
        sink_down.add_metric([run], 1.0 if status["state"] == "sink-down" else 0.0)
        state.add_metric([run, status["state"]], 1.0)
        for stream, count in sorted(status["exported"].items()):
            exported.add_metric([run, stream], count)
        failures.add_metric([run], status["exporter_failures"])
        pruned.add_metric([run], status["rows_pruned"])
        resent.add_metric([run], status["resent_records"])
        outages.add_metric([run], status["outages_total"])
    yield from (
        lag_rows,
        lag_seconds,
        sink_down,
        state,
        exported,
        failures,
        pruned,
        resent,
        outages,
    )


class _Collector:
    def __init__(self, statuses: Statuses) -> None:
        self._statuses = statuses

    def collect(self) -> Iterator[Any]:
        return _families(self._statuses)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class MetricsServer:
    """The HTTP server on its own daemon thread; ``close`` stops it."""

    def __init__(self, host: str, port: int, statuses: Statuses) -> None:
        from prometheus_client import CollectorRegistry, make_wsgi_app

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(statuses))
        metrics = make_wsgi_app(registry)

        def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            if environ.get("PATH_INFO") == "/healthz":
                start_response("200 OK", [("Content-Type", "text/plain")])
                return [b"ok\n"]
            if environ.get("PATH_INFO") in ("/metrics", "/"):
                return metrics(environ, start_response)  # type: ignore[no-any-return]
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"/metrics or /healthz\n"]

        self._server = make_server(host, port, app, handler_class=_QuietHandler)
        self.port = int(self._server.server_port)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="follow-metrics", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def serve_metrics(host: str, port: int, statuses: Statuses) -> MetricsServer:
    """Serve ``/metrics`` and ``/healthz`` on ``host:port``.

    Raises:
        ImportError: prometheus_client is not installed.
        OSError: the address cannot be bound.
    """
    return MetricsServer(host, port, statuses)
