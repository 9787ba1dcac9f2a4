"""The template's postgres sink: records/s from ``write`` to commit on a local server (issue 12).

Standalone: ``python tests/benchmarks/bench_postgres.py`` (``nox -s bench`` runs it;
it needs psycopg and cookiecutter, and PostgreSQL's server binaries or ``PGHOST``).
The template's postgres exporter is baked into a temporary folder and imported;
a throwaway cluster (the SDK's ``postgres_server``, fsync on) is the server.

For step_time records with 5 events and for step_memory records, in the same run:

* the exporter: ``write`` batches of 1,000 records, ``flush`` every 5,000 (COPY in
  one transaction, committed), ``close``; timed from the first write to the end of close;
* the baseline: psycopg's ``executemany`` of an ``INSERT`` of the same values (events
  as ``Jsonb``) into the same kind of table, one transaction per 5,000 records;
* the server alone: COPY of the exporter's rows made beforehand, in its format
  (binary where the table's types allow; what no Python work can beat: for step_time, mostly the server parsing the events into jsonb);
  for step_time also into a table whose ``events`` is ``json`` instead of ``jsonb``
  (the ceiling of that other DDL, which the sink does not use: see docs/postgres.md).

Each line prints the ceiling ratio (server alone / INSERT) beside the exporter's: the
exporter cannot be faster than the server alone.

Targets: at least 50,000 step_time records/s, and at least 5x the INSERT path.
Prints PASS or MISS per target and always exits 0.
"""

from __future__ import annotations

import gc
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the one bake
from _smoke import scaled, summary, verdict
from bake import baked_exporter
from psycopg import sql
from psycopg.types.json import Jsonb
from traceml_exporter_sdk import ExporterContext, StepMemoryRecord, StepTimeRecord
from traceml_exporter_sdk.testing.postgres_server import PostgresServer, postgres_server

ROOT = Path(__file__).resolve().parents[2]
RECORDS = scaled(50_000, 2_000)
WRITE = 1_000
FLUSH_EVERY = 5_000
REPEATS = scaled(3, 1)
NS = 1_712_345_678_901_234_567
EVENTS = (
    "_traceml_internal:dataloader_next",
    "_traceml_internal:forward_time",
    "_traceml_internal:backward_time",
    "_traceml_internal:optimizer_step",
    "_traceml_internal:step_time",
)


