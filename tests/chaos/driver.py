"""Executes a schedule: synthetic runs as processes, ``traceml-exporter follow`` as its own
process into ``chaos.sink``, faults by switch files and signals, everything observed.

While a follower lives, a monitor thread scrapes its ``/metrics`` and ``/healthz`` and
reads its RSS every ``SCRAPE_S``. After the last step the harness recovers: the sink
comes back, live runs end, a follower is started if none runs, and is left until every
run is settled (``--logs-dir``: then SIGTERM). At each follower's end it snapshots each
run's ``status.json``, ``finalization_warning.json`` and what the sink holds. All of it
is an ``Observation``, which ``invariants.check`` judges. Beside real runs
(``chaos.real``) a sampler thread notes what each database commits, and the rows are
read from the databases at the end (a deleted run's just before it is deleted).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from child_env import child_env

from .real import RealRun, identity, read_rows
from .schedule import STUCK_AFTER_S, RunPlan, Schedule, Step
from .sink import open_store, set_mode

__all__ = ["Observation", "execute"]

TESTS = Path(__file__).resolve().parents[1]
SCRAPE_S = 0.1
STARTUP_S = 30.0
"""How long a run or a follower may take to start on a loaded machine."""
REAL_END_S = 120.0
"""How long a real run may take to end once told (its training's step, TraceML's
finalization and summary) on a loaded machine."""
PORT_LINE = re.compile(r"metrics on http://127\.0\.0\.1:(\d+)/metrics")
FOLLOW_DIR = Path("aggregator") / "follow"
ENDED = ("done", "failed", "deleted")
"""The states of a run's follow that is over (``failed``, ``deleted``: where ``follow`` has them)."""
PASSED = "(exported already|the run ended without|cannot be followed)"
"""How ``follow --logs-dir`` says it passes a run over (its stderr)."""


@dataclass
class Segment:
    """One follower process, from its start to its end."""

    index: int
    start: float
    end: float | None = None
    exit_code: int | None = None
    ended_by: str = "itself"
    signal_at: float | None = None
    done_before_signal: bool = False
    """It had printed its summary (ended by itself) when the signal was sent."""
    out: str = ""
    err: str = ""
    snapshot: dict[str, Any] = field(default_factory=dict)
    """Per run at the end: status, warning, sink keys, rows committed and pruned by then."""


