"""Real Prometheus and VictoriaMetrics servers for exporter tests, on 127.0.0.1.

``prometheus_server()`` starts Prometheus (2.42 in Debian 12, with
``--web.enable-remote-write-receiver``) and ``victoria_metrics_server()``
starts VictoriaMetrics (1.79), each on a free port with its storage in a
temporary folder, and yields a :class:`MetricsServer`: its remote-write URL,
``samples(match)`` to read back every raw sample over the server's HTTP API,
``query(promql)`` to ask what a dashboard would,
and ``stop()``/``start()`` (same port, same data) for faults. Every wait is
bounded; the process and its folder are gone on exit. Standard library only.

The binaries are found on ``PATH``, in ``$TRACEML_EXPORTER_METRICS_BIN`` (a
folder), in the cache that ``.ci/run`` fills (``apt-get download prometheus
victoria-metrics`` and ``dpkg-deb -x`` into ``CACHE_DIR``) or in ``/usr/bin``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .fault_proxy import unused_port

__all__ = [
    "BINARIES",
    "CACHE_DIR",
    "HOW_TO_GET_A_SERVER",
    "MetricsServer",
    "MetricsServerUnavailableError",
    "Series",
    "find_binary",
    "prometheus_server",
    "victoria_metrics_server",
    "vmauth_proxy",
]

CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / (
    "traceml-exporter-sdk/debian"
)
"""Where ``.ci/run`` unpacks Debian's packages: binaries in ``CACHE_DIR/root/usr/bin``."""
BINARIES = {"prometheus": "prometheus", "victoria-metrics": "victoria-metrics", "vmauth": "vmauth"}
HOW_TO_GET_A_SERVER = (
    "install the servers (Debian/Ubuntu: apt-get install prometheus victoria-metrics), or "
    f"unpack them without starting services: cd {CACHE_DIR} && apt-get download prometheus "
    "victoria-metrics && for d in *.deb; do dpkg-deb -x $d root; done (what .ci/run does), or "
    "point TRACEML_EXPORTER_METRICS_BIN at a folder holding the binaries"
)
"""The hint every 'no server' message carries."""
START_TIMEOUT_S = 30.0
_VALUES = re.compile(r'"values":\[[^\]]*\]')


def _json_numbers(found: re.Match[str]) -> str:
    """VictoriaMetrics writes +Inf, -Inf and NaN bare in its export's values: JSON's way."""
    return found.group(0).replace("+Inf", "Infinity").replace("-Inf", "-Infinity")


class MetricsServerUnavailableError(RuntimeError):
    """No binary, or the server did not start; the message says why and how to get one."""


@dataclass(frozen=True)
class Series:
    """One series read back: its labels (``__name__`` included) and raw samples."""

    labels: dict[str, str]
    timestamps_ms: list[int]
    values: list[float]

    @property
    def name(self) -> str:
        return self.labels.get("__name__", "")


def find_binary(name: str) -> Path | None:
    """The server binary ``name`` (``prometheus`` or ``victoria-metrics``), or None."""
    folders = [os.environ.get("TRACEML_EXPORTER_METRICS_BIN", ""), str(CACHE_DIR / "root/usr/bin")]
    found = shutil.which(name)
    if found:
        return Path(found)
    for folder in [*folders, "/usr/bin"]:
        if folder and (Path(folder) / name).is_file() and os.access(Path(folder) / name, os.X_OK):
            return Path(folder) / name
    return None


