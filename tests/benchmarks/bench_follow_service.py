"""``traceml-exporter follow`` left running as a service (issue 30): a 10-minute sink
outage beside a 512-rank run, and ``--logs-dir`` over 8 live runs and over 100 finished ones.

The writers are ``bench_follow.py``'s (``Writer050`` with its ``Rows``: 0.5.0's schema,
one transaction every 0.5 s, each row's ``recv_ts_ns`` the wall time of its commit),
in this process; ``follow`` runs as a subprocess with ``_outage_exporter.py`` (jsonl,
down while a flag file exists, and a line per flush that returned: its time and the
commit stamps of the records it saw out, so each row's lag, the lag per time window and
how often each commit's rows were acknowledged are known). Measured:

- (a) outage drain: a writer at the 512-rank rate (10,816 rows/s); after a warm-up
  the sink is down for ``--outage-seconds`` (600), then back while the writer goes
  on (``--retry-max-interval`` 2). The backlog when the sink comes back (written minus
  acknowledged; about 6.5 M rows), the time until the lag is back under 2 s for good
  (the p99 of the row lags of each ``--window-seconds`` window, every window after
  it under 2 s; target within 180 s), the follower's RSS every second from
  /proc/<pid>/status (target: under 200 MB throughout), and that every row was
  acknowledged, none twice, and the jsonl holds every row with no more repeats than
  ``status.json``'s ``resent_records`` (the follower's exit 0 too). ``status.json``'s
  ``lag_rows`` and ``lag_seconds``, polled every second, are printed beside.
- (b) ``follow --logs-dir`` over 8 runs of 64 ranks, each written at 1/8 of the
  512-rank rate (the same 10,816 rows/s in all, the 8 commits spread over each
  0.5 s): the follower's CPU over the steady part of ``--seconds`` (60) from
  /proc/<pid>/stat (target <= 25% of one core) and the lag p99 over all rows (target
  < 2 s); then ``--logs-dir`` over ``--finished-runs`` (100) runs already exported
  (each followed to its end once beforehand), for ``--idle-seconds`` (30): its CPU
  (target < 1% of one core).
- (c) beside them, for the ceiling: the single-run follower at 1x (``bench_follow``'s
  phase, ``--single-seconds`` 15), whose own targets ``bench_follow.py`` judges.

The machine's load average is printed with each part. Prints PASS or MISS per target
outside smoke mode; exits 0 either way. ``--parts`` picks parts (outage, single, logs,
idle: the order they run in); the flags above scale them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from _outage_exporter import FLUSH_LOG
from _smoke import scaled, summary, verdict
from bench_follow import FLUSH_S, PER_SECOND, RATE_512, TYPES, Rows, percentile, proc_cpu, run_phase
from traceml_exporter_sdk.testing.readback import jsonl_parts

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "follow"))
sys.path.insert(0, str(HERE.parent))  # tests/: the shared helpers

from child_env import child_env  # noqa: E402
from follow_files import status  # noqa: E402
from writer050 import Writer050  # noqa: E402

SPEC = "_outage_exporter:make_exporter"
STREAMS = ",".join(PER_SECOND)
TARGET_DRAIN_S, TARGET_LAG_S, TARGET_RSS_MB = 180.0, 2.0, 200.0
TARGET_LOGS_CPU, TARGET_IDLE_CPU = 0.25, 0.01
PARTS = ("outage", "single", "logs", "idle")
"""In the order they run: the single run just before the logs folder, for their ratio."""


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.0f} s"


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` (VmRSS), in MB; NaN once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def per_commit(multiple: float) -> int:
    """Rows in one of ``Rows.commit(multiple)``'s transactions."""
    return sum(round(per_s * multiple * FLUSH_S) for per_s in PER_SECOND.values())


def start_follow(
    where: str, path: Path, out: Path, *args: str, spec: str = SPEC, **env: str
) -> subprocess.Popen[bytes]:
    """``follow`` as its own process; its stdout and stderr (progress lines) to ``out``.*."""
    command = [sys.executable, "-m", "traceml_exporter_sdk.cli", "follow", spec]
    command += [where, str(path), "--streams", STREAMS, *args]
    with open(out.with_suffix(".out"), "wb") as stdout, open(out.with_suffix(".err"), "wb") as err:
        return subprocess.Popen(
            command,
            env=child_env([HERE], **env),
            stdout=stdout,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )


