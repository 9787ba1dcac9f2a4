"""Prometheus sink throughput: records/s from ``write`` to the server's 2xx, on loopback.

Standalone: ``python tests/benchmarks/bench_prometheus.py`` (``nox -s bench`` runs it).
It bakes the template's ``prometheus`` and ``otlp`` sinks into a temporary folder (the
real generated exporters), starts a local VictoriaMetrics (the SDK's
``testing.prometheus_server``, Debian's binary) and the SDK's ``OtlpReceiver``, and
times, best of ``REPEATS``, on step_time records with 5 events (64 ranks) and on the
SDK's corpus (every stream):

* the prometheus exporter: ``write`` in batches of ``BATCH`` records, ``flush`` once a
  ``FLUSH_INTERVAL_S`` passed (the export worker's default cadence) and at the end, each
  returning after VictoriaMetrics' 2xx;
  the bytes sent per record (snappy-compressed requests) are printed too;
* the otlp exporter on the same records to the OTLP receiver, in the same run;
* the server alone: the prometheus exporter's own request bodies re-sent to
  VictoriaMetrics with nothing else to do (its ceiling for those requests);
* the reader alone: only reading, in Python, the fields the fold needs (rank, node,
  step, each event's four stats), with no work on them: the ceiling of any pure-Python
  aggregation of these records on this machine.

Target: at least 200,000 records/s end to end on step_time. Prints PASS or MISS and
exits 0.
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import urllib3

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the one bake
from _smoke import scaled, summary, verdict
from bake import baked_exporter
from bench_otlp import corpus, step_records
from traceml_exporter_sdk import ExporterContext
from traceml_exporter_sdk.testing.otlp_receiver import OtlpReceiver
from traceml_exporter_sdk.testing.prometheus_server import MetricsServer, victoria_metrics_server

ROOT = Path(__file__).resolve().parents[2]
BATCH = 64
FLUSH_INTERVAL_S = 1.0
"""ExportWorker's default ``flush_interval_s``: how often TraceML's worker flushes."""
REPEATS = scaled(3, 1)
STEP_RECORDS = scaled(200_000, 2_000)
CORPUS_RECORDS = scaled(100_000, 1_000)
OTLP_RECORDS = scaled(20_000, 1_000)
TARGET = 200_000.0


class Capture:
    """Wraps the exporter's transport ``post`` to keep every body it sent (server-alone run)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []


def time_prometheus(
    make: Callable[[ExporterContext], Any], records: Sequence[Any], capture: Capture | None = None
) -> tuple[float, int]:
    """Seconds from the first ``write`` to the last 2xx, and the bytes sent."""
    with tempfile.TemporaryDirectory() as folder:
        context = ExporterContext.create(folder, export_streams="all")
        exporter = make(context)
        exporter.open()
        if capture is not None:
            transport = exporter._transport  # the bench keeps the bodies sent
            post = transport.post

            def keep(body: bytes, **kwargs: Any) -> Any:
                capture.bodies.append(body)
                return post(body, **kwargs)

            transport.post = keep
        gc.collect()
        start = last = time.perf_counter()
        for i in range(0, len(records), BATCH):
            exporter.write(records[i : i + BATCH])
            if time.perf_counter() - last >= FLUSH_INTERVAL_S:
                exporter.flush()
                last = time.perf_counter()
        exporter.flush()
        elapsed = time.perf_counter() - start
        sent = exporter.bytes_sent
        exporter.close()
    return elapsed, sent


def time_otlp(
    make: Callable[[ExporterContext], Any], records: Sequence[Any], peer: OtlpReceiver
) -> float:
    with tempfile.TemporaryDirectory() as folder:
        context = ExporterContext.create(folder, export_streams="all")
        exporter = make(context)
        exporter.open()
        peer.reset()
        gc.collect()
        start = time.perf_counter()
        for i in range(0, len(records), BATCH):
            exporter.write(records[i : i + BATCH])
        exporter.flush()
        elapsed = time.perf_counter() - start
        exporter.close()
    assert sum(r["records"] for r in peer.requests() if r["status"] == 200) == len(records)
    return elapsed


