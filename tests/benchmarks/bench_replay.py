"""``traceml-exporter replay`` and ``replay --sqlite`` (backfill) at disk speed (issue 14).

Writes RECORDS step_time records as JSON Lines payloads (each line one payload: a list
of one StepTimeSampler envelope carrying ROWS_PER_PAYLOAD steps with the five
``_traceml_internal`` events, the shape of a real CPU run's step rows), then times,
in CPU seconds, all in this run:

- 0.5.0 baseline: the same file read line by line, decoded with ``orjson`` and
  projected with traceml-ai 0.5.0 alone (``normalize_telemetry_envelope`` and
  step_time's ``build_rows``), in this process;
- replay: ``traceml-exporter replay jsonl --payloads FILE`` as a subprocess, start to
  exit (reading, decoding, mapping, the jsonl exporter writing every record, fsync
  on close), its CPU time and peak RSS from the child's own rusage; also run on a
  file a quarter the size, so the two peaks show whether memory stays flat;
- backfill: ``traceml-exporter replay jsonl --sqlite DB`` on a database of
  BACKFILL_ROWS step_time rows in the contract's layout, against the 0.5.0 baseline's
  per-row rate;
- worker alone: the same payloads, already decoded in memory, submitted to an
  ``ExportWorker`` whose exporter does nothing (and, for information, fed ready-made
  records), the floor any replay of these payloads pays.

Targets: replay at least 4x the 0.5.0 baseline's records/s (CPU); replay CPU time
< 2x the worker alone. Prints records/s, PASS or MISS per target, and exits 0 either
way. ``--records`` and ``--backfill-rows`` scale it down for a quick look.
"""

from __future__ import annotations

import argparse
import gc
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import _smoke
import orjson
from _smoke import scaled, verdict
from traceml_exporter_sdk import ExporterContext, ExportWorker, StepTimeRecord, records_from_payload

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "follow"))  # the no-op exporter
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the payloads builder
from failing_exporter import NoOpExporter
from payloads import meta

RECORDS = scaled(1_000_000, 4_000)
ROWS_PER_PAYLOAD = 10
BACKFILL_ROWS = scaled(200_000, 2_000)
TARGET_RATIO = 2.0
TARGET_VS_REFERENCE = 4.0

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
            "meta": meta(
                sampler="StepTimeSampler",
                rank=rank,
                world_size=2,
                hostname="bench-host",
                pid=4242 + rank,
                timestamp=1_760_000_000_000_000_000 + index,
            ),
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


def time_reference(path: Path) -> tuple[float, int]:
    """0.5.0 alone: orjson per line, then normalize_telemetry_envelope + build_rows."""
    from traceml_ai.aggregator.sqlite_writers import step_time
    from traceml_ai.telemetry.envelope import normalize_telemetry_envelope

    build_rows = step_time.build_rows
    rows = 0
    gc.collect()
    cpu = time.process_time()
    with path.open("rb") as fh:
        for line in fh:
            for item in orjson.loads(line):
                envelope = normalize_telemetry_envelope(item)
                if envelope is None:
                    continue
                for table in build_rows(envelope=envelope, recv_ts_ns=time.time_ns()).values():
                    rows += len(table)
    return time.process_time() - cpu, rows


def run_child(command: list[str]) -> tuple[float, float, int, str]:
    """Run the CLI; its wall and CPU seconds, peak RSS in MB, and stdout (from wait4)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"{command[3:5]} failed ({proc.returncode}): {stderr.strip()}")
    cpu = usage.ru_utime + usage.ru_stime
    return elapsed, cpu, usage.ru_maxrss // 1024, stdout


def time_replay(path: Path, root: Path) -> tuple[float, float, int, str]:
    command = [sys.executable, "-m", "traceml_exporter_sdk.cli", "replay", "jsonl"]
    command += ["--payloads", str(path), "--session-root", str(root)]
    return run_child(command)


def write_database(path: Path, payloads: Path, rows: int) -> int:
    """The first ``rows`` step_time records of the payload file, as the contract's table."""
    columns = ", ".join(
        "events_json TEXT NOT NULL" if name == "events" else f"{name}"
        for name in StepTimeRecord.COLUMNS
    )
    names = [("events_json" if n == "events" else n) for n in StepTimeRecord.COLUMNS]
    insert = (
        f"INSERT INTO step_time_samples ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
    )
    written = 0
    with sqlite3.connect(path) as conn:
        conn.execute(
            f"CREATE TABLE step_time_samples (id INTEGER PRIMARY KEY AUTOINCREMENT, {columns})"
        )
        with payloads.open("rb") as fh:
            for line in fh:
                batch = records_from_payload(orjson.loads(line)).records
                values = []
                for record in batch[: rows - written]:
                    data = record.to_dict()
                    events = orjson.dumps(data.pop("events"), option=orjson.OPT_SORT_KEYS)
                    values.append([*list(data.values())[2:], events.decode()])
                conn.executemany(insert, values)
                written += len(values)
                if written >= rows:
                    break
    conn.close()
    return written


