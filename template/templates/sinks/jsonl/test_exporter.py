"""Unit tests of the JSON Lines layout and its guarantees (the suite checks the contract)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest
from exporter_calls import run, written
from traceml_exporter_sdk import ExporterContext, ExportRecord
from traceml_exporter_sdk.testing import expected_by_stream

from {{ cookiecutter.package_name }}.exporter import (
    SUMMARY_FILE,
    {{ cookiecutter.exporter_class }},
    encode_line,
    make_exporter,
)


def test_factory_only_stores_settings(context: ExporterContext) -> None:
    exporter = make_exporter(context)
    assert isinstance(exporter, {{ cookiecutter.exporter_class }})
    assert not context.session_root.exists()


def test_one_file_per_selected_stream(tmp_path: Path) -> None:
    context = ExporterContext.create(tmp_path, export_streams="system,step_time")
    run(context)
    assert sorted(p.name for p in context.export_dir.glob("*.jsonl")) == [
        "step_time.jsonl",
        "system.jsonl",
        "system_gpu.jsonl",
    ]


def test_lines_are_to_dict_without_hostname(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(context, records[:4], records[4:])
    back = written(context)
    assert back == expected_by_stream(records)
    assert all("hostname" not in row for rows in back.values() for row in rows)


def test_hostname_kept_when_asked(
    hostname_context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(hostname_context, records)
    back = written(hostname_context)
    assert back == expected_by_stream(records, include_hostname=True)
    assert back["step_time"][1]["hostname"] is None


def test_flush_fsyncs_every_file(
    context: ExporterContext, records: list[ExportRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    exporter = make_exporter(context)
    exporter.open()
    exporter.write(records)
    exporter.flush()
    assert len(synced) == len(context.streams)
    exporter.close()


def test_unflushed_lines_survive_close_and_summary_counts(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    exporter = make_exporter(context)
    exporter.open()
    exporter.write(records)
    exporter.close(dropped_batches=3)
    summary = json.loads((context.export_dir / SUMMARY_FILE).read_text("utf-8"))
    assert summary["dropped_batches"] == 3
    assert summary["written_records"]["step_time"] == 3
    assert sum(summary["written_records"].values()) == len(records)
    assert sum(len(rows) for rows in written(context).values()) == len(records)


def test_a_second_run_appends(context: ExporterContext, records: list[ExportRecord]) -> None:
    run(context, records)
    run(context, records)
    assert sum(len(rows) for rows in written(context).values()) == 2 * len(records)


def test_integers_beyond_64_bits_stay_exact() -> None:
    big = {"stream": "step_time", "timestamp_unix_ns": 2**70, "seq": -(2**65)}
    assert json.loads(encode_line(big)) == big
    assert encode_line({"a": 1}) == b'{"a":1}\n'


def test_a_lone_surrogate_is_written_as_its_escape() -> None:
    """orjson refuses a str that is not UTF-8: that line is written by json, as ASCII."""
    data = {"line": "lone \udcff, NUL \x00, U+2028 \u2028", "\udcff key": 1}
    line = encode_line(data)
    assert line.isascii()
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert json.loads(line) == data


def test_calls_out_of_order_raise(context: ExporterContext, records: list[ExportRecord]) -> None:
    exporter = make_exporter(context)
    with pytest.raises(RuntimeError, match="not open"):
        exporter.write(records)
    exporter.open()
    exporter.close()
    with pytest.raises(RuntimeError, match="not open"):
        exporter.write(records)


def test_open_fails_cleanly_when_export_dir_is_a_file(context: ExporterContext) -> None:
    context.export_dir.parent.mkdir(parents=True)
    context.export_dir.write_text("in the way")
    exporter = make_exporter(context)
    with pytest.raises(OSError, match="export"):
        exporter.open()


def open_under(folder: Path) -> list[str]:
    """Paths under ``folder`` this process holds open (Linux ``/proc/self/fd``)."""
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        pytest.skip("needs /proc/self/fd")
    targets = []
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            targets.append(os.readlink(fd))
    return [t for t in targets if t.startswith(str(folder))]


def test_a_failure_closes_every_file(
    context: ExporterContext, records: list[ExportRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    """TraceML never calls an exporter again after a failure, not even close."""
    exporter = make_exporter(context)
    exporter.open()
    exporter.write(records)
    assert open_under(context.export_dir)

    def broken_fsync(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space"):
        exporter.flush()
    assert open_under(context.export_dir) == []
    with pytest.raises(RuntimeError, match="not open"):
        exporter.write(records)
