"""OTLP sink throughput: records/s from ``write`` to the collector's 2xx, on loopback.

Standalone: ``python tests/benchmarks/bench_otlp.py`` (``nox -s bench`` runs it).
It bakes the template's ``otlp`` sink into a temporary folder (the real generated
exporter), starts the SDK's ``OtlpReceiver`` (a separate process decoding every
request with opentelemetry-proto) and times, best of ``REPEATS``:

* the generated exporter: ``write`` in batches of ``BATCH`` records, then ``flush``,
  which returns after the peer's 2xx for every record;
* the official OpenTelemetry Python pipeline, ``LoggerProvider`` +
  ``BatchLogRecordProcessor`` + ``OTLPLogExporter``, emitting the same records (their
  fields as attributes, the ``events`` map, which OTel attributes cannot hold, as the
  body) to the same peer, timed from the first ``emit`` to ``force_flush`` returning.
  Its queue is made large enough that it drops nothing (checked at the peer).

on the SDK's sample corpus (every stream, repeated) and on step_time records
with 5 events. Targets: at least 20,000 records/s on the corpus, and at least 3x
the official pipeline on both. Prints PASS or MISS per target and exits 0.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the one bake
from _smoke import scaled, summary, verdict
from bake import baked_exporter
from traceml_exporter_sdk import ExporterContext, StepTimeRecord
from traceml_exporter_sdk.testing import corpus_records
from traceml_exporter_sdk.testing.otlp_receiver import OtlpReceiver

ROOT = Path(__file__).resolve().parents[2]
BATCH = 64
REPEATS = scaled(3, 1)
CORPUS_RECORDS = scaled(30_000, 1_000)  # the official pipeline batches 512
STEP_RECORDS = scaled(20_000, 1_000)
FLOOR = 20_000.0
RATIO = 3.0
EVENTS = (
    "_traceml_internal:dataloader_next",
    "_traceml_internal:forward_time",
    "_traceml_internal:backward_time",
    "_traceml_internal:optimizer_step",
    "_traceml_internal:step_time",
)


def step_records(n: int) -> list[Any]:
    ns = 1_750_000_000_000_000_000
    out = []
    for i in range(n):
        events = {
            name: {
                "cuda:0": {
                    "is_gpu": True,
                    "duration_ms": 10.0 + i % 7 + k,
                    "cpu_ms": 3.25 + k,
                    "gpu_ms": 10.25 + k,
                    "n_calls": 1,
                }
            }
            for k, name in enumerate(EVENTS)
        }
        rank = i % 64
        out.append(
            StepTimeRecord(
                ns, rank, rank, rank % 8, 64, 8, rank // 8, f"node-{rank // 8:03d}",
                ns + i, i // 64, i // 64, events,
            )
        )  # fmt: skip
    return out


def corpus(n: int) -> list[Any]:
    base = corpus_records()
    return (base * (n // len(base) + 1))[:n]


def time_ours(
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


def _official_record(record: Any) -> tuple[dict[str, Any], Any, int, int]:
    data = record.to_dict()
    attributes = {
        f"traceml.{k}": v
        for k, v in data.items()
        if v is not None and k not in ("events", "timestamp_unix_ns", "observed_timestamp_unix_ns")
    }
    return (
        attributes,
        data.get("events"),
        data.get("timestamp_unix_ns") or 0,
        data["observed_timestamp_unix_ns"],
    )


def time_official(records: Sequence[Any], peer: OtlpReceiver) -> float:
    from opentelemetry._logs import LogRecord
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    provider = LoggerProvider(resource=Resource.create({"service.name": "traceml"}))
    processor = BatchLogRecordProcessor(
        OTLPLogExporter(endpoint=peer.endpoint, timeout=30),
        max_queue_size=len(records) + 1,
        schedule_delay_millis=200,
    )
    provider.add_log_record_processor(processor)
    logger = provider.get_logger("bench")
    peer.reset()
    gc.collect()
    start = time.perf_counter()
    for record in records:
        attributes, events, ts, observed = _official_record(record)
        logger.emit(
            LogRecord(
                timestamp=ts,
                observed_timestamp=observed,
                event_name=f"traceml.{record.STREAM}",
                attributes=attributes,
                body=events,
            )
        )
    provider.force_flush(120_000)
    elapsed = time.perf_counter() - start
    provider.shutdown()
    got = sum(r["records"] for r in peer.requests() if r["status"] == 200)
    if got != len(records):
        print(f"  note: the official pipeline delivered {got} of {len(records)} records")
    return elapsed


def best(run: Callable[[], float]) -> float:
    return min(run() for _ in range(REPEATS))


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        make = baked_exporter(Path(folder), "otlp", "bench").make_exporter
        results: list[bool] = []
        with OtlpReceiver() as peer:
            os.environ["OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"] = peer.endpoint
            for label, records, floor in (
                ("SDK corpus, every stream", corpus(CORPUS_RECORDS), FLOOR),
                ("step_time with 5 events", step_records(STEP_RECORDS), None),
            ):
                n = len(records)
                ours = n / best(lambda r=records: time_ours(make, r, peer))
                official = n / best(lambda r=records: time_official(r, peer))
                ratio = ours / official
                print(f"{label}: {n:,} records, write -> 2xx on loopback")
                print(f"  generated otlp exporter      {ours:>10,.0f} records/s")
                print(f"  official OTel SDK pipeline   {official:>10,.0f} records/s")
                print(f"  ratio {ratio:.1f}x (target >= {RATIO:g}x): {verdict(ratio >= RATIO)}")
                results.append(ratio >= RATIO)
                if floor is not None:
                    print(f"  floor {floor:,.0f} records/s: {verdict(ours >= floor)}")
                    results.append(ours >= floor)
    print(f"\n{summary(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
