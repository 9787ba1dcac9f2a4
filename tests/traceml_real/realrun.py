"""Real ``traceml run`` jobs and ``traceml-exporter follow`` beside them, for the tests here.

A run is ``traceml run`` of ``train_tiny.py`` (CPU torch) in its own session; the
follower is ``python -m traceml_exporter_sdk.cli follow SPEC --session-root RUN
--streams all --hostname``, as a user starts it beside the run. Every wait is
bounded; ``kill_tree`` ends a run's launcher, aggregator and ranks (each in its own
session) by pid.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from child_env import child_env
from follow_files import bookmark
from traceml_exporter_sdk._bridge.sqlite_source import TABLE_BY_STREAM, open_database
from traceml_exporter_sdk.records import RECORD_TYPES
from traceml_exporter_sdk.testing.readback import jsonl_parts
from waiting import wait_for

HERE = Path(__file__).parent
TRAIN = HERE / "train_tiny.py"
CAPTURE = HERE / "capture"
FAILING = HERE.parent / "follow" / "failing_exporter.py"
STREAMS = tuple(t.STREAM for t in RECORD_TYPES)
TABLES = tuple(TABLE_BY_STREAM[s] for s in STREAMS)
RUN_TIMEOUT = 150.0
"""A run of a few hundred steps takes 15-30 s on two busy cores; this bounds a stuck one."""
EXIT_OK, EXIT_INPUT, EXIT_EXPORT, EXIT_INCOMPLETE = 0, 3, 4, 6
EXIT_LOCKED, EXIT_INTERRUPTED = 8, 130
STARTING = threading.Lock()
"""One run starts at a time: 0.5.0's launcher gives its aggregator 15 s to listen (not
configurable), which runs importing torch at once on two busy cores can miss."""
READY = "Aggregator ready on"
STARTED: list[Any] = []
"""Every ``Run`` and ``Follow`` started, for ``reap`` (a scenario that failed midway)."""


def traceml_binary() -> str:
    """The ``traceml`` launcher of this environment; a missing one fails the test (never skips)."""
    path = Path(sys.executable).with_name("traceml")
    if not path.exists():
        raise AssertionError(
            f"no traceml launcher beside {sys.executable}: this session needs "
            "traceml-ai==0.5.0 and torch installed (nox -s traceml_real)"
        )
    return str(path)


def free_port() -> int:
    """A port no one listens on now: each run gets its own aggregator and torchrun ports,
    so runs (ours at once, or another user's) do not collide on TraceML's defaults."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
"""Set for every run and follower: two cores are shared by several at once."""


@dataclass
class Run:
    """One ``traceml run`` job: ``<logs>/<name>``."""

    logs: Path
    name: str
    steps: int
    nproc: int = 1
    retention: str | None = None
    step_sleep: float = 0.02
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    returncode: int | None = None
    started: float = 0.0
    elapsed: float = 0.0

    @property
    def root(self) -> Path:
        return self.logs / self.name

    @property
    def database(self) -> Path:
        return self.root / "aggregator" / "telemetry"

    @property
    def log(self) -> Path:
        return self.logs / f"{self.name}.launcher.log"

    def start(self) -> Run:
        """Launch the run; return once its aggregator listens (or the launcher ended)."""
        with STARTING:
            self._launch()
            STARTED.append(self)
            wait_for(
                lambda: READY in self.tail(200) or self.process.poll() is not None,  # type: ignore[union-attr]
                f"the aggregator of {self.name} to listen",
                60,
                every=0.1,
            )
        return self

    def _launch(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        command = [traceml_binary(), "run", "--logs-dir", str(self.logs), "--run-name", self.name]
        command += ["--interval", "0.5", "--nproc-per-node", str(self.nproc)]
        command += ["--aggregator-port", str(free_port()), "--master-port", str(free_port())]
        if self.retention is not None:
            command += ["--history-retention", self.retention]
        command.append(str(TRAIN))
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.logs,
                env=child_env(
                    **{
                        **ONE_THREAD,
                        "TRAIN_STEPS": str(self.steps),
                        "TRAIN_STEP_SLEEP": str(self.step_sleep),
                        "TRAIN_STOP_FILE": str(self.stop_file),
                        "TRAIN_RESUME_FILE": str(self.resume_file),
                        **self.env,
                    }
                ),
                start_new_session=True,
            )
        self.started = time.monotonic()

    def wait(self, timeout: float = RUN_TIMEOUT) -> int:
        assert self.process is not None
        try:
            self.returncode = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_tree(self.process.pid)
            raise AssertionError(f"traceml run {self.name} did not end in {timeout:g} s") from None
        self.elapsed = time.monotonic() - self.started
        return self.returncode

    @property
    def stop_file(self) -> Path:
        """Training stops after the step it is in once this file exists (``train_tiny.py``)."""
        return self.logs / f"{self.name}.stop"

    @property
    def resume_file(self) -> Path:
        """A pause (``TRAIN_PAUSE_AT``) ends once this file exists (``train_tiny.py``)."""
        return self.logs / f"{self.name}.resume"

    def stop_training(self) -> None:
        self.stop_file.touch()

    def resume(self) -> None:
        self.resume_file.touch()

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def manifest(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.root / "manifest.json").read_text())
        return data