def ended(process: subprocess.Popen[bytes], timeout: float) -> int:
    """The follower's exit code once it ended; killed (-9) after ``timeout``."""
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return -9


def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    """Whether ``predicate`` came true within ``timeout`` seconds (looked at every 0.1 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


class Pacer:
    """Commits each writer's transaction every ``FLUSH_S``, the writers spread evenly over
    it, and calls ``tick(elapsed)`` about once a second until it says stop."""

    def __init__(self, rows: Sequence[Rows], multiple: float) -> None:
        self.rows = rows
        self.multiple = multiple
        self.written = 0
        self.commits = 0

    def run(self, tick: Callable[[float], bool]) -> float:
        """Returns the seconds it wrote for."""
        spacing = FLUSH_S / len(self.rows)
        start = next_tick = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= next_tick:
                if tick(now - start):
                    return now - start
                next_tick = max(next_tick + 1.0, now + 0.5)
            due = start + self.commits * spacing
            if now < due:
                time.sleep(min(due, next_tick) - now)
                continue
            self.written += self.rows[self.commits % len(self.rows)].commit(self.multiple)
            self.commits += 1


# -- what the exporters logged -----------------------------------------------------------


@dataclass
class Flush:
    t_ns: int
    stamps: list[tuple[int, int]]
    """(commit stamp, records of that commit seen out by this flush)."""
    streams: dict[str, int]


class FlushLog:
    """``_outage_exporter``'s flush lines of one run, read as they come."""

    def __init__(self, root: Path) -> None:
        self.path = root / FLUSH_LOG
        self.flushes: list[Flush] = []
        self._offset = 0
        self._partial = b""

    def read(self) -> list[Flush]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return self.flushes
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        for line in lines:
            entry = orjson.loads(line)
            self.flushes.append(Flush(entry["t"], entry["stamps"], entry["streams"]))
        return self.flushes