def _get(url: str, *, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as answer:  # noqa: S310 - our own server
        return bytes(answer.read())


@dataclass
class MetricsServer:
    """A running server of ``kind`` this module started; stop/start keep port and data."""

    kind: str
    binary: Path
    folder: Path
    port: int
    extra_args: list[str] = field(default_factory=list)
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def write_url(self) -> str:
        """The remote-write endpoint (the full URL a sender posts to)."""
        path = "/api/v1/write"
        return self.base_url + path

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _args(self) -> list[str]:
        if self.kind == "prometheus":
            return [
                str(self.binary),
                f"--config.file={self.folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-remote-write-receiver",
                "--storage.tsdb.retention.time=100y",
                "--log.level=warn",
                *self.extra_args,
            ]
        if self.kind == "vmauth":
            return [
                str(self.binary),
                f"-auth.config={self.folder / 'auth.yml'}",
                f"-httpListenAddr=127.0.0.1:{self.port}",
                "-loggerLevel=ERROR",
                *self.extra_args,
            ]
        return [
            str(self.binary),
            f"-storageDataPath={self.folder / 'data'}",
            f"-httpListenAddr=127.0.0.1:{self.port}",
            "-retentionPeriod=100y",
            "-search.latencyOffset=0s",
            "-search.disableCache",
            "-loggerLevel=ERROR",
            *self.extra_args,
        ]

    def start(self) -> MetricsServer:
        """Start (or start again) and wait until it answers its health check."""
        if self.running:
            return self
        log = (self.folder / "server.log").open("ab")
        try:
            self._proc = subprocess.Popen(
                self._args(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        finally:
            log.close()
        health = "/-/ready" if self.kind == "prometheus" else "/health"
        until = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < until:
            if self._proc.poll() is not None:
                break
            with contextlib.suppress(OSError):
                _get(self.base_url + health, timeout=1.0)
                return self
            time.sleep(0.05)
        self.stop()
        tail = (self.folder / "server.log").read_text(errors="replace")[-2000:]
        raise MetricsServerUnavailableError(
            f"{self.kind} did not become ready on port {self.port} within "
            f"{START_TIMEOUT_S:g} s: {tail}"
        )

    def stop(self, *, timeout: float = 15.0) -> None:
        """Stop the process (SIGTERM, then SIGKILL); the data folder stays for ``start()``."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def samples(self, match: str) -> list[Series]:
        """Every raw sample of every series ``match`` (a PromQL selector) selects.

        Staleness markers are not samples: Prometheus' query API leaves them out, and so
        does this on VictoriaMetrics, whose raw export returns them as NaN or null (it
        stores no other NaN: an ordinary one is dropped as it is written). A series whose
        samples are all markers is left out too.
        """
        if self.kind == "prometheus":
            query = urllib.parse.urlencode(
                {"query": f"{match}[36500d]", "time": f"{time.time() + 86400:.3f}"}
            )
            answer = json.loads(_get(f"{self.base_url}/api/v1/query?{query}"))
            if answer.get("status") != "success":
                raise AssertionError(f"prometheus query {match!r} failed: {answer}")
            return [
                Series(
                    dict(item["metric"]),
                    [round(float(t) * 1000) for t, _ in item["values"]],
                    [float(v) for _, v in item["values"]],
                )
                for item in answer["data"]["result"]
            ]
        _get(f"{self.base_url}/internal/force_flush")
        query = urllib.parse.urlencode(
            {"match[]": match, "start": "0", "end": f"{time.time() + 86400 * 2:.0f}"}
        )
        # split on \n only: a label may hold U+2028, U+0085 or a form feed
        lines = _get(f"{self.base_url}/api/v1/export?{query}").decode("utf-8").split("\n")
        out = []
        for line in lines:
            if line.strip():
                item = json.loads(_VALUES.sub(_json_numbers, line), strict=False)
                kept = [
                    (int(t), float(v))
                    for t, v in zip(item["timestamps"], item["values"], strict=True)
                    if v is not None and not math.isnan(v)
                ]
                if kept:
                    stamps, values = zip(*kept, strict=True)
                    out.append(Series(dict(item["metric"]), list(stamps), list(values)))
        return out

    def query(
        self,
        promql: str,
        at: float | None = None,
        *,
        until: Callable[[dict[frozenset[tuple[str, str]], float]], bool] | None = None,
        timeout: float = 10.0,
    ) -> dict[frozenset[tuple[str, str]], float]:
        """An instant query, as a dashboard asks it: ``{labels: value}`` at ``at`` (now).

        What a user sees: staleness and lookback are applied by the server itself.
        VictoriaMetrics answers a query over a short range from data up to about a
        second old (its raw export sees a write at once), so a caller that knows what
        it waits for passes ``until``: the query is repeated until ``until(answer)``
        holds or ``timeout`` passes, and the last answer is returned either way.
        """
        deadline = time.monotonic() + timeout
        while True:
            if self.kind != "prometheus":
                _get(f"{self.base_url}/internal/force_flush")
            moment = time.time() if at is None else at
            query = urllib.parse.urlencode({"query": promql, "time": f"{moment:.3f}"})
            answer = json.loads(_get(f"{self.base_url}/api/v1/query?{query}"))
            if answer.get("status") != "success":
                raise AssertionError(f"{self.kind} query {promql!r} failed: {answer}")
            found = {
                frozenset(item["metric"].items()): float(item["value"][1])
                for item in answer["data"]["result"]
            }
            if until is None or until(found) or time.monotonic() > deadline:
                return found
            time.sleep(0.1)


@contextlib.contextmanager
def _server(
    kind: str, extra_args: list[str], config: str = "", config_name: str = "prometheus.yml"
) -> Iterator[MetricsServer]:
    binary = find_binary(BINARIES[kind])
    if binary is None:
        raise MetricsServerUnavailableError(f"no {kind} binary found; {HOW_TO_GET_A_SERVER}")
    folder = Path(tempfile.mkdtemp(prefix=f"traceml-{kind}-"))
    try:
        if config:
            (folder / config_name).write_text(config, encoding="utf-8")
        server = MetricsServer(kind, binary, folder, unused_port(), extra_args)
        try:
            yield server.start()
        finally:
            server.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def prometheus_server(
    *, out_of_order_time_window: str | None = None, scrape: Sequence[str] = ()
) -> contextlib.AbstractContextManager[MetricsServer]:
    """Prometheus with the remote-write receiver; optionally an out-of-order window (``"30d"``)
    and ``scrape`` targets (``host:port``, scraped every second as ``job="scraped"``)."""
    config = "global: {}\n"
    if out_of_order_time_window:
        config += f"storage:\n  tsdb:\n    out_of_order_time_window: {out_of_order_time_window}\n"
    if scrape:
        config += (
            "scrape_configs:\n- job_name: scraped\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            f"  static_configs:\n  - targets: {json.dumps(list(scrape))}\n"
        )
    return _server("prometheus", [], config)


def victoria_metrics_server() -> contextlib.AbstractContextManager[MetricsServer]:
    """VictoriaMetrics single-node (``/api/v1/write`` takes remote write)."""
    return _server("victoria-metrics", [])


def vmauth_proxy(
    upstream: MetricsServer, bearer_token: str
) -> contextlib.AbstractContextManager[MetricsServer]:
    """VictoriaMetrics' ``vmauth`` in front of ``upstream``: only ``bearer_token`` gets through
    (its ``write_url`` is the upstream's, behind the token)."""
    config = f"users:\n- bearer_token: {json.dumps(bearer_token)}\n  url_prefix: {json.dumps(upstream.base_url)}\n"
    return _server("vmauth", [], config, "auth.yml")
