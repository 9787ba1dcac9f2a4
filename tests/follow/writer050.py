"""A small writer of TraceML 0.5.0's database: its schema and its transaction pattern.

For the follower's fast tests and its benchmark, without torch or a training run.
Like 0.5.0's aggregator (``aggregator/sqlite_writer.py``): WAL mode, the seven
tables created one by one, each flush one transaction of inserts (and, when asked,
retention deletes), ``wal_checkpoint(TRUNCATE)`` at the end; a ``manifest.json``
that moves from ``running`` to ``complete`` with an ``aggregator_exit_code``.
``test_writer050.py`` checks the schema against 0.5.0's own ``init_schema``.

Rows are made from records (``row_of``): the record's fields in table order with
``recv_ts_ns`` for ``observed_timestamp_unix_ns``, float seconds in
``sample_ts_s`` (0.5.0 ranks send float seconds, so the record's
``timestamp_unix_ns`` is None) and sorted compact JSON in ``events_json``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from traceml_exporter_sdk._bridge.sqlite_source import TABLE_BY_STREAM
from traceml_exporter_sdk.records import RECORD_TYPES, Record

RENAMED = {"observed_timestamp_unix_ns": "recv_ts_ns", "timestamp_unix_ns": "sample_ts_s"}
NOT_NULL = {"recv_ts_ns", "events_json", "line", "gpu_idx"}
SQL_TYPES = {"int": "INTEGER", "float": "REAL", "str": "TEXT"}


def columns_050(record_type: type[Record]) -> list[tuple[str, str]]:
    """(name, SQL type) of the table 0.5.0 writes for ``record_type``, minus ``id``."""
    hints = {f.name: str(f.type) for f in dataclasses.fields(record_type)}
    out = []
    for name in record_type.COLUMNS:
        if name == "events":
            out.append(("events_json", "TEXT"))
        elif name == "timestamp_unix_ns":
            out.append(("sample_ts_s", "REAL"))
        else:
            out.append((RENAMED.get(name, name), SQL_TYPES[hints[name].split(" ")[0]]))
    return out


def create_table_sql(record_type: type[Record]) -> str:
    columns = ",\n".join(
        f"    {name} {kind}{' NOT NULL' if name in NOT_NULL else ''}"
        for name, kind in columns_050(record_type)
    )
    table = TABLE_BY_STREAM[record_type.STREAM]
    return (
        f"CREATE TABLE IF NOT EXISTS {table} (\n"
        f"    id INTEGER PRIMARY KEY AUTOINCREMENT,\n{columns}\n)"
    )


def row_of(record: Record, sample_ts_s: float | None = 1_764_230_400.25) -> tuple[Any, ...]:
    """The 0.5.0 row of ``record`` (without ``id``)."""
    values = []
    for name in record.COLUMNS:
        value = getattr(record, name)
        if name == "events":
            value = json.dumps(value, sort_keys=True, separators=(",", ":"))
        elif name == "timestamp_unix_ns":
            value = sample_ts_s
        values.append(value)
    return tuple(values)


class Writer050:
    """Writes a run folder as TraceML 0.5.0's aggregator does: manifest and database."""

    def __init__(
        self, root: Path, *, session_id: str = "run1", tables: Iterable[str] | None = None
    ) -> None:
        self.root = root
        self.database = root / "aggregator" / "telemetry"
        self.session_id = session_id
        self.created_at = datetime.now(timezone.utc).isoformat()
        self.database.parent.mkdir(parents=True, exist_ok=True)
        self.write_manifest("running")
        self.connection: sqlite3.Connection | None = sqlite3.connect(
            self.database, isolation_level=None, check_same_thread=False, timeout=10.0
        )
        self.connection.execute("PRAGMA journal_mode=WAL")
        self.connection.execute("PRAGMA synchronous=NORMAL")
        wanted = {t.STREAM for t in RECORD_TYPES} if tables is None else set(tables)
        for record_type in RECORD_TYPES:
            if record_type.STREAM in wanted:
                self.create(record_type)

    def create(self, record_type: type[Record]) -> None:
        """Create one table (0.5.0 creates them one statement at a time)."""
        assert self.connection is not None
        self.connection.execute(create_table_sql(record_type))

    def write_manifest(self, status: str, exit_code: int | None = None) -> None:
        manifest: dict[str, Any] = {
            "schema_version": 1,
            "session_id": self.session_id,
            "status": "running" if status == "running" else "completed",
            "created_at": self.created_at,
            "telemetry_status": status,
        }
        if exit_code is not None:
            manifest["aggregator_exit_code"] = exit_code
        tmp = self.root / "manifest.json.tmp"
        tmp.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        os.replace(tmp, self.root / "manifest.json")

    def flush(
        self, records: Sequence[Record], *, prune: dict[str, int] | None = None
    ) -> dict[str, list[int]]:
        """One transaction: insert the rows of ``records`` and delete, per table in
        ``prune``, every row with an id up to that one. Returns the ids given."""
        assert self.connection is not None
        by_table: dict[str, list[tuple[Any, ...]]] = {}
        for record in records:
            by_table.setdefault(TABLE_BY_STREAM[record.STREAM], []).append(row_of(record))
        ids: dict[str, list[int]] = {}
        connection = self.connection
        connection.execute("BEGIN")
        try:
            for table, rows in by_table.items():
                marks = ", ".join("?" * len(rows[0]))
                for row in rows:
                    cursor = connection.execute(f"INSERT INTO {table} VALUES (NULL, {marks})", row)
                    ids.setdefault(table, []).append(int(cursor.lastrowid or 0))
            for table, upto in (prune or {}).items():
                connection.execute(f"DELETE FROM {table} WHERE id <= ?", (upto,))
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
        return ids

    def checkpoint(self) -> tuple[int, int, int]:
        """``wal_checkpoint(TRUNCATE)``: (busy, wal pages, pages moved); busy 0 = it ran whole."""
        assert self.connection is not None
        row = self.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return int(row[0]), int(row[1]), int(row[2])

    def close(self, *, status: str | None = "complete") -> tuple[int, int, int]:
        """Checkpoint and close as 0.5.0 does at finalize; then mark the manifest."""
        result = self.checkpoint()
        self.disconnect()
        if status is not None:
            self.write_manifest(status, 0)
        return result

    def disconnect(self) -> None:
        """Close without a checkpoint or a manifest update (an aggregator that died)."""
        if self.connection is not None:
            self.connection.close()
            self.connection = None


