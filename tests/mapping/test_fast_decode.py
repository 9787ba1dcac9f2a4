"""``msgspec_lines``: a JSON line straight to records with msgspec, against the usual way.

The usual way is ``PayloadReader.decode_line`` (orjson, or json for NaN and long
integers) and then ``records_from_payload``. For every line the fast mapper either
raises (and replay then goes the usual way) or gives the same records, field by
field with types, and the same skipped count.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from near_typed import canon, event_maps, key, near_typed_envelopes
from oracle import events as reference_events
from oracle import payloads
from traceml_exporter_sdk import (
    ExporterContext,
    ExportWorker,
    RecordBatch,
    records_from_payload,
)
from traceml_exporter_sdk._bridge import sqlite_rows
from traceml_exporter_sdk._bridge.sqlite_rows import RowConverter
from traceml_exporter_sdk._build.msgspec_lines import line_mapper
from traceml_exporter_sdk._export.payload_files import PayloadReader
from traceml_exporter_sdk.streams import ALL_STREAMS
from traceml_exporter_sdk.testing import load_corpus
from traceml_exporter_sdk.worker import NO_PAYLOAD

STREAMS = [ALL_STREAMS, ("step_time",), ("step_memory", "system", "system_gpu")]


@contextmanager
def fixed_clock() -> Iterator[None]:
    real = time.time_ns
    time.time_ns = lambda: 7  # both paths stamp each envelope when they build it
    try:
        yield
    finally:
        time.time_ns = real


def compare(line: bytes, streams: tuple[str, ...]) -> bool:
    """True when the fast mapper built the line; asserts it matches the usual way."""
    mapper = line_mapper(streams)
    assert mapper is not None
    reader = PayloadReader(Path("unused"), "jsonl")
    with fixed_clock():
        payload = reader.decode_line(1, 0, line)
        usual = (
            RecordBatch([], 0)
            if payload is NO_PAYLOAD
            else records_from_payload(payload, streams=streams)
        )
        try:
            fast = mapper(line)
        except Exception:
            return False
    assert payload is not NO_PAYLOAD  # a malformed line never maps
    assert key(fast.records) == key(usual.records)
    assert fast.skipped == usual.skipped
    return True


def dumps(payload: Any) -> bytes | None:
    try:
        return json.dumps(payload).encode()
    except (TypeError, ValueError):
        return None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(near_typed_envelopes(), min_size=1, max_size=3), st.sampled_from(STREAMS))
def test_near_typed_lines_map_as_the_usual_way(payload: Any, streams: tuple[str, ...]) -> None:
    line = dumps(payload)
    if line is not None:
        compare(line, streams)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads, st.sampled_from(STREAMS))
def test_differential_lines_map_as_the_usual_way(payload: Any, streams: tuple[str, ...]) -> None:
    line = dumps(payload)
    if line is not None:
        compare(line, streams)


def test_corpus_lines_mostly_take_the_fast_way() -> None:
    """The corpus (every sampler, as TraceML sends it; a few lines on purpose hold
    float-second timestamps of older ranks, which go the usual way)."""
    taken = [compare(orjson.dumps(p), ALL_STREAMS) for p in load_corpus()]
    assert sum(taken) >= 0.8 * len(taken), (sum(taken), len(taken))


@pytest.mark.parametrize(
    "line",
    [
        b'[{"meta":{"sampler":"StepTimeSampler"},"body":{"tables":{"T":[{"step":1.5}]}}}]',
        b'[{"meta":{"sampler":"StepTimeSampler"},"body":{"tables":{"T":[{"events":{"f":{"cpu":{"is_gpu":1}}}}]}}}]',
        b'[{"meta":{"sampler":"StepTimeSampler"},"body":{"tables":{"T":[{"step":NaN}]}}}]',
        b'\xef\xbb\xbf[{"meta":{"sampler":"StepTimeSampler"},"body":{"tables":{}}}]',
        b'[{"meta":{"sampler":"StepTimeSampler"},"body":[]}]',
        b'[{"meta":{"sampler":"StepTimeSampler"},"body":{"tables":{"T":[{"step":1}]}},"x":1},3]',
        b'{"sampler":"StepTimeSampler","tables":{"T":[{"step":1}]}}',
    ],
    ids=["float-step", "int-is-gpu", "nan", "bom", "list-body", "junk-item", "flat"],
)
def test_what_the_fast_way_cannot_read_goes_the_usual_way(line: bytes) -> None:
    assert compare(line, ALL_STREAMS) is False


def test_long_integers_and_emptied_events_match() -> None:
    big = "9" * 25
    line = (
        '[{"meta":{"sampler":"StepTimeSampler","global_rank":' + big + '},"body":{"tables":'
        '{"T":[{"step":' + big + ',"events":{"a":{},"b":{"cpu":{"n_calls":' + big + "}}}}]}}}]"
    ).encode()
    assert compare(line, ALL_STREAMS) is True


def test_one_mapper_over_lines_of_changing_samplers_matches_the_usual_way() -> None:
    """The mapper tries the one-pass decoding first only after a line of StepTimeSampler
    envelopes alone; whichever it tries first, each line maps as the usual way."""
    step = {
        "meta": {"sampler": "StepTimeSampler", "rank": 1},
        "body": {
            "tables": {
                "T": [
                    {
                        "seq": 1,
                        "step": 1,
                        "timestamp": 5,
                        "events": {"f": {"cpu": {"is_gpu": False}}},
                    }
                ]
            }
        },
    }
    process = {"meta": {"sampler": "ProcessSampler"}, "body": {"tables": {"T": [{"seq": 1}]}}}
    # A body that reads as a step body, under another sampler: never mapped as steps.
    memory = {"meta": {"sampler": "StepMemorySampler"}, "body": {"tables": {"T": [{"step": 1}]}}}
    lines = [[step], [step, process], [process], [memory], [step], step, [], [memory, step], [step]]
    mapper = line_mapper(ALL_STREAMS)
    assert mapper is not None
    reader = PayloadReader(Path("unused"), "jsonl")
    for payload in lines:
        line = orjson.dumps(payload)
        with fixed_clock():
            usual = records_from_payload(reader.decode_line(1, 0, line), streams=ALL_STREAMS)
            fast = mapper(line)
        assert key(fast.records) == key(usual.records), payload
        assert fast.skipped == usual.skipped


def test_without_msgspec_replay_decodes_the_usual_way(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "msgspec", None)  # import msgspec raises ImportError
    monkeypatch.delitem(sys.modules, "traceml_exporter_sdk._build.step_structs", raising=False)
    assert line_mapper(ALL_STREAMS) is None
    path = tmp_path / "p.jsonl"
    path.write_bytes(orjson.dumps(load_corpus()[0]) + b"\n")
    [produce] = PayloadReader(path, "jsonl").deferred_records(ALL_STREAMS)
    assert produce() == load_corpus()[0]  # the decoded payload, for the worker to map


_number = st.one_of(st.none(), st.integers(-(2**70), 2**70), st.floats())
typed_event_maps = st.dictionaries(
    st.sampled_from(["step", "forward", ""]),
    st.dictionaries(
        st.sampled_from(["cpu", "cuda:0"]),
        st.fixed_dictionaries(
            {
                "is_gpu": st.one_of(st.none(), st.booleans()),
                "duration_ms": _number,
                "cpu_ms": _number,
                "gpu_ms": _number,
                "n_calls": st.one_of(st.none(), st.integers(-(2**70), 2**70)),
            },
            optional={"x": st.integers()},
        ),
        max_size=2,
    ),
    max_size=3,
)
"""Maps with every stats key, each of its type or an int for a float: what the fast
decoding takes as it is (``event_maps`` mostly lack a key and go the careful way)."""


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(event_maps, typed_event_maps, reference_events), st.booleans())
def test_backfill_events_json_fast_equals_careful(events: Any, sort_keys: bool) -> None:
    """backfill decodes events_json with msgspec when it can; the careful decoding agrees."""
    try:
        text = json.dumps(events, sort_keys=sort_keys)
    except (TypeError, ValueError):
        return
    fast = outcome(text)
    careful_fast, sqlite_rows._FAST_DECODE = sqlite_rows._FAST_DECODE, None
    try:
        careful = outcome(text)
    finally:
        sqlite_rows._FAST_DECODE = careful_fast
    assert fast == careful


STEP_ROW = (1, 1_764_230_400_000_000_000, 0, 0, 0, 1, 1, 0, "host", None, 0, 0)
"""A step_time row as the backfill reads it, ``events_json`` still to come."""


def outcome(text: str) -> Any:
    """What the backfill makes of a row with this ``events_json``: the decoded map
    (comparable, key order aside), or the reason the row is skipped."""
    reasons: list[str] = []
    records = RowConverter("step_time").records(
        [(*STEP_ROW, text)], lambda _id, reason: reasons.append(reason)
    )
    return reasons[0] if reasons else key_of(records[0].events)  # type: ignore[attr-defined]


def key_of(events: dict[str, Any]) -> Any:
    """``canon`` with every map's keys sorted: the fast decoding keeps the text's key order."""
    if isinstance(events, dict):
        items = sorted(events.items(), key=lambda item: repr(canon(item[0])))
        return [(canon(name), key_of(value)) for name, value in items]
    return canon(events)


def test_backfill_events_keep_the_texts_key_order() -> None:
    """A stats map decoded fast keeps the text's order (TraceML 0.5.0 sorts its keys);
    the careful decoding gives the contract's; the maps are equal."""
    stats = {"cpu_ms": 1.0, "duration_ms": 2.0, "gpu_ms": None, "is_gpu": False, "n_calls": 1}
    text = json.dumps({"step": {"cpu": stats}})
    [fast] = RowConverter("step_time").records([(*STEP_ROW, text)], pytest.fail)
    assert list(fast.events["step"]["cpu"]) == list(stats)  # type: ignore[attr-defined]
    careful_fast, sqlite_rows._FAST_DECODE = sqlite_rows._FAST_DECODE, None
    try:
        [careful] = RowConverter("step_time").records([(*STEP_ROW, text)], pytest.fail)
    finally:
        sqlite_rows._FAST_DECODE = careful_fast
    order = ["is_gpu", "duration_ms", "cpu_ms", "gpu_ms", "n_calls"]
    assert list(careful.events["step"]["cpu"]) == order  # type: ignore[attr-defined]
    assert fast == careful


def test_worker_admits_a_record_batch_from_a_deferred_producer(tmp_path: Path) -> None:
    """What replay's producers return when the fast way mapped the line."""
    line = orjson.dumps(
        [
            {"meta": {"sampler": "StepTimeSampler"}, "body": {"tables": {"T": [{"step": 1}]}}},
            {"meta": {"sampler": "ProcessSampler"}, "body": {"tables": {"T": [{"seq": 1}]}}},
            {"meta": {"sampler": "StepMemorySampler"}, "body": {"tables": {"T": [{"step": 1}]}}},
        ]
    )
    mapper = line_mapper(("step_time", "process"))
    assert mapper is not None
    batch = mapper(line)
    assert [r.STREAM for r in batch.records] == ["step_time", "process"]
    context = ExporterContext.create(tmp_path, "step_time")  # process is not selected here
    worker = ExportWorker("jsonl", context).start()
    worker.submit_deferred(lambda: RecordBatch(list(batch.records), 2))
    report = worker.shutdown(10)
    assert report.failure is None
    assert report.admitted_by_stream == {"step_time": 1}
    assert report.skipped_units == 2
