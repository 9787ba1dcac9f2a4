"""The template's tensorboard exporter beside tensorboardX's ``add_scalar`` (issue 21).

Standalone: ``python tests/benchmarks/bench_tensorboard.py`` (``nox -s bench`` runs it;
it needs cookiecutter, tensorboard, tensorboardX and the sink's google-crc32c). The
exporter is baked from ``template/`` into a temporary folder and imported from there.
Both writers get the same points, step_time records with 5 events (20 scalars each, as
``bench_export.py``'s payloads), and are timed from the first call to a closed file,
best of ``REPEATS`` interleaved runs; each output is then read back with TensorBoard's
``EventAccumulator`` and must hold every point (a writer that lost points gets no figure).

Target: the exporter writes at least 10x the points/s of tensorboardX. Prints PASS or
MISS; exits 0.
"""

from __future__ import annotations

import gc
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tensorboard.backend.event_processing import event_accumulator
from tensorboardX import SummaryWriter
from traceml_exporter_sdk import ExporterContext

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the one bake
from _smoke import scaled, summary, verdict
from bake import baked_exporter
from bench_export import RANKS, build_batches, step_time_payload

ROOT = Path(__file__).resolve().parents[2]
REPEATS = scaled(3, 1)
TICKS = scaled(8, 1)
STEPS = 8
MEASURES = ("duration_ms", "cpu_ms", "gpu_ms", "n_calls")
Factory = Callable[[ExporterContext], Any]
Point = tuple[int, str, float, int, float]
"""``(rank, tag, value, step, wall_time)``."""


def points_of(records: list[Any]) -> list[Point]:
    """The scalars of step_time records, as the sink's README maps them."""
    out = []
    for record in records:
        data = record.to_dict()
        wall = data["timestamp_unix_ns"] / 1e9
        for name, devices in data["events"].items():
            for device, stats in devices.items():
                for measure in MEASURES:
                    value = stats.get(measure)
                    if value is not None:
                        tag = f"step_time/{name}/{device}/{measure}"
                        out.append((data["rank"], tag, value, data["step"], wall))
    return out


def run_exporter(factory: Factory, batches: list[list[Any]], folder: Path) -> float:
    context = ExporterContext.create(folder / "session", export_streams="all")
    exporter = factory(context)
    gc.collect()
    start = time.perf_counter()
    exporter.open()
    for batch in batches:
        exporter.write(batch)
        exporter.flush()
    exporter.close()
    elapsed = time.perf_counter() - start
    shutil.move(str(context.export_dir / "tensorboard"), str(folder / "out"))
    return elapsed


def run_tensorboardx(points: list[Point], folder: Path) -> float:
    gc.collect()
    start = time.perf_counter()
    writers: dict[int, SummaryWriter] = {}
    for rank, tag, value, step, wall in points:
        writer = writers.get(rank)
        if writer is None:
            writer = writers[rank] = SummaryWriter(str(folder / "out" / f"rank_{rank}"))
        writer.add_scalar(tag, value, step, walltime=wall)
    for writer in writers.values():
        writer.close()
    return time.perf_counter() - start


def points_read_back(out: Path) -> int:
    """Every scalar point under ``out``, read with TensorBoard's EventAccumulator."""
    total = 0
    for run_dir in sorted(out.iterdir()):
        events = event_accumulator.EventAccumulator(
            str(run_dir), size_guidance={event_accumulator.SCALARS: 0}
        ).Reload()
        total += sum(len(events.Scalars(t)) for t in events.Tags()[event_accumulator.SCALARS])
    return total


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bench-tensorboard-"))
    try:
        factory = baked_exporter(tmp / "bake", "tensorboard").make_exporter
        batches = build_batches(lambda r, t, rng: step_time_payload(r, t, STEPS, rng), TICKS)
        records = [record for batch in batches for record in batch]
        points = points_of(records)
        print(
            f"{len(records):,} step_time records of {RANKS} ranks, {len(points):,} points "
            f"({len(points) / len(records):.0f} per record); best of {REPEATS}"
        )
        best = {"exporter": 0.0, "tensorboardX": 0.0}
        for repeat in range(REPEATS):
            for name in best:
                folder = tmp / f"{name}-{repeat}"
                folder.mkdir()
                if name == "exporter":
                    elapsed = run_exporter(factory, batches, folder)
                else:
                    elapsed = run_tensorboardx(points, folder)
                back = points_read_back(folder / "out")
                if back != len(points):
                    print(f"{name}: read back {back:,} of {len(points):,} points: no figure")
                    continue
                best[name] = max(best[name], len(points) / elapsed)
                shutil.rmtree(folder)
        for name, rate in best.items():
            print(f"  {name:13s} {rate:12,.0f} points/s   (read back complete)")
        ratio = best["exporter"] / best["tensorboardX"] if best["tensorboardX"] else 0.0
        print(f"target: exporter >= 10x tensorboardX: {ratio:.1f}x {verdict(ratio >= 10)}")
        print(summary([ratio >= 10]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
