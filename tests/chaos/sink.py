"""The harness's sink: an exporter whose store the checker reads back on its own, with a
fault switch the driver flips from outside (``chaos.sink:make_exporter``).

``$CHAOS_SINK`` is a folder holding ``store.sqlite`` (what the sink acknowledged) and the
switch: ``switch`` for every run, ``switch.<run>`` for one run (it wins). A switch holds
one mode: ``up``; ``down`` (a transient error, as a sink that went away); ``permanent``
(an error marked permanent, as bad credentials); ``slow:<seconds>`` (each call takes
that long); ``hang`` (a call blocks while the switch says so, 300 s at most, then goes
on). ``write`` buffers; ``flush`` and ``close`` commit the buffer in one transaction, so
a row is in the store exactly when its flush returned (an acknowledgement). Each call
that met a fault is logged in ``calls`` (when, which run, method, mode), so the checker
knows when the follower first had a chance to see it. A failing call releases its
connection first, as the contract asks.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from traceml_exporter_sdk.records import stream_key

__all__ = ["MODES", "SinkDownError", "SinkRefusedError", "make_exporter", "open_store", "set_mode"]

MODES = ("up", "down", "permanent", "slow", "hang")
HANG_LIMIT_S = 300.0
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS rows (run TEXT, stream TEXT, key TEXT, record TEXT, t REAL)",
    "CREATE TABLE IF NOT EXISTS calls (t REAL, run TEXT, method TEXT, mode TEXT, phase TEXT)",
)


class SinkDownError(OSError):
    """Transient: the sink is down (its switch says ``down``)."""


class SinkRefusedError(Exception):
    """Permanent: the sink refuses the exporter (its switch says ``permanent``)."""

    permanent = True


def open_store(folder: Path) -> sqlite3.Connection:
    """The store, in autocommit mode, its tables made; WAL, so readers never block it."""
    connection = sqlite3.connect(folder / "store.sqlite", timeout=60.0, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    for statement in SCHEMA:
        connection.execute(statement)
    return connection


def set_mode(folder: Path, mode: str, run: str | None = None) -> None:
    """Flip the switch (atomically): of every run, or of ``run`` alone (``None`` mode: remove)."""
    path = folder / (f"switch.{run}" if run else "switch")
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(mode, encoding="utf-8")
    os.replace(tmp, path)


def _mode(folder: Path, run: str) -> str:
    for name in (f"switch.{run}", "switch"):
        try:
            return (folder / name).read_text(encoding="utf-8").strip() or "up"
        except FileNotFoundError:
            continue
    return "up"


class ChaosSink:
    """One run's exporter into the shared store."""

    def __init__(self, context: Any) -> None:
        self._folder = Path(os.environ["CHAOS_SINK"])
        self._run = Path(context.session_root).name
        self._store: sqlite3.Connection | None = None
        self._buffer: list[tuple[str, str, str, str, float]] = []

    def _log(self, method: str, mode: str, phase: str) -> None:
        store = open_store(self._folder) if self._store is None else self._store
        try:
            store.execute(
                "INSERT INTO calls VALUES (?, ?, ?, ?, ?)",
                (time.time(), self._run, method, mode, phase),
            )
        finally:
            if store is not self._store:
                store.close()

    def _release(self) -> None:
        self._buffer.clear()
        if self._store is not None:
            self._store.close()
            self._store = None

    def _gate(self, method: str) -> None:
        """Apply the switch to this call: raise, sleep, or block."""
        mode = _mode(self._folder, self._run)
        if mode == "up":
            return
        kind, _, value = mode.partition(":")
        self._log(method, mode, "start")
        if kind == "slow":
            time.sleep(float(value or 0.5))
        elif kind == "hang":
            until = time.monotonic() + HANG_LIMIT_S
            while _mode(self._folder, self._run) == "hang" and time.monotonic() < until:
                time.sleep(0.05)
            self._log(method, mode, "end")
        elif kind in ("down", "permanent"):
            self._release()
            error = SinkDownError if kind == "down" else SinkRefusedError
            raise error(f"the sink is {kind} ({method})")

    def open(self) -> None:
        self._gate("open")
        self._store = open_store(self._folder)

    def write(self, records: Sequence[Any]) -> None:
        self._gate("write")
        now = time.time()
        for record in records:
            key = json.dumps(stream_key(record))
            data = json.dumps(record.to_dict(), sort_keys=True)
            self._buffer.append((self._run, record.STREAM, key, data, now))

    def _commit(self) -> None:
        assert self._store is not None
        if not self._buffer:
            return
        self._store.execute("BEGIN")
        self._store.executemany("INSERT INTO rows VALUES (?, ?, ?, ?, ?)", self._buffer)
        self._store.execute("COMMIT")
        self._buffer.clear()

    def flush(self) -> None:
        self._gate("flush")
        self._commit()

    def close(self, *, dropped_batches: int = 0) -> None:
        try:
            self._gate("close")
            self._commit()
        finally:
            self._release()


def make_exporter(context: Any) -> ChaosSink:
    return ChaosSink(context)
