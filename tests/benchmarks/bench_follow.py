"""``traceml-exporter follow`` beside a live TraceML 0.5.0 database at a 512-rank run's rate.

A writer in this process (``tests/follow/writer050.py``'s ``Writer050``: 0.5.0's
schema, WAL, one transaction per flush every 0.5 s) inserts 0.5.0-shaped rows as a
512-rank job would: per second 5,120 step_time and 5,120 step_memory rows (10 steps
a second on each rank), 512 process rows (1 Hz a rank) and 64 system rows (1 Hz on
each of 64 nodes): 10,816 rows/s. Each row's ``recv_ts_ns`` is the wall time of the
flush that commits it. ``follow`` runs as a subprocess with the jsonl exporter
(``_lag_exporter.py``: jsonl, plus the time from each row's stamp to the exporter
flush that saw it out). Measured, all in this run:

- (a) the highest writer rate, in multiples of the 512-rank rate, the follower keeps
  up with: every row exported, the lag at p99 under 2 s and the follower ending
  within 2 s of the writer's last commit; the rates go up (1, 2, 3, 5, 8, 12x) until
  one is missed (target >= 5x);
- (b) the lag from a row's commit to the exporter's flush, at p99, at the 512-rank
  rate (target < 2 s; default --poll-interval 0.25 and --flush-interval 1);
- (c) the follower's CPU at the 512-rank rate, from its /proc stat over the steady
  part of the phase (target <= 20% of one core);
- beside them, ``replay jsonl --sqlite`` of the same database, finished: its rows/s
  (CPU) and CPU seconds, and the writer's own ceiling (rows/s it commits flat out);
- the ceiling of the stages themselves on one core: the same database's pages
  read by SQLite alone, turned into records alone, and written by the jsonl
  exporter alone, one after the other in one thread with no follower, worker or
  queue (``--stages``, in a process of its own), each stage's CPU time apart.

Prints PASS or MISS per target outside smoke mode; exits 0 either way.
``--seconds`` and ``--rates`` scale it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from _smoke import SMOKE, scaled, summary, verdict

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "follow"))
sys.path.insert(0, str(HERE.parent))  # tests/: the shared helpers

from child_env import child_env  # noqa: E402
from traceml_exporter_sdk._bridge.sqlite_source import TABLE_BY_STREAM  # noqa: E402
from traceml_exporter_sdk.records import (  # noqa: E402
    ProcessRecord,
    Record,
    StepMemoryRecord,
    StepTimeRecord,
    SystemRecord,
)
from writer050 import Writer050, columns_050, corpus_records_050, row_of  # noqa: E402

RANKS = 512
PER_SECOND = {"step_time": 5120, "step_memory": 5120, "process": 512, "system": 64}
RATE_512 = sum(PER_SECOND.values())
FLUSH_S = 0.5
SECONDS = scaled(15, 2)
RATES = (1, 2, 3, 5, 8, 12) if not SMOKE else (1, 5)
TARGET_RATE, TARGET_LAG_S, TARGET_CPU = 5.0, 2.0, 0.20
CLK_TCK = os.sysconf("SC_CLK_TCK")
TYPES: dict[str, type[Record]] = {
    "step_time": StepTimeRecord,
    "step_memory": StepMemoryRecord,
    "process": ProcessRecord,
    "system": SystemRecord,
}


class Rows:
    """0.5.0 rows of each table, made by SQLite itself so the writer's ceiling is SQLite's.

    A template row per table (from the corpus's records, ``row_of``) is copied into a
    TEMP table of the writer's connection (not in the database file) as many times as
    one flush needs at most, rank and step varying row by row; each flush is then one
    ``INSERT ... SELECT`` per table that sets ``recv_ts_ns`` and moves the steps on.
    """

    def __init__(self, writer: Writer050, most: float) -> None:
        samples: dict[str, Record] = {}
        for batch in corpus_records_050():
            for record in batch:
                # step_time: a record with several events, as a real step has
                wanted = record.STREAM != "step_time" or len(getattr(record, "events", {})) > 1
                if wanted and record.STREAM in TYPES and record.STREAM not in samples:
                    samples[record.STREAM] = record
        connection = writer.connection
        assert connection is not None
        self.connection = connection
        self.inserts: dict[str, str] = {}
        for stream, record_type in TYPES.items():
            names = [name for name, _ in columns_050(record_type)]
            template = list(row_of(samples[stream]))
            index = {name: i for i, name in enumerate(names)}
            count = round(PER_SECOND[stream] * most * FLUSH_S)
            rows = []
            for n in range(count):
                template[index["global_rank"]] = n % RANKS
                if "rank" in index:
                    template[index["rank"]] = n % RANKS
                if "step" in index:
                    template[index["step"]] = n // RANKS
                rows.append((n, *template))
            connection.execute(
                f"CREATE TEMP TABLE tpl_{stream} (n INTEGER PRIMARY KEY, {', '.join(names)})"
            )
            marks = ", ".join("?" * (len(names) + 1))
            connection.executemany(f"INSERT INTO temp.tpl_{stream} VALUES ({marks})", rows)
            selected = ", ".join(
                "?1" if name == "recv_ts_ns" else "step + ?2" if name == "step" else name
                for name in names
            )
            self.inserts[stream] = (
                f"INSERT INTO main.{TABLE_BY_STREAM[stream]} ({', '.join(names)}) "
                f"SELECT {selected} FROM temp.tpl_{stream} WHERE n < ?3 ORDER BY n"
            )
        self.step = 0

    def commit(self, multiple: float) -> int:
        """One flush as 0.5.0's, every insert in one transaction, stamped with its time."""
        connection, total = self.connection, 0
        stamp = time.time_ns()
        connection.execute("BEGIN")
        for stream, per_s in PER_SECOND.items():
            count = round(per_s * multiple * FLUSH_S)
            connection.execute(self.inserts[stream], (stamp, self.step, count))
            total += count
        connection.execute("COMMIT")
        self.step += round(10 * multiple * FLUSH_S)
        return total


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


@dataclass
class Phase:
    multiple: float
    rows: int
    write_s: float
    writer_rate: float
    lag_p50: float
    lag_p99: float
    lag_max: float
    tail_s: float
    cpu_share: float
    cpu_s: float
    """The follower's whole CPU time (start to exit, all threads)."""
    exported: int
    exit_code: int

    @property
    def kept_up(self) -> bool:
        return (
            self.exit_code == 0
            and self.exported == self.rows
            and self.lag_p99 < TARGET_LAG_S
            and self.tail_s < TARGET_LAG_S
        )


def percentile(lags: list[tuple[int, int]], share: float) -> float:
    total = sum(n for _, n in lags)
    if not total:
        return float("nan")
    seen = 0
    for ms, n in lags:
        seen += n
        if seen >= share * total:
            return ms / 1000
    return lags[-1][0] / 1000


def follow(root: Path, lag_file: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "traceml_exporter_sdk.cli", "follow"]
    command += ["_lag_exporter:make_exporter", "--session-root", str(root)]
    command += ["--streams", ",".join(PER_SECOND), "--wait", "30"]
    env = child_env([HERE], BENCH_LAG_FILE=str(lag_file))
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )


