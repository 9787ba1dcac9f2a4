"""What the follower's tests share: start ``traceml-exporter follow`` as its own process,
and read what it exported (its bookmark and status: ``follow_files.py``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from child_env import child_env
from traceml_exporter_sdk.records import Record
from traceml_exporter_sdk.testing.readback import jsonl_parts

FAST = [
    "--poll-interval",
    "0.05",
    "--flush-interval",
    "0.1",
    "--wait",
    "20",
    "--progress-interval",
    "0",
]
"""Quick polls and flushes; no progress lines (the tests of those ask for them)."""
EXIT_INPUT, EXIT_EXPORT, EXIT_INCOMPLETE, EXIT_PERMANENT, EXIT_LOCKED, EXIT_INTERRUPTED = (
    3,
    4,
    6,
    7,
    8,
    130,
)
FAILING = Path(__file__).with_name("failing_exporter.py")


def follow(
    root: Path, *args: str, spec: str = "jsonl", where: str = "--session-root", **env: str
) -> subprocess.Popen[str]:
    """Start ``traceml-exporter follow`` on ``root`` (all streams, hostname kept)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "traceml_exporter_sdk.cli",
            "follow",
            spec,
            where,
            str(root),
            "--streams",
            "all",
            "--hostname",
            *FAST,
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env([FAILING.parent], **env),
    )


def finish(process: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def exported(root: Path) -> dict[str, list[dict[str, Any]]]:
    """Every record line of every part; a torn last line of a part that was never
    closed (the follower was killed mid-write) is left out, as its rows were never
    acknowledged."""
    out: dict[str, list[dict[str, Any]]] = {}
    export = root / "aggregator" / "export"
    for stream in ("step_time", "step_memory", "system", "system_gpu", "process"):
        for path in jsonl_parts(export, stream):
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
    for stream in ("runtime_environment", "stdout_stderr"):
        for path in jsonl_parts(export, stream):
            for raw in path.read_bytes().splitlines():
                data = json.loads(raw)
                if "closing" not in data:
                    out.setdefault(stream, []).append(data)
    return out


def expected(batches: Sequence[Sequence[Record]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for batch in batches:
        for record in batch:
            out.setdefault(record.STREAM, []).append(record.to_dict())
    return out


def catches(process: subprocess.Popen[str], signum: int) -> bool:
    """``process`` has a handler for ``signum`` installed (``SigCgt`` in /proc): a signal
    sent before that, while it still imports, would kill it instead of stopping it."""
    try:
        status_text = Path(f"/proc/{process.pid}/status").read_text()
    except OSError:
        return False
    for line in status_text.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def steps(root: Path) -> Counter[int]:
    """How many times each step's step_time record was exported."""
    return Counter(line["step"] for line in exported(root).get("step_time", []))


ORPHAN = """
import os, sqlite3, subprocess, sys, time
if sys.argv[1] == "launcher":
    child = subprocess.Popen([sys.executable, "-c", sys.argv[2], "aggregator", sys.argv[3]])
    print(child.pid, flush=True)
    time.sleep(600)
else:
    connection = sqlite3.connect(sys.argv[2])
    connection.execute("SELECT count(*) FROM step_time_samples").fetchall()
    time.sleep(600)
"""
"""A launcher and its aggregator child, which holds the database open, as TraceML's."""


@contextlib.contextmanager
def orphan_launcher(database: Path) -> Iterator[subprocess.Popen[str]]:
    """TraceML's launcher and aggregator stand-ins on ``database``: kill the launcher it
    yields and the aggregator lives on, orphaned. Both are killed on the way out."""
    launcher = subprocess.Popen(
        [sys.executable, "-c", ORPHAN, "launcher", ORPHAN, str(database)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert launcher.stdout is not None
    aggregator = int(launcher.stdout.readline())
    try:
        yield launcher
    finally:
        launcher.kill()
        launcher.wait(10)
        launcher.stdout.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(aggregator, signal.SIGKILL)
