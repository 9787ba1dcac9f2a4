"""A fault proxy on 127.0.0.1 in front of a real server: the network faults sinks' tests drive.

:class:`FaultProxy` forwards each HTTP request to the server and, on request, answers
an error status (with ``Retry-After``) to the next requests, reads requests and never
answers (a tarpit), or closes its port and every connection (a stopped server) and
opens it again. Every sink's tests use this one proxy, so a fault means the same in
each. It starts threads of its own: it is a peer for tests, not part of an exporter.
"""

from __future__ import annotations

import contextlib
import http
import selectors
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

_P = TypeVar("_P", bound="_Proxy")

__all__ = ["FaultProxy", "TcpFaultProxy", "unused_port"]

_POLL_S = 0.2


def unused_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released): a server that
    is down, or the port to start one on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


class _Proxy:
    """The listening half every proxy shares: a port kept across :meth:`stop_listening` and
    :meth:`listen`, a thread per connection, and :meth:`close` ending them all."""

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._clients: set[socket.socket] = set()
        self.port = unused_port()  # kept across stop_listening/listen
        self.listen()

    def stop_listening(self) -> None:
        """Close the port and every connection, as a stopped server does."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):  # Linux: stops listening now, wakes accept()
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for client in list(self._clients):
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)

    def listen(self) -> None:
        """Open the port (again): connections are accepted and served."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        listener.settimeout(_POLL_S)
        self._listener = listener
        self._spawn(self._accept, listener)

    def close(self) -> None:
        """Stop everything: the tarpit lets go, the port closes, the threads end."""
        self._stop.set()
        self.stop_listening()
        for thread in list(self._threads):
            thread.join(timeout=5)

    def __enter__(self: _P) -> _P:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- serving -----------------------------------------------------------------------

    def _spawn(self, target: Callable[..., object], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _accept(self, listener: socket.socket) -> None:
        while not self._stop.is_set() and self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._spawn(self._held_open, client)

    def _held_open(self, client: socket.socket) -> None:
        self._clients.add(client)
        try:
            with client:
                self._serve(client)
        finally:
            self._clients.discard(client)

    def _serve(self, client: socket.socket) -> None:
        raise NotImplementedError


class FaultProxy(_Proxy):
    """An HTTP/1.1 proxy to ``127.0.0.1:upstream_port``, driven into faults by the tests.

    Faults apply in this order: the error answers :meth:`fail` asked for, then the
    :meth:`tarpit`, else the request is forwarded (on a new upstream connection, the
    answer re-framed with ``Content-Length``). ``statuses`` lists what each request got
    (0 for one held by the tarpit), ``seen`` counts requests read, ``forwarded`` those
    the server answered.
    """

    def __init__(self, upstream_port: int) -> None:
        self.statuses: list[int] = []
        self.seen = 0
        self.forwarded = 0
        self._fail = 0
        self._answer = b""
        self._tarpit = False
        super().__init__(upstream_port)

    @property
    def upstream_port(self) -> int:
        return self.upstream[1]

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: give it to the exporter instead of the server's."""
        return f"http://127.0.0.1:{self.port}"

    # -- faults ------------------------------------------------------------------------

    def fail(
        self,
        times: int,
        *,
        status: int = 503,
        retry_after: str | None = None,
        body: bytes = b"overloaded\n",
        content_type: str = "text/plain",
    ) -> None:
        """Answer ``status`` (with ``Retry-After`` when given) to the next ``times`` requests."""
        reason = http.HTTPStatus(status).phrase
        head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
        if retry_after is not None:
            head += f"Retry-After: {retry_after}\r\n"
        head += f"Content-Length: {len(body)}\r\n\r\n"
        with self._lock:
            self._fail, self._answer = times, head.encode("latin-1") + body

    def tarpit(self, hold: bool = True) -> None:
        """Read every later request and never answer it (until ``tarpit(False)`` or close)."""
        self._tarpit = hold

    def _serve(self, client: socket.socket) -> None:
        client.settimeout(_POLL_S)
        while not self._stop.is_set() and self._listener is not None:
            request = self._read_request(client)
            if request is None:
                break
            self.seen += 1
            with self._lock:
                failing = self._fail > 0
                self._fail -= failing
            if failing:
                self.statuses.append(int(self._answer.split(b" ", 2)[1]))
                with contextlib.suppress(OSError):  # the client's deadline may pass first
                    client.sendall(self._answer)
                continue
            if self._tarpit:
                while not self._stop.is_set() and self._tarpit:
                    time.sleep(0.05)
                self.statuses.append(0)
                break
            answer, status = self._forward(request)
            self.forwarded += 1
            self.statuses.append(status)
            with contextlib.suppress(OSError):
                client.sendall(answer)

    def _forward(self, request: bytes) -> tuple[bytes, int]:
        """Send ``request`` to the server on a new connection; its answer, re-framed."""
        head, _, body = request.partition(b"\r\n\r\n")
        lines = [line for line in head.split(b"\r\n") if not _named(line, b"connection")]
        with socket.create_connection(self.upstream, timeout=30) as upstream:
            upstream.sendall(b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n" + body)
            chunks = []
            while chunk := upstream.recv(65536):
                chunks.append(chunk)
        answer = b"".join(chunks)
        head, _, body = answer.partition(b"\r\n\r\n")
        if any(_named(line, b"transfer-encoding") and b"chunked" in line.lower()
               for line in head.split(b"\r\n")):  # fmt: skip
            body = _unchunk(body)
        names = (b"connection", b"transfer-encoding", b"content-length")
        kept = [line for line in head.split(b"\r\n") if not _named(line, *names)]
        kept.append(f"Content-Length: {len(body)}".encode())
        status = int(kept[0].split(b" ", 2)[1])
        return b"\r\n".join(kept) + b"\r\n\r\n" + body, status

    def _read_request(self, client: socket.socket) -> bytes | None:
        """One whole request (head and ``Content-Length`` body), or None once it closed."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self._recv(client)
            if not chunk:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if _named(line, b"content-length"):
                length = int(line.partition(b":")[2])
        while len(body) < length:
            chunk = self._recv(client)
            if not chunk:
                return None
            body += chunk
        return head + b"\r\n\r\n" + body

    def _recv(self, client: socket.socket) -> bytes:
        try:
            while not self._stop.is_set():
                with contextlib.suppress(TimeoutError):
                    return client.recv(65536)
        except OSError:
            return b""
        return b""


class TcpFaultProxy(_Proxy):
    """A byte-level TCP proxy to ``upstream_host:upstream_port``, driven into faults.

    :meth:`stall` stops forwarding, both ways, on every connection and every new one,
    which the kernel still accepts; ``hold_s`` later (or at :meth:`close`) it closes
    them all. :meth:`lose_answer_after` lets the next client message holding
    ``marker`` reach the server, then cuts that connection before the answer comes
    back; ``dropped`` counts the answers so lost.
    """

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.dropped = 0
        self._marker: bytes | None = None
        self._stalled_at: float | None = None
        self._hold_s = 0.0
        super().__init__(upstream_port, upstream_host)

    def stall(self, hold_s: float = 12.0) -> None:
        """Stop forwarding on every connection, for ``hold_s`` seconds at the most."""
        self._hold_s = hold_s
        self._stalled_at = time.monotonic()

    def lose_answer_after(self, marker: bytes) -> None:
        """Lose the server's answer to the next client message that holds ``marker``."""
        self._marker = marker

    def _held(self) -> bool:
        at = self._stalled_at
        return not self._stop.is_set() and at is not None and time.monotonic() - at < self._hold_s

    def _serve(self, client: socket.socket) -> None:
        if self._stalled_at is None:
            self._pump(client)
        while self._held():
            time.sleep(0.05)

    def _pump(self, client: socket.socket) -> None:
        with (
            socket.create_connection(self.upstream, timeout=10) as upstream,
            selectors.DefaultSelector() as selector,
        ):
            selector.register(client, selectors.EVENT_READ, upstream)
            selector.register(upstream, selectors.EVENT_READ, client)
            losing = False
            while not self._stop.is_set() and self._stalled_at is None:
                for key, _ in selector.select(timeout=0.05):
                    if self._stalled_at is not None:
                        break  # stalled while waiting: what came stays unread
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        data = source.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    if source is upstream and losing:
                        self.dropped += 1
                        return  # carried out by the server; the client never hears it
                    if source is client and self._marker is not None and self._marker in data:
                        self._marker, losing = None, True
                    key.data.sendall(data)


def _named(line: bytes, *names: bytes) -> bool:
    """Whether the header ``line`` is one of ``names`` (lower case)."""
    return line.partition(b":")[0].strip().lower() in names


def _unchunk(body: bytes) -> bytes:
    out = b""
    rest = body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        rest = rest[size + 2 :]
    return out