def run_phase(base: Path, multiple: float, seconds: float) -> tuple[Phase, Path]:
    root = base / f"run-{multiple:g}x"
    writer = Writer050(root, session_id=root.name, tables=TYPES)
    rows_of = Rows(writer, multiple)
    lag_file = base / f"lag-{multiple:g}x.json"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    follower = follow(root, lag_file)
    flushes = max(1, round(seconds / FLUSH_S))
    written = 0
    samples: list[tuple[float, float]] = []
    start = time.monotonic()
    for n in range(flushes):
        due = start + n * FLUSH_S
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        written += rows_of.commit(multiple)
        if n == min(2, flushes - 1) or n == flushes - 1:  # steady part: after the first second
            samples.append((time.monotonic(), proc_cpu(follower.pid)))
    write_s = max(time.monotonic() - start, flushes * FLUSH_S)
    last_commit = time.monotonic()
    writer.close()
    _out, err = follower.communicate(timeout=300)
    tail_s = time.monotonic() - last_commit
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the follower is the only child
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lags = [tuple(pair) for pair in json.loads(lag_file.read_text())] if lag_file.exists() else []
    (t0, c0), (t1, c1) = samples[0], samples[-1]
    cpu_share = (c1 - c0) / (t1 - t0) if t1 > t0 else float("nan")
    exported = sum(n for _, n in lags)
    if follower.returncode != 0:
        print(f"  follow at {multiple:g}x exited {follower.returncode}: {err.decode().strip()}")
    phase = Phase(
        multiple,
        written,
        write_s,
        written / write_s,
        percentile(lags, 0.50),  # type: ignore[arg-type]
        percentile(lags, 0.99),  # type: ignore[arg-type]
        lags[-1][0] / 1000 if lags else float("nan"),
        tail_s,
        cpu_share,
        cpu_s,
        exported,
        follower.returncode,
    )
    return phase, writer.database


