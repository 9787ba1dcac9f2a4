"""The shipped corpus, the look-alike classes, the readers and the hypothesis strategies."""

from __future__ import annotations

import collections
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import make_corpus
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st
from traceml_exporter_sdk import (
    ALL_STREAMS,
    RECORD_TYPE_BY_STREAM,
    RECORD_TYPES,
    ExporterContext,
    JsonlExporter,
    records_from_payload,
    stream_key,
)
from traceml_exporter_sdk.testing import (
    as_foreign,
    corpus_batches,
    corpus_records,
    foreign_class,
    group_by_stream,
    load_corpus,
    read_jsonl,
    read_jsonl_lines,
)
from traceml_exporter_sdk.testing import strategies as rs
from traceml_exporter_sdk.testing.corpus import (
    HOSTILE_TEXT,
    LONG_LINE,
    OBSERVED_BASE_NS,
    hostile_batches,
    load_hostile_corpus,
)
from traceml_exporter_sdk.testing.readback import JsonlLines, TornLineWarning, read_jsonl_file


def all_records() -> list[Any]:
    return corpus_records()


def values(stream: str, field: str) -> list[Any]:
    return [getattr(r, field) for r in all_records() if stream == r.STREAM]


# -- the corpus ----------------------------------------------------------------------------


def test_shipped_corpus_is_what_the_generator_writes() -> None:
    assert make_corpus.OUT.read_text(encoding="utf-8") == make_corpus.render()


def test_shipped_hostile_corpus_is_what_the_generator_writes() -> None:
    text = make_corpus.HOSTILE_OUT.read_text(encoding="utf-8")
    assert text == make_corpus.render(make_corpus.hostile_payloads())
    assert text.isascii()  # every hostile character is a JSON escape on disk


def test_hostile_corpus_carries_each_hostile_text_as_one_stdout_line() -> None:
    assert all(records_from_payload(p).skipped == 0 for p in load_hostile_corpus())
    lines = [r.line for r in hostile_batches()[0]]
    assert lines == list(HOSTILE_TEXT)
    joined = "".join(lines)
    for hostile in ("\ud800", "\udfff", "\x00", "\u2028", "\u2029", "\x85", "\x1b"):
        assert hostile in joined, repr(hostile)
    assert len(LONG_LINE) > 128 * 1024
    # then every class with the hostile text in every str field, event names too
    (generated,) = hostile_batches(["step_time"])
    names = {name for r in generated for name in r.events}
    assert names >= set(HOSTILE_TEXT[1:])  # the first record's events map is empty
    assert {r.hostname for r in generated} == set(HOSTILE_TEXT)


def test_corpus_is_payloads_of_envelope_lists_in_the_wire_shape() -> None:
    payloads = load_corpus()
    assert len(payloads) == 24
    for payload in payloads:
        assert isinstance(payload, list)
        for envelope in payload:
            assert set(envelope) == {"meta", "body"}
            assert len(envelope["body"]["tables"]) == 1
    assert load_corpus() is not load_corpus()  # each call a fresh copy


def test_corpus_maps_with_nothing_skipped_and_covers_all_seven_streams() -> None:
    samplers = {env["meta"]["sampler"] for p in load_corpus() for env in p}
    assert samplers == {
        "RuntimeEnvironmentSampler",
        "SystemSampler",
        "ProcessSampler",
        "StepTimeSampler",
        "StepMemorySampler",
        "Stdout/Stderr",
    }
    assert all(records_from_payload(p).skipped == 0 for p in load_corpus())
    counts = collections.Counter(r.STREAM for r in all_records())
    assert set(counts) == set(ALL_STREAMS)
    assert min(counts.values()) >= 4


def test_corpus_has_several_ranks_on_two_nodes_and_one_rank_without_hostname() -> None:
    ranks = {(r.node_rank, r.global_rank) for r in all_records() if r.STREAM == "step_time"}
    assert ranks == {(0, 0), (0, 1), (1, 2), (1, 3)}
    hostnames = set(values("step_time", "hostname"))
    assert hostnames == {"node-a.cluster.local", "node-b.cluster.local", None}


def test_corpus_has_the_contract_edge_values() -> None:
    peaks = values("step_memory", "peak_reserved_bytes") + values("step_memory", "peak_alloc_bytes")
    assert None in peaks
    assert 0.0 in peaks
    assert {None, 0.0} <= set(values("system_gpu", "util")) | set(
        values("system_gpu", "temperature_c")
    )
    lines = values("stdout_stderr", "line")
    assert any("\n" in line for line in lines)
    assert any("\u2028" in line for line in lines)
    assert any(not line.isascii() for line in lines)
    assert "" not in lines  # empty lines are not recorded
    stamps = values("step_time", "timestamp_unix_ns")
    assert None in stamps  # a rank older than integer timestamps
    assert all(len(str(s)) == 19 for s in stamps if s is not None)
    assert {} in values("step_time", "events")
    gpus = collections.Counter(
        (r.global_rank, r.seq) for r in all_records() if r.STREAM == "system_gpu"
    )
    assert max(gpus.values()) >= 2
    assert any(r.gpu_count == 0 for r in all_records() if r.STREAM == "system")
    assert 3 in values("system_gpu", "gpu_idx")  # gpu_idx counts an entry that was passed over


