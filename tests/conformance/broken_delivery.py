"""Deliberately broken exporters: each loses data across a flush, a close, a restart or a
failure in one realistic way, or leaves a resource behind after a failure.

Each is ``broken_exporters.Good`` changed in one place; ``test_matrix.py`` asserts that
each fails exactly the checks of its rule.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from typing import Any

from broken_exporters import Good


class Buffered(Good):
    """Good, with records kept in memory until ``deliver`` puts them in the files."""

    def open(self) -> None:
        super().open()
        self.pending: list[tuple[str, str]] = []

    def write(self, records: Any) -> None:
        try:
            self.put(records)
        except BaseException:
            self.release()
            raise

    def put(self, records: Any) -> None:
        self.pending.extend((r.STREAM, self.line(r)) for r in records)

    def deliver(self) -> None:
        pending, self.pending = self.pending, []
        try:
            for stream, line in pending:
                self.files[stream].write(line)
        except BaseException:
            self.release()
            raise
        Good.flush(self)


class FlushNotDurable(Buffered):
    """flush() returns at once; everything is written only at close (a client that batches
    "for efficiency" and acknowledges before it sent anything)."""

    def flush(self) -> None:
        pass

    def close(self, *, dropped_batches: int = 0) -> None:
        self.deliver()
        super().close()


def make_flush_not_durable(context: Any) -> FlushNotDurable:
    return FlushNotDurable(context)


class DroppedBatchesRollback(Buffered):
    """Treats close(dropped_batches > 0) as an aborted run: what was written since the last
    flush is rolled back instead of delivered."""

    def flush(self) -> None:
        self.deliver()

    def close(self, *, dropped_batches: int = 0) -> None:
        if dropped_batches:
            self.pending.clear()  # "the run is incomplete anyway"
        self.deliver()
        super().close()


def make_dropped_batches_rollback(context: Any) -> DroppedBatchesRollback:
    return DroppedBatchesRollback(context)


class BoundedBuffer(Buffered):
    """Keeps at most 5,000 records between flushes and drops the rest without a word."""

    LIMIT = 5_000

    def put(self, records: Any) -> None:
        room = max(0, self.LIMIT - len(self.pending))
        self.pending.extend((r.STREAM, self.line(r)) for r in list(records)[:room])

    def flush(self) -> None:
        self.deliver()

    def close(self, *, dropped_batches: int = 0) -> None:
        self.deliver()
        super().close()


def make_bounded_buffer(context: Any) -> BoundedBuffer:
    return BoundedBuffer(context)


class TruncatesOnRestart(Good):
    """Opens its files with mode "w": a second instance on the same folder (a restart, as
    ``follow`` does after a crash) empties what the first wrote."""

    def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            for stream in self.streams:
                self.files[stream] = open(self.dir / f"{stream}.jsonl", "w", encoding="utf-8")  # noqa: SIM115
        except BaseException:
            self.close_files()
            raise


def make_truncates_on_restart(context: Any) -> TruncatesOnRestart:
    return TruncatesOnRestart(context)


class CloseSwallowsFailure(Good):
    """Raises from write and flush, but close logs a failure and returns normally."""

    def close(self, *, dropped_batches: int = 0) -> None:
        with contextlib.suppress(OSError):  # "best effort at shutdown"
            self.close_files()


def make_close_swallows_failure(context: Any) -> CloseSwallowsFailure:
    return CloseSwallowsFailure(context)


class SqliteLeftOpenOnFailure(Good):
    """Keeps a sqlite3 index of its batches; a failing write or flush closes the files but
    leaves the connection open (only close closes it, and close never comes)."""

    def open(self) -> None:
        super().open()
        try:
            self.db = sqlite3.connect(self.dir / "index.db")
        except BaseException:
            self.close_files()
            raise
        try:
            self.db.execute("CREATE TABLE IF NOT EXISTS batches (n INTEGER)")
        except BaseException:
            self.db.close()
            self.close_files()
            raise

    def write(self, records: Any) -> None:
        super().write(records)
        try:
            self.db.execute("INSERT INTO batches VALUES (?)", (len(records),))
        except BaseException:
            self.release()  # the files, not the connection: the mistake
            raise

    def flush(self) -> None:
        super().flush()
        self.db.commit()

    def close(self, *, dropped_batches: int = 0) -> None:
        super().close()
        self.db.commit()
        self.db.close()


def make_sqlite_left_open_on_failure(context: Any) -> SqliteLeftOpenOnFailure:
    return SqliteLeftOpenOnFailure(context)


class MutatesRecords(Good):
    """Deletes the unmeasured (None) stats from each record's own events map before writing
    it: the record it was handed is changed."""

    def line(self, record: Any) -> str:
        for devices in getattr(record, "events", {}).values():
            for stats in devices.values():
                for key in [k for k, v in stats.items() if v is None]:
                    del stats[key]
        return super().line(record)


def make_mutates_records(context: Any) -> MutatesRecords:
    return MutatesRecords(context)


class FlattensDevices(Good):
    """Keys each event by its name alone, so a phase measured on two devices in one step
    keeps only the last device's stats."""

    def line(self, record: Any) -> str:
        data = record.to_dict()
        if not self.include_hostname:
            data.pop("hostname", None)
        if "events" in data:
            flat: dict[str, Any] = {}
            for name, devices in data["events"].items():
                for device, stats in devices.items():
                    flat[name] = {device: stats}  # the last device wins
            data["events"] = flat
        return json.dumps(data) + "\n"