def writer_ceiling(base: Path, seconds: float) -> float:
    """Rows/s the writer commits flat out (no pause, no follower): the peer's own ceiling."""
    writer = Writer050(base / "ceiling", tables=TYPES)
    rows_of = Rows(writer, 16)
    written, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        written += rows_of.commit(16)
    rate = written / (time.monotonic() - start)
    writer.close()
    return rate


def replay(database: Path, root: Path) -> tuple[float, float, int]:
    """``replay jsonl --sqlite`` of a finished database: wall s, CPU s, rows."""
    command = [sys.executable, "-m", "traceml_exporter_sdk.cli", "replay", "jsonl"]
    command += ["--sqlite", str(database), "--session-root", str(root)]
    command += ["--streams", ",".join(PER_SECOND)]
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"replay --sqlite failed: {stderr.strip()}")
    rows = sum(
        int(line.split()[-1].replace(",", ""))
        for line in stdout.splitlines()
        if line.strip().split(" ")[0] in PER_SECOND and line.startswith("  ")
    )
    return wall, usage.ru_utime + usage.ru_stime, rows


def stages(database: Path, root: Path) -> dict[str, float]:
    """CPU seconds of each stage alone over ``database``: SQLite's reads, building
    the records, the jsonl exporter's writes (one thread, page by page)."""
    from traceml_exporter_sdk._bridge.sqlite_rows import RowConverter
    from traceml_exporter_sdk._bridge.sqlite_source import PAGE_ROWS, open_database
    from traceml_exporter_sdk.context import ExporterContext
    from traceml_exporter_sdk.jsonl import JsonlExporter

    source = open_database(database, tuple(PER_SECOND))
    exporter = JsonlExporter(ExporterContext.create(root, ",".join(PER_SECOND), False))
    exporter.open()
    clock = time.process_time
    spent = {"read": 0.0, "build": 0.0, "write": 0.0, "rows": 0.0}

    def skip(row_id: int, reason: str) -> None:
        raise SystemExit(f"row {row_id} does not fit: {reason}")

    for plan in source.tables:
        converter, after = RowConverter(plan.stream), 0
        while True:
            t0 = clock()
            rows = source.connection.execute(plan.query, (after, PAGE_ROWS)).fetchall()
            t1 = clock()
            if not rows:
                break
            after = rows[-1][0]
            records = converter.records(rows, skip)
            t2 = clock()
            exporter.write(records)
            t3 = clock()
            spent["read"] += t1 - t0
            spent["build"] += t2 - t1
            spent["write"] += t3 - t2
            spent["rows"] += len(rows)
            del rows, records
    t0 = clock()
    exporter.flush()
    exporter.close()
    spent["write"] += clock() - t0
    source.close()
    return spent


