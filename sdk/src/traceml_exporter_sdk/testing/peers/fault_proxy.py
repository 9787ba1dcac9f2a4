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
import socket
import threading
import time
from types import TracebackType

__all__ = ["FaultProxy"]

_POLL_S = 0.2


class FaultProxy:
    """An HTTP/1.1 proxy to ``127.0.0.1:upstream_port``, driven into faults by the tests.

    Faults apply in this order: the error answers :meth:`fail` asked for, then the
    :meth:`tarpit`, else the request is forwarded (on a new upstream connection, the
    answer re-framed with ``Content-Length``). ``statuses`` lists what each request got
    (0 for one held by the tarpit), ``seen`` counts requests read, ``forwarded`` those
    the server answered.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.statuses: list[int] = []
        self.seen = 0
        self.forwarded = 0
        self._fail = 0
        self._answer = b""
        self._tarpit = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._clients: set[socket.socket] = set()
        with socket.socket() as probe:  # a free port, kept across stop_listening/listen
            probe.bind(("127.0.0.1", 0))
            self.port: int = probe.getsockname()[1]
        self.listen()

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

    def stop_listening(self) -> None:
        """Close the port and every connection, as a stopped server does."""
        listener, self._listener = self._listener, None
        if listener is not None:
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

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- serving -----------------------------------------------------------------------

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
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
            self._spawn(self._serve, client)

    def _serve(self, client: socket.socket) -> None:
        client.settimeout(_POLL_S)
        self._clients.add(client)
        with client:
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
        self._clients.discard(client)

    def _forward(self, request: bytes) -> tuple[bytes, int]:
        """Send ``request`` to the server on a new connection; its answer, re-framed."""
        head, _, body = request.partition(b"\r\n\r\n")
        lines = [line for line in head.split(b"\r\n") if not _named(line, b"connection")]
        with socket.create_connection(("127.0.0.1", self.upstream_port), timeout=30) as upstream:
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
