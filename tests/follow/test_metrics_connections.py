"""``/metrics`` and ``/healthz`` of ``follow`` against clients that connect and say
nothing, or drip a byte at a time (issue 41): a scrape is answered beside them, their
threads are bounded, and each is closed after the server's connection deadline."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from traceml_exporter_sdk._bridge.follow.metrics import MetricsServer
from waiting import wait_for

STATUS: dict[str, Any] = {
    "run": "/logs/run1", "state": "following", "lag_rows": 0, "lag_seconds": 0.0,
    "call": None, "lost": {}, "exported": {"step_time": 3}, "exporter_failures": 0,
    "rows_pruned": 0, "resent_records": 0, "outages_total": 0,
}  # fmt: skip


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    metrics = MetricsServer(
        "127.0.0.1", 0, lambda: [STATUS], None, max_connections=8, connection_seconds=2.0
    )
    yield metrics
    metrics.close()


def scrape(server: MetricsServer, path: str = "/metrics", timeout: float = 1.0) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=timeout) as got:
        return str(got.read().decode())


@contextlib.contextmanager
def idle(server: MetricsServer, count: int, drip: bool = False) -> Iterator[list[socket.socket]]:
    """``count`` connections that send nothing (or, ``drip``, a byte now and then)."""
    sockets = [
        socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(count)
    ]
    if drip:
        for s in sockets:
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
    try:
        yield sockets
    finally:
        for s in sockets:
            s.close()


def closed_by_server(s: socket.socket, drip: bool) -> bool:
    try:
        if drip:
            s.sendall(b"X")
        s.settimeout(0.01)
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_an_idle_connection_holds_up_no_scrape(server: MetricsServer) -> None:
    with idle(server, 1):
        started = time.monotonic()
        assert 'run="run1"' in scrape(server)
        assert scrape(server, "/healthz") == "ok\n"
        assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("drip", [False, True], ids=["silent", "dripping"])
def test_connections_past_the_bound_cost_no_thread_and_each_is_closed_in_time(
    server: MetricsServer, drip: bool
) -> None:
    before = threading.active_count()
    with idle(server, 40, drip) as sockets:
        time.sleep(0.5)
        assert threading.active_count() - before <= 8, "a thread per connection, unbounded"
        started = time.monotonic()
        wait_for(lambda: all(closed_by_server(s, drip) for s in sockets), timeout=10)
        assert time.monotonic() - started < 2.0 + 1.5, "kept past the connection deadline"
    assert 'run="run1"' in scrape(server)
    wait_for(lambda: threading.active_count() <= before, timeout=5)
