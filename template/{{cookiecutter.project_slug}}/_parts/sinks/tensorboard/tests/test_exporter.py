"""Unit tests of the TensorBoard layout, its scalars and its encoding (the suite checks the
contract; ``test_tensorboard_server.py`` and ``test_tensorboard_crash.py`` the server and a
kill -9)."""

from __future__ import annotations

import json
import math
import struct
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
from exporter_calls import disk_full, fsyncs, is_permanent, open_under, open_with, run, written
from hypothesis import HealthCheck, given, settings
from sink_support import accumulator, log_root, scalars_of
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
from traceml_exporter_sdk import (
    ExporterContext,
    ExportRecord,
    StepMemoryRecord,
    StepTimeRecord,
    SystemRecord,
)
from traceml_exporter_sdk.testing import expected_by_stream
from traceml_exporter_sdk.testing.strategies import record_batches

from traceml_exporter_example._measures import EVENT_MEASURES as MEASURES
from traceml_exporter_example._measures import MEASURES as SNAPSHOT
from traceml_exporter_example._tensorboard_events import (
    FILE_VERSION,
    event,
    frame,
    scalar_prefix,
)
from traceml_exporter_example.exporter import (
    LOGDIR_ENV,
    SUMMARY_FILE,
    ExampleExporter,
    make_exporter,
)

NS = 1_712_345_678_901_234_567


def f32(value: float) -> float | str:
    """``value`` rounded to float32 as TensorBoard stores it (NaN as a comparable text)."""
    try:
        rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        rounded = math.copysign(math.inf, value)
    return "nan" if math.isnan(rounded) else rounded


def expected_scalars(
    records: Iterable[ExportRecord],
) -> dict[str, dict[str, list[tuple[int, float | str]]]]:
    """Rank folder -> tag -> ``(step, float32 value)``: the mapping the README gives."""
    out: dict[str, dict[str, list[tuple[int, float | str]]]] = {}
    for record in records:
        data = record.to_dict()
        rank = data.get("rank", data.get("global_rank"))
        folder = out.setdefault("unranked" if rank is None else f"rank_{rank}", {})
        stepped = record.STREAM in ("step_time", "step_memory")
        step = data["step"] if stepped and data.get("step") is not None else data.get("seq")
        step = 0 if step is None else max(-(2**63), min(step, 2**63 - 1))
        points: list[tuple[str, Any]] = []
        if record.STREAM == "step_time":
            for name, devices in data["events"].items():
                for device, stats in devices.items():
                    points += [(f"step_time/{name}/{device}/{m}", stats.get(m)) for m in MEASURES]
        elif record.STREAM in SNAPSHOT:
            key = {"system_gpu": "gpu_idx", "step_memory": "device"}.get(record.STREAM)
            base = record.STREAM if key is None else f"{record.STREAM}/{data[key]}"
            points += [(f"{base}/{field}", data[field]) for field in SNAPSHOT[record.STREAM]]
        for tag, value in points:
            if value is not None and not isinstance(value, bool):
                shown = tag.encode("utf-8", "backslashreplace").decode()  # a lone surrogate
                folder.setdefault(shown, []).append((step, f32(value)))
    return out


def read_scalars(root: Path) -> dict[str, dict[str, list[tuple[int, float | str]]]]:
    out = {}
    for run_dir in sorted(root.iterdir()):
        tags = scalars_of(run_dir)
        out[run_dir.name] = {tag: [(s, f32(v)) for s, v in points] for tag, points in tags.items()}
    return out


def event_files(root: Path) -> list[Path]:
    return sorted(root.glob("*/events.out.tfevents.*"))


def test_factory_only_stores_settings(context: ExporterContext) -> None:
    exporter = make_exporter(context)
    assert isinstance(exporter, ExampleExporter)
    assert exporter.root == context.export_dir / "tensorboard"
    assert not context.session_root.exists()