def _step_time(n: int, rng: random.Random) -> list[Any]:
    out = []
    for i in range(n):
        events = {}
        for name in EVENTS:
            cpu = rng.uniform(0.5, 40.0)
            events[name] = {
                "cuda:0": {
                    "is_gpu": True,
                    "duration_ms": cpu + 0.25,
                    "cpu_ms": cpu,
                    "gpu_ms": cpu + 0.25,
                    "n_calls": 1,
                }
            }
        rank = i % 64
        ids = (rank, rank, rank % 8, 64, 8, rank // 8, f"node-{rank // 8:03d}")
        out.append(StepTimeRecord(NS + i, *ids, NS + i, i // 64, i // 64, events))
    return out


def _step_memory(n: int, rng: random.Random) -> list[Any]:
    out = []
    for i in range(n):
        rank = i % 64
        ids = (rank, rank, rank % 8, 64, 8, rank // 8, f"node-{rank // 8:03d}")
        peaks = (rng.uniform(1e9, 8e10), rng.uniform(1e9, 8e10))
        out.append(StepMemoryRecord(NS + i, *ids, NS + i, i // 64, "cuda:0", i // 64, *peaks))
    return out


def _exporter_run(module: Any, records: Sequence[Any], root: Path, schema: str) -> float:
    context = ExporterContext.create(root, "all")
    exporter = module.make_exporter(context)
    exporter.schema = schema
    exporter.open()
    gc.collect()
    start = time.perf_counter()
    written = 0
    for i in range(0, len(records), WRITE):
        exporter.write(records[i : i + WRITE])
        written += WRITE
        if written % FLUSH_EVERY == 0:
            exporter.flush()
    exporter.close()
    return time.perf_counter() - start


def _insert_run(server: PostgresServer, records: Sequence[Any], schema: str) -> float:
    """psycopg executemany INSERT of the same values, one transaction per FLUSH_EVERY."""
    stream = records[0].STREAM
    columns = ("schema_version", *(c for c in records[0].COLUMNS if c != "hostname"))
    target = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(stream))
    with psycopg.connect(**server.conninfo_kwargs()) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(
                target, sql.SQL("traceml.{}").format(sql.Identifier(stream))
            )
        )
        conn.commit()
        insert = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
            target,
            sql.SQL(", ").join(map(sql.Identifier, columns)),
            sql.SQL(", ").join(sql.Placeholder() * len(columns)),
        )
        gc.collect()
        start = time.perf_counter()
        with conn.cursor() as cur:
            for i in range(0, len(records), FLUSH_EVERY):
                rows = []
                for record in records[i : i + FLUSH_EVERY]:
                    data = record.to_dict()
                    if "events" in data:
                        data["events"] = Jsonb(data["events"])
                    rows.append(tuple(data[c] for c in columns))
                cur.executemany(insert, rows)
                conn.commit()
        return time.perf_counter() - start


def _floor_run(
    server: PostgresServer, records: Sequence[Any], schema: str, events_type: str = "jsonb"
) -> float:
    """The server alone: COPY of the exporter's own rows, made beforehand, one commit per 5,000.

    In the exporter's own format (binary where the table's types allow);
    ``events_type="json"`` changes the copied table's ``events`` column to ``json``.
    """
    import uuid

    from traceml_exporter_bench._postgres_schema import (
        binary_types,
        ensure_table,
        layout_for,
        register_binary_dumpers,
    )

    stream, columns = records[0].STREAM, records[0].COLUMNS
    layout = layout_for(stream, columns, include_hostname=False)
    target = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(stream))
    with psycopg.connect(**server.conninfo_kwargs()) as conn:
        with conn.cursor() as cur:
            cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            table = ensure_table(cur, schema, stream, columns)
            if events_type != "jsonb":
                cur.execute(
                    sql.SQL("DROP VIEW {}.{}").format(
                        sql.Identifier(schema), sql.Identifier(stream + "_unique")
                    )
                )
                cur.execute(
                    sql.SQL("ALTER TABLE {} ALTER COLUMN events TYPE {}").format(
                        target, sql.SQL(events_type)
                    )
                )
                table["events"] = events_type
        conn.commit()
        types = binary_types(layout.columns, table)
        run_id = "00000000-0000-0000-0000-000000000000"
        binary = types is not None
        prefix = (uuid.UUID(run_id).bytes if binary else run_id, "floor")
        rows = [layout.row(r.to_dict(), prefix, binary=binary) for r in records]
        register_binary_dumpers(conn)
        copy = sql.SQL("COPY {} ({}) FROM STDIN{}").format(
            target,
            sql.SQL(", ").join(map(sql.Identifier, layout.columns)),
            sql.SQL(" (FORMAT BINARY)" if types else ""),
        )
        gc.collect()
        start = time.perf_counter()
        with conn.cursor() as cur:
            for i in range(0, len(rows), FLUSH_EVERY):
                with cur.copy(copy) as pipe:
                    if types is not None:
                        pipe.set_types(types)
                    for row in rows[i : i + FLUSH_EVERY]:
                        pipe.write_row(row)
                conn.commit()
        return time.perf_counter() - start


def _best(run: Callable[[int], float]) -> float:
    return min(run(i) for i in range(REPEATS))


def _measure(
    name: str, records: Sequence[Any], module: Any, server: PostgresServer, folder: Path
) -> tuple[float, float, float, float | None]:
    """records/s of the exporter, of executemany INSERT, of the server alone (and into json)."""
    tag = name.split()[0]
    ours = _best(lambda i: _exporter_run(module, records, folder / f"{tag}{i}", "traceml"))
    theirs = _best(lambda i: _insert_run(server, records, f"insert_{tag}_{i}"))
    floor = _best(lambda i: _floor_run(server, records, f"floor_{tag}_{i}"))
    as_json = None
    if "events" in records[0].COLUMNS:
        as_json = RECORDS / _best(
            lambda i: _floor_run(server, records, f"json_{tag}_{i}", events_type="json")
        )
    return RECORDS / ours, RECORDS / theirs, RECORDS / floor, as_json


def main() -> int:
    os.environ.pop("TRACEML_POSTGRES_CONNINFO", None)
    rng = random.Random(12)
    results: list[bool] = []
    with tempfile.TemporaryDirectory() as folder, postgres_server(fsync=True) as server:
        module = baked_exporter(Path(folder) / "bake", "postgres", "bench")
        os.environ.update(server.env())
        version = server.execute("SHOW server_version")
        print(
            f"postgres sink benchmark: PostgreSQL {version[0][0] if version else '?'}, fsync on, "
            f"{RECORDS:,} records, write {WRITE:,}, commit every {FLUSH_EVERY:,}, best of {REPEATS}"
        )
        for name, make in (("step_time (5 events)", _step_time), ("step_memory", _step_memory)):
            records = make(RECORDS, rng)
            rate, baseline, floor, as_json = _measure(name, records, module, server, Path(folder))
            ratio = rate / baseline
            print(
                f"  {name:21} COPY exporter {rate:9,.0f} records/s   executemany INSERT "
                f"{baseline:8,.0f} records/s   {ratio:4.1f}x\n"
                f"    ceiling: the server alone (COPY of ready rows) {floor:9,.0f} records/s = "
                f"{floor / baseline:4.1f}x INSERT; the exporter reaches {rate / floor:4.0%} of it"
            )
            if as_json is not None:
                print(
                    f"    other DDL: the server alone into events json (not jsonb) "
                    f"{as_json:9,.0f} records/s = {as_json / baseline:4.1f}x INSERT into jsonb"
                )
            if name.startswith("step_time"):
                ok_rate, ok_ratio = rate >= 50_000, ratio >= 5
                results += [ok_rate, ok_ratio]
                print(
                    f"    step_time >= 50,000 records/s: {verdict(ok_rate)}; "
                    f">= 5x INSERT: {verdict(ok_ratio)}"
                )
    print(f"\n{summary(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
