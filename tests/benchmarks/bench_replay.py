"""How much ``traceml-exporter replay`` adds on top of the export worker itself.

Writes 1,000,000 step_time records as JSON Lines payloads (each line one payload:
a list of one StepTimeSampler envelope carrying ROWS_PER_PAYLOAD steps, the shape
of a real CPU run's step rows), then times:

- replay: ``traceml-exporter replay jsonl --payloads FILE`` as a subprocess, start
  to exit: reading and decoding the file, the worker's mapping, the jsonl exporter
  encoding and writing every record, fsync on close;
- worker alone: the same payloads, already decoded in memory, submitted to an
  ``ExportWorker`` whose exporter does nothing: the mapping and the worker's own
  queueing, the floor any replay of these payloads pays.

Also printed, for information: the worker fed ready-made records
(``submit_records``) into the no-op exporter, which skips the mapping.

Both are timed in wall-clock and CPU seconds (the replay's from the child's rusage).
The verdict uses CPU time, which other processes on a shared machine do not inflate;
on an idle machine the two agree (the worker's thread and the reader share one GIL).
Target: replay < 2x worker alone. Prints PASS or MISS and exits 0 either way.
"""

from __future__ import annotations

import argparse
import gc
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
from traceml_exporter_sdk import ExporterContext, ExportWorker, records_from_payload

RECORDS = 1_000_000
ROWS_PER_PAYLOAD = 10
TARGET_RATIO = 2.0

EVENTS = {
    "_traceml_internal:dataloader_next": 0.4,
    "_traceml_internal:forward_time": 3.1,
    "_traceml_internal:backward_time": 6.2,
    "_traceml_internal:optimizer_step": 1.3,
    "_traceml_internal:step_time": 11.5,
}


def payload(index: int, rows: int) -> list[dict[str, Any]]:
    rank = index % 2
    first = (index // 2) * rows
    return [
        {
            "meta": {
                "rank": rank,
                "global_rank": rank,
                "local_rank": rank,
                "world_size": 2,
                "local_world_size": 2,
                "node_rank": 0,
                "hostname": "bench-host",
                "pid": 4242 + rank,
                "sampler": "StepTimeSampler",
                "timestamp": 1_760_000_000_000_000_000 + index,
            },
            "body": {
                "tables": {
                    "StepTimeTable": [
                        {
                            "seq": step,
                            "timestamp": 1_760_000_000_000_000_000 + step * 1_000_000,
                            "step": step,
                            "events": {
                                name: {
                                    "cpu": {
                                        "is_gpu": False,
                                        "duration_ms": ms,
                                        "cpu_ms": ms,
                                        "gpu_ms": None,
                                        "n_calls": 1,
                                    }
                                }
                                for name, ms in EVENTS.items()
                            },
                        }
                        for step in range(first, first + rows)
                    ]
                }
            },
        }
    ]


def write_payloads(path: Path, records: int, rows: int) -> int:
    count = records // rows
    with path.open("wb") as fh:
        for index in range(count):
            fh.write(orjson.dumps(payload(index, rows)) + b"\n")
    return count


class NoOpExporter:
    def open(self) -> None:
        pass

    def write(self, records: Sequence[Any]) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self, *, dropped_batches: int = 0) -> None:
        pass


def no_op(context: ExporterContext) -> NoOpExporter:
    return NoOpExporter()


def time_worker(batches: list[Any], root: Path, records: bool) -> tuple[float, float, int]:
    # The batches are all in memory before the clock starts; keep the cyclic GC from
    # re-scanning them over and over, which would slow the baseline (and flatter the ratio).
    gc.collect()
    gc.freeze()
    context = ExporterContext.create(root, "step_time")
    worker = ExportWorker(no_op, context, queue_size=len(batches) + 1)
    submit = worker.submit_records if records else worker.submit
    start = time.perf_counter()
    cpu = time.process_time()
    worker.start()
    for batch in batches:
        submit(batch)
    report = worker.shutdown(timeout=None)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu
    gc.unfreeze()
    assert report.dropped_batches == 0, report
    assert report.failure is None, report
    return elapsed, cpu, report.admitted_records


def time_replay(path: Path, root: Path) -> tuple[float, float, str]:
    command = [sys.executable, "-m", "traceml_exporter_sdk.cli", "replay", "jsonl"]
    command += ["--payloads", str(path), "--session-root", str(root)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if result.returncode != 0:
        raise SystemExit(f"replay failed ({result.returncode}): {result.stderr.strip()}")
    return elapsed, cpu, result.stdout


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=RECORDS)
    parser.add_argument("--rows-per-payload", type=int, default=ROWS_PER_PAYLOAD)
    args, _ = parser.parse_known_args(argv)  # nox -s bench passes its posargs to every script

    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        base = Path(tmp)
        path = base / "payloads.jsonl"
        t0 = time.perf_counter()
        lines = write_payloads(path, args.records, args.rows_per_payload)
        records = lines * args.rows_per_payload
        size_mb = path.stat().st_size / 1e6
        print(
            f"bench_replay: {records:,} step_time records in {lines:,} payloads "
            f"({size_mb:,.0f} MB of JSON Lines, written in {time.perf_counter() - t0:.1f} s)"
        )

        replay_s, replay_cpu, summary = time_replay(path, base / "replay")
        assert f"step_time                {records:,}" in summary, summary
        out_mb = (
            base / "replay" / "aggregator" / "export" / "step_time.jsonl"
        ).stat().st_size / 1e6

        payloads = [orjson.loads(line) for line in path.read_bytes().splitlines()]
        worker_s, worker_cpu, admitted = time_worker(payloads, base / "worker", records=False)
        assert admitted == records, admitted
        ready = [records_from_payload(p, observed_timestamp_unix_ns=0).records for p in payloads]
        del payloads
        records_s, records_cpu, admitted = time_worker(ready, base / "records", records=True)
        assert admitted == records, admitted

    ratio = replay_cpu / worker_cpu
    verdict = "PASS" if ratio < TARGET_RATIO else "MISS"
    rows = [
        ("replay (jsonl exporter, whole CLI run)", replay_s, replay_cpu, ""),
        ("worker alone (same payloads, no-op)", worker_s, worker_cpu, ""),
        ("worker, ready records (no mapping)", records_s, records_cpu, "  (information)"),
    ]
    print(f"  {'':<40} {'wall s':>8} {'CPU s':>8} {'records/s (CPU)':>16}")
    for label, wall, cpu, note in rows:
        print(f"  {label:<40} {wall:8.2f} {cpu:8.2f} {records / cpu:16,.0f}{note}")
    print(f"  jsonl written: {out_mb:,.0f} MB; wall ratio {replay_s / worker_s:.2f}x")
    print(
        f"  ratio replay / worker alone (CPU time) {ratio:.2f}x (target < {TARGET_RATIO:.0f}x): "
        f"{verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