def test_the_log_dir_setting(
    context: ExporterContext,
    records: list[ExportRecord],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(LOGDIR_ENV, str(tmp_path / "logs"))
    run(context, records)
    assert log_root(context) == tmp_path / "logs" / context.session_root.name
    assert {p.name for p in log_root(context).iterdir()} == {"rank_0", "rank_1"}
    assert (context.export_dir / SUMMARY_FILE).is_file()


def test_one_new_file_per_open_and_rank(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(context, records)
    first = {path: path.read_bytes() for path in event_files(log_root(context))}
    assert [p.parent.name for p in first] == ["rank_0", "rank_1"]
    run(context, records)
    files = event_files(log_root(context))
    assert len(files) == 4
    assert all(path.read_bytes() == data for path, data in first.items()), "never appended"
    assert written(context) == expected_by_stream(records + records)
    summary = json.loads((context.export_dir / SUMMARY_FILE).read_text("utf-8"))
    assert summary["written_records"]["step_time"] == 3
    assert sorted(summary["files"]) == sorted(
        str(p) for p in files if str(p) not in map(str, first)
    )


def test_scalars_are_the_float32_of_every_measure(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(context, records[:4], records[4:])
    got = read_scalars(log_root(context))
    assert got == expected_scalars(records)
    assert got["rank_0"]["step_time/_traceml_internal:forward_time/cuda:0/duration_ms"] == [
        (7, 12.5),
        (7, 12.5),
    ]
    assert "step_time/_traceml_internal:step_time/cpu/duration_ms" not in got["rank_0"]  # None
    assert got["rank_0"]["step_time/_traceml_internal:step_time/cpu/n_calls"] == [(7, 0.0)] * 2


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(batch=record_batches(max_size=8))
def test_any_batch_reads_back_as_its_float32_scalars(batch: list[ExportRecord]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        context = ExporterContext.create(folder, "all")
        run(context, batch)
        root = log_root(context)
        got = read_scalars(root) if root.is_dir() else {}
        want = {k: v for k, v in expected_scalars(batch).items() if v}
        assert {k: v for k, v in got.items() if v} == want


def test_precision_is_float32_and_times_are_wall_time(context: ExporterContext) -> None:
    """A byte count beyond 2**24 loses its low bits; a time is ``wall_time``, never a value."""
    exact = 2**40 + 1
    timed = StepMemoryRecord(NS, 0, 0, 0, 1, 1, 0, None, NS + 5, 3, "cuda:0", 9, exact, None)
    untimed = SystemRecord(NS + 7, 0, 0, 1, 1, 0, None, None, 4, 1e39, 1.5, None, 0, 1)
    run(context, [timed, untimed])
    events = accumulator(log_root(context) / "rank_0")
    (alloc,) = events.Scalars("step_memory/cuda:0/peak_alloc_bytes")
    assert alloc.value == float(2**40) != exact
    assert (alloc.step, alloc.wall_time) == (9, (NS + 5) / 1e9)
    (cpu,) = events.Scalars("system/cpu_percent")
    assert cpu.value == math.inf  # beyond float32
    assert (cpu.step, cpu.wall_time) == (4, (NS + 7) / 1e9)  # seq; observed stamp
    tags = events.Tags()["scalars"]
    assert "step_memory/cuda:0/peak_reserved_bytes" not in tags  # None is left out
    assert not [tag for tag in tags if "timestamp" in tag]


def test_events_equal_what_protobuf_encodes() -> None:
    """The hand encoder's bytes are exactly protobuf's for the same ``Event`` (protobuf
    leaves a field out when it holds 0.0; these cases hold none but in a Value)."""
    for wall_time, step, values in [
        (NS / 1e9, 7, [("a/b", 1.5), ("\u00e9/\u2028", -0.0)]),
        (1.5, -3, [("x", math.inf), ("zero", 0.0)]),
        (1.0, 2**62, []),
    ]:
        ours = event(
            wall_time, step, [scalar_prefix(tag) + struct.pack("<f", v) for tag, v in values]
        )
        proto = event_pb2.Event(wall_time=wall_time, step=step)
        proto.summary.SetInParent()
        for tag, value in values:
            proto.summary.value.add(tag=tag, simple_value=value)
        assert ours == frame(proto.SerializeToString())
        data = ours[12:-4]
        assert struct.unpack("<I", ours[8:12])[0] == masked_crc32c(ours[:8])
        assert struct.unpack("<I", ours[-4:])[0] == masked_crc32c(data)


def test_the_record_copy_is_a_string_tensor(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(context, records[:1])
    (path,) = event_files(log_root(context))
    first, second = _raw_events(path.read_bytes())
    assert event_pb2.Event.FromString(first).file_version == FILE_VERSION.decode()
    value = event_pb2.Event.FromString(second).summary.value[-1]
    assert value.tag == "traceml/record/step_time"
    assert value.metadata.plugin_data.plugin_name == "traceml_record"
    assert value.tensor.dtype == 7  # DT_STRING
    assert json.loads(value.tensor.string_val[1]) == expected_by_stream(records[:1])["step_time"][0]
    assert isinstance(value, summary_pb2.Summary.Value)


def _raw_events(data: bytes) -> list[bytes]:
    out = []
    while data:
        (length,) = struct.unpack("<Q", data[:8])
        out.append(data[12 : 12 + length])
        data = data[16 + length :]
    return out


def test_flush_reaches_readers_and_close_fsyncs(
    context: ExporterContext, records: list[ExportRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = fsyncs(monkeypatch)
    exporter = open_with(context, records, flush=True)
    assert written(context) == expected_by_stream(records), "flushed events are readable"
    assert synced == []
    exporter.close()
    assert len(synced) == 4  # two event files, then the summary and its folder


def test_a_failure_closes_every_file(
    context: ExporterContext, records: list[ExportRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    """TraceML never calls an exporter again after a failure, not even close."""
    exporter = open_with(context, records)
    assert len(open_under(context.export_dir)) == 2

    disk_full(monkeypatch)
    with pytest.raises(OSError, match="No space") as raised:
        exporter.close()
    assert not is_permanent(raised.value)  # nothing this sink raises is permanent
    assert open_under(context.export_dir) == []
    with pytest.raises(RuntimeError, match="not open"):
        exporter.write(records)


def test_a_rank_with_only_text_streams_still_reads_back(context: ExporterContext) -> None:
    step = StepTimeRecord(NS, None, None, None, None, None, None, None, None, None, None, {})
    run(context, [step])
    assert [p.name for p in log_root(context).iterdir()] == ["unranked"]
    back: Mapping[str, list[dict[str, Any]]] = written(context)
    assert back == expected_by_stream([step])
