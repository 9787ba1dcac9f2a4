"""The value space: derived from the record classes' type hints, sent by every fidelity run.

Coverage is computed from the dataclass fields and type hints (``value_space_gaps``),
never from a list kept here: a record class that gains a field or a nullable is covered
by the generator, or the generator refuses it by name and these tests fail.
"""

from __future__ import annotations

import dataclasses
import math
import struct
import sys
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, find, given, settings
from traceml_exporter_sdk import RECORD_TYPES
from traceml_exporter_sdk.records import EventStats
from traceml_exporter_sdk.testing import strategies as rs
from traceml_exporter_sdk.testing.checks._common import corpus
from traceml_exporter_sdk.testing.corpus import (
    HOSTILE_TEXT,
    LONG_LINE,
    corpus_records,
    non_finite_batches,
    value_space_batches,
)
from traceml_exporter_sdk.testing.expected import _text, export_differences, same_value
from traceml_exporter_sdk.testing.value_space import (
    FLOAT_EDGES,
    INT64_MAX,
    INT64_MIN,
    NON_FINITE,
    RULES,
    field_specs,
    value_space_gaps,
    value_space_records,
)


def flat(batches: list[list[Any]]) -> list[Any]:
    return [r for b in batches for r in b]


# -- what a fidelity run sends -----------------------------------------------------------


def test_every_fidelity_run_covers_the_value_space() -> None:
    """Every nullable field None, every field at every edge of its type, events stats too:
    in the records every check that sends the corpus sends (``checks._common.corpus``)."""
    assert value_space_gaps(flat(corpus())) == []


@pytest.mark.parametrize("streams", ["step_time", "system", "process", "all"])
def test_every_stream_selection_covers_its_own_classes(streams: str) -> None:
    records = flat(corpus(streams))
    classes = {type(r) for r in records}
    assert value_space_gaps(records, [c for c in RECORD_TYPES if c in classes]) == []


def test_the_payload_corpus_alone_does_not() -> None:
    """Why the value space is there: the wire-shaped corpus has no None in seq, step, ..."""
    gaps = value_space_gaps(corpus_records())
    assert any(g.startswith("StepTimeRecord.seq never takes") for g in gaps), gaps


def test_non_finite_batches_hold_nan_and_both_infinities_in_every_float_field() -> None:
    records = flat(non_finite_batches())
    assert value_space_gaps(records, non_finite=True) == []
    floated = {
        c
        for c in RECORD_TYPES
        if any(s.kind is float or s.name == "events" for s in field_specs(c))
    }
    assert {type(r) for r in records} == floated


def test_value_space_records_are_distinct_with_unique_stream_keys() -> None:
    from traceml_exporter_sdk import stream_key

    records = flat(value_space_batches())
    texts = [_text(r.to_dict()) for r in records]
    assert len(set(texts)) == len(texts)
    keys = [(r.STREAM, _text(stream_key(r))) for r in records if r.STREAM != "stdout_stderr"]
    assert len(set(keys)) == len(keys)


def test_value_space_keeps_the_contracts_rules() -> None:
    for record in flat(value_space_batches()) + flat(non_finite_batches()):
        for name, rule in RULES.items():
            value = getattr(record, name, None)
            if value is not None:
                assert rule.allows(value), (record.STREAM, name, value)


def test_value_space_reaches_int64_ends_and_float_edges_bit_for_bit() -> None:
    values = [getattr(r, "seq", None) for r in flat(value_space_batches())]
    assert INT64_MAX in values
    assert INT64_MIN in values
    peaks = [getattr(r, "peak_alloc_bytes", 1.5) for r in flat(value_space_batches())]
    for edge in FLOAT_EDGES:
        bits = struct.pack(">d", edge)
        assert any(type(p) is float and struct.pack(">d", p) == bits for p in peaks), edge


def test_batches_are_fresh_copies() -> None:
    first = value_space_batches(["step_time"])[0]
    first[1].events.clear()
    assert value_space_batches(["step_time"])[0][1].events != {}


def test_the_longest_line_is_over_one_mebibyte_of_utf8() -> None:
    assert len(LONG_LINE.encode("utf-8")) > 1 << 20
    assert not LONG_LINE.isascii()
    assert LONG_LINE in HOSTILE_TEXT


# -- a record class that changes ---------------------------------------------------------


class _Base:
    STREAM: ClassVar[str] = "step_time"
    COLUMNS: ClassVar[tuple[str, ...]] = ()


@dataclasses.dataclass(frozen=True)
class Grown(_Base):
    """step_time's fields plus a new nullable int and a new float."""

    observed_timestamp_unix_ns: int
    new_count: int | None
    new_ratio: float


Grown.COLUMNS = tuple(f.name for f in dataclasses.fields(Grown))


@dataclasses.dataclass(frozen=True)
class Unknown(_Base):
    """A field of a type the value space has no edges for."""

    observed_timestamp_unix_ns: int
    blob: bytes | None