def test_corpus_records_are_distinct_and_stream_keys_unique() -> None:
    records = all_records()
    texts = [json.dumps(r.to_dict(), sort_keys=True) for r in records]
    assert len(set(texts)) == len(texts)
    keys = collections.Counter(
        (r.STREAM, stream_key(r)) for r in records if r.STREAM != "stdout_stderr"
    )
    assert [k for k, n in keys.items() if n > 1] == []


def test_corpus_batches_are_stamped_deterministically_and_repeat_distinctly() -> None:
    batches = corpus_batches()
    assert batches[0][0].observed_timestamp_unix_ns == OBSERVED_BASE_NS
    assert [b[0].observed_timestamp_unix_ns for b in batches] == sorted(
        {b[0].observed_timestamp_unix_ns for b in batches}
    )
    twice = corpus_batches(repeat=2)
    assert len(twice) == 2 * len(batches)
    assert twice[len(batches)][0].observed_timestamp_unix_ns == OBSERVED_BASE_NS + 24
    only = corpus_batches(["system", "system_gpu"])
    assert {r.STREAM for b in only for r in b} == {"system", "system_gpu"}
    with pytest.raises(ValueError, match="repeat must be at least 1"):
        corpus_batches(repeat=0)


# -- look-alike classes ------------------------------------------------------------------------


@pytest.mark.parametrize("cls", RECORD_TYPES, ids=lambda c: c.STREAM)
def test_foreign_class_looks_like_the_sdk_class_but_is_another_type(cls: type) -> None:
    foreign = foreign_class(cls.STREAM)
    assert foreign is not cls
    assert foreign.__name__ == cls.__name__
    assert foreign.__module__ == "traceml_ai.aggregator.export"
    for attr in ("STREAM", "SCHEMA_VERSION", "COLUMNS"):
        assert getattr(foreign, attr) == getattr(cls, attr)
    assert [f.name for f in dataclasses.fields(foreign)] == list(cls.COLUMNS)  # type: ignore[attr-defined]
    records = [r for r in all_records() if type(r) is cls]
    copies = as_foreign(records)
    assert not any(isinstance(c, RECORD_TYPES) for c in copies)
    assert [c.to_dict() for c in copies] == [r.to_dict() for r in records]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(copies[0], cls.COLUMNS[0], 1)  # type: ignore[attr-defined]


def test_foreign_class_rejects_an_unknown_stream() -> None:
    with pytest.raises(ValueError, match="unknown STREAM 'steps'"):
        foreign_class("steps")


# -- readers -----------------------------------------------------------------------------------


