"""The jsonl exporter across re-runs and full disks: no empty parts, no line glued to a torn one."""

from __future__ import annotations

import errno
import io
import os
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import orjson
import pytest
import traceml_exporter_sdk.jsonl as jsonl_module
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from runtime_helpers import T0, context, step_payload
from traceml_exporter_sdk import (
    ExporterContext,
    ExportWorker,
    JsonlExporter,
    ProcessRecord,
    StepMemoryRecord,
    StepTimeRecord,
)
from traceml_exporter_sdk.records import ExportRecord
from traceml_exporter_sdk.testing import read_jsonl
from traceml_exporter_sdk.testing.readback import TornLineWarning, read_jsonl_export

STREAMS = ("process", "step_memory", "step_time")
SLOW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def record(stream: str, n: int) -> ExportRecord:
    """A record of ``stream`` told apart from the others by ``n``."""
    if stream == "process":
        return ProcessRecord(T0, 0, 0, 0, 1, 1, 0, "h", T0, n, *([None] * 10))
    if stream == "step_memory":
        return StepMemoryRecord(T0, 0, 0, 0, 1, 1, 0, "h", T0, n, "cuda:0", n, 2e9, None)
    return StepTimeRecord(
        observed_timestamp_unix_ns=T0,
        rank=0,
        global_rank=0,
        local_rank=0,
        world_size=1,
        local_world_size=1,
        node_rank=0,
        hostname="h",
        timestamp_unix_ns=T0,
        seq=n,
        step=n,
        events={"fwd": {"cpu": {"cpu_ms": 1.5}}},
    )


def lines_of(records: Sequence[ExportRecord], stream: str) -> list[dict[str, Any]]:
    """What the exporter writes for ``stream``'s records: ``to_dict()`` without hostname."""
    out = []
    for item in records:
        if stream == item.STREAM:
            data = item.to_dict()
            data.pop("hostname", None)
            out.append(data)
    return out


def export(ctx: ExporterContext, records: Sequence[ExportRecord]) -> None:
    exporter = JsonlExporter(ctx)
    exporter.open()
    exporter.write(records)
    exporter.close()


def worker_export(ctx: ExporterContext, payload: list[dict[str, Any]]) -> None:
    worker = ExportWorker("jsonl", ctx)
    worker.start()
    assert worker.submit(payload)
    report = worker.shutdown()
    assert report.failure is None, report.failure


def record_counts(export_dir: Path) -> dict[str, int]:
    """File name -> record lines, checking that the file ends with its closing line."""
    counts = {}
    for path in sorted(export_dir.iterdir()):
        lines = path.read_bytes().split(b"\n")
        assert lines.pop() == b"", f"{path.name} does not end with a newline"
        closing = orjson.loads(lines.pop())
        assert closing["closing"] is True, path.name
        assert closing["written_records"] == len(lines), path.name
        counts[path.name] = len(lines)
    return counts


# -- no empty parts --------------------------------------------------------------


def test_a_rerun_makes_no_file_for_a_stream_that_got_no_record(tmp_path: Path) -> None:
    ctx = context(tmp_path, "process,step_time")
    worker_export(ctx, step_payload(0, 0, 2))
    worker_export(ctx, step_payload(0, 2, 2))
    assert record_counts(ctx.export_dir) == {"step_time.1.jsonl": 2, "step_time.jsonl": 2}


def test_three_exports_of_one_stream_into_all_streams_leave_no_empty_file(
    tmp_path: Path,
) -> None:
    ctx = context(tmp_path, "all")
    for start in (0, 2, 4):
        worker_export(ctx, step_payload(0, start, 2))
    assert record_counts(ctx.export_dir) == {
        "step_time.1.jsonl": 2,
        "step_time.2.jsonl": 2,
        "step_time.jsonl": 2,
    }
    assert [line["step"] for line in read_jsonl(ctx)["step_time"]] == list(range(6))


