"""The OTLP/HTTP logs receiver's own process: a strict HTTP server driven over stdin/stdout.

Run as ``python -m traceml_exporter_sdk.testing.peers.otlp_server PATH MAX_BODY`` by
:class:`~traceml_exporter_sdk.testing.otlp_receiver.OtlpReceiver`; it prints
``{"port": N}`` once listening on 127.0.0.1, then answers one JSON command per
stdin line with one JSON line. It exits when stdin closes, so it never outlives
the test process. Requests are decoded with ``opentelemetry-proto`` only.
"""

from __future__ import annotations

import base64
import gzip
import json
import sys
import threading
import zlib
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

CONTENT_TYPE = "application/x-protobuf"
TARPIT_MAX_S = 600.0
"""Longest a tarpitted request is held when nobody resets or stops the receiver."""


class _State:
    """What the server received and the faults still to play, shared by handler threads."""

    def __init__(self, path: str, max_body: int) -> None:
        self.path = path
        self.max_body = max_body
        self.lock = threading.Lock()
        self.faults: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.bodies: list[bytes] = []
        self.release = threading.Event()

    def next_fault(self) -> dict[str, Any] | None:
        with self.lock:
            if not self.faults:
                return None
            fault = self.faults[0]
            times = fault.get("times")
            if times is not None:
                if times <= 1:
                    self.faults.pop(0)
                else:
                    fault["times"] = times - 1
            return dict(fault)

    def reset(self) -> None:
        with self.lock:
            self.faults.clear()
            self.requests.clear()
            self.bodies.clear()
            self.release.set()
            self.release = threading.Event()


