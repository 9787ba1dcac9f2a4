"""Unit tests of the Parquet layout, schema and failure rules (the suite checks the contract)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from exporter_calls import StrayRecord, is_permanent, refusal, run, written
from traceml_exporter_sdk import (
    ExporterContext,
    ExportRecord,
    StdoutStderrRecord,
    StepMemoryRecord,
    StepTimeRecord,
)
from traceml_exporter_sdk.testing import as_foreign, expected_by_stream

from traceml_exporter_example._parquet_arrow import FIELD_TYPES, dictionary_columns
from traceml_exporter_example._parquet_events import EVENTS_TYPE
from traceml_exporter_example._parquet_layout import SinkError
from traceml_exporter_example._parquet_text import EXACT_TEXT, clean_text
from traceml_exporter_example.exporter import (
    SUMMARY_FILE,
    ExampleExporter,
    make_exporter,
    read_export,
)

ByStream = dict[str, list[dict[str, Any]]]
NS = 1_712_345_678_901_234_567


def visible(context: ExporterContext, stream: str) -> list[str]:
    """What a glob reader of the stream folder lists."""
    return sorted(p.name for p in (context.export_dir / stream).glob("*.parquet"))


def everything_under(context: ExporterContext) -> list[str]:
    return sorted(str(p.relative_to(context.export_dir)) for p in context.export_dir.rglob("*"))


def memory(step: int, peak: float | None = 1e9, device: str | None = "cuda:0") -> StepMemoryRecord:
    return StepMemoryRecord(NS, 0, 0, 0, 1, 1, 0, "node-a", NS, step, device, step, peak, 0.0)


def test_factory_only_stores_settings(context: ExporterContext) -> None:
    exporter = make_exporter(context)
    assert isinstance(exporter, ExampleExporter)
    assert not context.session_root.exists()


def test_one_folder_per_stream_behind_a_generation_link(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(context, records)
    streams = {r.STREAM for r in records}
    for stream in streams:
        link = context.export_dir / stream
        assert link.is_symlink()
        assert os.readlink(link).startswith(f".{stream}/g")
        (name,) = visible(context, stream)
        assert name.startswith("part-")
        assert name.endswith(".parquet")
    assert not [n for n in everything_under(context) if n.endswith(".tmp")]
    assert (context.export_dir / SUMMARY_FILE).exists()


def test_rows_are_to_dict_without_hostname(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(context, records[:4], records[4:])
    assert written(context) == expected_by_stream(records)
    schema = pq.read_schema(next((context.export_dir / "step_time").glob("*.parquet")))
    assert "hostname" not in schema.names
    assert schema.names[:2] == ["stream", "schema_version"]


def test_hostname_kept_when_asked(
    hostname_context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(hostname_context, records)
    assert written(hostname_context) == expected_by_stream(records, include_hostname=True)


def test_schema_is_declared_not_inferred(context: ExporterContext) -> None:
    """A first batch whose columns are all None, then values: the declared types throughout."""
    first = [memory(1, peak=None, device=None), memory(2, peak=None, device=None)]
    second = [memory(3), memory(4, peak=0.0)]
    run(context, first, second)
    table = pq.read_table(context.export_dir / "step_memory")
    assert table.schema.field("peak_alloc_bytes").type == pa.float64()
    assert table.schema.field("device").type == pa.string()
    assert table.schema.field("step").type == pa.int64()
    assert table.column("peak_alloc_bytes").to_pylist() == [None, None, 1e9, 0.0]
    assert table.column("device").to_pylist() == [None, None, "cuda:0", "cuda:0"]
    for path in (context.export_dir / "step_memory").glob("*.parquet"):
        assert pq.read_schema(path).field("peak_alloc_bytes").type == pa.float64()


def test_each_part_has_its_declared_schema_before_compaction(context: ExporterContext) -> None:
    exporter = make_exporter(context)
    exporter.open()
    exporter.write([memory(1, peak=None, device=None)])
    exporter.flush()
    exporter.write([memory(2)])
    exporter.flush()
    parts = sorted((context.export_dir / "step_memory").glob("*.parquet"))
    assert len(parts) == 2
    assert {pq.read_schema(p).field("peak_alloc_bytes").type for p in parts} == {pa.float64()}
    exporter.close()
    assert len(visible(context, "step_memory")) == 1  # compacted at close


def test_events_are_a_nested_map(context: ExporterContext, records: list[ExportRecord]) -> None:
    run(context, records[:1])
    schema = pq.read_schema(next((context.export_dir / "step_time").glob("*.parquet")))
    assert schema.field("events").type == EVENTS_TYPE
    assert pa.types.is_map(EVENTS_TYPE.item_type)
    (row,) = written(context)["step_time"]
    assert row["events"] == records[0].to_dict()["events"]


def test_every_contract_field_has_a_declared_type() -> None:
    from traceml_exporter_sdk import RECORD_TYPES  # noqa: PLC0415 - the oracle of field names

    names = {name for cls in RECORD_TYPES for name in cls.COLUMNS}
    assert names - set(FIELD_TYPES) == set()


def test_hostile_text_follows_the_documented_rule(hostname_context: ExporterContext) -> None:
    lines = ["nul \x00 inside", "sep \u2028 and \u2029", "lone \udcff surrogate", "\ud83d\ude00"]
    host = "bad\udc80host"
    events = {"ev\udcffent": {"cu\x00da": {"is_gpu": True, "cpu_ms": 1.0}}}
    step = StepTimeRecord(NS, 0, 0, 0, 1, 1, 0, host, NS, 1, 1, events)  # type: ignore[arg-type]
    batch: list[ExportRecord] = [StdoutStderrRecord(NS, 0, NS, line) for line in lines]
    run(hostname_context, [*batch, step])
    got = written(hostname_context)
    assert [r["line"] for r in got["stdout_stderr"]] == [*lines[:3], "\U0001f600"]
    (row,) = got["step_time"]
    assert row["hostname"] == host
    assert row["events"] == {"ev\udcffent": {"cu\x00da": {**events["ev\udcffent"]["cu\x00da"]}}}
    on_disk = pq.read_table(hostname_context.export_dir / "stdout_stderr").to_pylist()
    assert [r["line"] for r in on_disk][2:] == ["lone \ufffd surrogate", "\U0001f600"]
    assert [r[EXACT_TEXT] and json.loads(r[EXACT_TEXT]) for r in on_disk] == [
        None,
        None,
        {"line": lines[2]},
        {"line": "\U0001f600"},  # json.loads joins an escaped pair
    ]
    (step_on_disk,) = pq.read_table(hostname_context.export_dir / "step_time").to_pylist()
    assert step_on_disk["hostname"] == "bad\ufffdhost"
    assert json.loads(step_on_disk[EXACT_TEXT]) == {"hostname": host, "events": events}
    assert clean_text("ok \u2028") == "ok \u2028"


def test_an_integer_beyond_int64_raises_and_names_the_field(context: ExporterContext) -> None:
    exporter = make_exporter(context)
    exporter.open()
    exporter.write([memory(1)])
    exporter.flush()
    exporter.write([memory(2**63)])  # buffered: turned into Arrow columns by the flush
    with pytest.raises(OverflowError, match=r"step_memory\.seq .*int64") as raised:
        exporter.flush()
    assert is_permanent(raised.value)  # the same record is refused again: follow ends
    with pytest.raises(RuntimeError, match="failed exporter"):
        exporter.close()
    assert [r["step"] for r in written(context)["step_memory"]] == [1]


def test_int64_limits_and_nan_are_stored_exactly(context: ExporterContext) -> None:
    low, high = -(2**63), 2**63 - 1
    run(context, [memory(low, peak=float("nan")), memory(high, peak=float("-inf"))])
    rows = written(context)["step_memory"]
    assert [r["step"] for r in rows] == [low, high]
    assert rows[0]["peak_alloc_bytes"] != rows[0]["peak_alloc_bytes"]  # NaN stays NaN
    assert rows[1]["peak_alloc_bytes"] == float("-inf")


def test_an_unknown_stats_key_of_a_later_schema_is_refused_not_dropped(
    context: ExporterContext,
) -> None:
    @dataclasses.dataclass(frozen=True)
    class LaterStep:
        STREAM: ClassVar[str] = "step_time"
        SCHEMA_VERSION: ClassVar[int] = 2
        COLUMNS: ClassVar[tuple[str, ...]] = ("step", "events")
        step: int
        events: dict[str, Any]

        def to_dict(self) -> dict[str, Any]:
            return {"stream": self.STREAM, "schema_version": 2, **dataclasses.asdict(self)}

    known = {"fwd": {"cpu": {"is_gpu": False, "cpu_ms": 1.0}}}
    later: list[ExportRecord] = [LaterStep(1, known)]
    run(context, later)
    assert written(context)["step_time"][0]["events"]["fwd"]["cpu"]["cpu_ms"] == 1.0
    unknown = {"fwd": {"cpu": {"is_gpu": False, "cpu_ms": 1.0, "new_stat": 2}}}
    exporter = make_exporter(context)
    exporter.open()
    exporter.write([LaterStep(2, unknown)])
    with pytest.raises(ValueError, match="new_stat") as raised:
        exporter.flush()
    assert is_permanent(raised.value)


def test_an_unknown_field_is_kept_as_json_text(context: ExporterContext) -> None:
    @dataclasses.dataclass(frozen=True)
    class Later:
        STREAM: ClassVar[str] = "stdout_stderr"
        SCHEMA_VERSION: ClassVar[int] = 2
        COLUMNS: ClassVar[tuple[str, ...]] = ("rank", "line", "labels")
        rank: int
        line: str
        labels: Any

        def to_dict(self) -> dict[str, Any]:
            return {"stream": self.STREAM, "schema_version": 2, **dataclasses.asdict(self)}

    later: list[ExportRecord] = [Later(0, "x", {"a": [1, 2.5]}), Later(1, "y", None)]
    run(context, later)
    assert written(context)["stdout_stderr"] == [r.to_dict() for r in later]
    field = pq.read_schema(next((context.export_dir / "stdout_stderr").glob("*"))).field("labels")
    assert field.type == pa.string()


def test_sdk_and_look_alike_records_mixed_in_one_batch_keep_their_order(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    foreign = as_foreign(records)
    mixed = [r if i % 2 else f for i, (r, f) in enumerate(zip(records, foreign, strict=True))]
    run(context, mixed, records)
    assert written(context) == expected_by_stream([*records, *records])


def test_text_and_map_keys_are_dictionary_encoded_numbers_are_not(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(context, records)
    path = next((context.export_dir / "step_time").glob("*.parquet"))
    schema = pq.read_schema(path)
    assert "events.key_value.key" in dictionary_columns(schema)
    assert "stream" in dictionary_columns(schema)
    assert "step" not in dictionary_columns(schema)
    meta = pq.ParquetFile(path).metadata.row_group(0)
    encodings = {
        meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)
    }
    assert any("DICTIONARY" in e for e in encodings["stream"])
    assert not any("DICTIONARY" in e for e in encodings["step"])


def test_each_flush_adds_one_part_per_stream_and_close_compacts(context: ExporterContext) -> None:
    exporter = ExampleExporter(context.export_dir, part_limit=1000)
    exporter.open()
    for step in range(5):
        exporter.write([memory(step)])
        exporter.flush()
        assert len(visible(context, "step_memory")) == step + 1
    exporter.flush()  # nothing new: no part
    assert len(visible(context, "step_memory")) == 5
    exporter.close(dropped_batches=2)
    summary = json.loads((context.export_dir / SUMMARY_FILE).read_text("utf-8"))
    assert summary["written_records"] == {"step_memory": 5}
    assert summary["dropped_batches"] == 2
    (name,) = visible(context, "step_memory")
    assert name.endswith("-0000000001-0000000005.parquet")
    assert [r["step"] for r in written(context)["step_memory"]] == list(range(5))
    generations = [p.name for p in (context.export_dir / ".step_memory").iterdir()]
    assert len(generations) == 1  # replaced generations are removed at close
    assert os.readlink(context.export_dir / "step_memory").endswith(generations[0])


def test_compaction_past_the_part_limit_keeps_order(context: ExporterContext) -> None:
    exporter = ExampleExporter(context.export_dir, part_limit=3)
    exporter.open()
    for step in range(10):
        exporter.write([memory(step), memory(step)])
        exporter.flush()
        assert len(visible(context, "step_memory")) <= 3
        want = [s for s in range(step + 1) for _ in range(2)]
        assert [r["step"] for r in written(context)["step_memory"]] == want
    exporter.close()
    assert len(visible(context, "step_memory")) == 1


def test_a_backlog_is_written_out_before_the_flush(context: ExporterContext) -> None:
    exporter = ExampleExporter(context.export_dir, backlog_bytes=1)
    exporter.open()
    exporter.write([memory(step) for step in range(20_000)])  # past STAGE_ROWS: staged to Arrow
    assert len(visible(context, "step_memory")) == 1
    assert len(written(context)["step_memory"]) == 20_000
    exporter.close()
    assert len(written(context)["step_memory"]) == 20_000


def test_a_stream_no_folder_may_be_named_after_is_refused_for_good(
    context: ExporterContext,
) -> None:
    error = refusal(context, StrayRecord())
    assert "is not a plain name" in str(error)
    assert is_permanent(error)  # the same record is refused again: follow ends at once
    assert not (context.export_dir.parent / "stray").exists()


def test_the_names_the_readme_gives_are_the_ones_written(context: ExporterContext) -> None:
    """A reader follows the README: ``export_summary.json`` with ``closed_unix_ns``, and
    ``read_export(export_dir)`` reading every stream, or the ones it is given."""
    run(context, [memory(0), memory(1)])
    summary = json.loads((context.export_dir / "export_summary.json").read_text("utf-8"))
    assert summary["closed_unix_ns"] > 0
    every = read_export(context.export_dir)
    assert sorted(every) == ["step_memory"]
    assert [r["step"] for r in every["step_memory"]] == [0, 1]
    assert read_export(context.export_dir, ["step_time"]) == {"step_time": []}


def test_durable_parts_and_compaction(context: ExporterContext) -> None:
    exporter = ExampleExporter(context.export_dir, part_limit=2, durable=True)
    exporter.open()
    for step in range(6):
        exporter.write([memory(step)])
        exporter.flush()
    exporter.close()
    assert [r["step"] for r in written(context)["step_memory"]] == list(range(6))
    assert len(visible(context, "step_memory")) == 1


@contextlib.contextmanager
def entries_made() -> Iterator[dict[str, str]]:
    """Each folder that gained an entry (a folder made, a file renamed or linked into it)
    and is not fsynced since, with the entry: a power cut may lose what it names."""
    unsynced: dict[str, str] = {}
    _RECORDING[:] = [unsynced]
    real_fsync = os.fsync

    def fsync(fd: Any) -> None:
        real_fsync(fd)
        number = fd if isinstance(fd, int) else fd.fileno()
        unsynced.pop(os.readlink(f"/proc/self/fd/{number}"), None)

    os.fsync = fsync
    try:
        yield unsynced
    finally:
        os.fsync = real_fsync
        _RECORDING.clear()


_RECORDING: list[dict[str, str]] = []
_ENTRY_ARG = {"os.mkdir": 0, "os.rename": 1, "os.link": 1, "os.symlink": 1}


def _entry_made(event: str, args: tuple[Any, ...]) -> None:
    """An audit hook (the event comes before the call): a folder that exists is not made."""
    if not _RECORDING or event not in _ENTRY_ARG:
        return
    entry = os.path.abspath(os.fsdecode(args[_ENTRY_ARG[event]]))
    if not (event == "os.mkdir" and os.path.lexists(entry)):
        _RECORDING[0][os.path.dirname(entry)] = entry


sys.addaudithook(_entry_made)


def test_durable_makes_every_new_entry_durable_before_a_flush_returns(
    tmp_path: Path,
) -> None:
    """With ``durable``, every folder that gained an entry (the export folder, a
    generation, a renamed part, its hard links, the swapped link) is fsynced before
    open, flush or close returns, so a power cut keeps every acknowledged record."""
    (tmp_path / "session" / "aggregator").mkdir(parents=True)  # TraceML's, before the exporter
    context = ExporterContext.create(tmp_path / "session", export_streams="all")
    exporter = ExampleExporter(context.export_dir, part_limit=2, durable=True)
    with entries_made() as unsynced:
        exporter.open()
        assert not unsynced, f"open returned; not durable: {unsynced}"
        for step in range(6):
            exporter.write([memory(step)])
            exporter.flush()
            assert not unsynced, f"flush {step} returned; not durable: {unsynced}"
        exporter.close()
        assert not unsynced, f"close returned; not durable: {unsynced}"


def test_a_second_run_adds_its_files_and_keeps_the_first(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(context, records[:1])
    run(context, records[:1])
    assert len(visible(context, "step_time")) == 2
    assert len(written(context)["step_time"]) == 2


def test_leftovers_of_a_killed_run_are_hidden_and_removed(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(context, records[:1])
    current = (context.export_dir / "step_time").resolve()
    (current / ".part-torn.parquet.tmp").write_bytes(b"PAR1 torn")
    (current.parent / "g999999").mkdir()
    assert len(visible(context, "step_time")) == 1  # the temporary name is not listed
    run(context, records[:1])
    assert [p.name for p in current.parent.iterdir()] == [current.name]
    assert not [p for p in current.iterdir() if p.name.startswith(".")]


def test_a_folder_in_the_way_is_refused(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    (context.export_dir / "step_time").mkdir(parents=True)
    exporter = make_exporter(context)
    exporter.open()
    with pytest.raises(SinkError, match=r"step_time.*move it aside"):
        exporter.write(records[:1])


def test_a_failing_flush_names_the_path_and_leaves_no_temporary_file(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    exporter = make_exporter(context)
    exporter.open()
    exporter.write(records[:1])
    exporter.flush()
    generation = (context.export_dir / "step_time").resolve()
    exporter.write(records[:1])
    os.rename(generation, generation.with_name("moved"))  # writing a part there now fails
    with pytest.raises(SinkError, match=r"step_time.*part-.*\.parquet"):
        exporter.flush()
    with pytest.raises(RuntimeError, match="failed exporter"):
        exporter.close()
    assert not [n for n in everything_under(context) if n.endswith(".tmp")]


def test_a_second_exporter_on_the_same_folder_is_refused_at_open(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    """Two writers in one folder would delete each other's parts: the second is refused."""
    first = make_exporter(context)
    first.open()
    first.write(records[:4])
    first.flush()
    second = make_exporter(context)
    with pytest.raises(
        SinkError, match=r"export.*another exporter is writing in this folder"
    ) as raised:
        second.open()
    assert not is_permanent(raised.value)  # the other one ends: the follower waits for it
    with pytest.raises(RuntimeError, match="failed exporter"):
        second.close()
    first.write(records[4:])
    first.flush()
    first.close()
    assert written(context) == expected_by_stream(records)
    third = make_exporter(context)  # the lock went with the first one's close
    third.open()
    third.write(records[:1])
    third.close()
    assert len(written(context)["step_time"]) == len(expected_by_stream(records)["step_time"]) + 1