def time_backfill(db: Path, root: Path) -> tuple[float, float, int, str]:
    command = [sys.executable, "-m", "traceml_exporter_sdk.cli", "replay", "jsonl"]
    command += ["--sqlite", str(db), "--session-root", str(root)]
    return run_child(command)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=RECORDS)
    parser.add_argument("--rows-per-payload", type=int, default=ROWS_PER_PAYLOAD)
    parser.add_argument("--backfill-rows", type=int, default=BACKFILL_ROWS)
    args, _ = parser.parse_known_args(argv)  # nox -s bench passes its posargs to every script

    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        base = Path(tmp)
        path = base / "payloads.jsonl"
        t0 = time.perf_counter()
        lines = write_payloads(path, args.records, args.rows_per_payload)
        records = lines * args.rows_per_payload
        size_mb = path.stat().st_size / 1e6
        quarter = base / "quarter.jsonl"
        quarter_lines = write_payloads(quarter, records // 4, args.rows_per_payload)
        print(
            f"bench_replay: {records:,} step_time records in {lines:,} payloads "
            f"({size_mb:,.0f} MB of JSON Lines, written in {time.perf_counter() - t0:.1f} s)"
        )

        ref_cpu, ref_rows = time_reference(path)
        assert ref_rows == records, ref_rows
        replay_s, replay_cpu, replay_rss, summary = time_replay(path, base / "replay")
        assert f"step_time                {records:,}" in summary, summary
        out_mb = (
            base / "replay" / "aggregator" / "export" / "step_time.jsonl"
        ).stat().st_size / 1e6
        _, quarter_cpu, quarter_rss, _ = time_replay(quarter, base / "replay-quarter")

        db = base / "backfill.sqlite"
        db_rows = write_database(db, path, args.backfill_rows)
        fill_s, fill_cpu, fill_rss, summary = time_backfill(db, base / "backfill")
        assert f"step_time                {db_rows:,}" in summary, summary

        payloads = [orjson.loads(line) for line in path.read_bytes().splitlines()]
        worker_s, worker_cpu, admitted = time_worker(payloads, base / "worker", records=False)
        assert admitted == records, admitted
        ready = [records_from_payload(p, observed_timestamp_unix_ns=0).records for p in payloads]
        del payloads
        records_s, records_cpu, admitted = time_worker(ready, base / "records", records=True)
        assert admitted == records, admitted

    ref_rate = ref_rows / ref_cpu
    vs_ref = (records / replay_cpu) / ref_rate
    ratio = replay_cpu / worker_cpu
    rows = [
        ("0.5.0 alone (orjson + build_rows)", float("nan"), ref_cpu, records, "  (baseline)"),
        ("replay (jsonl exporter, whole CLI run)", replay_s, replay_cpu, records, ""),
        ("backfill (replay --sqlite, whole CLI run)", fill_s, fill_cpu, db_rows, ""),
        ("worker alone (same payloads, no-op)", worker_s, worker_cpu, records, ""),
        ("worker, ready records (no mapping)", records_s, records_cpu, records, "  (information)"),
    ]
    print(f"  {'':<42} {'records':>9} {'wall s':>7} {'CPU s':>7} {'records/s (CPU)':>16}")
    for label, wall, cpu, n, note in rows:
        print(f"  {label:<42} {n:>9,} {wall:7.2f} {cpu:7.2f} {n / cpu:16,.0f}{note}")
    print(
        f"  jsonl written: {out_mb:,.0f} MB; wall ratio replay / worker {replay_s / worker_s:.2f}x"
    )
    print(
        f"  peak RSS of replay: {replay_rss:,} MB for {size_mb:,.0f} MB of payloads, "
        f"{quarter_rss:,} MB for a quarter of them ({quarter_lines * args.rows_per_payload:,} "
        f"records, {quarter_cpu:.2f} CPU s); backfill: {fill_rss:,} MB"
    )
    print(
        f"  replay / 0.5.0 alone (records/s, CPU) {vs_ref:.2f}x "
        f"(target >= {TARGET_VS_REFERENCE:g}x): {verdict(vs_ref >= TARGET_VS_REFERENCE)}"
    )
    fill_vs_ref = (db_rows / fill_cpu) / ref_rate
    print(f"  backfill / 0.5.0 alone (rows/s, CPU) {fill_vs_ref:.2f}x (figure)")
    print(
        f"  ratio replay / worker alone (CPU time) {ratio:.2f}x (target < {TARGET_RATIO:.0f}x): "
        f"{verdict(ratio < TARGET_RATIO)}"
    )
    print(f"\n{_smoke.summary([vs_ref >= TARGET_VS_REFERENCE, ratio < TARGET_RATIO])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