@dataclass
class Follow:
    """One ``traceml-exporter follow`` process: of the run ``root``, or of every run of the
    logs folder ``root`` with ``logs_dir``."""

    root: Path
    spec: str = "jsonl"
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    streams: str = "all"
    logs_dir: bool = False
    process: subprocess.Popen[str] | None = None
    returncode: int | None = None
    out: str = ""
    err: str = ""

    def start(self) -> Follow:
        command = [sys.executable, "-m", "traceml_exporter_sdk.cli", "follow", self.spec]
        command += ["--logs-dir" if self.logs_dir else "--session-root", str(self.root)]
        command += ["--streams", self.streams, "--hostname"]
        # --wait: a run may queue for STARTING behind several others (the modules' runs at once)
        command += ["--wait", "240", "--progress-interval", "0", *self.args]
        # the failing exporters' folder first; a baked sink's src (nox) stays on the path
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=child_env([FAILING.parent], **{**ONE_THREAD, **self.env}),
        )
        STARTED.append(self)
        return self

    def signal(self, signum: int, timeout: float = 60.0) -> float:
        """Send ``signum`` and wait for the end; the seconds it took to end."""
        assert self.process is not None
        started = time.monotonic()
        self.process.send_signal(signum)
        self.finish(timeout)
        return time.monotonic() - started

    def finish(self, timeout: float = 90.0) -> int:
        assert self.process is not None
        try:
            self.out, self.err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.out, self.err = self.process.communicate()
            raise AssertionError(
                f"follow did not end in {timeout:g} s\n{self.out}\n{self.err}"
            ) from None
        self.returncode = self.process.returncode
        return self.returncode

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.out, self.err = self.process.communicate(timeout=30)
        self.returncode = self.process.returncode

    def report(self) -> str:
        return f"follow exit {self.returncode}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


@dataclass
class Outcome:
    """What a scenario left for its tests: its runs, followers and anything else."""

    runs: list[Run]
    follows: list[Follow] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def training(run: Run) -> bool:
    """``run`` still trains and its follower has had step rows acknowledged by the sink
    (its bookmark has them); a run that ended already fails the caller."""
    assert run.process is not None
    assert run.process.poll() is None, f"{run.name} ended early"
    return bool((bookmark(run.root) or {}).get("last_id", {}).get("step_time_samples"))


def real_outcome(scenarios: dict[str, Future[Outcome]], name: str) -> Outcome:
    """The outcome of scenario ``name`` of conftest's ``real_scenarios`` (its exception,
    raised here, fails the test)."""
    assert name in scenarios, f"scenario {name!r} was not started: list it in REAL_NEEDS"
    return scenarios[name].result(timeout=900)


def _ppid_and_pgid(pid: int) -> tuple[int, int] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[2])


def descendants(pid: int) -> list[int]:
    """Every live process under ``pid`` (by /proc parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = _ppid_and_pgid(int(entry))
            if info is not None:
                children.setdefault(info[0], []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(pid: int) -> list[int]:
    """SIGKILL ``pid``, everything under it and their process groups; returns the pids hit."""
    pids = [pid, *descendants(pid)]
    groups = {info[1] for p in pids if (info := _ppid_and_pgid(p)) is not None}
    # a follower shares this process's group (it is started without a session of its own):
    # killing that group would end pytest itself, with no report (seen: rc 137, "F" cut off)
    groups.discard(os.getpgrp())
    for target in pids:
        with contextlib.suppress(OSError):
            os.kill(target, signal.SIGKILL)
    for group in groups:
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)
    return pids


def reap() -> list[str]:
    """SIGKILL every run (its whole tree) and follower still running; names them. A
    scenario that failed midway leaves its long runs (``stop_training`` never came)."""
    left = []
    for item in STARTED:
        process = item.process
        if process is not None and process.poll() is None:
            left.append(f"{type(item).__name__} {item.root}")
            kill_tree(process.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(30)
    STARTED.clear()
    return left


def scrape(port: int, path: str = "/metrics") -> str:
    """What a follower's ``--metrics-port`` serves at ``path``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
        return str(answer.read().decode())


