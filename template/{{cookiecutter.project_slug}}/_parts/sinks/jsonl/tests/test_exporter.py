"""Unit tests of the JSON Lines layout and its guarantees (the suite checks the contract)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from exporter_calls import (
    StrayRecord,
    disk_full,
    fsyncs,
    is_permanent,
    open_under,
    open_with,
    refusal,
    run,
    written,
)
from traceml_exporter_sdk import ExporterContext, ExportRecord
from traceml_exporter_sdk.testing import expected_by_stream

from traceml_exporter_example.exporter import (
    SUMMARY_FILE,
    ExampleExporter,
    encode_line,
    make_exporter,
)


def test_factory_only_stores_settings(context: ExporterContext) -> None:
    exporter = make_exporter(context)
    assert isinstance(exporter, ExampleExporter)
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
    synced = fsyncs(monkeypatch)
    exporter = open_with(context, records, flush=True)
    assert len(synced) == len(context.streams)
    exporter.close()


def test_the_summary_counts_what_close_delivered(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(context, records, dropped=3, flush=False)  # the suite reads the rows back
    summary = json.loads((context.export_dir / SUMMARY_FILE).read_text("utf-8"))
    assert summary["dropped_batches"] == 3
    assert summary["written_records"]["step_time"] == 3
    assert sum(summary["written_records"].values()) == len(records)


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


def test_a_stream_no_file_may_be_named_after_is_refused_for_good(
    context: ExporterContext,
) -> None:
    error = refusal(context, StrayRecord())
    assert isinstance(error, ValueError)
    assert "'../stray' is not a plain name" in str(error)
    assert is_permanent(error)  # the same record is refused again: follow ends at once


def test_a_failure_closes_every_file(
    context: ExporterContext, records: list[ExportRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    """TraceML never calls an exporter again after a failure, not even close."""
    exporter = open_with(context, records)
    assert open_under(context.export_dir)

    disk_full(monkeypatch)
    with pytest.raises(OSError, match="No space") as raised:
        exporter.flush()
    assert not is_permanent(raised.value)  # space may be freed: the follower waits
    assert open_under(context.export_dir) == []
    with pytest.raises(RuntimeError, match="not open"):
        exporter.write(records)


def test_a_line_cut_off_by_a_kill_is_dropped_not_continued(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    """A killed run leaves a last line without ``\\n``; the next run cuts it off before it
    appends, so its own first line is whole (and everything flushed before stays)."""
    run(context, records[:2])
    path = context.export_dir / "step_time.jsonl"
    flushed = path.read_bytes()
    with path.open("ab") as handle:
        handle.write(b'{"stream": "step_time", "cut off by a ki')
    run(context, records[2:])
    assert path.read_bytes().startswith(flushed)
    assert written(context) == expected_by_stream(records)
