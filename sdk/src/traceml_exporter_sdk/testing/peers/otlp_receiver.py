"""A strict OTLP/HTTP logs receiver for exporter tests (needs ``traceml-exporter-sdk[otlp]``).

It runs in its own process on 127.0.0.1 at a free port and decodes what it gets
with ``opentelemetry-proto``, never with the exporter's encoder::

    with OtlpReceiver() as peer:
        os.environ["OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"] = peer.endpoint
        ...  # run the exporter
        peer.log_records()  # what was accepted, decoded to plain Python

It enforces what a collector does: ``POST`` to the logs path (404 otherwise),
``Content-Type: application/x-protobuf`` (415), a ``Content-Length`` (411) under
a size limit (413), ``Content-Encoding: gzip`` really gzip (400), a body that
is an ``ExportLogsServiceRequest`` (400); errors carry a serialized
``google.rpc.Status``, success a serialized ``ExportLogsServiceResponse``.
:meth:`OtlpReceiver.set_faults` scripts how it misbehaves (:class:`Fault`).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["DEFAULT_MAX_BODY", "LOGS_PATH", "Fault", "OtlpReceiver", "any_value", "decode_request"]

LOGS_PATH = "/v1/logs"
DEFAULT_MAX_BODY = 20 * 1024 * 1024
"""The OpenTelemetry Collector's default ``max_request_body_size`` (20 MiB)."""
START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Fault:
    """One scripted misbehaviour, played for ``times`` requests (None: for ever) in order."""

    kind: str
    """``status`` (answer ``status``), ``drop`` (close the connection, no answer),
    ``tarpit`` (read the request, never answer), ``partial`` (2xx with
    ``partial_success``), ``raw`` (answer ``status`` with ``message`` as the body) or
    ``drip`` (a good answer, one byte every ``retry_after`` seconds)."""
    times: int | None = 1
    status: int = 503
    retry_after: str | None = None
    message: str = ""
    rejected: int = 0

    @classmethod
    def http(
        cls, status: int, *, times: int | None = 1, retry_after: float | str | None = None,
        message: str = "",
    ) -> Fault:  # fmt: skip
        """Answer ``status`` (with ``Retry-After`` when given) and the message as a Status."""
        after = None if retry_after is None else str(retry_after)
        message = message or f"scripted {status}"
        return cls("status", times, status, after, message)

    @classmethod
    def drop(cls, *, times: int | None = 1) -> Fault:
        """Read the request, then close the connection without an answer."""
        return cls("drop", times)

    @classmethod
    def tarpit(cls, *, times: int | None = None) -> Fault:
        """Read the request and never answer (until ``release``, ``reset`` or ``stop``)."""
        return cls("tarpit", times)

    @classmethod
    def partial(cls, rejected: int, *, times: int | None = 1, message: str = "") -> Fault:
        """Accept with ``partial_success.rejected_log_records = rejected`` and a message."""
        return cls("partial", times, 200, None, message or f"rejected {rejected}", rejected)

    @classmethod
    def drip(cls, interval_s: float, *, times: int | None = 1) -> Fault:
        """Accept, but send the answer one byte every ``interval_s`` seconds."""
        return cls("drip", times, 200, str(interval_s))

    @classmethod
    def raw(cls, status: int, body: str, *, times: int | None = 1) -> Fault:
        """Answer ``status`` with ``body`` (latin-1 text, sent as bytes) as it is."""
        return cls("raw", times, status, None, body)


