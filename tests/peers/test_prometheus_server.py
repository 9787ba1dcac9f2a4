"""The SDK's Prometheus and VictoriaMetrics peers: they start, take samples, read them back
exactly, stop and start again on the same data, and say how to get them when missing."""

from __future__ import annotations

import math
import os
import socket
import struct
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from traceml_exporter_sdk.testing.peers import prometheus_server as peer  # monkeypatched
from traceml_exporter_sdk.testing.prometheus_server import (
    HOW_TO_GET_A_SERVER,
    MetricsServer,
    MetricsServerUnavailableError,
    prometheus_server,
    victoria_metrics_server,
    vmauth_proxy,
)

pytestmark = pytest.mark.skipif(
    any(peer.find_binary(name) is None for name in peer.BINARIES.values())
    and os.environ.get("TRACEML_EXPORTER_REQUIRE_PROMETHEUS") != "1",
    reason=f"no Prometheus/VictoriaMetrics binaries here; {HOW_TO_GET_A_SERVER}",
)


def _field(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128  # one-byte lengths are enough here
    return bytes((number << 3 | 2, len(payload))) + payload


def timeseries(name: str, value: float, stamp_ms: int, **labels: str) -> bytes:
    """One TimeSeries field of a WriteRequest: labels and one sample."""
    pairs = sorted({"__name__": name, **labels}.items())
    series = b"".join(_field(1, _field(1, k.encode()) + _field(2, v.encode())) for k, v in pairs)
    stamp = bytearray()
    while True:
        stamp.append((stamp_ms & 0x7F) | (0x80 if stamp_ms > 0x7F else 0))
        stamp_ms >>= 7
        if not stamp_ms:
            break
    sample = b"\x09" + struct.pack("<d", value) + b"\x10" + bytes(stamp)
    return _field(1, series + _field(2, sample))


def framed(*series: bytes) -> bytes:
    """A WriteRequest of ``series``, snappy-framed as one literal (valid, uncompressed)."""
    body = b"".join(series)
    assert len(body) <= 256
    return bytes((len(body),)) + b"\xf0" + bytes((len(body) - 1,)) + body


def write_request(name: str, value: float, stamp_ms: int, **labels: str) -> bytes:
    """A one-sample WriteRequest."""
    return framed(timeseries(name, value, stamp_ms, **labels))


def post(url: str, body: bytes, **headers: str) -> int:
    request = urllib.request.Request(url, data=body, method="POST")
    request.add_header("Content-Type", "application/x-protobuf")
    request.add_header("Content-Encoding", "snappy")
    request.add_header("X-Prometheus-Remote-Write-Version", "0.1.0")
    for name, value in headers.items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def refused(server: MetricsServer) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", server.port)) != 0


def test_prometheus_takes_remote_write_reads_it_back_and_restarts_on_its_data() -> None:
    now = int(time.time() * 1000)
    with prometheus_server() as server:
        assert post(server.write_url, write_request("probe_total", 0.1 + 0.2, now, a="x y")) == 204
        (series,) = server.samples('{__name__="probe_total"}')
        assert series.labels == {"__name__": "probe_total", "a": "x y"}
        assert series.values == [0.1 + 0.2]  # exact
        assert series.timestamps_ms == [now]
        older = write_request("probe_total", 1.0, now - 1, a="x y")
        assert post(server.write_url, older) == 400  # out of order: refused
        server.stop()
        assert refused(server)
        server.start()
        assert server.samples('{__name__="probe_total"}')[0].values == [0.1 + 0.2]
    assert refused(server)
    assert not Path(server.folder).exists()


def test_victoria_metrics_reads_back_infinities_and_any_label_text() -> None:
    now = int(time.time() * 1000)
    text = "line\u2028separator \x85 form\x0cfeed"
    with victoria_metrics_server() as server:
        assert post(server.write_url, write_request("probe", math.inf, now, t=text)) == 204
        assert post(server.write_url, write_request("probe", -2.5, now, t="plain")) == 204
        found = {s.labels["t"]: s.values for s in server.samples('{__name__="probe"}')}
    assert found == {text: [math.inf], "plain": [-2.5]}


STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]
"""Prometheus' staleness marker: the one NaN bit pattern that ends a series."""


@pytest.mark.parametrize("start", [prometheus_server, victoria_metrics_server])
def test_a_staleness_marker_is_no_sample_and_ends_the_series_for_a_query(start: Any) -> None:
    """As the Prometheus sink ends a replaced series: its marker and the new series share
    one request and one timestamp."""
    now = int(time.time() * 1000)
    with start() as server:
        assert post(server.write_url, write_request("info", 1.0, now - 1000, v="old")) == 204
        ended = timeseries("info", STALE, now, v="old")
        assert post(server.write_url, framed(ended, timeseries("info", 1.0, now, v="new"))) == 204
        found = {s.labels["v"]: s.values for s in server.samples('{__name__="info"}')}
        shown = server.query("info", at=now / 1000, until=lambda found: shows(found) == ["new"])
    assert shows(shown) == ["new"]  # "old" for ever: its marker was taken for a sample
    assert found == {"old": [1.0], "new": [1.0]}


def shows(answer: dict[frozenset[tuple[str, str]], float]) -> list[str]:
    return sorted(dict(labels)["v"] for labels in answer)


def test_vmauth_lets_only_its_token_through() -> None:
    now = int(time.time() * 1000)
    with victoria_metrics_server() as upstream, vmauth_proxy(upstream, "tok-right") as auth:
        good = post(auth.write_url, write_request("m", 1.0, now), Authorization="Bearer tok-right")
        bad = post(auth.write_url, write_request("m", 1.0, now), Authorization="Bearer tok-wrong")
        assert good == 204
        assert 400 <= bad < 500
        assert upstream.samples('{__name__="m"}')[0].values == [1.0]


def test_a_missing_binary_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peer, "find_binary", lambda name: None)
    with pytest.raises(MetricsServerUnavailableError, match="apt-get download"):
        prometheus_server().__enter__()