def make_flattens_devices(context: Any) -> FlattensDevices:
    return FlattensDevices(context)


# -- causes: mistakes whose failures must be explained by what the evidence shows ----------


class OneRowPerKey(Good):
    """Keeps one row per (global_rank, seq) of each stream, the first one seen (a sink with
    that primary key and ON CONFLICT DO NOTHING): a tick carrying two steps, or two GPUs of
    one snapshot, lose all but one row. Nothing lands under the wrong stream."""

    def open(self) -> None:
        super().open()
        self.keys: set[tuple[str, Any, Any]] = set()

    def put(self, records: Any) -> None:
        for record in records:
            key = (record.STREAM, getattr(record, "global_rank", None), getattr(record, "seq", id))
            if key[2] is id or key not in self.keys:
                self.keys.add(key)
                self.files[record.STREAM].write(self.line(record))


def make_one_row_per_key(context: Any) -> OneRowPerKey:
    return OneRowPerKey(context)


class ClockStamped(Good):
    """Stamps observed_timestamp_unix_ns from its own clock instead of keeping the record's."""

    def line(self, record: Any) -> str:
        data = record.to_dict()
        if not self.include_hostname:
            data.pop("hostname", None)
        data["observed_timestamp_unix_ns"] = time.time_ns()
        return json.dumps(data) + "\n"


def make_clock_stamped(context: Any) -> ClockStamped:
    return ClockStamped(context)


class AutoFlushTimer(Good):
    """A 1 s auto-flush timer "so data is not held too long": a thread of the exporter's
    own flushes the files beside the worker (under a lock, so only the rule is broken)."""

    def open(self) -> None:
        super().open()
        self.lock = threading.Lock()
        self.timer: threading.Timer | None = None
        self.arm()

    def arm(self) -> None:
        self.timer = threading.Timer(1.0, self.tick)
        self.timer.daemon = True
        self.timer.start()

    def tick(self) -> None:
        with self.lock:
            if not self.files or self.timer is None:
                return
            for handle in self.files.values():
                handle.flush()
            self.arm()

    def put(self, records: Any) -> None:
        with self.lock:
            super().put(records)

    def close(self, *, dropped_batches: int = 0) -> None:
        self.stop()
        with self.lock:
            super().close()

    def release(self) -> None:
        self.stop()
        super().release()

    def stop(self) -> None:
        timer, self.timer = getattr(self, "timer", None), None
        if timer is not None:
            timer.cancel()
            if timer is not threading.current_thread():
                timer.join()


def make_auto_flush_timer(context: Any) -> AutoFlushTimer:
    return AutoFlushTimer(context)
