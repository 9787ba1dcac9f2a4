"""Compaction under a reader's feet: every listing shows each record exactly once."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
from traceml_exporter_sdk import ExporterContext, StepMemoryRecord

from traceml_exporter_example.exporter import ExampleExporter

NS = 1_712_345_678_901_234_567
FLUSHES = 300
PART = re.compile(r"^part-\d{19}-(\d{10})-(\d{10})\.parquet$")


def _consistent(names: list[str]) -> bool:
    """A listing whose files hold parts 1..n, each exactly once (file names give the ranges)."""
    ranges = sorted(
        (int(m.group(1)), int(m.group(2))) for m in map(PART.match, names) if m is not None
    )
    expected = 1
    for first, last in ranges:
        if first != expected:
            return False
        expected = last + 1
    return bool(ranges)


def _steps_by_glob(folder: Path) -> list[Any] | None:
    """What a glob reader gets: the ``step`` of every row, or None if a listed file vanished."""
    try:
        return [
            step
            for path in sorted(folder.glob("*.parquet"))
            for step in pq.read_table(path, columns=["step"])["step"].to_pylist()
        ]
    except FileNotFoundError:
        return None


def _steps_by_duckdb(folder: Path) -> list[Any] | None:
    try:
        with duckdb.connect() as connection:
            rows = connection.execute(
                f"SELECT step FROM read_parquet('{folder}/*.parquet')"  # noqa: S608
            ).fetchall()
    except duckdb.IOException:
        return None
    return [step for (step,) in rows]


def test_a_glob_reader_never_sees_a_record_twice_or_misses_one(context: ExporterContext) -> None:
    exporter = ExampleExporter(context.export_dir, part_limit=2, durable=False)
    exporter.open()
    exporter.write([StepMemoryRecord(NS, 0, 0, 0, 1, 1, 0, None, NS, 0, "cpu", 0, 1.0, 2.0)])
    exporter.flush()
    folder = context.export_dir / "step_memory"
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            for step in range(1, FLUSHES):
                record = StepMemoryRecord(
                    NS, 0, 0, 0, 1, 1, 0, None, NS, step, "cpu", step, 1.0, 2.0
                )
                exporter.write([record, record])
                exporter.flush()  # a part, and a compaction every other flush
            exporter.close()
        except BaseException as error:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(error)

    listings: list[list[str]] = []

    def list_folder() -> None:
        while writer.is_alive():
            listings.append([n for n in os.listdir(folder) if n.endswith(".parquet")])

    writer = threading.Thread(target=produce)
    lister = threading.Thread(target=list_folder)
    writer.start()
    lister.start()
    reads = raced = 0
    try:
        while writer.is_alive() or reads == 0:
            for read in (_steps_by_glob, _steps_by_duckdb):
                steps = read(folder)
                if steps is None:
                    raced += 1
                    continue
                reads += 1
                want = [0] + [s for s in range(1, (len(steps) + 1) // 2 + 1) for _ in range(2)]
                assert sorted(steps) == want[: len(steps)], "a record twice, or a gap"
                assert len(steps) % 2 == 1, "half of a flushed part"
    finally:
        writer.join(timeout=60)
        lister.join(timeout=60)
    assert not errors, errors
    assert len(listings) > 1000
    bad = [names for names in listings if not _consistent(names)]
    assert not bad, f"{len(bad)} of {len(listings)} listings show a part twice or miss one"
    assert reads > 10, f"the reader barely ran ({reads} reads, {raced} raced a swap)"
    assert sorted(_steps_by_glob(folder) or []) == [0] + [
        s for s in range(1, FLUSHES) for _ in "ab"
    ]