def test_a_failing_method_releases_the_folder(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    failing = make_exporter(context)
    failing.open()
    failing.write([memory(2**63)])
    with pytest.raises(OverflowError, match="int64"):
        failing.flush()
    run(context, records)  # a new exporter gets the folder at once
    assert written(context) == expected_by_stream(records)


_HOLDER = """
import sys
from traceml_exporter_sdk import ExporterContext
from traceml_exporter_example.exporter import make_exporter

exporter = make_exporter(ExporterContext.create(sys.argv[1], export_streams="all"))
exporter.open()
print("open", flush=True)
sys.stdin.readline()
exporter.close()
print("closed", flush=True)
"""


def test_an_exporter_of_another_process_keeps_the_folder_until_it_closes(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen(  # noqa: S603 - this test's own script
        [sys.executable, "-c", _HOLDER, str(context.session_root)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    ) as holder:  # fmt: skip
        try:
            assert holder.stdout is not None
            assert holder.stdin is not None
            assert holder.stdout.readline() == "open\n"
            with pytest.raises(SinkError, match="another exporter is writing in this folder"):
                make_exporter(context).open()
            holder.stdin.write("\n")
            holder.stdin.flush()
            assert holder.stdout.readline() == "closed\n"
        finally:
            holder.kill()
            holder.wait(timeout=30)
    run(context, records)
    assert written(context) == expected_by_stream(records)
