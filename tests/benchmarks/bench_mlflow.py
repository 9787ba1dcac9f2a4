"""The template's mlflow exporter beside the server's own ceiling and MLflow's fluent API
(issue 21), and its default cross-rank summary at a 512-rank run's rate (issue 33).

Standalone: ``python tests/benchmarks/bench_mlflow.py`` (``nox -s bench`` runs it; it
needs cookiecutter and ``mlflow[auth]``). The exporter is baked from ``template/`` into a
temporary folder and imported from there, and the baked project's test peer
(``tests/mlflow_server.py``) starts one local ``mlflow server`` (sqlite, no auth) for
all three:

* the exporter with a run per rank (``TRACEML_MLFLOW_RANK_RUNS=all``): step_time
  records of 64 ranks with 5 events (20 points each), ``write`` and a ``flush`` every
  ``FLUSH_EVERY`` batches, to ``close``;
* the ceiling: the same points as prebuilt ``runs/log-batch`` bodies (1,000 metrics,
  encoded before the clock starts) POSTed one after another, no exporter work at all;
  measured beside the exporter (before it, then after it), ``ROUNDS`` times: the median
  pair's ratio counts;
* the fluent API: ``mlflow.log_metrics`` once per step (one record's 20 points), on the
  first ``FLUENT_RECORDS`` records (it is slow; the rate is what counts).

* the default exporter (the cross-rank summary, no rank run) on step_time records of
  ``BIG_RANKS`` ranks (5 events each), ``write`` and a ``flush`` every
  ``BIG_FLUSH_EVERY`` batches, to ``close``: records/s against the 5,120 records/s a
  512-rank run makes at 10 steps/s, and the lag (the most steps waiting for ranks after
  a flush, the longest flush).

Each figure is points/s from the first call to the last 200. Targets: the exporter at
least 80% of the ceiling and at least 5x the fluent path; the summary at least 5,120
records/s with at most the default wait (64 steps) waiting. The load average is printed
beside the ratios (the ceiling moves with it). Prints PASS or MISS; exits 0.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import urllib3
from traceml_exporter_sdk import ExporterContext

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the one bake
from _smoke import scaled, summary, verdict
from bake import bake, exporter_of
from bench_export import build_batches, step_time_payload
from traceml_exporter_sdk import records_from_payload

ROOT = Path(__file__).resolve().parents[2]
TICKS = scaled(8, 1)
STEPS = 8
FLUSH_EVERY = 16
ROUNDS = scaled(5, 1)
"""Ceiling and exporter pairs, in turn ceiling first and exporter first (the server's
database grows through the run); the ratio is the median pair's (the load of a shared
machine moves between two measurements a minute apart)."""
FLUENT_RECORDS = scaled(40, 4)
BIG_RANKS = scaled(512, 4)
BIG_TICKS = scaled(4, 1)
BIG_FLUSH_EVERY = 128
BIG_RATE = 5_120
"""step_time records/s of 512 ranks at 10 steps/s."""
Factory = Callable[[ExporterContext], Any]


def points_of(records: list[Any]) -> dict[int, list[dict[str, Any]]]:
    """Per rank, the log-batch metrics of its records, as the sink maps them."""
    out: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        data = record.to_dict()
        for name, devices in data["events"].items():
            for device, stats in devices.items():
                for measure in ("duration_ms", "cpu_ms", "gpu_ms", "n_calls"):
                    if stats.get(measure) is not None:
                        out.setdefault(data["rank"], []).append(
                            {
                                "key": f"step_time/{name}/{device}/{measure}",
                                "value": float(stats[measure]),
                                "timestamp": data["timestamp_unix_ns"] // 1_000_000,
                                "step": data["step"],
                            }
                        )
    return out


def new_experiment(env: dict[str, str]) -> None:
    env["MLFLOW_EXPERIMENT_NAME"] = f"bench-{uuid.uuid4().hex[:8]}"
    os.environ.update(env)


def run_exporter(
    factory: Factory,
    batches: list[list[Any]],
    folder: Path,
    every: int = FLUSH_EVERY,
    after_flush: Callable[[Any, float], None] | None = None,
) -> float:
    """Seconds from open() to close() returning, a flush every ``every`` batches; after
    each, ``after_flush(exporter, its seconds)``."""
    exporter = factory(ExporterContext.create(folder, export_streams="all"))
    start = time.perf_counter()
    exporter.open()
    for index, batch in enumerate(batches, 1):
        exporter.write(batch)
        if index % every == 0:
            began = time.perf_counter()
            exporter.flush()
            if after_flush is not None:
                after_flush(exporter, time.perf_counter() - began)
    exporter.close()
    return time.perf_counter() - start


def big_batches() -> list[list[Any]]:
    """One batch per rank per tick (``STEPS`` steps), ranks interleaved, world_size
    ``BIG_RANKS``."""
    rng = random.Random(5)
    batches = []
    for tick in range(BIG_TICKS):
        for rank in range(BIG_RANKS):
            payload = step_time_payload(rank, tick, STEPS, rng)
            payload[0]["meta"]["world_size"] = BIG_RANKS
            batches.append(records_from_payload(payload, observed_timestamp_unix_ns=tick).records)
    return batches


def run_summary(
    factory: Factory, batches: list[list[Any]], folder: Path
) -> tuple[float, int, float]:
    """Seconds from open() to close(), the most steps waiting after a flush, the longest
    flush."""
    waiting, longest = [0], [0.0]

    def lag(exporter: Any, seconds: float) -> None:
        waiting[0] = max(waiting[0], exporter._summary.waiting)
        longest[0] = max(longest[0], seconds)

    seconds = run_exporter(factory, batches, folder, BIG_FLUSH_EVERY, lag)
    return seconds, waiting[0], longest[0]


def run_ceiling(peer: Any, points: dict[int, list[Any]]) -> float:
    experiment = peer.call("POST", "experiments/create", {"name": f"ceiling-{uuid.uuid4().hex}"})
    bodies = []
    for rank, metrics in points.items():
        run = peer.call(
            "POST",
            "runs/create",
            {"experiment_id": experiment["experiment_id"], "run_name": f"rank {rank}"},
        )
        run_id = run["run"]["info"]["run_id"]
        for start in range(0, len(metrics), 1000):
            body = {"run_id": run_id, "metrics": metrics[start : start + 1000]}
            bodies.append(json.dumps(body).encode())
    headers = {"Content-Type": "application/json"}
    pool = urllib3.HTTPConnectionPool("127.0.0.1", peer.port, maxsize=1)
    start = time.perf_counter()
    for body in bodies:
        answer = pool.request(
            "POST", "/api/2.0/mlflow/runs/log-batch", body=body, headers=headers, retries=False
        )
        if answer.status != 200:
            raise RuntimeError(f"log-batch answered {answer.status}: {answer.data[:300]!r}")
    elapsed = time.perf_counter() - start
    pool.close()
    return elapsed


def run_fluent(records: list[Any]) -> tuple[float, int]:
    import mlflow

    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    mlflow.set_experiment(os.environ["MLFLOW_EXPERIMENT_NAME"])
    per_record = []
    for record in records:
        data = record.to_dict()
        metrics = {
            f"step_time/{name}/{device}/{measure}": float(stats[measure])
            for name, devices in data["events"].items()
            for device, stats in devices.items()
            for measure in ("duration_ms", "cpu_ms", "gpu_ms", "n_calls")
            if stats.get(measure) is not None
        }
        per_record.append((metrics, data["step"], data["timestamp_unix_ns"] // 1_000_000))
    with mlflow.start_run():
        start = time.perf_counter()
        for metrics, step, stamp in per_record:
            mlflow.log_metrics(metrics, step=step, timestamp=stamp, synchronous=True)
        elapsed = time.perf_counter() - start
    return elapsed, sum(len(m) for m, _, _ in per_record)


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bench-mlflow-"))
    os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
    peer = None
    try:
        project = bake(tmp / "bake", sink="mlflow", project_name="bench mlflow")
        factory = exporter_of(project).make_exporter
        sys.path.insert(0, str(project / "tests"))
        peers = importlib.import_module("mlflow_server")
        started = time.perf_counter()
        peer = peers.MlflowServer().start()
        print(f"mlflow server healthy after {time.perf_counter() - started:.1f} s")
        env = {"MLFLOW_TRACKING_URI": peer.url, "TRACEML_MLFLOW_TIMEOUT_S": "120"}
        batches = build_batches(lambda r, t, rng: step_time_payload(r, t, STEPS, rng), TICKS)
        batches = batches[: scaled(len(batches), 2)]  # smoke: two ranks' batches
        records = [record for batch in batches for record in batch]
        points = points_of(records)
        total = sum(map(len, points.values()))
        ranks = len(points)
        print(f"{len(records):,} step_time records of {ranks} ranks, {total:,} points")
        rounds = []  # (ceiling, exporter, load): each pair measured back to back
        for index in range(ROUNDS):
            figures: dict[str, float] = {}
            for side in ("ceiling", "exporter")[:: 1 if index % 2 == 0 else -1]:
                new_experiment(env)
                if side == "ceiling":
                    figures[side] = total / run_ceiling(peer, points)
                    continue
                os.environ["TRACEML_MLFLOW_RANK_RUNS"] = "all"
                figures[side] = total / run_exporter(factory, batches, tmp / f"session{index}")
                del os.environ["TRACEML_MLFLOW_RANK_RUNS"]
            rounds.append((figures["ceiling"], figures["exporter"], os.getloadavg()))
        ceiling, exporter, load = sorted(rounds, key=lambda r: r[1] / r[0])[len(rounds) // 2]
        new_experiment(env)
        elapsed, fluent_points = run_fluent(records[:FLUENT_RECORDS])
        fluent = fluent_points / elapsed
        big = big_batches()
        big_records = sum(map(len, big))
        new_experiment(env)
        seconds, waiting, longest = run_summary(factory, big, tmp / "big")
        rate = big_records / seconds
        big_load = os.getloadavg()
        for number, (one, two, at) in enumerate(rounds, 1):
            print(
                f"  round {number}: ceiling {one:,.0f}, exporter {two:,.0f} points/s, "
                f"ratio {two / one:.3f} (load average {at[0]:.2f})"
            )
        print("  the median round:")
        print(f"  ceiling (prebuilt log-batch)  {ceiling:10,.0f} points/s")
        print(
            f"  the exporter, rank runs on    {exporter:10,.0f} points/s "
            f"({exporter / 20:,.0f} records/s)"
        )
        print(f"  fluent mlflow.log_metrics     {fluent:10,.0f} points/s ({FLUENT_RECORDS} steps)")
        print(
            f"  the summary, {BIG_RANKS} ranks         {rate:10,.0f} records/s "
            f"({big_records:,} records; lag: at most {waiting} steps waiting after a flush, "
            f"longest flush {longest * 1000:,.0f} ms)"
        )
        loads = "load average {:.2f} {:.2f} {:.2f}"
        results = []
        for label, ratio, target in (
            ("exporter / ceiling", exporter / ceiling, 0.8),
            ("exporter / fluent", exporter / fluent, 5.0),
        ):
            results.append(ratio >= target)
            print(
                f"target: {label} >= {target:g}: {ratio:.3f} {verdict(results[-1])} "
                f"({loads.format(*load)})"
            )
        results.append(rate >= BIG_RATE and waiting <= 64)
        print(
            f"{BIG_RANKS}-rank step_time rate kept up: {verdict(results[-1])} "
            f"({rate:,.0f} records/s, target {BIG_RATE:,}; {loads.format(*big_load)})"
        )
        print(summary(results))
    finally:
        if peer is not None:
            peer.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