def test_read_jsonl_lines_splits_on_newline_only_and_skips_closing_lines(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(
        b'{"stream": "stdout_stderr", "line": "a\xe2\x80\xa8b"}\n'
        b'{"stream": "stdout_stderr", "closing": true, "written_records": 1}\n'
    )
    assert read_jsonl_lines(path) == [{"stream": "stdout_stderr", "line": "a\u2028b"}]
    assert len(read_jsonl_lines(path, skip_closing=False)) == 2
    assert read_jsonl_lines(tmp_path / "missing.jsonl") == []
    path.write_text('{"a": 1}\n[1]\n')
    with pytest.raises(ValueError, match=r"x.jsonl:2: a JSON line must be an object"):
        read_jsonl_lines(path)


def test_a_torn_last_line_is_left_out_counted_and_warned_about(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    tail = b'{"a": 3, "b'
    path.write_bytes(b'{"a": 1}\n{"a": 2}\n' + tail)
    message = re.escape(f"{path}: left out a torn last line, {len(tail)} bytes")
    with pytest.warns(TornLineWarning, match=message):
        assert read_jsonl_lines(path) == [{"a": 1}, {"a": 2}]
    assert read_jsonl_file(path) == JsonlLines([{"a": 1}, {"a": 2}], {path: len(tail)})
    path.write_bytes(b'{"a": 1}')  # a whole object, but its newline never came
    assert read_jsonl_file(path) == JsonlLines([], {path: 8})
    path.write_bytes(b'{"a": 1}\n \t')  # blanks after the last line are no line
    assert read_jsonl_file(path) == JsonlLines([{"a": 1}], {})
    assert read_jsonl_file(tmp_path / "missing.jsonl").torn_lines == 0


def test_a_bad_line_before_the_last_is_still_an_error(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a"\n{"a": 3')
    with pytest.raises(ValueError, match=r"x.jsonl:2: not a JSON line"):
        read_jsonl_file(path)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.dictionaries(st.text(max_size=3), st.integers() | st.text(max_size=8))),
    st.integers(min_value=0),
)
def test_a_file_cut_anywhere_reads_as_a_prefix_and_counts_the_cut_line(
    tmp_path_factory: pytest.TempPathFactory, objects: list[dict[str, Any]], cut: int
) -> None:
    """Whatever byte a crash stops at: the whole lines before it read back, in order, and
    the bytes of the line it cut are counted, never decoded."""
    blob = b"".join(json.dumps(o).encode() + b"\n" for o in objects)
    cut %= len(blob) + 1
    path = tmp_path_factory.mktemp("cut") / "x.jsonl"
    path.write_bytes(blob[:cut])
    read = read_jsonl_file(path)
    whole = blob[:cut].count(b"\n")
    assert read.lines == objects[:whole]
    torn = cut - (blob.rfind(b"\n", 0, cut) + 1)
    assert read.torn == ({path: torn} if torn else {})


def test_group_by_stream_keeps_order_and_rejects_unknown_streams() -> None:
    rows = [
        {"stream": "system", "seq": 1},
        {"stream": "system_gpu"},
        {"stream": "system", "seq": 2},
    ]
    assert group_by_stream(rows) == {
        "system": [{"stream": "system", "seq": 1}, {"stream": "system", "seq": 2}],
        "system_gpu": [{"stream": "system_gpu"}],
    }
    with pytest.raises(ValueError, match="stream 'bogus'"):
        group_by_stream([{"stream": "bogus"}])


# -- strategies -----------------------------------------------------------------------------------

STRATEGIES = {
    "step_time": rs.step_time_records,
    "step_memory": rs.step_memory_records,
    "system": rs.system_records,
    "system_gpu": rs.system_gpu_records,
    "process": rs.process_records,
    "runtime_environment": rs.runtime_environment_records,
    "stdout_stderr": rs.stdout_stderr_records,
}


@pytest.mark.parametrize("stream", ALL_STREAMS)
def test_each_record_strategy_builds_its_record_class(stream: str) -> None:
    @settings(max_examples=25, deadline=None)
    @given(STRATEGIES[stream](), STRATEGIES[stream](foreign=True))
    def check(record: Any, foreign: Any) -> None:
        assert type(record) is RECORD_TYPE_BY_STREAM[stream]
        assert type(foreign) is foreign_class(stream)
        for r in (record, foreign):
            data = r.to_dict()
            assert list(data) == ["stream", "schema_version", *r.COLUMNS]
            assert data["stream"] == stream
            assert type(data["observed_timestamp_unix_ns"]) is int

    check()


@settings(max_examples=40, deadline=None)
@given(rs.stdout_stderr_records())
def test_stdout_lines_are_never_empty(record: Any) -> None:
    assert record.line != ""


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@pytest.mark.parametrize(
    "hostile",
    ["\ud800", "\x00", "\u2028", "\x85", LONG_LINE],
    ids=["lone-surrogate", "nul", "u2028", "u0085", "long-line"],
)
def test_strategies_carry_hostile_text(hostile: str) -> None:
    """Property tests built on the strategies meet what the hostile_text check sends."""
    line = find(rs.stdout_stderr_records(), lambda r: hostile in r.line).line
    assert hostile in line
    if hostile is LONG_LINE:  # every other text field draws a 128 KiB text
        hostile = rs.LONG_TEXT
        assert len(hostile) >= 128 * 1024
    key = find(rs.events_maps(), lambda events: any(hostile in name for name in events))
    assert key


def test_records_rejects_unknown_streams() -> None:
    with pytest.raises(ValueError, match="streams must name some of"):
        rs.records(["steps"])


@settings(max_examples=30, deadline=None)
@given(rs.record_batches())
def test_strategies_drive_an_exporter_round_trip(tmp_path_factory: Any, batch: list[Any]) -> None:
    """What authors use the strategies for: any batch, written and read back, equals to_dict()."""
    root = tmp_path_factory.mktemp("session")
    context = ExporterContext.create(root, "all", exporter_hostname=True)
    exporter = JsonlExporter(context)
    exporter.open()
    exporter.write(batch)
    exporter.close()
    expected = collections.defaultdict(list)
    for record in batch:
        expected[record.STREAM].append(record.to_dict())
    assert {s: rows for s, rows in read_jsonl(context).items() if rows} == dict(expected)


def test_corpus_has_the_shapes_of_real_runs() -> None:
    """An event on several devices in one step, several ranks of one host, several hosts:
    a sink that flattens devices or keys by host alone meets them in every fidelity run."""
    from traceml_exporter_sdk.testing import corpus_records

    records = corpus_records()
    steps = [r for r in records if r.STREAM == "step_time"]
    assert any(len(devices) > 1 for r in steps for devices in r.events.values())
    ranks_by_node: dict[object, set[object]] = {}
    for record in records:
        if getattr(record, "node_rank", None) is not None:
            ranks_by_node.setdefault(record.node_rank, set()).add(record.global_rank)
    assert len(ranks_by_node) >= 2
    assert all(len(ranks) >= 2 for ranks in ranks_by_node.values())
    assert len({getattr(r, "hostname", None) for r in records} - {None}) >= 2