def measure_stages(database: Path, root: Path) -> dict[str, float]:
    """``stages`` in a fresh process (this one holds the writer's and phases' garbage)."""
    command = [sys.executable, __file__, "--stages", str(database), str(root)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench_follow --stages failed: {done.stderr.strip()}")
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--rates", type=str, default=",".join(f"{r:g}" for r in RATES))
    parser.add_argument("--stages", nargs=2, metavar=("DB", "ROOT"), help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args(argv)  # nox -s bench passes its posargs to every script
    if args.stages:
        print(json.dumps(stages(Path(args.stages[0]), Path(args.stages[1]))))
        return 0
    rates = [float(r) for r in args.rates.split(",")]
    print(
        f"bench_follow: a 512-rank run's rate is {RATE_512:,} rows/s "
        f"({', '.join(f'{s} {n:,}' for s, n in PER_SECOND.items())}), "
        f"flushed every {FLUSH_S:g} s; {args.seconds:g} s a phase"
    )
    with tempfile.TemporaryDirectory(prefix="bench-follow-") as tmp:
        base = Path(tmp)
        ceiling = writer_ceiling(base, min(args.seconds, 3.0))
        phases: list[Phase] = []
        first_db: Path | None = None
        for multiple in rates:
            phase, database = run_phase(base, multiple, args.seconds)
            phases.append(phase)
            first_db = first_db or database
            if not phase.kept_up and multiple > rates[0]:
                break  # the rates go up: it keeps up with none above
        assert first_db is not None
        replay_wall, replay_cpu, replay_rows = replay(first_db, base / "replay")
        alone = measure_stages(first_db, base / "stages")
    print(f"  writer ceiling (flat out, no follower) {ceiling:,.0f} rows/s")
    header = (
        f"  {'rate':>5} {'writer rows/s':>13} {'rows':>9} {'lag p50':>8} {'p99':>6} "
        f"{'max':>6} {'tail s':>6} {'CPU':>6} {'rows/CPU s':>10} {'kept up':>8}"
    )
    print(header)
    for p in phases:
        print(
            f"  {p.multiple:>4g}x {p.writer_rate:13,.0f} {p.rows:9,} {p.lag_p50:8.2f} "
            f"{p.lag_p99:6.2f} {p.lag_max:6.2f} {p.tail_s:6.2f} {p.cpu_share:6.1%} "
            f"{p.rows / p.cpu_s:10,.0f} "
            f"{'yes' if p.kept_up else 'NO':>8}"
        )
    base_phase = phases[0]
    print(
        f"  replay --sqlite of the {rates[0]:g}x database: {replay_rows:,} rows, "
        f"{replay_wall:.2f} s wall, {replay_cpu:.2f} CPU s, {replay_rows / replay_cpu:,.0f} "
        f"rows/s (CPU); follow of the same rows: {base_phase.cpu_s:.2f} CPU s, "
        f"{base_phase.rows / base_phase.cpu_s:,.0f} rows per CPU s"
    )
    total = alone["read"] + alone["build"] + alone["write"]
    per_row = {k: alone[k] / alone["rows"] * 1e6 for k in ("read", "build", "write")}
    print(
        f"  the stages alone on one core, same rows: SQLite reads {per_row['read']:.1f} us a row, "
        f"building the records {per_row['build']:.1f} us, the jsonl exporter {per_row['write']:.1f} us: "
        f"{alone['rows'] / total:,.0f} rows per CPU s ({alone['rows'] / total / RATE_512:.1f}x the "
        f"512-rank rate, {RATE_512 / (alone['rows'] / total):.1%} of a core at 1x)"
    )
    fastest = max(p.rows / p.cpu_s for p in phases)
    print(
        f"  on a core of its own the follower would take at most {fastest:,.0f} rows/s "
        f"({fastest / RATE_512:.1f}x the 512-rank rate); the machine's load average now: "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores"
    )
    kept = [p.multiple for p in phases if p.kept_up]
    best = max(kept) if kept else 0.0
    one = next((p for p in phases if p.multiple == 1), base_phase)
    results = [best >= TARGET_RATE, one.lag_p99 < TARGET_LAG_S, one.cpu_share <= TARGET_CPU]
    print(
        f"  (a) highest rate kept up {best:g}x the 512-rank rate "
        f"(target >= {TARGET_RATE:g}x): {verdict(results[0])}"
    )
    print(
        f"  (b) lag commit -> exporter flush p99 {one.lag_p99:.2f} s at 1x "
        f"(target < {TARGET_LAG_S:g} s): {verdict(results[1])}"
    )
    print(
        f"  (c) follower CPU at 1x {one.cpu_share:.1%} of one core "
        f"(target <= {TARGET_CPU:.0%}): {verdict(results[2])}"
    )
    print(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
