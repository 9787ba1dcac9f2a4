"""A backlog is drained in bounded passes: tables take turns, and the bookmark moves while
it drains (the follower in-process, on a database written as TraceML 0.5.0 does)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from traceml_exporter_sdk import ExporterContext, ExportWorker
from traceml_exporter_sdk._bridge.follow import follower as follower_module
from traceml_exporter_sdk._bridge.follow.database import connect
from traceml_exporter_sdk._bridge.follow.follower import PASS_S, REREAD_S, Follower
from traceml_exporter_sdk._bridge.follow.ledger import Ledger
from traceml_exporter_sdk._bridge.follow.run import RunFolder
from traceml_exporter_sdk._bridge.follow.status import RunStatus
from traceml_exporter_sdk._bridge.sqlite_source import PAGE_ROWS
from traceml_exporter_sdk.testing import corpus_records
from writer050 import Writer050

STREAMS = ("step_time", "step_memory", "process")
PAGES = 3
"""Pages of backlog per table."""


class Recorder:
    """Keeps the stream of each record it is given, in order (a busy worker hands several
    queued batches over in one write, so a write is not a turn); flushes succeed."""

    def __init__(self, batches: list[str]) -> None:
        self.batches = batches

    def open(self) -> None:
        pass

    def write(self, records: Sequence[Any]) -> None:
        self.batches.extend(r.STREAM for r in records)

    def flush(self) -> None:
        pass

    def close(self, dropped_batches: int = 0) -> None:
        pass


def _backlog(root: Path) -> int:
    """A run marked complete whose tables hold ``PAGES`` pages each; returns its rows."""
    writer = Writer050(root, tables=STREAMS)
    samples = {r.STREAM: r for r in corpus_records(streams=STREAMS)}
    rows = PAGES * PAGE_ROWS
    for stream in STREAMS:
        writer.flush([samples[stream]] * rows)
    writer.close()
    return rows * len(STREAMS)


class SteppingClock:
    """A monotonic clock that moves ``step`` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


@pytest.mark.parametrize("step", [0.0, PASS_S / 2])
def test_tables_take_turns_and_the_bookmark_moves_while_a_backlog_drains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: float
) -> None:
    total = _backlog(tmp_path / "run")
    saved: list[dict[str, int]] = []
    write = Ledger._write

    def spy(self: Ledger, last_id: dict[str, int], *args: Any) -> None:
        saved.append(dict(last_id))
        write(self, last_id, *args)

    monkeypatch.setattr(Ledger, "_write", spy)
    folder = RunFolder.at(tmp_path / "run")
    context = ExporterContext.create(folder.root, ",".join(STREAMS), False)
    batches: list[str] = []

    def make_worker() -> ExportWorker:
        # a flush after every batch, so each page can be acknowledged on its own
        return ExportWorker(
            lambda _: Recorder(batches), context, queue_size=1_000, flush_interval_s=1e-6
        )

    follower = Follower(folder, make_worker, poll_interval=0.01, clock=SteppingClock(step))
    follower.start()
    source, resumed = follower.open_source()
    result = follower.run(source, resumed)

    assert result.end == "complete"
    assert result.report.delivered_records == total
    # tables take turns a page at a time: no table's backlog waits for another's
    turns = [stream for stream, _ in itertools.groupby(batches)]
    assert sorted(turns[: len(STREAMS)]) == sorted(STREAMS), turns
    assert len(turns) >= PAGES * len(STREAMS), turns
    if step:
        # the clock passes PASS_S within a round: each pass ends after one round, and the
        # loop saves the bookmark between passes, long before the last row is read
        assert len(saved) >= PAGES, saved
        first = saved[0]
        assert 0 < sum(first.values()) < total, saved
    assert saved[-1] == dict.fromkeys(saved[-1], PAGES * PAGE_ROWS)


def test_an_unchanged_database_is_not_read_again_until_a_commit_or_reread_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = Writer050(tmp_path / "run", tables=STREAMS)
    sample = next(r for r in corpus_records(streams=STREAMS) if r.STREAM == "step_time")
    writer.flush([sample] * 10)
    connects: list[float] = []

    def counting(folder: RunFolder) -> Any:
        connects.append(time.monotonic())
        return connect(folder)

    monkeypatch.setattr(follower_module, "connect", counting)
    folder = RunFolder.at(tmp_path / "run")
    context = ExporterContext.create(folder.root, ",".join(STREAMS), False)
    batches: list[str] = []
    stop = threading.Event()
    follower = Follower(
        folder,
        lambda: ExportWorker(lambda _: Recorder(batches), context, flush_interval_s=0.05),
        poll_interval=0.01,
        stop=stop,
    )
    follower.start()
    source, resumed = follower.open_source()
    thread = threading.Thread(target=follower.run, args=(source, resumed))
    thread.start()
    try:
        time.sleep(1.5)  # 150 polls of an unchanged database
        idle_reads = len(connects)
        writer.flush([sample] * 5)  # a commit is seen at the next poll, not after REREAD_S
        seen = time.monotonic()
        deadline = seen + 5
        while follower.worker.delivered_records < 15 and time.monotonic() < deadline:
            time.sleep(0.01)
        caught_up = time.monotonic() - seen
    finally:
        stop.set()
        thread.join(30)
        writer.close()
    assert follower.worker.delivered_records == 15
    assert idle_reads <= 6, f"{idle_reads} reads of an unchanged database in 1.5 s"
    assert caught_up < 0.5 * REREAD_S, f"a commit was read {caught_up:.2f} s after it"


def test_the_lag_of_a_backlog_is_the_age_of_its_rows_not_of_the_pass_that_read_them(
    tmp_path: Path,
) -> None:
    folder = RunFolder.at(tmp_path / "run")
    status = RunStatus(folder.root)
    ledger = Ledger(folder, status)
    source: Any = SimpleNamespace(
        last_id={"step_time_samples": 0}, pruned={}, skipped=0, rows_read=0, pruned_rows=0, read={}
    )
    received_ns = time.time_ns() - 600 * 10**9  # rows TraceML received 10 minutes ago
    source.last_id = {"step_time_samples": 2000}
    ledger.handed("step_time", 2000)
    ledger.mark(source, time.monotonic(), received_ns)  # read just now, after an outage
    ledger.lag(source, {"step_time_samples": 4000}, time.monotonic())
    assert 599 < status.snapshot()["lag_seconds"] < 700
    ledger.acknowledge(2000)
    ledger.lag(source, {"step_time_samples": 2000}, time.monotonic(), caught_up=True)
    assert status.snapshot()["lag_seconds"] == 0