def _count_records(request: logs_service_pb2.ExportLogsServiceRequest) -> int:
    return sum(
        len(scope.log_records)
        for resource in request.resource_logs
        for scope in resource.scope_logs
    )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test process reads what happened through ``requests``."""

    def do_GET(self) -> None:
        self._status(HTTPStatus.METHOD_NOT_ALLOWED, "only POST is accepted")

    def do_PUT(self) -> None:
        self.do_GET()

    def do_DELETE(self) -> None:
        self.do_GET()

    def do_POST(self) -> None:
        state = self.server.state
        meta: dict[str, Any] = {
            "path": self.path,
            "content_type": self.headers.get("Content-Type"),
            "content_encoding": self.headers.get("Content-Encoding"),
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "wire_bytes": 0,
            "body_bytes": 0,
            "records": 0,
            "status": None,
            "fault": None,
        }
        with state.lock:
            state.requests.append(meta)
        body, problem = self._read_body(meta)
        if problem is not None:
            meta["status"] = problem[0]
            self._status(*problem)
            return
        assert body is not None
        try:
            request = logs_service_pb2.ExportLogsServiceRequest.FromString(body)
        except DecodeError as exc:
            meta["status"] = 400
            self._status(HTTPStatus.BAD_REQUEST, f"not an ExportLogsServiceRequest: {exc}")
            return
        meta["records"] = count = _count_records(request)
        fault = state.next_fault()
        meta["fault"] = fault
        if fault is not None and self._play(fault, meta):
            return
        rejected = min(int(fault["rejected"]), count) if fault and fault["kind"] == "partial" else 0
        response = logs_service_pb2.ExportLogsServiceResponse()
        if fault is not None and fault["kind"] == "partial":
            response.partial_success.rejected_log_records = rejected
            response.partial_success.error_message = str(fault.get("message") or "")
        with state.lock:
            state.bodies.append(body)
            meta["status"] = 200
            meta["accepted_index"] = len(state.bodies) - 1
        if fault is not None and fault["kind"] == "drip":
            self._drip(response.SerializeToString(), float(fault["retry_after"]))
            return
        self._send(200, response.SerializeToString())

    def _read_body(self, meta: dict[str, Any]) -> tuple[bytes | None, tuple[int, str] | None]:
        """The decompressed body, or the (status, message) the request is refused with."""
        state = self.server.state
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            return None, (HTTPStatus.LENGTH_REQUIRED, "a Content-Length is required")
        size = int(length)
        if size > state.max_body:
            self.close_connection = True
            return None, (
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"request body of {size} bytes is over the limit of {state.max_body}",
            )
        raw = self.rfile.read(size)
        meta["wire_bytes"] = len(raw)
        if self.path != state.path:
            return None, (HTTPStatus.NOT_FOUND, f"no such path {self.path!r}; use {state.path}")
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != CONTENT_TYPE:
            return None, (
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                f"Content-Type {content_type!r} is not supported; send {CONTENT_TYPE}",
            )
        encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding == "gzip":
            try:
                raw = gzip.decompress(raw)
            except (OSError, EOFError, zlib.error) as exc:
                return None, (HTTPStatus.BAD_REQUEST, f"Content-Encoding gzip, but {exc}")
        elif encoding != "identity":
            return None, (
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                f"Content-Encoding {encoding!r} is not supported; use gzip or none",
            )
        meta["body_bytes"] = len(raw)
        return raw, None

    def _play(self, fault: dict[str, Any], meta: dict[str, Any]) -> bool:
        """Answer as the fault says; False when the request is to be accepted after all."""
        kind = fault["kind"]
        if kind == "status":
            meta["status"] = int(fault["status"])
            headers = {}
            if fault.get("retry_after") is not None:
                headers["Retry-After"] = str(fault["retry_after"])
            self._status(int(fault["status"]), str(fault.get("message") or ""), headers)
            return True
        if kind == "raw":
            meta["status"] = int(fault["status"])
            self._send(int(fault["status"]), str(fault["message"]).encode("latin-1"))
            return True
        if kind == "drop":
            meta["status"] = "dropped"
            self.close_connection = True
            self.connection.close()
            return True
        if kind == "tarpit":
            meta["status"] = "tarpit"
            release = self.server.state.release
            release.wait(TARPIT_MAX_S)
            self.close_connection = True
            return True
        return False

    def _drip(self, body: bytes, interval_s: float) -> None:
        """A whole 200 answer, one byte every ``interval_s`` (until released)."""
        head = (
            f"HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode("ascii")
        release = self.server.state.release
        self.close_connection = True
        for byte in head + body:
            if release.wait(interval_s):
                return
            try:
                self.wfile.write(bytes((byte,)))
                self.wfile.flush()
            except OSError:
                return

    def _status(self, code: int, message: str, headers: dict[str, str] | None = None) -> None:
        """An error answer: a serialized google.rpc.Status, as OTLP/HTTP specifies."""
        body = status_pb2.Status(code=int(code), message=message).SerializeToString()
        self._send(int(code), body, headers)

    def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, state: _State) -> None:
        self.state = state
        super().__init__(("127.0.0.1", 0), _Handler)


def _command(state: _State, command: dict[str, Any]) -> dict[str, Any]:
    op = command.get("op")
    if op == "faults":
        with state.lock:
            state.faults = [dict(f) for f in command["faults"]]
        return {"ok": True}
    if op == "requests":
        with state.lock:
            return {"requests": [dict(r) for r in state.requests]}
    if op == "bodies":
        with state.lock:
            bodies = state.bodies[int(command.get("since", 0)) :]
        return {"bodies": [base64.b64encode(b).decode("ascii") for b in bodies]}
    if op == "reset":
        state.reset()
        return {"ok": True}
    if op == "release":
        with state.lock:
            state.release.set()
            state.release = threading.Event()
        return {"ok": True}
    return {"error": f"unknown command {op!r}"}


def main(argv: list[str]) -> int:
    path, max_body = argv[0], int(argv[1])
    state = _State(path, max_body)
    server = _Server(state)
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    out = sys.stdout
    out.write(json.dumps({"port": server.server_address[1]}) + "\n")
    out.flush()
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("op") == "stop":
            break
        out.write(json.dumps(_command(state, command)) + "\n")
        out.flush()
    state.release.set()
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
