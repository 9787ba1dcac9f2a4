"""Readers nobody here wrote: DuckDB and polars read every stream as it is on disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from sink_support import query
from traceml_exporter_sdk import ExporterContext, ExportWorker
from traceml_exporter_sdk.testing import corpus_batches

from traceml_exporter_example.exporter import ExampleExporter

ByStream = dict[str, list[dict[str, Any]]]
FORWARD = "_traceml_internal:forward_time"


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ByStream]:
    """The sample corpus, twice, through the worker: compacted parts plus a second run."""
    context = ExporterContext.create(tmp_path_factory.mktemp("readers"), export_streams="all")
    expected: ByStream = {}
    for run in range(2):
        worker = ExportWorker(
            lambda c: ExampleExporter(c.export_dir, part_limit=4),
            context,
            flush_interval_s=0.001,
            max_batches_per_write=1,
        ).start()
        for batch in corpus_batches(observed_base_ns=1_800_000_000_000_000_000 + run * 1000):
            worker.submit_records(batch)
            for record in batch:
                data = record.to_dict()
                data.pop("hostname", None)
                expected.setdefault(record.STREAM, []).append(data)
        report = worker.shutdown()
        assert report.failure is None
        assert report.failed_records == 0
    return context.export_dir, expected


def _glob(export_dir: Path, stream: str) -> str:
    return f"{export_dir / stream}/*.parquet"


def _plain(value: Any) -> Any:
    """polars before 2.0 gives a map as a list of {key, value} structs: make it a dict."""
    if isinstance(value, list) and all(
        isinstance(item, dict) and item.keys() == {"key", "value"} for item in value
    ):
        return {item["key"]: _plain(item["value"]) for item in value}
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def test_duckdb_reads_every_stream_exactly(export: tuple[Path, ByStream]) -> None:
    export_dir, expected = export
    assert len(expected) == 7
    for stream, want in expected.items():
        rows = query(
            f"SELECT * EXCLUDE (filename, file_row_number, _exact_text) FROM read_parquet("  # noqa: S608
            f"'{_glob(export_dir, stream)}', filename = true, file_row_number = true) "
            "ORDER BY filename, file_row_number"
        )
        assert rows == want, stream


def test_duckdb_step_time_query_returns_exact_ns_and_event_values(
    export: tuple[Path, ByStream],
) -> None:
    export_dir, expected = export
    rows = [
        tuple(row.values())
        for row in query(
            "SELECT global_rank, step, timestamp_unix_ns, observed_timestamp_unix_ns, "  # noqa: S608
            f"events['{FORWARD}'] AS forward "
            f"FROM read_parquet('{_glob(export_dir, 'step_time')}') "
            f"WHERE events['{FORWARD}'] IS NOT NULL "
            "ORDER BY observed_timestamp_unix_ns, global_rank, step"
        )
    ]
    want = sorted(
        (
            r["global_rank"],
            r["step"],
            r["timestamp_unix_ns"],
            r["observed_timestamp_unix_ns"],
            r["events"][FORWARD],
        )
        for r in expected["step_time"]
        if FORWARD in r["events"]
    )
    assert len(rows) == len(want) > 0
    assert sorted(rows, key=lambda row: row[:4]) == want
    assert all(len(str(row[2])) == 19 for row in rows if row[2] is not None)
    ((total,),) = [
        tuple(row.values())
        for row in query(
            f"SELECT sum(events['{FORWARD}']['cuda:0'].n_calls) "  # noqa: S608
            f"FROM read_parquet('{_glob(export_dir, 'step_time')}')"
        )
    ]
    assert total == sum(
        r["events"][FORWARD]["cuda:0"]["n_calls"] or 0
        for r in expected["step_time"]
        if "cuda:0" in r["events"].get(FORWARD, {})
    )


def test_polars_reads_every_stream_exactly(export: tuple[Path, ByStream]) -> None:
    export_dir, expected = export
    for stream, want in expected.items():
        frame = pl.read_parquet(_glob(export_dir, stream)).drop("_exact_text")
        assert [_plain(row) for row in frame.to_dicts()] == want, stream
    step_time = pl.read_parquet(_glob(export_dir, "step_time"))
    assert step_time.schema["timestamp_unix_ns"] == pl.Int64
    assert step_time.schema["global_rank"] == pl.Int64
    memory = pl.scan_parquet(_glob(export_dir, "step_memory"))
    assert memory.collect_schema()["peak_alloc_bytes"] == pl.Float64