def lags(
    flushes: Sequence[Flush], since_ns: float = 0, until_ns: float = float("inf")
) -> list[tuple[int, int]]:
    """(lag ms, rows) sorted, of the rows seen out by the flushes in [since, until)."""
    counts: Counter[int] = Counter()
    for flush in flushes:
        if since_ns <= flush.t_ns < until_ns:
            for stamp, rows in flush.stamps:
                counts[(flush.t_ns - stamp) // 1_000_000] += rows
    return sorted(counts.items())


def windows(
    flushes: Sequence[Flush], start_ns: int, end_ns: int, width_s: float
) -> list[tuple[float, float, int]]:
    """(seconds after ``start_ns``, lag p99 s, rows) of each whole window up to ``end_ns``;
    a window with no rows has an infinite lag (nothing was seen out)."""
    out = []
    width = int(width_s * 1e9)
    for since in range(start_ns, end_ns - width + 1, width):
        histogram = lags(flushes, since, since + width)
        rows = sum(n for _, n in histogram)
        p99 = percentile(histogram, 0.99) if rows else float("inf")
        out.append(((since - start_ns) / 1e9, p99, rows))
    return out


def back_under(series: Sequence[tuple[float, float]], limit: float) -> float | None:
    """The first x of (x, value) pairs from which every value is under ``limit``."""
    first = None
    for x, value in reversed(series):
        if value >= limit:
            break
        first = x
    return first


@dataclass
class Acknowledged:
    """How often each commit's rows were acknowledged (flushes that returned)."""

    missing: int
    twice: int
    by_stream: dict[str, int]

    @classmethod
    def of(cls, flushes: Sequence[Flush], written: int, rows_each: int) -> Acknowledged:
        per_stamp: Counter[int] = Counter()
        by_stream: Counter[str] = Counter()
        for flush in flushes:
            per_stamp.update(dict(flush.stamps))
            by_stream.update(flush.streams)
        missing = written - sum(min(n, rows_each) for n in per_stamp.values())
        twice = sum(max(0, n - rows_each) for n in per_stamp.values())
        return cls(missing, twice, dict(by_stream))


def jsonl_records(root: Path) -> int:
    """Record lines in a run's jsonl export, every part (closing lines and a torn last
    line left out), counted without parsing them."""
    total = 0
    for stream in PER_SECOND:
        for path in jsonl_parts(root / "aggregator" / "export", stream):
            with open(path, "rb") as fh:
                last = b""
                while chunk := fh.read(1 << 24):
                    total += chunk.count(b"\n")
                    last = (last + chunk)[-4096:]
            if b'"closing":true' in last.rstrip(b"\n").rsplit(b"\n", 1)[-1]:
                total -= 1
    return total


# -- (a) a sink outage beside a 512-rank run ---------------------------------------------


@dataclass
class Sample:
    t: float
    part: str
    rss_mb: float
    cpu_s: float
    status: dict[str, Any]


@dataclass
class Outage:
    warmup_s: float
    outage_s: float
    written: int = 0
    backlog: int = 0
    status_backlog: int = 0
    recovered_s: float | None = None
    status_recovered_s: float | None = None
    status_rows_recovered_s: float | None = None
    drained_rows_s: float = float("nan")
    drain_cpu: float = float("nan")
    warm_p99: float = float("nan")
    lag_max: float = float("nan")
    rss: dict[str, float] = field(default_factory=dict)
    acknowledged: Acknowledged | None = None
    jsonl: int = 0
    final: dict[str, Any] = field(default_factory=dict)
    exit_code: int = 0
    windows: list[tuple[float, float, int]] = field(default_factory=list)
    load: str = ""

    @property
    def rss_max(self) -> float:
        return max(self.rss.values(), default=float("nan"))

    @property
    def resent(self) -> int:
        return int(self.final.get("resent_records") or 0)

    @property
    def exact(self) -> bool:
        ack = self.acknowledged
        return (
            ack is not None
            and self.exit_code == 0
            and ack.missing == 0
            and ack.twice <= self.resent
            and self.written <= self.jsonl <= self.written + self.resent
        )


def outage_part(base: Path, args: argparse.Namespace) -> Outage:
    root = base / "run"
    writer = Writer050(root, session_id="outage", tables=TYPES)
    rows = Rows(writer, 1)
    flag = base / "sink-down"
    follower = start_follow(
        "--session-root", root, base / "follow", "--wait", "30",
        "--retry-max-interval", f"{args.retry_max_interval:g}", BENCH_OUTAGE_FLAG=str(flag),
    )  # fmt: skip
    log = FlushLog(root)
    pacer = Pacer([rows], 1)
    result = Outage(args.warmup_seconds, args.outage_seconds)
    samples: list[Sample] = []
    marks: dict[str, int] = {}
    up_at = args.warmup_seconds + args.outage_seconds

    def sample(part: str) -> None:
        cpu = proc_cpu(follower.pid) if follower.poll() is None else float("nan")
        samples.append(Sample(time.time(), part, rss_mb(follower.pid), cpu, status(root)))

    def tick(elapsed: float) -> bool:
        part = "warm-up" if "down" not in marks else "outage" if "up" not in marks else "drain"
        sample(part)
        if follower.poll() is not None:
            return True
        if "down" not in marks and elapsed >= args.warmup_seconds:
            flag.touch()
            marks["down"] = time.time_ns()
        elif "down" in marks and "up" not in marks and elapsed >= up_at:
            flag.unlink()
            marks["up"] = time.time_ns()
            acked = sum(n for f in log.read() for _, n in f.stamps)
            result.backlog = pacer.written - acked
            result.status_backlog = int(samples[-1].status.get("lag_rows") or 0)
        elif "up" in marks:
            covered = windows(log.read(), marks["up"], time.time_ns() - 10**9, args.window_seconds)
            back = back_under([(x, p99) for x, p99, _ in covered], TARGET_LAG_S)
            if (
                back is not None
                and covered[-1][0] + args.window_seconds - back >= args.confirm_seconds
            ):
                return True
            return elapsed - up_at >= args.drain_seconds
        return False

    pacer.run(tick)
    result.written = pacer.written
    last_commit = time.time_ns()
    writer.close()
    behind = pacer.written - sum(n for f in log.read() for _, n in f.stamps)
    tail_ends = time.monotonic() + 30 + behind / 20_000  # it reads far faster than that
    while follower.poll() is None and time.monotonic() < tail_ends:
        sample("tail")
        time.sleep(1)
    result.exit_code = ended(follower, 1)
    result.load = load()
    flushes = log.read()
    result.final = status(root)
    for s in samples:
        result.rss[s.part] = max(result.rss.get(s.part, 0.0), s.rss_mb)
    result.acknowledged = Acknowledged.of(flushes, pacer.written, per_commit(1))
    result.jsonl = jsonl_records(root)
    everything = lags(flushes)
    result.lag_max = everything[-1][0] / 1000 if everything else float("nan")
    if "down" in marks:
        result.warm_p99 = percentile(lags(flushes, 0, marks["down"]), 0.99)
    if "up" in marks:
        up = marks["up"]
        result.windows = windows(flushes, up, last_commit, args.window_seconds)
        result.recovered_s = back_under([(x, p) for x, p, _ in result.windows], TARGET_LAG_S)
        after = [s for s in samples if s.part == "drain"]
        result.status_recovered_s = back_under(
            [(s.t - up / 1e9, s.status.get("lag_seconds", 1e9)) for s in after], TARGET_LAG_S
        )
        result.status_rows_recovered_s = back_under(
            [(s.t - up / 1e9, s.status.get("lag_rows", 1e12)) for s in after],
            TARGET_LAG_S * RATE_512,
        )
        if result.recovered_s is not None:
            done = up + int((result.recovered_s + args.window_seconds) * 1e9)
            drained = sum(n for _, n in lags(flushes, up, done))
            result.drained_rows_s = drained / (result.recovered_s + args.window_seconds)
            during = [s for s in after if s.t * 1e9 <= done]
            if len(during) > 1:
                result.drain_cpu = (during[-1].cpu_s - during[0].cpu_s) / (
                    during[-1].t - during[0].t
                )
    return result


def print_outage(o: Outage, args: argparse.Namespace) -> list[bool]:
    ack = o.acknowledged
    assert ack is not None
    final = o.final
    outages = final.get("outages") or []
    lengths = [f"{x['seconds']:.0f} s, {x['tries']} tries" for x in outages]
    print(
        f"(a) a {o.outage_s:g} s sink outage beside a writer at the 512-rank rate "
        f"({RATE_512:,} rows/s), after {o.warmup_s:g} s of warm-up; {load()} at the end"
    )
    print(
        f"  backlog when the sink came back: {o.backlog:,} rows written and not acknowledged "
        f"({o.backlog / RATE_512:.0f} s of the writer; status.json said lag_rows "
        f"{o.status_backlog:,}); lag p99 before the outage {o.warm_p99:.2f} s, at most {o.lag_max:.0f} s"
    )
    print(
        f"  status.json at the end: state {final.get('state')}, end {final.get('end')}, "
        f"{len(outages)} outage(s) "
        f"({', '.join(lengths)}), "
        f"{final.get('exporter_failures')} exporter failures, {o.resent:,} records resent; "
        f"follow exited {o.exit_code}"
    )
    shown_windows = o.windows
    if o.recovered_s is not None:  # the drain and a little after
        shown_windows = shown_windows[: int(o.recovered_s / args.window_seconds) + 3]
    stride = max(1, len(shown_windows) // 40)
    shown = ", ".join(f"{x:g}s {p99:.1f}" for x, p99, _ in shown_windows[::stride])
    print(f"  lag p99 per {args.window_seconds:g} s window after the sink came back: {shown}")
    drained = "never" if o.recovered_s is None else f"after {o.recovered_s:g} s"

    print(
        f"  lag back under {TARGET_LAG_S:g} s for good {drained} (row lags, windows of "
        f"{args.window_seconds:g} s); drained at {o.drained_rows_s:,.0f} rows/s acknowledged "
        f"({o.drained_rows_s / RATE_512:.1f}x the writer), the follower at {o.drain_cpu:.0%} of "
        f"a core; status.json's lag_seconds under {TARGET_LAG_S:g} s for good after "
        f"{seconds(o.status_recovered_s)}, its lag_rows under {TARGET_LAG_S * RATE_512:,.0f} "
        f"after {seconds(o.status_rows_recovered_s)}"
    )
    print("  follower RSS max: " + ", ".join(f"{part} {mb:.0f} MB" for part, mb in o.rss.items()))
    print(
        f"  rows: {o.written:,} written, {o.written - ack.missing:,} acknowledged "
        f"({ack.missing:,} missing, {ack.twice:,} acknowledged twice), "
        f"{o.jsonl:,} lines in the jsonl ({o.jsonl - o.written:+,} against the rows; "
        f"status.json: {o.resent:,} resent)"
    )
    results = [
        o.recovered_s is not None and o.recovered_s <= TARGET_DRAIN_S,
        o.rss_max < TARGET_RSS_MB,
        o.exact,
    ]
    print(
        f"  (a1) lag back under {TARGET_LAG_S:g} s {drained} after the sink came back "
        f"(target within {TARGET_DRAIN_S:g} s): {verdict(results[0])}"
    )
    print(
        f"  (a2) follower RSS at most {o.rss_max:.0f} MB throughout "
        f"(target < {TARGET_RSS_MB:g} MB): {verdict(results[1])}"
    )
    print(
        f"  (a3) every row acknowledged, none twice beyond the {o.resent:,} resent, jsonl "
        f"complete, exit 0: {verdict(results[2])}"
    )
    return results


# -- (b) a logs folder --------------------------------------------------------------------


@dataclass
class Watched:
    """A ``--logs-dir`` follower watched for ``seconds``: its CPU share (of one core) and RSS."""

    runs: int
    seconds: float
    cpu: float
    rss_mb: float
    exit_code: int
    load: str


@dataclass
class LogsDir(Watched):
    lag_p50: float
    lag_p99: float
    lag_max: float
    written: int
    acknowledged: int


def logs_part(base: Path, args: argparse.Namespace) -> LogsDir:
    logs = base / "logs"
    multiple = 1 / args.runs
    writers = [
        Writer050(logs / f"run{i:02d}", session_id=f"run{i:02d}", tables=TYPES)
        for i in range(args.runs)
    ]
    pacer = Pacer([Rows(w, multiple) for w in writers], multiple)
    follower = start_follow("--logs-dir", logs, base / "follow")
    following = wait_until(
        lambda: all(status(w.root).get("state") == "following" for w in writers), 60
    )
    if not following:
        print("  (b) not every run was being followed after 60 s")
    warm = min(10.0, args.seconds / 4)
    cpu: list[tuple[float, float]] = []
    rss: list[float] = []

    def tick(elapsed: float) -> bool:
        rss.append(rss_mb(follower.pid))
        if (elapsed >= warm and not cpu) or elapsed >= args.seconds:
            cpu.append((time.monotonic(), proc_cpu(follower.pid)))
        return elapsed >= args.seconds

    pacer.run(tick)
    for w in writers:
        w.close()
    wait_until(lambda: all(status(w.root).get("end") == "complete" for w in writers), 120)
    follower.send_signal(signal.SIGTERM)
    code = ended(follower, 60)
    (t0, c0), (t1, c1) = cpu[0], cpu[-1]
    flushes = [f for w in writers for f in FlushLog(w.root).read()]
    histogram = lags(flushes)
    return LogsDir(
        runs=args.runs,
        seconds=args.seconds,
        cpu=(c1 - c0) / (t1 - t0) if t1 > t0 else float("nan"),
        rss_mb=max(rss, default=float("nan")),
        exit_code=code,
        load=load(),
        lag_p50=percentile(histogram, 0.50),
        lag_p99=percentile(histogram, 0.99),
        lag_max=histogram[-1][0] / 1000 if histogram else float("nan"),
        written=pacer.written,
        acknowledged=sum(n for _, n in histogram),
    )


@dataclass
class Idle(Watched):
    passed: int


def idle_part(base: Path, args: argparse.Namespace) -> Idle:
    """``--logs-dir`` over runs that were each followed to their end once already."""
    logs = base / "finished"
    multiple = 1 / 8
    roots = []
    for i in range(args.finished_runs):
        writer = Writer050(logs / f"done{i:03d}", session_id=f"done{i:03d}", tables=TYPES)
        Rows(writer, multiple).commit(multiple)
        writer.close()
        roots.append(writer.root)
    first = start_follow(
        "--logs-dir", logs, base / "first", "--runs-poll-interval", "0.5", spec="jsonl"
    )
    wait_until(lambda: all(status(r).get("end") == "complete" for r in roots), 120)
    first.send_signal(signal.SIGTERM)
    ended(first, 60)
    err = base / "idle.err"
    watcher = start_follow("--logs-dir", logs, err, spec="jsonl")

    def passed() -> int:
        return err.read_text(errors="replace").count("exported already") if err.exists() else 0

    wait_until(lambda: passed() >= len(roots), 60)
    time.sleep(1)  # past its first look
    t0, c0 = time.monotonic(), proc_cpu(watcher.pid)
    time.sleep(args.idle_seconds)
    t1, c1 = time.monotonic(), proc_cpu(watcher.pid)
    memory = rss_mb(watcher.pid)
    watcher.send_signal(signal.SIGTERM)
    code = ended(watcher, 60)
    return Idle(
        runs=len(roots),
        seconds=args.idle_seconds,
        cpu=(c1 - c0) / (t1 - t0),
        rss_mb=memory,
        exit_code=code,
        load=load(),
        passed=passed(),
    )


# -- the whole ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arg = parser.add_argument
    arg("--parts", default=",".join(PARTS), help=f"which parts, of {', '.join(PARTS)}")
    arg("--warmup-seconds", type=float, default=scaled(30, 2))
    arg("--outage-seconds", type=float, default=scaled(600, 3))
    arg("--drain-seconds", type=float, default=scaled(300, 20), help="the longest drain watched")
    arg(
        "--confirm-seconds",
        type=float,
        default=scaled(20, 2),
        help="lag under 2 s this long ends the drain",
    )
    arg("--window-seconds", type=float, default=scaled(5, 1))
    arg("--retry-max-interval", type=float, default=2.0)
    arg("--runs", type=int, default=8)
    arg("--seconds", type=float, default=scaled(60, 4), help="the logs folder's steady phase")
    arg("--finished-runs", type=int, default=scaled(100, 5))
    arg("--idle-seconds", type=float, default=scaled(30, 2))
    arg("--single-seconds", type=float, default=scaled(15, 2))
    args, _ = parser.parse_known_args(argv)  # nox -s bench passes its posargs to every script
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"--parts: unknown {', '.join(sorted(unknown))}; known {', '.join(PARTS)}")
    print(
        f"bench_follow_service: follow as a service beside writers at the 512-rank rate "
        f"({RATE_512:,} rows/s); {os.cpu_count()} cores, {load()}",
        flush=True,
    )
    results: list[bool] = []
    single = None
    with tempfile.TemporaryDirectory(prefix="bench-follow-service-") as tmp:
        for part in PARTS:
            if part not in parts:
                continue
            base = Path(tmp) / part
            base.mkdir()
            if part == "single":
                single, _db = run_phase(base, 1, args.single_seconds)
                print(
                    f"(c) the single-run follower at 1x, {args.single_seconds:g} s (bench_follow's "
                    f"phase; its targets are judged by python tests/benchmarks/bench_follow.py): "
                    f"CPU {single.cpu_share:.1%} of a core, lag p99 {single.lag_p99:.2f} s, "
                    f"{single.rows / single.cpu_s:,.0f} rows per CPU s, "
                    f"kept up {'yes' if single.kept_up else 'NO'}; {load()}"
                )
            elif part == "logs":
                b = logs_part(base, args)
                print(
                    f"(b) follow --logs-dir over {b.runs} runs of {512 // b.runs} ranks, each at 1/"
                    f"{b.runs} of the 512-rank rate, {b.seconds:g} s: {b.written:,} rows written, "
                    f"{b.acknowledged:,} acknowledged; lag p50 {b.lag_p50:.2f} s, p99 "
                    f"{b.lag_p99:.2f} s, max {b.lag_max:.2f} s; RSS at most {b.rss_mb:.0f} MB; "
                    f"follow exited {b.exit_code} on SIGTERM; {b.load}"
                )
                beside = (
                    f" ({b.cpu / single.cpu_share:.1f}x the single run's {single.cpu_share:.1%})"
                    if single is not None
                    else ""
                )
                results += [b.cpu <= TARGET_LOGS_CPU, b.lag_p99 < TARGET_LAG_S]
                print(
                    f"  (b1) follower CPU {b.cpu:.1%} of one core{beside} "
                    f"(target <= {TARGET_LOGS_CPU:.0%}): {verdict(results[-2])}"
                )
                print(
                    f"  (b2) lag p99 over all rows {b.lag_p99:.2f} s "
                    f"(target < {TARGET_LAG_S:g} s): {verdict(results[-1])}"
                )
            elif part == "idle":
                i = idle_part(base, args)
                results.append(i.cpu < TARGET_IDLE_CPU)
                print(
                    f"(b) follow --logs-dir over {i.runs} finished runs, each exported already "
                    f"({i.passed} said so), watched {i.seconds:g} s: RSS {i.rss_mb:.0f} MB, "
                    f"exited {i.exit_code} on SIGTERM; {i.load}"
                )
                print(
                    f"  (b3) CPU {i.cpu:.2%} of one core (target < {TARGET_IDLE_CPU:.0%}): "
                    f"{verdict(results[-1])}"
                )
            else:
                results += print_outage(outage_part(base, args), args)
            sys.stdout.flush()
            shutil.rmtree(base, ignore_errors=True)
    print(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