def corpus_records_050() -> list[list[Record]]:
    """The SDK corpus as a 0.5.0 run's rows give it back: one batch per payload, with
    ``timestamp_unix_ns`` None (0.5.0 stores float seconds)."""
    from traceml_exporter_sdk.testing import corpus_batches

    return [
        [dataclasses.replace(r, timestamp_unix_ns=None) for r in batch]  # type: ignore[type-var]
        for batch in corpus_batches(streams=None)
    ]


def step_records(first: int, count: int, *, rank: int = 0, observed: int = 1) -> list[Record]:
    """``count`` StepTimeRecords of one rank, steps ``first`` on (0.5.0's float seconds)."""
    from payloads import envelope
    from traceml_exporter_sdk import records_from_payload

    stats = {"is_gpu": False, "duration_ms": 1.5, "cpu_ms": 1.5, "gpu_ms": None, "n_calls": 1}
    rows = [
        {
            "seq": step,
            "timestamp": 1_764_230_400.5 + step,
            "step": step,
            "events": {"_traceml_internal:step_time": {"cpu": stats}},
        }
        for step in range(first, first + count)
    ]
    # one rank alone on a VM, sending float seconds as 0.5.0 does
    item = envelope(
        table="StepTimeTable",
        rows=rows,
        sampler="StepTimeSampler",
        rank=rank,
        ranks_per_node=1,
        world_size=1,
        hostname="vm",
        pid=1,
        timestamp=1_764_230_400.5,
    )
    return records_from_payload(item, observed_timestamp_unix_ns=observed).records