Unknown.COLUMNS = tuple(f.name for f in dataclasses.fields(Unknown))


def test_a_new_field_of_a_known_type_is_covered_without_a_change() -> None:
    records = value_space_records([Grown])
    assert value_space_gaps(records, [Grown]) == []
    assert any(r.new_count is None for r in records)
    assert any(same_value(r.new_ratio, 5e-324) for r in records)


def test_a_new_nullable_the_records_leave_out_is_a_gap() -> None:
    records = [r for r in value_space_records([Grown]) if r.new_count is not None]
    assert value_space_gaps(records, [Grown]) == ["Grown.new_count never takes null"]


def test_a_new_field_of_an_unknown_type_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="field blob: type <class 'bytes'> has no edge values"):
        value_space_records([Unknown])
    with pytest.raises(TypeError, match="field blob: no strategy"):
        rs._record(Unknown, False)


def test_a_stats_key_the_records_leave_out_is_a_gap() -> None:
    records = flat(value_space_batches(["step_time"]))
    for record in records:
        for devices in record.events.values():
            for stats in devices.values():
                stats["n_calls"] = 1
    gaps = value_space_gaps(records, [type(records[0])])
    assert any(g.startswith("StepTimeRecord.events.n_calls never takes") for g in gaps), gaps
    assert [s.name for s in field_specs(EventStats)] == list(EventStats.__annotations__)


# -- the strategies --------------------------------------------------------------------------

DERIVED = ("local_world_size", "node_rank")
"""Identity fields computed from others, so they stay consistent (``identities()``)."""


@pytest.mark.parametrize("cls", RECORD_TYPES, ids=lambda c: c.STREAM)
def test_each_strategy_reaches_none_and_the_edges_of_every_field(cls: type) -> None:
    """From the type hints: in 600 draws, each nullable field is None, each float -0.0 and
    the largest double (either sign), each int one of int64's ends (where no contract rule
    narrows it)."""
    seen: dict[str, set[str]] = {}

    @settings(
        max_examples=600,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(rs.records([cls.STREAM]))  # type: ignore[attr-defined]
    def draw(record: Any) -> None:
        for name in record.COLUMNS:
            seen.setdefault(name, set()).add(_text(getattr(record, name)))

    draw()
    missing = []
    for spec in field_specs(cls):
        groups: list[list[Any]] = [[None]] if spec.nullable else []
        if spec.kind is float:
            groups += [[-0.0], [sys.float_info.max, -sys.float_info.max]]
        if spec.kind is int and spec.name not in RULES and spec.name not in DERIVED:
            groups += [[INT64_MAX, INT64_MIN]]
        missing += [
            f"{spec.name} never one of {[_text(v) for v in group]}"
            for group in groups
            if not any(_text(v) in seen[spec.name] for v in group)
        ]
    assert missing == []


def test_non_finite_strategies_reach_nan() -> None:
    find(
        rs.system_records(non_finite=True),
        lambda r: isinstance(r.cpu_percent, float) and math.isnan(r.cpu_percent),
        settings=settings(
            database=None, max_examples=2_000, suppress_health_check=list(HealthCheck)
        ),
    )
    assert NON_FINITE[1] != NON_FINITE[1]  # NaN


# -- the type-strict comparison ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (True, 1),
        (1.0, 1),
        (0.0, -0.0),
        (0, None),
        (math.nan, None),
        (math.nan, -math.nan),
        (float.fromhex("0x1p-1074"), 0.0),
        ({"a": 1}, {"a": 1.0}),
        ({"1": 1}, {1: 1}),
        ([1], (1.0,)),
        (2**63, float(2**63)),
    ],
)
def test_values_of_other_types_or_bits_differ(a: Any, b: Any) -> None:
    assert not same_value(a, b)
    assert not same_value(b, a)


@pytest.mark.parametrize(
    "value",
    [math.nan, -0.0, 5e-324, 10**5000, {"x": [1, None, math.inf]}, "é\u2028"],
    ids=["nan", "negative-zero", "subnormal", "huge-int", "nested", "text"],
)
def test_a_value_is_the_same_as_an_equal_copy(value: Any) -> None:
    copy = struct.unpack(">d", struct.pack(">d", value))[0] if type(value) is float else value
    assert same_value(value, copy)


def test_export_differences_name_the_first_difference() -> None:
    expected = {"system": [{"cpu_percent": 1.0, "gpu_available": 1}]}
    assert export_differences(expected, expected) == []
    got = {"system": [{"cpu_percent": 1, "gpu_available": True}]}
    assert export_differences(got, expected) == [
        "system[0]: cpu_percent: expected 1.0, got 1; gpu_available: expected 1, got true"
    ]
    assert export_differences({}, expected) == ["system: expected 1 records, got 0"]