def time_server_alone(server: MetricsServer, bodies: Sequence[bytes]) -> float:
    """Seconds VictoriaMetrics takes to answer ``bodies`` posted back to back."""
    headers = {
        "Content-Type": "application/x-protobuf",
        "Content-Encoding": "snappy",
        "X-Prometheus-Remote-Write-Version": "0.1.0",
    }
    pool = urllib3.HTTPConnectionPool("127.0.0.1", server.port, maxsize=1, retries=False)
    start = time.perf_counter()
    for body in bodies:
        answer = pool.urlopen("POST", "/api/v1/write", body=body, headers=headers)
        assert answer.status == 204, answer.data
    elapsed = time.perf_counter() - start
    pool.close()
    return elapsed


def time_reader_alone(records: Sequence[Any]) -> float:
    """Seconds to read what the fold reads, doing nothing with it."""
    gc.collect()
    start = time.perf_counter()
    seen = 0
    for record in records:
        identity = (record.STREAM, getattr(record, "rank", None), getattr(record, "node_rank", 0))
        seen += identity is not None and getattr(record, "step", None) is None
        events = getattr(record, "events", None)
        if events:
            for devices in events.values():
                for stats in devices.values():
                    get = stats.get
                    values = (get("duration_ms"), get("cpu_ms"), get("gpu_ms"), get("n_calls"))
                    seen += values is None
    elapsed = time.perf_counter() - start
    assert seen >= 0
    return elapsed


def series_count(server: MetricsServer) -> int:
    return len(server.samples('{job="traceml"}'))


def main() -> int:
    results: list[bool] = []
    with tempfile.TemporaryDirectory() as folder:
        prometheus = baked_exporter(Path(folder), "prometheus", "benchprometheus").make_exporter
        otlp = baked_exporter(Path(folder), "otlp", "benchotlp").make_exporter
        with victoria_metrics_server() as server, OtlpReceiver() as peer:
            os.environ["PROMETHEUS_REMOTE_WRITE_URL"] = server.write_url
            os.environ["OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"] = peer.endpoint
            for label, records, otlp_records in (
                ("step_time with 5 events, 64 ranks", step_records(STEP_RECORDS),
                 step_records(OTLP_RECORDS)),
                ("SDK corpus, every stream", corpus(CORPUS_RECORDS), corpus(OTLP_RECORDS)),
            ):  # fmt: skip
                n = len(records)
                runs = [time_prometheus(prometheus, records) for _ in range(REPEATS)]
                elapsed, sent = min(runs)
                capture = Capture()
                time_prometheus(prometheus, records, capture)
                alone = min(time_server_alone(server, capture.bodies) for _ in range(REPEATS))
                reader = n / min(time_reader_alone(records) for _ in range(REPEATS))
                ours = n / elapsed
                theirs = len(otlp_records) / min(
                    time_otlp(otlp, otlp_records, peer) for _ in range(REPEATS)
                )
                print(f"{label}: {n:,} records, write -> 2xx on loopback")
                print(f"  prometheus exporter -> VictoriaMetrics {ours:>12,.0f} records/s")
                print(f"  bytes sent per record                  {sent / n:>12,.2f}")
                print(f"  requests: {len(capture.bodies)}, {sum(map(len, capture.bodies)):,} bytes")
                print(
                    f"  VictoriaMetrics alone, same requests   {alone * 1000:>12,.1f} ms "
                    f"(of {elapsed * 1000:,.1f} ms end to end)"
                )
                print(f"  reading the fold's fields alone        {reader:>12,.0f} records/s")
                print(f"  otlp exporter -> OTLP receiver         {theirs:>12,.0f} records/s")
                if label.startswith("step_time"):
                    ok = ours >= TARGET
                    print(f"  target {TARGET:,.0f} records/s: {verdict(ok)}")
                    results.append(ok)
            print(f"  series in VictoriaMetrics after the runs: {series_count(server):,}")
    print(f"\n{summary(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