def test_a_stream_with_no_record_has_no_file_and_no_closing_line(tmp_path: Path) -> None:
    ctx = context(tmp_path, "process,step_time")
    exporter = JsonlExporter(ctx)
    exporter.open()
    exporter.close(dropped_batches=2)
    assert os.listdir(ctx.export_dir) == []
    assert read_jsonl(ctx) == {}


SELECTION = st.sets(st.sampled_from(STREAMS), min_size=1).map(sorted)
EXPORTS = st.lists(
    st.tuples(SELECTION, st.lists(st.sampled_from(STREAMS), max_size=5)), min_size=1, max_size=4
)


@SLOW
@given(EXPORTS)
# An export that wrote only step_time, then one that wrote process to part 1: a third that
# selects process alone must write part 2, not the free process.jsonl, to be read last.
@example(
    [
        (["process", "step_time"], ["step_time"]),
        (["process", "step_time"], ["process"]),
        (["process"], ["process"]),
    ]
)
def test_exports_into_one_folder_read_back_in_order_with_no_empty_file(
    tmp_path_factory: pytest.TempPathFactory, exports: list[tuple[list[str], list[str]]]
) -> None:
    """Any run of exports, each with its own selection and records: every file holds a
    record, and each stream reads back as its exports wrote it, in their order."""
    root = tmp_path_factory.mktemp("session")
    written: list[ExportRecord] = []
    for selection, streams in exports:
        records = [record(s, len(written) + i) for i, s in enumerate(streams) if s in selection]
        export(ExporterContext.create(root, ",".join(selection), False), records)
        written += records
    ctx = ExporterContext.create(root, ",".join(STREAMS), False)
    assert all(count > 0 for count in record_counts(ctx.export_dir).values())
    back = read_jsonl_export(ctx)
    assert {s: read.lines for s, read in back.items()} == {
        s: lines_of(written, s) for s in STREAMS if lines_of(written, s)
    }
    assert all(read.torn_lines == 0 for read in back.values())


# -- a full disk -----------------------------------------------------------------


class FullDisk(io.FileIO):
    """A new file on a disk with ``room`` bytes left: a write past them is cut short,
    and the next one fails with ENOSPC, as a real full disk does."""

    def __init__(self, fd: int, room: int) -> None:
        super().__init__(fd, "w")
        self.room = room

    def write(self, data: Any) -> int:
        left = self.room - self.tell()
        if left <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.name)
        return super().write(memoryview(data)[:left])


def full_disk(room: int) -> Callable[..., IO[bytes]]:
    """A stand-in for the exporter's ``open``: every file it makes holds ``room`` bytes."""

    def open_on_full_disk(fd: int, mode: str, buffering: int) -> IO[bytes]:
        # the exporter wraps the file it made exclusively, through no link (an fd)
        assert isinstance(fd, int)
        assert mode == "wb"
        return io.BufferedWriter(FullDisk(fd, room), buffering)

    return open_on_full_disk