@dataclass
class Observation:
    """Everything a schedule's execution left for the checker (times: Unix seconds)."""

    schedule: str
    where: str
    poll_interval: float
    shutdown_timeout: float
    idle_timeout: float
    started: float
    stuck_after: float | None = None
    """``--stuck-after`` as given; None where ``follow`` has no such option."""
    segments: list[Segment] = field(default_factory=list)
    scrapes: list[dict[str, Any]] = field(default_factory=list)
    ledgers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    deleted: dict[str, float] = field(default_factory=dict)
    killed: dict[str, tuple[str, float]] = field(default_factory=dict)
    switches: list[tuple[float, str, str | None]] = field(default_factory=list)
    calls: list[tuple[float, str, str, str, str]] = field(default_factory=list)
    sink: dict[str, dict[str, int]] = field(default_factory=dict)
    """run -> stream key (json) -> how many times the sink holds it."""
    final: dict[str, dict[str, Any]] = field(default_factory=dict)
    """run -> status and warning files at the very end (None: absent)."""
    slip: float = 0.0
    """Seconds the timeline was pushed back while runs started (a loaded machine)."""
    recovery_settled: bool = True
    unsettled: list[str] = field(default_factory=list)
    unsettled_states: dict[str, str | None] = field(default_factory=dict)
    """Their state in ``status.json`` when the harness gave up waiting."""
    real: bool = False
    """Real ``traceml run`` jobs: the ledgers are the sampler's, the rows ``row_keys``."""
    row_keys: dict[str, dict[str, int]] = field(default_factory=dict)
    """Real runs: each row's identity (``real.identity``) -> its number in the ledger, read
    from the database at the end; the sink's keys are identities too."""

    def dump(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> Observation:
        """What ``dump`` wrote (``--recheck``: judge a kept execution again)."""
        data = json.loads(path.read_text(encoding="utf-8"))
        known = {f.name for f in dataclasses.fields(Segment)}
        segments = [
            Segment(**{k: v for k, v in s.items() if k in known}) for s in data.pop("segments")
        ]
        data["killed"] = {k: tuple(v) for k, v in data.get("killed", {}).items()}
        data["switches"] = [tuple(s) for s in data.get("switches", [])]
        data["calls"] = [tuple(c) for c in data.get("calls", [])]
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields}, segments=segments)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    from prometheus_client.parser import text_string_to_metric_families

    return [
        (sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode(errors="replace")
    except (OSError, ValueError):
        return -1, ""


def _rss_kb(pid: int) -> int | None:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


class _Run:
    """A synthetic run's launcher and aggregator processes (``chaos.aggregator``)."""

    def __init__(self, plan: RunPlan, logs: Path, state: Path, env: dict[str, str]) -> None:
        self.plan = plan
        self.root = logs / plan.name
        self.ledger = state / f"{plan.name}.ledger.jsonl"
        self.stop = state / f"{plan.name}.stop"
        self.pid_file = state / f"{plan.name}.pid"
        spec = {
            **plan.spec(),
            "root": str(self.root),
            "ledger": str(self.ledger),
            "stop": str(self.stop),
            "pid_file": str(self.pid_file),
        }
        self.launcher = subprocess.Popen(
            [sys.executable, "-m", "chaos.aggregator", "launch", json.dumps(spec)],
            env=env,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )
        self.orphaned = False

    def aggregator_pid(self, wait: float = 10.0) -> int | None:
        """The aggregator's pid once its run folder is made (None after ``wait`` s)."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                return int(self.pid_file.read_text())
            time.sleep(0.02)
        return None

    def kill_launcher(self) -> None:
        self.aggregator_pid()  # the aggregator is up, so it is orphaned, not never started
        with contextlib.suppress(OSError):
            self.launcher.kill()
        self.launcher.wait(10)
        self.orphaned = True

    def kill_whole(self) -> None:
        pid = self.aggregator_pid()
        if pid is not None:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.launcher.kill()
        self.launcher.wait(10)

    def end(self) -> None:
        self.stop.touch()

    def alive(self) -> bool:
        return self.launcher.poll() is None


class _Harness:
    def __init__(self, schedule: Schedule, work: Path) -> None:
        self.schedule = schedule
        self.work = work
        self.logs = work / "logs"
        self.sink = work / "sink"
        self.state = work / "state"
        for folder in (self.logs, self.sink, self.state):
            folder.mkdir(parents=True, exist_ok=True)
        set_mode(self.sink, "up")
        open_store(self.sink).close()
        self.env = child_env(
            [TESTS, TESTS / "follow"],
            CHAOS_SINK=str(self.sink),
            OMP_NUM_THREADS="1",
            PYTHONUNBUFFERED="1",
        )
        self.runs: dict[str, _Run | RealRun] = {}
        self.real_rows: dict[str, dict[str, int] | None] = {}
        """Real runs deleted: their rows, read just before."""
        self.follower: subprocess.Popen[str] | None = None
        self.segment: Segment | None = None
        self.port: int | None = None
        self.lock = threading.Lock()
        self.done = threading.Event()
        """The schedule is over: the monitor and the sampler stop."""
        self.recovering = threading.Event()
        """Recovery began: no fault switch flips any more (a late timer's "up" does)."""
        self.obs = Observation(
            str(schedule),
            schedule.where,
            schedule.poll_interval,
            schedule.shutdown_timeout,
            schedule.idle_timeout,
            time.time(),
            stuck_after=STUCK_AFTER_S if _has_stuck_after(self.env["PYTHONPATH"]) else None,
            real=schedule.real,
        )

    # -- the follower --------------------------------------------------------------

    def _paths(self, index: int) -> tuple[Path, Path]:
        return self.state / f"follow{index}.out", self.state / f"follow{index}.err"

    def start_follow(self) -> None:
        if self.follower is not None and self.follower.poll() is None:
            return
        self.end_follow()
        where = self.schedule.where
        target = self.logs if where == "logs-dir" else self.logs / self.schedule.runs[0].name
        if where == "session-root" and self.schedule.runs[0].name in self.obs.deleted:
            return
        index = len(self.obs.segments)
        out_path, err_path = self._paths(index)
        command = [
            sys.executable,
            "-m",
            "traceml_exporter_sdk.cli",
            "follow",
            "chaos.sink:make_exporter",
            f"--{where}",
            str(target),
            "--streams",
            "all",
            "--hostname",
            *self.schedule.follow_args(self.obs.stuck_after is not None),
        ]
        with open(out_path, "w") as out, open(err_path, "w") as err:
            process = subprocess.Popen(
                command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, text=True, env=self.env
            )
        segment = Segment(index, time.time())
        with self.lock:
            self.follower, self.segment, self.port = process, segment, None
            self.obs.segments.append(segment)
        self._await_handlers(process)

    def _await_handlers(self, process: subprocess.Popen[str]) -> None:
        """Wait (10 s at most) until the follower catches SIGTERM: one sent while it still
        imports would kill it, which is no test of its shutdown."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and process.poll() is None:
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
                    if line.startswith("SigCgt:") and int(line.split()[1], 16) >> 14 & 1:
                        return
            time.sleep(0.02)

    def signal_follow(self, signum: int, wait: float) -> None:
        process, segment = self.follower, self.segment
        if process is None or segment is None or process.poll() is not None:
            self.end_follow()
            return
        summary = self._paths(segment.index)[0].read_text(errors="replace")
        segment.done_before_signal = "follow of " in summary  # it had printed its end
        segment.signal_at = time.time()
        segment.ended_by = signal.Signals(signum).name
        process.send_signal(signum)
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
            segment.ended_by += " (then SIGKILL: it did not end)"
        self.end_follow()

    def end_follow(self) -> None:
        """Record the follower's end once it has exited."""
        process, segment = self.follower, self.segment
        if process is None or segment is None or process.poll() is None:
            return
        with self.lock:
            self.follower = self.segment = None
            self.port = None
        segment.end = time.time()
        segment.exit_code = process.returncode
        out_path, err_path = self._paths(segment.index)
        segment.out = out_path.read_text(errors="replace")
        segment.err = err_path.read_text(errors="replace")
        segment.snapshot = self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        sink = self._sink_keys()
        now = time.time()
        return {
            name: {
                "status": _read_json(run.root / FOLLOW_DIR / "status.json"),
                "warning": _read_json(run.root / FOLLOW_DIR / "finalization_warning.json"),
                "sink": sorted(sink.get(name, {})),
                "at": now,
            }
            for name, run in list(self.runs.items())
        }

    def _sink_keys(self) -> dict[str, dict[str, int]]:
        """run -> key -> how many times the sink holds it: the stream key (synthetic
        runs: step_time alone), or the row's identity (real runs: seven streams)."""
        store = sqlite3.connect(
            f"{(self.sink / 'store.sqlite').as_uri()}?mode=ro", uri=True, timeout=60
        )
        try:
            out: dict[str, dict[str, int]] = {}
            if self.schedule.real:
                for run, stream, record in store.execute("SELECT run, stream, record FROM rows"):
                    keys = out.setdefault(run, {})
                    key = identity(stream, record)
                    keys[key] = keys.get(key, 0) + 1
                return out
            for run, key, count in store.execute(
                "SELECT run, key, count(*) FROM rows GROUP BY run, key"
            ):
                out.setdefault(run, {})[key] = count
            return out
        finally:
            store.close()

    def sampler(self) -> None:
        """What each real run's database commits, every ``SCRAPE_S`` (``RealRun.sample``)."""
        while not self.done.wait(SCRAPE_S):
            for name, run in list(self.runs.items()):
                if isinstance(run, RealRun) and name not in self.obs.deleted:
                    run.sample()

    def _await_port(self, wait: float) -> None:
        """Until the monitor knows the follower's /metrics port (``wait`` s at most)."""
        deadline = time.monotonic() + wait
        while self.port is None and time.monotonic() < deadline:
            if self.follower is None or self.follower.poll() is not None:
                return
            time.sleep(0.02)

    # -- the monitor ---------------------------------------------------------------

    def monitor(self) -> None:
        while not self.done.wait(SCRAPE_S):
            with self.lock:
                process, segment, port = self.follower, self.segment, self.port
            if process is None or segment is None or process.poll() is not None:
                continue
            if port is None:
                match = PORT_LINE.search(self._paths(segment.index)[1].read_text(errors="replace"))
                if match is None:
                    continue
                with self.lock:
                    self.port = port = int(match[1])
            at = time.time()
            code, text = _get(f"http://127.0.0.1:{port}/metrics")
            health, body = _get(f"http://127.0.0.1:{port}/healthz")
            metrics = []
            if code == 200:
                with contextlib.suppress(ValueError):
                    metrics = _parse_metrics(text)
            self.obs.scrapes.append(
                {
                    "t": at,
                    "segment": segment.index,
                    "metrics": metrics,
                    "metrics_code": code,
                    "health": health,
                    "health_body": body.strip()[:200],
                    "rss_kb": _rss_kb(process.pid),
                }
            )

    # -- the steps -----------------------------------------------------------------

    def do(self, step: Step) -> None:
        s = self.schedule
        run = self.runs.get(step.run or "")
        action = step.action
        if action in ("sink_down", "sink_hang", "sink_slow"):
            mode = {"sink_down": "down", "sink_hang": "hang"}.get(action, f"slow:{step.value}")
            self._switch(mode, None)
            threading.Timer(step.seconds, self._switch, ("up", None)).start()
        elif action == "sink_permanent":
            self._switch("permanent", step.run)
        elif action == "follow_sigterm":
            self.signal_follow(signal.SIGTERM, s.shutdown_timeout + 30)
        elif action == "follow_sigkill":
            self.signal_follow(signal.SIGKILL, 10)
        elif action == "follow_start":
            self.start_follow()
        elif run is not None and action == "run_kill_launcher" and run.alive():
            run.kill_launcher()
            self.obs.killed[run.plan.name] = ("launcher", time.time())
        elif run is not None and action in ("run_kill_whole", "run_delete"):
            if run.alive() or run.orphaned:
                run.kill_whole()
                self.obs.killed.setdefault(run.plan.name, ("whole", time.time()))
            if action == "run_delete":
                if isinstance(run, RealRun):  # what it held: the oracle, the folder gone
                    run.sample()
                    self.real_rows[run.plan.name] = read_rows(run.root / "aggregator" / "telemetry")
                _remove(run.root)
                self.obs.deleted[run.plan.name] = time.time()

    def _switch(self, mode: str, run: str | None) -> None:
        if self.recovering.is_set() and mode != "up":
            return
        set_mode(self.sink, mode, run)
        self.obs.switches.append((time.time(), mode, run))

    def execute(self) -> Observation:
        monitor = threading.Thread(target=self.monitor, daemon=True)
        monitor.start()
        sampler = threading.Thread(target=self.sampler, daemon=True)
        if self.schedule.real:
            sampler.start()
        pending = sorted(
            [(plan.start, "start", plan) for plan in self.schedule.runs]
            + [(step.t, "step", step) for step in self.schedule.steps],
            key=lambda item: item[0],
        )
        try:
            self.start_follow()
            # --session-root's /metrics comes with its run (once its folder is there)
            if self.schedule.where == "logs-dir" and not self.schedule.real:
                self._await_port(STARTUP_S)
            t0 = time.monotonic()
            for at, kind, item in pending:
                time.sleep(max(0.0, t0 + at - time.monotonic()))
                self.end_follow()
                if kind == "start":
                    assert isinstance(item, RunPlan)
                    began = time.monotonic()
                    make = RealRun if self.schedule.real else _Run
                    run = self.runs[item.name] = make(item, self.logs, self.state, self.env)
                    run.aggregator_pid(STARTUP_S)
                    self._await_port(STARTUP_S)
                    # the schedule's times are of the runs' lives, however slow a start
                    self.obs.slip += time.monotonic() - began
                    t0 += time.monotonic() - began
                else:
                    assert isinstance(item, Step)
                    self.do(item)
            time.sleep(max(0.0, t0 + self.schedule.horizon - time.monotonic()))
            self.end_follow()
            self.recover()
        finally:
            self.done.set()
            monitor.join(5)
            if sampler.is_alive():
                sampler.join(5)
            self.teardown()
        return self.obs

    # -- recovery and the end ------------------------------------------------------

    def recover(self) -> None:
        """Sink up, live runs ended; the follower settles every run, and then the next
        one started does too (what it resumes, what it passes over)."""
        self.recovering.set()  # no fault switch flips after this
        for path in self.sink.glob("switch.*"):  # a late timer's temp file may go first
            path.unlink(missing_ok=True)
        set_mode(self.sink, "up")
        self.obs.switches.append((time.time(), "up", "*"))
        for run in self.runs.values():  # a real orphan's ranks too: its aggregator stays
            if (run.alive() and not run.orphaned) or isinstance(run, RealRun):
                run.end()
        for run in self.runs.values():
            if not run.orphaned:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    run.launcher.wait(REAL_END_S if isinstance(run, RealRun) else 30)
        self.end_follow()
        self._settle()
        self._settle()  # the next start
        self._final()

    def _settle(self) -> None:
        """A follower (the one running, else a new one) until every run is settled (or a
        deadline: recorded as unsettled); ``--logs-dir``'s then gets SIGTERM."""
        s = self.schedule
        if self.follower is None:
            self.start_follow()
        if self.follower is None or self.segment is None:
            return  # the one run's folder was deleted: nothing to follow
        deadline = time.monotonic() + s.idle_timeout + s.shutdown_timeout + 20
        since = self.segment.start
        while self.follower is not None and self.follower.poll() is None:
            unsettled = [s.runs[0].name] if s.where == "session-root" else self._unsettled(since)
            if not unsettled:
                break
            if time.monotonic() > deadline:
                self.obs.recovery_settled = False
                self.obs.unsettled = unsettled
                self.obs.unsettled_states = self._states(unsettled)
                break
            time.sleep(0.1)
        time.sleep(3 * SCRAPE_S)  # a scrape of the settled state
        self.signal_follow(signal.SIGTERM, s.shutdown_timeout + 30)

    def _states(self, names: list[str]) -> dict[str, str | None]:
        return {
            name: (_read_json(self.runs[name].root / FOLLOW_DIR / "status.json") or {}).get("state")
            for name in names
        }

    def _unsettled(self, since: float) -> list[str]:
        """Runs the recovery follower has not yet finished with (followed to ``done``, or
        passed over and named on stderr)."""
        assert self.segment is not None
        err = self._paths(self.segment.index)[1].read_text(errors="replace")
        out = []
        for name, run in self.runs.items():
            if name in self.obs.deleted:
                continue
            status = _read_json(run.root / FOLLOW_DIR / "status.json") or {}
            ended = status.get("state") in ENDED
            done = ended and float(status.get("updated") or 0) > since
            passed = re.search(rf"follow {re.escape(name)}: {PASSED}", err) is not None
            if not (done or (passed and ended)):
                out.append(name)
        return out

    def _final(self) -> None:
        obs = self.obs
        obs.sink = self._sink_keys()
        store = sqlite3.connect(
            f"{(self.sink / 'store.sqlite').as_uri()}?mode=ro", uri=True, timeout=60
        )
        try:
            obs.calls = [
                tuple(row) for row in store.execute("SELECT t, run, method, mode, phase FROM calls")
            ]  # type: ignore[misc]
        finally:
            store.close()
        for name, run in self.runs.items():
            present: list[int] | None = None
            if isinstance(run, RealRun):
                if name in obs.deleted:
                    rows = self.real_rows.get(name)
                else:
                    run.sample()
                    rows = read_rows(run.root / "aggregator" / "telemetry")
                    present = None if rows is None else sorted(rows.values())
                obs.row_keys[name] = rows or {}
            elif name not in obs.deleted:
                present = _present_ids(run.root)
            obs.ledgers[name] = (
                [json.loads(line) for line in run.ledger.read_text().splitlines() if line.strip()]
                if run.ledger.exists()
                else []
            )
            obs.final[name] = {
                "status": _read_json(run.root / FOLLOW_DIR / "status.json"),
                "warning": _read_json(run.root / FOLLOW_DIR / "finalization_warning.json"),
                "present_ids": present,
                "exists": run.root.exists(),
            }

    def teardown(self) -> None:
        if self.follower is not None and self.follower.poll() is None:
            self.follower.kill()
            self.follower.wait(10)
        self.end_follow()
        for run in self.runs.values():
            if run.alive() or run.orphaned or isinstance(run, RealRun):
                run.kill_whole()


def _remove(root: Path) -> None:
    """``rm -rf`` until the folder is gone (10 s at most): a reader opening the database
    as it goes makes a ``-shm`` file, and the last ``rmdir`` fails (seed 19)."""
    deadline = time.monotonic() + 10
    while root.exists() and time.monotonic() < deadline:
        shutil.rmtree(root, ignore_errors=True)
        if root.exists():
            time.sleep(0.02)


@functools.cache
def _has_stuck_after(pythonpath: str) -> bool:
    """``follow`` has ``--stuck-after`` (a hung call's threshold), which the fix of issue 39
    brings; older ones are run without it."""
    help_text = subprocess.run(
        [sys.executable, "-m", "traceml_exporter_sdk.cli", "follow", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=child_env(pythonpath.split(os.pathsep)),
    ).stdout
    return "--stuck-after" in help_text


def _present_ids(root: Path) -> list[int] | None:
    """The step_time ids still in the run's database (retention deleted the others)."""
    database = root / "aggregator" / "telemetry"
    if not database.exists():
        return None
    connection = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        return [
            row[0] for row in connection.execute("SELECT id FROM step_time_samples ORDER BY id")
        ]
    except sqlite3.Error:
        return None
    finally:
        connection.close()


def execute(schedule: Schedule, work: Path) -> Observation:
    """Run ``schedule`` in the folder ``work`` and return what was seen."""
    observation = _Harness(schedule, work).execute()
    observation.dump(work / "observation.json")
    return observation
