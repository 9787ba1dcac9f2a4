"""Test peers: a real ``mlflow server`` (sqlite in a temp dir, 127.0.0.1; with
``auth=True`` its basic-auth app), and a fault proxy in front of it (503s, a tarpit, a
stopped listener).

``MlflowServer`` runs PyPI's ``mlflow`` as its own process with
``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false`` (otherwise it starts seven job workers) and
``--workers 1``; ``/health`` is polled for at most ``START_TIMEOUT_S`` (a fresh database
runs its migrations first). ``TRACEML_MLFLOW_PEER_URL`` names a running server without
auth instead (the fault tests still stop only their proxy). The basic-auth app checks a
password hash on every request (a slow hash, by design), so only the bad-credential
tests use it. When
none can be had the tests skip, or fail where ``TRACEML_EXPORTER_REQUIRE_MLFLOW=1`` (CI).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["ADMIN", "MlflowServer", "MlflowUnavailableError", "free_port"]

ADMIN = ("admin", "traceml-test-admin-7")
"""The basic-auth app's admin, as its config file below sets it."""
START_TIMEOUT_S = 240.0
"""A fresh server migrates two sqlite databases before it answers (15 s idle, minutes
on a loaded 2-core machine)."""
REQUIRE_ENV = "TRACEML_EXPORTER_REQUIRE_MLFLOW"
PEER_ENV = "TRACEML_MLFLOW_PEER_URL"


class MlflowUnavailableError(RuntimeError):
    """No MLflow server could be started here."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class MlflowServer:
    """A throwaway ``mlflow server`` on 127.0.0.1 (``--app-name basic-auth`` with ``auth``)."""

    def __init__(self, *, auth: bool = False) -> None:
        self.auth = auth
        self.folder = Path(tempfile.mkdtemp(prefix="mlflow-peer-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> MlflowServer:
        given = os.environ.get(PEER_ENV, "").strip().rstrip("/")
        if given and not self.auth:
            self.url, self.port = given, urllib.parse.urlsplit(given).port or 80
            if not self._healthy():
                raise MlflowUnavailableError(f"{PEER_ENV}={given!r} does not answer /health")
            return self
        mlflow = shutil.which("mlflow", path=str(Path(sys.executable).parent)) or shutil.which(
            "mlflow"
        )
        if mlflow is None:
            raise MlflowUnavailableError("the mlflow command is not installed (pip install mlflow)")
        config = self.folder / "auth.ini"
        config.write_text(
            "[mlflow]\ndefault_permission = READ\n"
            f"database_uri = sqlite:///{self.folder}/auth.db\n"
            f"admin_username = {ADMIN[0]}\nadmin_password = {ADMIN[1]}\n"
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n",
            "utf-8",
        )
        env = {
            **os.environ,
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "MLFLOW_AUTH_CONFIG_PATH": str(config),
            "MLFLOW_FLASK_SERVER_SECRET_KEY": "traceml-tests-only",
        }
        command = [
            *(mlflow, "server", "--workers", "1"),
            *(("--app-name", "basic-auth") if self.auth else ()),
            *("--host", "127.0.0.1", "--port", str(self.port)),
            *("--backend-store-uri", f"sqlite:///{self.folder}/mlflow.db"),
            *("--default-artifact-root", str(self.folder / "artifacts")),
        ]
        self.log = (self.folder / "server.log").open("wb")
        self.process = subprocess.Popen(  # noqa: S603 - a fixed command line
            command, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._healthy():
            if self.process.poll() is not None or time.monotonic() > deadline:
                text = (self.folder / "server.log").read_text("utf-8", "replace")[-3000:]
                self.stop()
                raise MlflowUnavailableError(f"mlflow server did not become healthy:\n{text}")
            time.sleep(0.5)
        return self

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=5) as answer:  # noqa: S310
                return bool(answer.status == 200)
        except OSError:
            return False

    def call(self, method: str, call: str, body: dict[str, Any] | None = None) -> Any:
        """One REST call as the admin; the answer's JSON (an error answer raises)."""
        url = f"{self.url}/api/2.0/mlflow/{call}"
        data = None
        if method == "GET" and body:
            url += "?" + urllib.parse.urlencode(body)
        elif body is not None:
            data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.auth:
            pair = base64.b64encode(f"{ADMIN[0]}:{ADMIN[1]}".encode()).decode()
            headers["Authorization"] = f"Basic {pair}"
        request = urllib.request.Request(  # noqa: S310 - 127.0.0.1 only
            url, data=data, method=method, headers=headers
        )
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            return json.loads(answer.read() or b"{}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 15)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait(timeout=20)
            self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def require_mlflow() -> bool:
    """Whether a missing server fails the tests instead of skipping them."""
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def error_of(exc: urllib.error.HTTPError) -> str:
    return exc.read().decode("utf-8", "replace")
