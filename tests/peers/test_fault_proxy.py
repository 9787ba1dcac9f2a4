"""The SDK's fault proxies do what the sinks' fault tests count on, seen from a real client.

Upstream is a real server: the standard library's HTTP server for :class:`FaultProxy`,
a line echo server for :class:`TcpFaultProxy`. Every fault is read back as a client
sees it on the socket: the status and ``Retry-After``, an answer that never comes, a
refused connection, a connection cut after the server got the message.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from typing import ClassVar

import pytest
from traceml_exporter_sdk.testing.fault_proxy import FaultProxy, TcpFaultProxy, unused_port


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")  # the proxy re-frames it
        self.end_headers()
        self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body) + 6, b"hello " + body))

    def log_message(self, *args: object) -> None:
        del args


class _Echo(socketserver.StreamRequestHandler):
    received: ClassVar[list[bytes]] = []

    def handle(self) -> None:
        for line in self.rfile:
            _Echo.received.append(line)
            self.wfile.write(b"ok " + line)


def _serving(server: socketserver.BaseServer) -> Iterator[int]:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield int(server.server_address[1])  # type: ignore[index]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def http_port() -> Iterator[int]:
    yield from _serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello))


@pytest.fixture
def echo_port() -> Iterator[int]:
    _Echo.received = []
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    yield from _serving(server)


def _post(proxy: FaultProxy, body: bytes, timeout: float = 5) -> tuple[int, str | None, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=timeout)
    try:
        conn.request("POST", "/", body=body)
        answer = conn.getresponse()
        return answer.status, answer.getheader("Retry-After"), answer.read()
    finally:
        conn.close()


def test_http_faults_then_forwarding(http_port: int) -> None:
    with FaultProxy(http_port) as proxy:
        assert _post(proxy, b"a") == (200, None, b"hello a")
        proxy.fail(2, status=503, retry_after="1")
        assert _post(proxy, b"b")[:2] == (503, "1")
        assert _post(proxy, b"c")[:2] == (503, "1")
        assert _post(proxy, b"d") == (200, None, b"hello d")
        assert proxy.statuses == [200, 503, 503, 200]
        assert (proxy.seen, proxy.forwarded) == (4, 2)


def test_http_tarpit_never_answers_and_a_stopped_proxy_refuses(http_port: int) -> None:
    with FaultProxy(http_port) as proxy:
        proxy.tarpit()
        with pytest.raises(TimeoutError):
            _post(proxy, b"x", timeout=0.5)
        proxy.tarpit(False)
        proxy.stop_listening()
        with pytest.raises(ConnectionRefusedError):
            _post(proxy, b"y")
        proxy.listen()
        assert _post(proxy, b"z") == (200, None, b"hello z")


def test_tcp_forwards_then_stalls_every_connection(echo_port: int) -> None:
    with TcpFaultProxy(echo_port) as proxy:
        a = socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
        a.sendall(b"one\n")
        assert a.recv(100) == b"ok one\n"
        proxy.stall(hold_s=5)
        a.sendall(b"two\n")
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as b:
            b.sendall(b"three\n")  # accepted by the kernel, never forwarded
            for sock in (a, b):
                sock.settimeout(0.3)
                with pytest.raises(TimeoutError):
                    sock.recv(100)
        assert _Echo.received == [b"one\n"]
        started = time.monotonic()
    with a, contextlib.suppress(ConnectionResetError):  # RST: "two" was never read
        a.settimeout(2)
        assert a.recv(100) == b""  # close() let go of the held connection, long before hold_s
    assert time.monotonic() - started < 1.5


def test_tcp_loses_the_answer_to_the_marked_message_only(echo_port: int) -> None:
    with TcpFaultProxy(echo_port) as proxy:
        proxy.lose_answer_after(b"COMMIT")
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as conn:
            conn.sendall(b"BEGIN\n")
            assert conn.recv(100) == b"ok BEGIN\n"
            conn.sendall(b"COMMIT\n")
            assert conn.recv(100) == b""  # cut: the client never hears the answer
        deadline = time.monotonic() + 2
        while proxy.dropped == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proxy.dropped == 1
        assert _Echo.received == [b"BEGIN\n", b"COMMIT\n"]  # the server got it
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as again:
            again.sendall(b"COMMIT\n")
            assert again.recv(100) == b"ok COMMIT\n"  # disarmed after one


def test_unused_port_refuses_connections() -> None:
    port = unused_port()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