class OtlpReceiver:
    """The receiver process and its controls; a context manager, or ``start()``/``stop()``."""

    def __init__(self, *, path: str = LOGS_PATH, max_body: int = DEFAULT_MAX_BODY) -> None:
        self.path = path
        self.max_body = max_body
        self.port = 0
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()
        self._stderr: Any = None

    # -- life ----------------------------------------------------------------------

    def start(self) -> OtlpReceiver:
        """Start the process and wait until it listens; raise with its stderr if it cannot."""
        if self._proc is not None:
            raise RuntimeError("the receiver is already running")
        self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8")  # noqa: SIM115
        command = [sys.executable, "-m", f"{__package__}.otlp_server", self.path]
        # The SDK importable in the child even when this process only had it on sys.path.
        source = str(Path(__file__).resolve().parents[3])
        paths = [source, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        self._proc = subprocess.Popen(
            [*command, str(self.max_body)],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            encoding="utf-8",
        )
        timer = threading.Timer(START_TIMEOUT_S, self._proc.kill)
        timer.start()
        try:
            assert self._proc.stdout is not None
            line = self._proc.stdout.readline()
        finally:
            timer.cancel()
        if not line:
            self._fail("did not start")
        self.port = int(json.loads(line)["port"])
        return self

    def stop(self) -> None:
        """Stop the process (releasing tarpitted requests); idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({"op": "stop"}) + "\n")
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``: a value for ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> str:
        """The full logs URL: a value for ``OTEL_EXPORTER_OTLP_LOGS_ENDPOINT``."""
        return self.base_url + self.path

    # -- scripting -----------------------------------------------------------------

    def set_faults(self, *faults: Fault) -> None:
        """Play ``faults`` in order on the next requests, then accept again; none: accept."""
        self._ask({"op": "faults", "faults": [asdict(f) for f in faults]})

    def release(self) -> None:
        """Let every tarpitted request go (its connection is closed without an answer)."""
        self._ask({"op": "release"})

    def reset(self) -> None:
        """Forget what was received and the faults; release tarpitted requests."""
        self._ask({"op": "reset"})

    # -- what was received -----------------------------------------------------------

    def requests(self) -> list[dict[str, Any]]:
        """Every request seen, in order: ``path``, ``headers``, ``content_encoding``,
        ``wire_bytes``, ``body_bytes`` (decompressed), ``records``, ``status`` (an int,
        ``"dropped"`` or ``"tarpit"``) and the ``fault`` played, if any."""
        return list(self._ask({"op": "requests"})["requests"])

    @property
    def request_count(self) -> int:
        return len(self.requests())

    @property
    def bytes_received(self) -> int:
        """Body bytes on the wire (compressed when gzip was announced), every request."""
        return sum(int(r["wire_bytes"]) for r in self.requests())

    def bodies(self) -> list[bytes]:
        """Decompressed bodies of the requests answered 2xx, in arrival order."""
        return [base64.b64decode(b) for b in self._ask({"op": "bodies"})["bodies"]]

    def messages(self) -> list[Any]:
        """The accepted requests as ``ExportLogsServiceRequest`` messages."""
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

        parse = logs_service_pb2.ExportLogsServiceRequest.FromString
        return [parse(body) for body in self.bodies()]

    def log_records(self) -> list[dict[str, Any]]:
        """Every accepted LogRecord as plain Python (see :func:`decode_request`), in order."""
        out: list[dict[str, Any]] = []
        for message in self.messages():
            out.extend(decode_request(message))
        return out

    # -- plumbing --------------------------------------------------------------------

    def _ask(self, command: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            proc = self._proc
            if proc is None or proc.stdin is None or proc.stdout is None:
                raise RuntimeError("the receiver is not running; call start()")
            try:
                proc.stdin.write(json.dumps(command) + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except OSError:
                line = ""
            if not line:
                self._fail("stopped answering")
            answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"OTLP receiver: {answer['error']}")
        return answer

    def _fail(self, what: str) -> None:
        err = ""
        if self._stderr is not None:
            self._stderr.seek(0)
            err = self._stderr.read()[-4000:]
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        raise RuntimeError(f"the OTLP receiver process {what}:\n{err}")


def any_value(value: Any) -> Any:
    """An ``AnyValue`` as Python: str, bool, int, float, bytes, list, dict; unset is None."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which)


def _attributes(pairs: Iterable[Any]) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in pairs}


def decode_request(message: Any) -> list[dict[str, Any]]:
    """One dict per LogRecord of an ``ExportLogsServiceRequest``.

    Keys: ``resource`` and ``attributes`` (dicts of :func:`any_value`),
    ``scope`` (name), ``scope_version``, ``time_unix_nano``,
    ``observed_time_unix_nano``, ``event_name``, ``severity_number``,
    ``severity_text``, ``body`` (None when unset).
    """
    out: list[dict[str, Any]] = []
    for resource_logs in message.resource_logs:
        resource = _attributes(resource_logs.resource.attributes)
        for scope_logs in resource_logs.scope_logs:
            scope, version = scope_logs.scope.name, scope_logs.scope.version
            for log in scope_logs.log_records:
                out.append(
                    {
                        "resource": resource,
                        "scope": scope,
                        "scope_version": version,
                        "time_unix_nano": log.time_unix_nano,
                        "observed_time_unix_nano": log.observed_time_unix_nano,
                        "event_name": log.event_name,
                        "severity_number": log.severity_number,
                        "severity_text": log.severity_text,
                        "body": any_value(log.body) if log.HasField("body") else None,
                        "attributes": _attributes(log.attributes),
                    }
                )
    return out