def exported(root: Path) -> dict[str, list[dict[str, Any]]]:
    """Every record line the jsonl exporter wrote, per stream, in file order; a torn last
    line of a part that was never closed (a follower killed mid-write) is left out."""
    out: dict[str, list[dict[str, Any]]] = {}
    for stream in STREAMS:
        for path in jsonl_parts(root / "aggregator" / "export", stream):
            lines = path.read_bytes().split(b"\n")
            for number, raw in enumerate(lines):
                if not raw.strip():
                    continue
                try:
                    data = json.loads(raw)
                except ValueError:
                    assert number == len(lines) - 1, f"{path}: a bad line before the last"
                    continue
                if "closing" not in data:
                    out.setdefault(stream, []).append(data)
    return out


def _connect(database: Path, *, finished: bool = True) -> sqlite3.Connection:
    """Read-only; a finished database (no ``-wal``) as immutable, so nothing is made beside it."""
    mode = "ro&immutable=1" if finished else "ro"
    return sqlite3.connect(
        f"{database.resolve().as_uri()}?mode={mode}", uri=True, isolation_level=None
    )


def database_rows(
    database: Path, *, finished: bool = True
) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    """(id, record.to_dict()) of every row of ``database``, per stream, by id.

    Read as ``replay --sqlite`` reads it (``backfill.open_database``); the ids come from
    the same tables, row for row. ``finished``: False for a run killed with its WAL left.
    """
    connection = _connect(database, finished=finished)
    try:
        ids = {
            table: [row[0] for row in connection.execute(f"SELECT id FROM {table} ORDER BY id")]
            for table in TABLES
        }
    finally:
        connection.close()
    source = open_database(database, STREAMS, _connect(database, finished=finished))
    try:
        records: dict[str, list[dict[str, Any]]] = {}
        for batch in source.batches():
            for record in batch:
                records.setdefault(record.STREAM, []).append(record.to_dict())
        assert source.skipped == 0, source.bad_rows[:5]
    finally:
        source.close()
    out: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for stream in STREAMS:
        table_ids, stream_records = ids[TABLE_BY_STREAM[stream]], records.get(stream, [])
        assert len(table_ids) == len(stream_records), stream
        if table_ids:
            out[stream] = list(zip(table_ids, stream_records, strict=True))
    return out


def highest_ids(database: Path) -> dict[str, int]:
    """``sqlite_sequence`` of a finished database: the highest id each table ever gave."""
    connection = _connect(database)
    try:
        return {
            str(k): int(v) for k, v in connection.execute("SELECT name, seq FROM sqlite_sequence")
        }
    finally:
        connection.close()


def run_files(root: Path) -> set[str]:
    """The run folder's files, relative, without the follower's and the exporter's own."""
    ours = ("aggregator/export/", "aggregator/follow/")
    return {
        str(path.relative_to(root))
        for path in root.rglob("*")
        if path.is_file() and not str(path.relative_to(root)).startswith(ours)
    }


def assert_traceml_outcome(run: Run, elsewhere: Path) -> dict[str, int]:
    """TraceML's own outcome: exit 0, telemetry complete, final_summary.json, and a
    ``telemetry`` file complete on its own (copied alone elsewhere: every table and row).
    Returns the copy's row count per table."""
    assert run.returncode == 0, f"traceml run exit {run.returncode}\n{run.tail()}"
    manifest = run.manifest()
    assert manifest.get("telemetry_status") == "complete", manifest
    assert manifest.get("aggregator_exit_code") == 0, manifest
    assert (run.root / "final_summary.json").is_file()
    for suffix in ("-wal", "-shm"):
        assert not run.database.with_name("telemetry" + suffix).exists(), f"telemetry{suffix} left"
    elsewhere.mkdir(parents=True, exist_ok=True)
    copy = elsewhere / "telemetry"
    shutil.copyfile(run.database, copy)
    connection = sqlite3.connect(copy)
    try:
        tables = {
            r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        assert set(TABLES) <= tables, f"the telemetry file alone lacks {set(TABLES) - tables}"
        counts = {t: connection.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    finally:
        connection.close()
    original = database_rows(run.database)
    assert counts == {TABLE_BY_STREAM[s]: len(original.get(s, [])) for s in STREAMS}
    assert counts["step_time_samples"] > 0, counts
    return counts


def same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to NaN and a float never equal to an int of the same value."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
