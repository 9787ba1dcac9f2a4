"""The template's parquet exporter beside the SDK's jsonl exporter (issue 13).

Standalone: ``python tests/benchmarks/bench_parquet.py`` (``nox -s bench`` runs it;
it needs pyarrow and cookiecutter). The parquet exporter is baked from
``template/`` into a temporary folder and imported from there. Every figure is
measured in this run, both exporters on the same records through
``ExportWorker`` (TraceML's call discipline, default flush interval), best of
``REPEATS`` interleaved runs:

* records/s on step_memory, on step_time with 5 events per step, and on a mix
  of every stream (the payloads of ``bench_export.py``), and on the SDK's
  sample corpus;
* bytes on disk after ``close`` (hard links counted once).

Targets: parquet at least as fast as jsonl on step_memory and on the mix, and
at most a quarter of jsonl's bytes. Prints PASS or MISS per target; exits 0.
"""

from __future__ import annotations

import gc
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow
from traceml_exporter_sdk import ExporterContext, ExportWorker
from traceml_exporter_sdk.testing import corpus_batches

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the one bake
from _smoke import scaled, summary, verdict
from bake import baked_exporter
from bench_export import (  # the workload of the export benchmark, shared
    STEPS_PER_TICK,
    build_batches,
    mixed_payload,
    rank_meta,
    step_time_payload,
)

ROOT = Path(__file__).resolve().parents[2]
REPEATS = scaled(5, 1)
Batch = list[Any]
Factory = Callable[[ExporterContext], object]


def step_memory_payload(rank: int, tick: int, rng: random.Random) -> list[Any]:
    """One rank's StepMemorySampler tick: peaks of STEPS_PER_TICK steps on its GPU."""
    t_ns = 1_750_000_000_000_000_000 + tick * 1_000_000_000
    rows = [
        {
            "seq": tick,
            "ts": t_ns + i,
            "device": f"cuda:{rank % 8}",
            "step": tick * STEPS_PER_TICK + i,
            "peak_alloc": rng.uniform(1e9, 8e9),
            "peak_resv": 8.5e9,
        }
        for i in range(STEPS_PER_TICK)
    ]
    meta = rank_meta(rank=rank, sampler="StepMemorySampler", t_ns=t_ns, omit=("pid",))
    return [{"meta": meta, "body": {"tables": {"step_memory": rows}}}]


def disk_bytes(root: Path) -> int:
    """Bytes of every regular file under ``root``; a hard-linked file counts once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            stat = os.lstat(os.path.join(folder, name))
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_size
    return total


def run_worker(
    exporter: str | Factory, batches: Sequence[Batch], streams: str, root: Path
) -> tuple[float, int]:
    """Seconds from start() to shutdown() with every record delivered, and bytes written."""
    context = ExporterContext.create(root, streams, exporter_hostname=False)
    worker = ExportWorker(exporter, context, queue_size=len(batches) + 1)
    gc.collect()
    started = time.perf_counter()
    worker.start()
    submit = worker.submit_records
    for batch in batches:
        submit(batch)
    report = worker.shutdown(timeout=None)
    elapsed = time.perf_counter() - started
    expected = sum(map(len, batches))
    if report.failed_records or report.dropped_batches or report.admitted_records != expected:
        raise SystemExit(f"benchmark run lost records: {report}")
    size = disk_bytes(context.export_dir)
    shutil.rmtree(root)
    return elapsed, size


def compare(
    name: str, batches: list[Batch], streams: str, parquet: Factory, tmp: Path, *, targets: bool
) -> list[bool]:
    """Best of REPEATS interleaved runs of jsonl and parquet on the same batches."""
    n = sum(map(len, batches))
    contenders: dict[str, str | Factory] = {"jsonl": "jsonl", "parquet": parquet}
    times: dict[str, list[float]] = {key: [] for key in contenders}
    sizes: dict[str, int] = {}
    for key, exporter in contenders.items():  # warm-up: imports, page cache
        run_worker(exporter, batches[: len(batches) // 8 + 1], streams, tmp / f"warm-{key}")
    for i in range(REPEATS):
        for key, exporter in contenders.items():
            elapsed, sizes[key] = run_worker(exporter, batches, streams, tmp / f"{key}-{i}")
            times[key].append(elapsed)
    best = {key: min(values) for key, values in times.items()}
    print(f"\n{name}: {n:,} records in {len(batches):,} batches; best of {REPEATS} runs")
    for key in contenders:
        print(
            f"  {key:<8} {n / best[key]:>10,.0f} records/s  {best[key]:6.3f} s  "
            f"{sizes[key]:>12,} bytes  ({sizes[key] / n:6.1f} bytes/record)"
        )
    speed = best["jsonl"] / best["parquet"]
    share = sizes["parquet"] / sizes["jsonl"]
    if not targets:
        print(f"  parquet: {speed:4.2f}x jsonl's speed, {share:.3f} of its bytes (no target)")
        return []
    ok_speed, ok_size = speed >= 1.0, share <= 0.25
    print(f"  parquet speed / jsonl speed: {speed:5.2f}x (target >= 1)     {verdict(ok_speed)}")
    print(f"  parquet bytes / jsonl bytes: {share:5.3f}  (target <= 0.25)  {verdict(ok_size)}")
    return [ok_speed, ok_size]


def main() -> int:
    print(f"bench_parquet: Python {sys.version.split()[0]}, pyarrow {pyarrow.__version__}")
    results: list[bool] = []
    with tempfile.TemporaryDirectory(prefix="bench-parquet-") as name:
        tmp = Path(name)
        parquet = baked_exporter(tmp / "baked", "parquet").make_exporter
        memory = build_batches(step_memory_payload, scaled(200, 2))
        steps = build_batches(
            lambda r, t, rng: step_time_payload(r, t, STEPS_PER_TICK, rng), scaled(100, 2)
        )
        mixed = build_batches(mixed_payload, scaled(60, 2))
        corpus = corpus_batches(repeat=scaled(400, 2))
        gc.collect()
        gc.freeze()  # the records outlive every run: keep the collector off them
        results += compare("step_memory", memory, "step_memory", parquet, tmp, targets=True)
        results += compare("step_time, 5 events", steps, "step_time", parquet, tmp, targets=False)
        results += compare("mixed, every stream", mixed, "all", parquet, tmp, targets=True)
        results += compare("sample corpus x400", corpus, "all", parquet, tmp, targets=False)
    print(f"\nbench_parquet: {summary(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
