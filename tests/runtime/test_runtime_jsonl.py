"""The built-in jsonl exporter, alone and under ExportWorker, reading back its real files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import (
    T0,
    all_streams_payload,
    context,
    envelope,
    read_jsonl,
    step_payload,
    warning_of,
)
from traceml_exporter_sdk import (
    ExporterContext,
    ExportWorker,
    JsonlExporter,
    ProcessRecord,
    StdoutStderrRecord,
    StepTimeRecord,
    records_from_payload,
)
from traceml_exporter_sdk.testing import read_jsonl as read_export
from traceml_exporter_sdk.worker import ExportReport


def export(ctx: ExporterContext, payloads: list[Any] = (), records: list[Any] = ()) -> ExportReport:  # type: ignore[assignment]
    worker = ExportWorker("jsonl", ctx)
    worker.start()
    for payload in payloads:
        assert worker.submit(payload)
    if records:
        assert worker.submit_records(records)
    report = worker.shutdown()
    assert report.failure is None, report.failure
    return report


def file_of(ctx: ExporterContext, stream: str) -> Path:
    return ctx.export_dir / f"{stream}.jsonl"


def without_hostname(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != "hostname"}


# -- layout ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "files"),
    [
        (None, ["step_time.jsonl"]),
        ("system,step_memory", ["step_memory.jsonl", "system.jsonl", "system_gpu.jsonl"]),
        (
            "all",
            [
                "process.jsonl",
                "runtime_environment.jsonl",
                "stdout_stderr.jsonl",
                "step_memory.jsonl",
                "step_time.jsonl",
                "system.jsonl",
                "system_gpu.jsonl",
            ],
        ),
    ],
)
def test_one_file_per_selected_stream(
    tmp_path: Path, setting: str | None, files: list[str]
) -> None:
    ctx = context(tmp_path, setting)
    report = export(ctx, [all_streams_payload(0), all_streams_payload(1)])
    assert sorted(os.listdir(ctx.export_dir)) == files
    for stream in ctx.streams:
        records, closing = read_jsonl(file_of(ctx, stream))
        assert {r["stream"] for r in records} == {stream}
        assert len(records) == report.admitted_by_stream[stream]
        assert len(closing) == 1


def test_a_selected_stream_with_no_record_gets_no_file(tmp_path: Path) -> None:
    ctx = context(tmp_path, "process,step_time")
    export(ctx, [step_payload(0, 0, 2)])
    assert os.listdir(ctx.export_dir) == ["step_time.jsonl"]


def test_the_closing_line_ends_each_file_in_its_documented_shape(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    export(ctx, [step_payload(0, 0, 3)])
    lines = file_of(ctx, "step_time").read_bytes().split(b"\n")
    assert lines[-1] == b""  # every line, the closing one included, ends with \n
    assert lines[-2] == (
        b'{"stream":"step_time","closing":true,"written_records":3,"dropped_batches":0}'
    )
    records = [json.loads(line) for line in lines[:-2]]
    assert len(records) == 3
    for record in records:
        assert "closing" not in record
        assert record["schema_version"] == 1
    assert "schema_version" not in json.loads(lines[-2])


def test_dropped_batches_is_the_same_worker_wide_count_in_every_closing_line(
    tmp_path: Path,
) -> None:
    ctx = context(tmp_path, "all")
    worker = ExportWorker("jsonl", ctx, queue_size=2)
    # Before start() nothing drains the queue: two batches fit, three are dropped.
    results = [worker.submit(all_streams_payload(rank)) for rank in range(5)]
    assert results == [True, True, False, False, False]
    worker.start()
    report = worker.shutdown()
    assert report.dropped_batches == 3
    for stream in ctx.streams:
        records, closing = read_jsonl(file_of(ctx, stream))
        assert closing == [
            {
                "stream": stream,
                "closing": True,
                "written_records": len(records),
                "dropped_batches": 3,
            }
        ]
    assert sum(len(read_jsonl(file_of(ctx, s))[0]) for s in ctx.streams) == 16
    assert warning_of(ctx)["dropped_batches"] == 3


# -- values ----------------------------------------------------------------------


def test_each_line_is_to_dict_without_hostname(tmp_path: Path) -> None:
    ctx = context(tmp_path, "all")
    records = records_from_payload(
        [*all_streams_payload(3), *step_payload(3, 1, 4)], observed_timestamp_unix_ns=T0
    ).records
    export(ctx, records=records)
    for stream in ctx.streams:
        lines, _ = read_jsonl(file_of(ctx, stream))
        assert lines == [without_hostname(r.to_dict()) for r in records if stream == r.STREAM]


def test_hostname_is_dropped_by_default(tmp_path: Path) -> None:
    ctx = context(tmp_path, "all")
    export(ctx, [all_streams_payload(0), all_streams_payload(1, omit=("hostname",))])
    for stream in ctx.streams:
        for record in read_jsonl(file_of(ctx, stream))[0]:
            assert "hostname" not in record


def test_hostname_is_kept_when_on_and_null_when_the_rank_sent_none(tmp_path: Path) -> None:
    ctx = context(tmp_path, "all", hostname=True)
    export(ctx, [all_streams_payload(0), all_streams_payload(1, omit=("hostname",))])
    for stream in ctx.streams:
        records, _ = read_jsonl(file_of(ctx, stream))
        if stream == "stdout_stderr":  # the record has no hostname field
            assert all("hostname" not in r for r in records)
            continue
        by_rank = {r["global_rank"]: r for r in records}
        assert by_rank[0]["hostname"] == "node-a"
        assert "hostname" in by_rank[1]
        assert by_rank[1]["hostname"] is None


def test_none_stays_null_and_a_measured_zero_stays_zero(tmp_path: Path) -> None:
    ctx = context(tmp_path, "all")
    zero_stats = {"is_gpu": False, "duration_ms": 0.0, "cpu_ms": 0.0, "gpu_ms": 0.0, "n_calls": 0}
    none_stats = {"is_gpu": None}
    payload = [
        envelope(
            rank=0,
            sampler="ProcessSampler",
            table="ProcessTable",
            rows=[
                {
                    "seq": 0,
                    "ts": T0,
                    "cpu": 0.0,
                    "cpu_cores": 0,
                    "gpu_available": False,
                    "gpu_count": 0,
                }
            ],
        ),
        envelope(
            rank=0,
            sampler="StepTimeSampler",
            table="StepTimeTable",
            rows=[
                {
                    "seq": 0,
                    "timestamp": T0,
                    "step": 0,
                    "events": {"zero": {"cpu": zero_stats}, "unsent": {"cpu": none_stats}},
                }
            ],
        ),
        envelope(
            rank=0,
            sampler="StepMemorySampler",
            table="step_memory",
            rows=[{"seq": 0, "ts": T0, "device": "cpu", "step": 0, "peak_alloc": 0}],
        ),
    ]
    export(ctx, [payload])
    process = read_jsonl(file_of(ctx, "process"))[0][0]
    assert process["cpu_percent"] == 0
    assert process["cpu_percent"] is not None
    assert process["cpu_logical_core_count"] == 0
    assert process["gpu_available"] == 0
    assert process["gpu_count"] == 0
    for field in ("ram_used_bytes", "ram_total_bytes", "gpu_device_index", "gpu_mem_used_bytes"):
        assert field in process
        assert process[field] is None
    events = read_jsonl(file_of(ctx, "step_time"))[0][0]["events"]
    assert events["zero"]["cpu"] == zero_stats
    assert events["unsent"]["cpu"] == {
        "is_gpu": None,
        "duration_ms": None,
        "cpu_ms": None,
        "gpu_ms": None,
        "n_calls": None,
    }
    memory = read_jsonl(file_of(ctx, "step_memory"))[0][0]
    assert memory["peak_alloc_bytes"] == 0
    assert memory["peak_alloc_bytes"] is not None
    assert memory["peak_reserved_bytes"] is None
    text = file_of(ctx, "process").read_text(encoding="utf-8")
    assert '"cpu_percent":0.0,' in text
    assert '"ram_used_bytes":null,' in text


def step_record(**fields: Any) -> StepTimeRecord:
    values: dict[str, Any] = {
        "observed_timestamp_unix_ns": T0,
        "rank": 0,
        "global_rank": 0,
        "local_rank": 0,
        "world_size": 1,
        "local_world_size": 1,
        "node_rank": 0,
        "hostname": "h",
        "timestamp_unix_ns": T0,
        "seq": 0,
        "step": 0,
        "events": {},
    }
    values.update(fields)
    return StepTimeRecord(**values)


def test_integers_beyond_64_bits_are_still_written_exactly(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    big = [
        step_record(seq=2**64, step=0),
        step_record(seq=1, step=-(2**63) - 1),
        step_record(seq=2, step=10**30, events={"é": {"cpu": {"gpu_ms": float("nan")}}}),
        step_record(seq=3, step=2**64 - 1),  # still within orjson's range
    ]
    export(ctx, records=big)
    records, closing = read_jsonl(file_of(ctx, "step_time"))
    assert [r["seq"] for r in records] == [2**64, 1, 2, 3]
    assert [r["step"] for r in records] == [0, -(2**63) - 1, 10**30, 2**64 - 1]
    assert records[2]["events"] == {
        "é": {"cpu": {"gpu_ms": None}}
    }  # NaN is null, as orjson writes it
    assert closing[0]["written_records"] == 4


STDOUT_LINES = [
    "héllo wörld ✓ 日本語 🚀",
    "line\u2028separator\u2029paragraph\x85next-line",
    'tab\tquote"back\\slash',
    "\x1b[31mred\x1b[0m \x00 nul",
    "ends with a newline\n",
    "lone surrogate \udc80 from a bad byte",
]


def test_unicode_and_line_separators_in_stdout_lines_round_trip(tmp_path: Path) -> None:
    ctx = context(tmp_path, "all")
    payload = [
        envelope(
            rank=2,
            sampler="Stdout/Stderr",
            table="stdout_stderr",
            rows=[{"line": s} for s in STDOUT_LINES],
        )
    ]
    export(ctx, [payload])
    path = file_of(ctx, "stdout_stderr")
    records, closing = read_jsonl(path)
    assert [r["line"] for r in records] == STDOUT_LINES
    assert closing[0]["written_records"] == len(STDOUT_LINES)
    raw = path.read_bytes()
    # Every reader sees one line per record, even one that splits on U+2028/U+2029/U+0085.
    text = raw.decode("utf-8")
    assert len(text.splitlines()) == len(raw.split(b"\n")) - 1 == len(STDOUT_LINES) + 1
    assert [json.loads(line)["line"] for line in text.splitlines()[:-1]] == STDOUT_LINES
    assert "héllo wörld ✓ 日本語 🚀".encode() in raw  # UTF-8, not \u escapes


def test_a_direct_stdout_record_with_a_separator_round_trips(tmp_path: Path) -> None:
    ctx = context(tmp_path, "all")
    exporter = JsonlExporter(ctx)
    exporter.open()
    record = StdoutStderrRecord(T0, 0, T0, "a\u2028b")
    exporter.write([record])
    exporter.close()
    records, _ = read_jsonl(file_of(ctx, "stdout_stderr"))
    assert records == [record.to_dict()]


# -- files -----------------------------------------------------------------------


def test_open_creates_the_export_dir_and_the_first_record_its_file(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    exporter = JsonlExporter(ctx)
    assert not ctx.session_root.exists()
    exporter.open()
    assert os.listdir(ctx.export_dir) == []
    exporter.write([step_record()])
    assert file_of(ctx, "step_time").exists()
    exporter.close()


def test_open_never_overwrites_an_earlier_export_and_writes_the_next_part(
    tmp_path: Path,
) -> None:
    """An earlier export stays as it is; this one goes to part 1 of every stream, and a
    third to part 2 (one past the highest part any selected stream has)."""
    ctx = context(tmp_path, "system")
    ctx.export_dir.mkdir(parents=True)
    earlier = file_of(ctx, "system_gpu")
    earlier.write_bytes(b"an earlier run's export\n")
    system = records_from_payload(all_streams_payload(0), observed_timestamp_unix_ns=T0)
    records = [r for r in system.records if r.STREAM in ctx.streams]
    exporter = JsonlExporter(ctx)
    exporter.open()
    assert exporter.paths() == {
        stream: ctx.export_dir / f"{stream}.1.jsonl" for stream in ("system", "system_gpu")
    }
    exporter.write(records)
    exporter.close()
    assert earlier.read_bytes() == b"an earlier run's export\n"
    third = JsonlExporter(ctx)
    third.open()
    third.write(records)
    third.close()
    assert sorted(p.name for p in ctx.export_dir.iterdir()) == [
        "system.1.jsonl",
        "system.2.jsonl",
        "system_gpu.1.jsonl",
        "system_gpu.2.jsonl",
        "system_gpu.jsonl",
    ]


def test_a_second_export_under_the_worker_reads_back_after_the_first(tmp_path: Path) -> None:
    """Two workers into one export dir (a follower started again): read_jsonl reads the
    first file, then the part, so every record is there in order."""
    ctx = context(tmp_path)
    for start in (0, 2):
        worker = ExportWorker("jsonl", ctx)
        worker.start()
        worker.submit(step_payload(0, start, 2))
        report = worker.shutdown()
        assert report.failure is None
    assert (ctx.export_dir / "step_time.1.jsonl").exists()
    steps = [line["step"] for line in read_export(ctx)["step_time"]]
    assert steps == [0, 1, 2, 3]


def test_a_record_of_an_unselected_stream_is_refused_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    ctx = context(tmp_path)
    exporter = JsonlExporter(ctx)
    exporter.open()
    process = ProcessRecord(T0, 0, 0, 0, 1, 1, 0, "h", T0, 0, *([None] * 10))
    with pytest.raises(ValueError, match="'process' are not selected"):
        exporter.write([step_record(), process])
    assert os.listdir(ctx.export_dir) == []


def _open_fds_under(path: Path) -> list[str]:
    fds = Path("/proc/self/fd")
    found = []
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(str(path)):
            found.append(target)
    return found


def test_a_failing_write_closes_every_file_since_close_will_not_be_called(
    tmp_path: Path,
) -> None:
    ctx = context(tmp_path)
    exporter = JsonlExporter(ctx)
    exporter.open()
    exporter.write([step_record()])
    assert _open_fds_under(ctx.export_dir)
    process = ProcessRecord(T0, 0, 0, 0, 1, 1, 0, "h", T0, 0, *([None] * 10))
    with pytest.raises(ValueError, match="not selected"):
        exporter.write([process])
    assert _open_fds_under(ctx.export_dir) == []


def test_a_failing_flush_closes_every_file_and_raises_the_flush_error(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    exporter = JsonlExporter(ctx)
    exporter.open()
    exporter.write([step_record()])
    handles = list(exporter._files.values())
    full = open("/dev/full", "wb")  # noqa: SIM115 - handed to the exporter's file
    os.dup2(full.fileno(), exporter._files["step_time"].fileno())
    full.close()
    with pytest.raises(OSError, match="No space left"):
        exporter.flush()
    assert handles
    assert all(handle.closed for handle in handles)
    assert _open_fds_under(ctx.export_dir) == []


def test_flush_puts_the_lines_in_the_file(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    exporter = JsonlExporter(ctx)
    exporter.open()
    exporter.write([step_record(step=1), step_record(step=2)])
    exporter.flush()
    lines = file_of(ctx, "step_time").read_bytes().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
    exporter.close()
