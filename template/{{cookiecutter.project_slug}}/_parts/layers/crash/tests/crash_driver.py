"""Export records through the SDK's ExportWorker until killed (the crash tests' child).

``python crash_driver.py SESSION_ROOT PROGRESS_FILE`` runs ``sink_support.crash_exporter``
and after every flush that returned appends one JSON line to PROGRESS_FILE: how many
records of each stream had been written before that flush, so were delivered. It never
stops on its own: :func:`kill_mid_run` kills it with SIGKILL at a random moment.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from sink_support import crash_exporter
from traceml_exporter_sdk import (
    ExporterContext,
    ExportRecord,
    ExportWorker,
    StepMemoryRecord,
    StepTimeRecord,
)

NS = 1_712_345_678_901_234_567
BATCH = 50


class Recording:
    """The exporter, plus a line in the progress file after each flush that returned."""

    def __init__(self, context: ExporterContext, progress: Path) -> None:
        self._inner = crash_exporter(context)
        self._progress_path = progress
        self._progress: IO[str] | None = None
        self._written: dict[str, int] = {}

    def open(self) -> None:
        self._progress = self._progress_path.open("a", encoding="utf-8", buffering=1)
        self._inner.open()

    def write(self, records: Sequence[ExportRecord]) -> None:
        self._inner.write(records)
        for record in records:
            self._written[record.STREAM] = self._written.get(record.STREAM, 0) + 1

    def flush(self) -> None:
        self._inner.flush()
        assert self._progress is not None
        self._progress.write(json.dumps(self._written) + "\n")

    def close(self, *, dropped_batches: int = 0) -> None:
        self._inner.close(dropped_batches=dropped_batches)


def batch(start: int) -> list[Any]:
    """Records ``start`` .. ``start + BATCH - 1`` of rank 0 in step_time and step_memory;
    ``step`` is the record's id, and n_calls and peak memory are the step too."""
    out: list[Any] = []
    for step in range(start, start + BATCH):
        events = {"fwd": {"cuda:0": {"is_gpu": True, "cpu_ms": step / 8, "n_calls": step}}}
        out.append(StepTimeRecord(NS, 0, 0, 0, 1, 1, 0, None, NS + step, step, step, events))  # type: ignore[arg-type]
        out.append(
            StepMemoryRecord(NS, 0, 0, 0, 1, 1, 0, None, NS, step, "cuda:0", step, 1e9, None)
        )
    return out


def kill_mid_run(session: Path, progress: Path, flushes: int, rng: random.Random) -> None:
    """Run this driver until ``flushes`` flushes returned, wait up to 50 ms, SIGKILL it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, __file__, str(session), str(progress)]
    child = subprocess.Popen(command, env=env)  # noqa: S603 - this folder's own driver
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and child.poll() is None:
            if progress.exists() and progress.read_text(encoding="utf-8").count("\n") >= flushes:
                break
            time.sleep(0.01)
        assert child.poll() is None, f"the driver exited with {child.returncode}"
        time.sleep(rng.uniform(0, 0.05))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)


def flushed(progress: Path) -> dict[str, int]:
    """The last complete progress line: records of each stream delivered before the kill."""
    lines = progress.read_text(encoding="utf-8").split("\n")[:-1]  # a torn last line is dropped
    result: dict[str, int] = json.loads(lines[-1]) if lines else {}
    return result


def main(argv: list[str]) -> None:
    session, progress = Path(argv[1]), Path(argv[2])
    context = ExporterContext.create(session, export_streams="all")
    worker = ExportWorker(
        lambda c: Recording(c, progress), context, flush_interval_s=0.005, max_batches_per_write=4
    ).start()
    start = 0
    while True:
        if worker.submit_records(batch(start)):
            start += BATCH
        time.sleep(0.001)


if __name__ == "__main__":
    main(sys.argv)
