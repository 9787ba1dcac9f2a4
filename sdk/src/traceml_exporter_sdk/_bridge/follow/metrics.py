"""The follower's own ``/metrics`` (Prometheus text, through ``prometheus_client``) and
``/healthz``, on 127.0.0.1 unless told otherwise.

A custom collector reads each run's status when scraped, so nothing is counted twice,
a finished run keeps its last figures, and a hung exporter call shows its age (the
follower's own threads need not run for it). Every series has a ``run`` label (the run
folder's name), but those of deleted runs, which leave: their count and rows lost stay
in two series of the service's own. ``/healthz`` answers 503 while a run's sink is down
or an exporter call is stuck, and 200 ``waiting`` while no run is followed yet.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from .loss import REASONS
from .status import TROUBLED

__all__ = ["CONNECTION_SECONDS", "MAX_CONNECTIONS", "MetricsServer", "serve_metrics"]

Statuses = Callable[[], Iterable[dict[str, Any]]]
Totals = Callable[[], dict[str, Any]]
PREFIX = "traceml_exporter_follow"
STATES = ("waiting", "following", "sink-down", "stuck", "done", "failed", "deleted")


def _families(statuses: Statuses, totals: Totals | None) -> Iterator[Any]:
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
    stale = CounterMetricFamily(
        f"{PREFIX}_stale_warnings",
        "Earlier finalization_warning.json files a complete end could not remove.",
        labels=["run"],
    )
    call = gauge(
        "exporter_call_seconds",
        "How long the exporter call in progress has run (0: none); a hung sink grows it.",
    )
    ended = GaugeMetricFamily(
        f"{PREFIX}_run_end", "1, once the run is over, for how it ended (complete, idle, ...).",
        labels=["run", "end"],
    )  # fmt: skip
    lost = CounterMetricFamily(
        f"{PREFIX}_rows_lost",
        f"Rows not exported, by reason ({', '.join(REASONS)}).",
        labels=["run", "reason"],
    )
    for status in statuses():
        run = status["run"].rsplit("/", 1)[-1]
        lag_rows.add_metric([run], status["lag_rows"])
        lag_seconds.add_metric([run], status["lag_seconds"])
        sink_down.add_metric([run], 1.0 if status["state"] == "sink-down" else 0.0)
        for name in STATES:
            state.add_metric([run, name], 1.0 if status["state"] == name else 0.0)
        if status.get("end"):
            ended.add_metric([run, status["end"]], 1.0)
        running = status.get("call")
        call.add_metric([run], running["seconds"] if running else 0.0)
        for reason, rows in sorted(status.get("lost", {}).items()):
            lost.add_metric([run, reason], rows)
        for stream, count in sorted(status["exported"].items()):
            exported.add_metric([run, stream], count)
        failures.add_metric([run], status["exporter_failures"])
        pruned.add_metric([run], status["rows_pruned"])
        resent.add_metric([run], status["resent_records"])
        outages.add_metric([run], status["outages_total"])
        stale.add_metric([run], status.get("stale_warnings", 0))
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
        stale,
        call,
        ended,
        lost,
    )
    if totals is not None:
        figures = totals()
        deleted = CounterMetricFamily(
            f"{PREFIX}_runs_deleted", "Run folders deleted (their series are gone)."
        )
        deleted.add_metric([], figures["runs_deleted"])
        deleted_lost = CounterMetricFamily(
            f"{PREFIX}_deleted_rows_lost", "Rows of deleted runs not exported, by reason.",
            labels=["reason"],
        )  # fmt: skip
        for reason, rows in sorted(figures["deleted_lost"].items()):
            deleted_lost.add_metric([reason], rows)
        yield from (deleted, deleted_lost)


class _Collector:
    def __init__(self, statuses: Statuses, totals: Totals | None) -> None:
        self._statuses = statuses
        self._totals = totals

    def collect(self) -> Iterator[Any]:
        return _families(self._statuses, self._totals)


MAX_CONNECTIONS = 32
"""Connections served at once (a thread each); one more is closed at once."""
CONNECTION_SECONDS = 10.0
"""The longest a connection is kept, however slowly it sends (a scrape takes milliseconds)."""


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    """One thread a connection, at most ``max_connections`` at once, each closed after
    ``connection_seconds``: a client that connects and says nothing (or drips a byte at a
    time) holds up no scrape for long, and many of them cost a bounded number of threads."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 64
    max_connections = MAX_CONNECTIONS
    connection_seconds = CONNECTION_SECONDS

    def server_activate(self) -> None:
        super().server_activate()
        self._open: dict[Any, float] = {}
        self._open_lock = threading.Lock()

    def verify_request(self, request: Any, client_address: Any) -> bool:
        with self._open_lock:
            if len(self._open) >= self.max_connections:
                return False  # closed unread: every slot is taken
            self._open[request] = time.monotonic() + self.connection_seconds
        return True

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.pop(request, None)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away or timed out: nothing to say (the default prints a
        traceback on stderr, the progress lines' place)."""

    def service_actions(self) -> None:
        """Between accepts (every ``poll_interval``): end the connections kept too long;
        their handler's read then ends and its thread with it."""
        now = time.monotonic()
        with self._open_lock:
            late = [request for request, deadline in self._open.items() if deadline <= now]
        for request in late:
            with contextlib.suppress(OSError):
                request.shutdown(socket.SHUT_RDWR)


def _health(statuses: Statuses) -> tuple[str, bytes]:
    """503 naming the runs whose sink is down or stuck; else 200, ``waiting`` while no run
    is followed yet (a follower waiting for its run is alive: liveness holds)."""
    runs = list(statuses())
    troubled = [
        f"{s['run'].rsplit('/', 1)[-1]}: {s['state']}" for s in runs if s["state"] in TROUBLED
    ]
    if troubled:
        return "503 Service Unavailable", ("\n".join(troubled) + "\n").encode()
    if all(s["state"] == "waiting" for s in runs):
        return "200 OK", b"waiting\n"
    return "200 OK", b"ok\n"


class _QuietHandler(WSGIRequestHandler):
    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(getattr(self.server, "connection_seconds", CONNECTION_SECONDS))

    def log_message(self, format: str, *args: Any) -> None:
        pass


class MetricsServer:
    """The HTTP server on its own daemon thread; ``close`` stops it."""

    def __init__(
        self,
        host: str,
        port: int,
        statuses: Statuses,
        totals: Totals | None,
        *,
        max_connections: int = MAX_CONNECTIONS,
        connection_seconds: float = CONNECTION_SECONDS,
    ) -> None:
        from prometheus_client import CollectorRegistry, make_wsgi_app

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(statuses, totals))
        metrics = make_wsgi_app(registry)

        def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            if environ.get("PATH_INFO") == "/healthz":
                code, body = _health(statuses)
                start_response(code, [("Content-Type", "text/plain")])
                return [body]
            if environ.get("PATH_INFO") in ("/metrics", "/"):
                return metrics(environ, start_response)  # type: ignore[no-any-return]
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"/metrics or /healthz\n"]

        self._server = make_server(
            host, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler
        )
        self._server.max_connections = max_connections
        self._server.connection_seconds = connection_seconds
        self.port = int(self._server.server_port)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.2,), name="follow-metrics", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def serve_metrics(
    host: str, port: int, statuses: Statuses, totals: Totals | None = None
) -> MetricsServer:
    """Serve ``/metrics`` and ``/healthz`` on ``host:port`` (``totals``: the service's
    own figures, ``LogsDirectory.totals``).

    Raises:
        ImportError: prometheus_client is not installed.
        OSError: the address cannot be bound.
    """
    return MetricsServer(host, port, statuses, totals)