def export_on_full_disk(ctx: ExporterContext, records: Sequence[ExportRecord], room: int) -> None:
    """open, write, flush, close on a disk with ``room`` bytes a file, up to ENOSPC if any."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsonl_module, "open", full_disk(room), raising=False)
        exporter = JsonlExporter(ctx)
        exporter.open()
        error: OSError | None = None
        try:
            exporter.write(records)
            exporter.flush()
            exporter.close()
        except OSError as exc:
            error = exc
    assert error is None or error.errno == errno.ENOSPC, error


def torn_tail(path: Path) -> int:
    """Bytes after the last newline of ``path``."""
    blob = path.read_bytes()
    return len(blob) - blob.rfind(b"\n") - 1


def test_a_torn_last_line_is_left_out_counted_and_warned_about(tmp_path: Path) -> None:
    ctx = context(tmp_path, "step_time")
    first = [record("step_time", n) for n in range(3)]
    export_on_full_disk(ctx, first, room=500)
    path = ctx.export_dir / "step_time.jsonl"
    assert 0 < torn_tail(path) < 500
    message = re.escape(f"{path}: left out a torn last line, {torn_tail(path)} bytes")
    with pytest.warns(TornLineWarning, match=message):
        back = read_jsonl(ctx)
    assert back["step_time"] == lines_of(first, "step_time")[: len(back["step_time"])]
    assert read_jsonl_export(ctx)["step_time"].torn == {path: torn_tail(path)}


def test_after_a_full_disk_the_next_worker_export_reads_back_intact(tmp_path: Path) -> None:
    """A worker whose flush meets a full disk fails with a line cut off; the next worker
    writes its own part, so none of its lines is glued to the torn one."""
    ctx = context(tmp_path)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsonl_module, "open", full_disk(700), raising=False)
        worker = ExportWorker("jsonl", ctx)
        worker.start()
        assert worker.submit(step_payload(0, 0, 10))
        report = worker.shutdown()
    assert report.failure is not None
    assert "No space left on device" in report.failure.error
    worker_export(ctx, step_payload(0, 10, 5))
    first = ctx.export_dir / "step_time.jsonl"
    assert torn_tail(first) > 0
    assert (ctx.export_dir / "step_time.1.jsonl").read_bytes().startswith(b'{"stream":')
    with pytest.warns(TornLineWarning, match=re.escape(str(first))):
        steps = [line["step"] for line in read_jsonl(ctx)["step_time"]]
    assert steps == list(range(len(steps) - 5)) + list(range(10, 15))
    assert read_jsonl_export(ctx)["step_time"].torn_lines == 1


@SLOW
@given(
    first=st.lists(st.sampled_from(STREAMS), min_size=1, max_size=8),
    second=st.lists(st.sampled_from(STREAMS), max_size=4),
    room=st.integers(min_value=1, max_value=1500),
)
@example(first=["step_time"], second=["step_time"], room=0)
def test_a_full_disk_cuts_at_most_the_last_line_and_the_next_export_is_intact(
    tmp_path_factory: pytest.TempPathFactory, first: list[str], second: list[str], room: int
) -> None:
    """Whatever the disk held: each file of the failed export reads back as a prefix of its
    records, a cut-off line is counted (once, with its bytes) and warned about, and the next
    export's records all follow intact."""
    ctx = ExporterContext.create(tmp_path_factory.mktemp("session"), ",".join(STREAMS), False)
    before = [record(s, n) for n, s in enumerate(first)]
    after = [record(s, len(first) + n) for n, s in enumerate(second)]
    export_on_full_disk(ctx, before, room)
    export(ctx, after)
    torn = {}
    for path in ctx.export_dir.glob("*.jsonl"):
        if torn_tail(path):
            torn[path] = torn_tail(path)
    assert all(".1." not in path.name for path in torn)  # the second export is whole
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        back = read_jsonl(ctx)
    assert sorted(str(w.message).partition(":")[0] for w in caught) == sorted(map(str, torn))
    assert all(w.category is TornLineWarning for w in caught)
    counts = read_jsonl_export(ctx)
    assert {path: size for read in counts.values() for path, size in read.torn.items()} == torn
    for stream in STREAMS:
        lines = back.get(stream, [])
        later = lines_of(after, stream)
        kept = len(lines) - len(later)
        assert lines[kept:] == later
        assert lines[:kept] == lines_of(before, stream)[:kept]


def test_a_write_after_close_is_refused_and_makes_no_file(tmp_path: Path) -> None:
    ctx = context(tmp_path, "process,step_time")
    exporter = JsonlExporter(ctx)
    exporter.open()
    exporter.write([record("step_time", 0)])
    exporter.close()
    with pytest.raises(RuntimeError, match="not open, or closed"):
        exporter.write([record("process", 1)])
    assert os.listdir(ctx.export_dir) == ["step_time.jsonl"]
