"""Real ``traceml run`` jobs in a schedule (``python -m chaos --real N``): TraceML 0.5.0 on
CPU torch, training ``tests/traceml_real/train_tiny.py``, started as ``realrun.Run``.

A real run keeps no ledger, so the database itself is the oracle: ``sample`` reads each
table's ``sqlite_sequence`` every ``SCRAPE_S`` while the run lives and writes what rose,
when, as ledger lines (an id is committed by the first sample that saw it, at most one
period late); ``read_rows`` reads every row left in it at the end (or just before the
harness deletes the folder) into its identity, ``identity(stream, record)``, which the
sink computes from what it stored. Retention stays at TraceML's default (30 min, far
beyond a run here): nothing is pruned, so every row the database held is a row to find
in the sink. A row's number for the checker is ``table index * ID_SPAN + id``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .schedule import RunPlan

__all__ = ["ID_SPAN", "RealRun", "available", "identity", "read_rows"]

HERE = Path(__file__).resolve().parent
REAL = HERE.parent / "traceml_real"
ID_SPAN = 10**8
"""Row numbers of table k are k * ID_SPAN + id: one space for the seven tables."""
READY_S = 150.0
"""How long a real run may take to write its first step rows on a loaded machine
(torch's import in the launcher, torchrun and the rank; 10-20 s alone)."""


def _realrun() -> Any:
    """``tests/traceml_real/realrun.py``, the real runs' own module (imported on use)."""
    if str(REAL) not in sys.path:
        sys.path.insert(0, str(REAL))
    import realrun

    return realrun


def available() -> str | None:
    """None when real runs can be made here; else what is missing, in one line."""
    missing = [name for name in ("torch", "traceml_ai") if importlib.util.find_spec(name) is None]
    if missing:
        return (
            f"real runs need {' and '.join(missing)} in this Python ({sys.executable}): "
            "torch==2.13.0 (the CPU wheel) and traceml-ai==0.5.0, as `nox -s chaos -- --real N` "
            "installs them"
        )
    if not Path(sys.executable).with_name("traceml").exists():
        return f"real runs need the `traceml` launcher beside {sys.executable}"
    return None


def identity(stream: str, record_json: str) -> str:
    """A row's identity: its stream and record (``to_dict()``, JSON with sorted keys). A
    resent record has the same; two rows of a real run never do (their timestamps)."""
    return hashlib.sha1(f"{stream}\n{record_json}".encode()).hexdigest()[:24]


def _tables() -> list[tuple[str, str]]:
    from traceml_exporter_sdk._bridge.sqlite_source import TABLE_BY_STREAM
    from traceml_exporter_sdk.records import RECORD_TYPES

    return [(t.STREAM, TABLE_BY_STREAM[t.STREAM]) for t in RECORD_TYPES]


def read_rows(database: Path) -> dict[str, int] | None:
    """Every row of ``database``: identity -> row number (None: no database). Read as
    ``follow`` reads it (the SDK's row converter), page by page, so a run still alive
    only adds rows between pages."""
    from traceml_exporter_sdk._bridge.sqlite_connect import connect_read_only
    from traceml_exporter_sdk._bridge.sqlite_rows import RowConverter
    from traceml_exporter_sdk._bridge.sqlite_source import open_database

    if not database.exists():
        return None
    tables = _tables()
    source = open_database(database, tuple(s for s, _ in tables), connect_read_only(database))
    out: dict[str, int] = {}
    try:
        index = {table: k for k, (_, table) in enumerate(tables)}
        bad: list[str] = []
        for plan in source.tables:
            converter = RowConverter(plan.stream)
            after = 0
            while rows := source.connection.execute(plan.query, (after, 2000)).fetchall():
                for row in rows:
                    bad.clear()
                    records = converter.records([row], lambda _i, why: bad.append(why))
                    if bad or len(records) != 1:
                        raise RuntimeError(f"{database}: {plan.table} id {row[0]}: {bad}")
                    data = json.dumps(records[0].to_dict(), sort_keys=True)
                    out[identity(plan.stream, data)] = index[plan.table] * ID_SPAN + int(row[0])
                after = int(rows[-1][0])
    finally:
        source.close()
    return out


def _started(pid: int) -> str | None:
    """The process's start time (``/proc/<pid>/stat``), which tells it from a later one
    given the same pid; None: no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()[19]


class RealRun:
    """One real ``traceml run`` as the driver's runs go (``chaos.driver._Run``): started
    (blocking) until its first step rows are in the database, then training for
    ``plan.seconds`` (a stop file ends it), a step every ``plan.every`` seconds."""

    def __init__(self, plan: RunPlan, logs: Path, state: Path, env: dict[str, str]) -> None:
        realrun = _realrun()
        self.plan = plan
        self.root = logs / plan.name
        self.ledger = state / f"{plan.name}.ledger.jsonl"
        self.ledger.touch()
        self._seq: dict[str, int] = {}
        self._pids: dict[int, str] = {}
        """Its processes (pid -> start time), noted while the launcher lives: an orphan
        is still found, and a pid given since to another process is never hit."""
        self.orphaned = False
        self.run = realrun.Run(
            logs,
            plan.name,
            steps=10**6,
            step_sleep=plan.every,
            env={k: env[k] for k in ("PYTHONPATH",) if k in env},
        )
        self.run.start()
        self.launcher: subprocess.Popen[bytes] = self.run.process
        self._ready()
        self._stop_at = time.monotonic() + plan.seconds

    def _ready(self) -> None:
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline and self.alive():
            self.sample()
            if self._seq.get("step_time_samples"):
                break
            time.sleep(0.1)
        self._note_pids()

    def _note_pids(self) -> None:
        if self.alive():
            for pid in (self.launcher.pid, *_realrun().descendants(self.launcher.pid)):
                started = _started(pid)
                if started is not None:
                    self._pids.setdefault(pid, started)

    def sample(self) -> None:
        """Note in the ledger the ids committed since the last sample; past the plan's
        seconds, end the training (the stop file)."""
        if self.alive() and time.monotonic() >= getattr(self, "_stop_at", float("inf")):
            self.end()
        database = self.root / "aggregator" / "telemetry"
        if not database.exists():
            return
        try:
            connection = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True, timeout=1)
            try:
                seqs = dict(connection.execute("SELECT name, seq FROM sqlite_sequence"))
            finally:
                connection.close()
        except sqlite3.Error:
            return
        now = time.time()
        lines = []
        for k, (_, table) in enumerate(_tables()):
            seq, before = int(seqs.get(table) or 0), self._seq.get(table, 0)
            if seq > before:
                lines.append(
                    {"t": now, "first_id": k * ID_SPAN + before + 1, "last_id": k * ID_SPAN + seq}
                )
                self._seq[table] = seq
        if lines:
            with open(self.ledger, "a", encoding="utf-8") as fh:
                fh.writelines(json.dumps(line) + "\n" for line in lines)

    def aggregator_pid(self, wait: float = 0.0) -> int | None:
        return self.launcher.pid

    def kill_launcher(self) -> None:
        """``kill -9`` of ``traceml run`` alone: its aggregator and ranks live on, orphaned."""
        self._note_pids()
        with contextlib.suppress(OSError):
            self.launcher.kill()
        self.launcher.wait(10)
        self.orphaned = True

    def kill_whole(self) -> None:
        """``kill -9`` of the launcher, the aggregator and the ranks (orphans too)."""
        self._note_pids()
        for pid, started in sorted(self._pids.items()):
            if _started(pid) == started:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.launcher.wait(10)
        self.orphaned = False

    def end(self) -> None:
        """Training stops after its step (an orphan's ranks too; its aggregator stays)."""
        self.run.stop_training()

    def alive(self) -> bool:
        return self.launcher.poll() is None

    def wait(self, seconds: float) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.launcher.wait(seconds)
