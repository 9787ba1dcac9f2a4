"""Fuzz ``records_from_payload``: bad input never raises and never mistypes a field.

Arbitrary JSON-like values, deep nesting, huge ints, NaN/inf, non-str keys, bytes,
and objects whose ``__str__``/``__int__``/``__float__``/``__eq__`` raise, or dicts
whose ``.get`` raises, are placed at every level (payload, item, meta, body,
tables, rows, events, GPU entries). The only exception allowed out of the mapper
is the documented ValueError for a bad ``streams``; every record it returns has
exactly the contract's type on every field (an ``int`` field never holds a
``bool`` or a float, a ``str`` field never a str subclass, and so on).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hostile import (
    DEEP_DICT,
    DEEP_LIST,
    DEEP_TUPLE,
    META_KEYS,
    OBSERVED,
    BoolInt,
    Evil,
    EvilDict,
    EvilFloat,
    EvilInt,
    EvilKey,
    EvilList,
    EvilStr,
    GetRaises,
    IntLike,
    ListLike,
    SubStr,
    WeirdStr,
    anything,
    check_batch,
    hostile_payloads,
    streams,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from traceml_exporter_sdk import (
    RECORD_TYPES,
    RecordBatch,
    StepMemoryRecord,
    StepTimeRecord,
    SystemGpuRecord,
    SystemRecord,
    records_from_payload,
)

pytestmark = pytest.mark.filterwarnings("ignore:__int__ returned non-int:DeprecationWarning")


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(hostile_payloads(), streams, st.booleans())
def test_never_raises_and_fields_keep_their_types(
    planted: tuple[Any, int], selected: set[str] | None, stamp: bool
) -> None:
    payload, plants = planted
    observed = OBSERVED if stamp else None
    batch = records_from_payload(payload, observed_timestamp_unix_ns=observed, streams=selected)
    check_batch(batch, observed)
    if selected is not None:
        assert {r.STREAM for r in batch.records} <= selected
    if plants == 0:
        # JSON-like values with ints in int64 range never make a projection fail.
        assert batch.skipped == 0
    # Units, not rows: one projection per envelope, so an item costs at most one.
    items = list.__len__(payload) if isinstance(payload, list) else 1
    assert batch.skipped <= max(items, 1)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(anything)
def test_arbitrary_values_as_the_whole_payload(payload: Any) -> None:
    check_batch(records_from_payload(payload, observed_timestamp_unix_ns=OBSERVED), OBSERVED)


@settings(max_examples=100, deadline=None)
@given(
    st.one_of(
        st.text(),
        st.binary(),
        st.just(set()),
        st.just([]),
        st.sets(st.text(max_size=3), min_size=1).filter(
            lambda names: not names <= {t.STREAM for t in RECORD_TYPES}
        ),
    )
)
def test_only_bad_streams_raise(bad: Any) -> None:
    with pytest.raises(ValueError, match="step_time"):
        records_from_payload(EvilList([1]), streams=bad)


# -- crafted cases with exact counts -----------------------------------------------------------


def env(sampler: str, table_rows: Any, meta: Any = None, table: str = "T") -> dict[str, Any]:
    base = {"global_rank": 1, "sampler": sampler}
    if meta is not None:
        base.update(meta)
    return {"meta": base, "body": {"tables": {table: table_rows}}}


STEP = {"seq": 1, "timestamp": OBSERVED, "step": 2, "events": {}}


def test_payload_list_whose_iteration_raises_counts_once() -> None:
    batch = records_from_payload(EvilList([env("StepTimeSampler", [STEP])]))
    assert batch == RecordBatch([], 1)


def test_list_subclass_payload_is_a_list_of_items() -> None:
    batch = records_from_payload(ListLike([env("StepTimeSampler", [STEP]), None]))
    assert [type(r) for r in batch.records] == [StepTimeRecord]
    assert batch.skipped == 1


@pytest.mark.parametrize(
    ("payload", "skipped"),
    [
        (DEEP_LIST, 1),
        (DEEP_DICT, 1),
        (EvilDict(), 1),
        (GetRaises(meta={}, body={}), 1),
        (Evil(), 1),
        ([Evil(), EvilDict(), 10**5000, b"x", DEEP_LIST], 5),
        ({"meta": EvilDict(), "body": {"tables": {"T": [STEP]}}}, 1),
        ({"meta": GetRaises(sampler="StepTimeSampler"), "body": {}}, 1),
        ({"meta": {"sampler": "StepTimeSampler"}, "body": EvilDict()}, 1),
        ({"meta": {"sampler": "StepTimeSampler"}, "body": GetRaises(tables={})}, 1),
        ({"meta": {"sampler": Evil()}, "body": {"tables": {"T": [STEP]}}}, 0),
        ({"meta": {"sampler": EvilStr("StepTimeSampler")}, "body": {"tables": {"T": [STEP]}}}, 0),
        ({"meta": {"sampler": EvilInt(1)}, "body": {"tables": {"T": [STEP]}}}, 0),
    ],
    ids=lambda value: type(value).__name__,
)
def test_hostile_items(payload: Any, skipped: int) -> None:
    batch = records_from_payload(payload, observed_timestamp_unix_ns=OBSERVED)
    assert batch == RecordBatch([], skipped)


@pytest.mark.parametrize(
    "value",
    [Evil(), EvilInt(3), EvilFloat(3.0), EvilStr("x"), DEEP_LIST, float("nan")],
    ids=lambda value: type(value).__name__,
)
def test_hostile_meta_values_are_best_effort(value: Any) -> None:
    meta = dict.fromkeys(META_KEYS, value)
    batch = records_from_payload(env("StepTimeSampler", [STEP], meta), observed_timestamp_unix_ns=1)
    assert batch.skipped == 0
    (record,) = batch.records
    check_batch(batch, 1)
    assert record.rank is None
    assert record.global_rank is None
    assert record.world_size is None


def test_meta_values_that_convert() -> None:
    meta = {"global_rank": IntLike(), "local_rank": BoolInt(), "hostname": WeirdStr(), "rank": b"4"}
    batch = records_from_payload(env("StepTimeSampler", [STEP], meta), observed_timestamp_unix_ns=1)
    check_batch(batch, 1)
    (record,) = batch.records
    assert (record.rank, record.global_rank) == (7, 7)
    assert record.local_rank in (1, None)  # int() of a bool-returning __int__: 1, or refused
    assert record.hostname == "weird"
    meta = {"global_rank": None, "rank": b"4", "hostname": b"h"}
    (record,) = records_from_payload(env("StepTimeSampler", [STEP], meta)).records
    assert (record.rank, record.hostname) == (4, "b'h'")


@pytest.mark.parametrize(
    ("sampler", "row"),
    [
        ("StepTimeSampler", {**STEP, "seq": EvilInt(1)}),
        ("StepTimeSampler", {**STEP, "timestamp": EvilInt(1)}),
        ("StepTimeSampler", {**STEP, "events": {EvilKey("x"): {"cpu": {}}}}),
        ("StepTimeSampler", {**STEP, "events": {"e": {Evil(): {}}}}),
        ("StepTimeSampler", {**STEP, "events": {"e": {"cpu": {"cpu_ms": 10**400}}}}),
        ("StepTimeSampler", {**STEP, "events": {"e": {"cpu": {"gpu_ms": EvilFloat(1.0)}}}}),
        ("StepTimeSampler", {**STEP, "events": {"e": {"cpu": GetRaises()}}}),
        ("StepTimeSampler", {**STEP, "events": {DEEP_TUPLE: {"cpu": {}}}}),
        ("StepTimeSampler", {EvilKey("seq"): 1, "step": 2}),
        ("StepTimeSampler", {**STEP, "events": {"e": {"cpu": {EvilKey("cpu_ms"): 1.0}}}}),
        ("StepTimeSampler", GetRaises(STEP)),
        ("StepMemorySampler", {"device": EvilStr("cuda:0")}),
        ("StepMemorySampler", {"peak_alloc": -(10**400)}),
        ("SystemSampler", {"gpus": [[10**400, 0, 0, 0, 0, 0]]}),
        ("SystemSampler", {"gpus": [[EvilFloat(1.0), 0, 0, 0, 0, 0]]}),
        ("SystemSampler", {"cpu": EvilInt(2)}),
        ("ProcessSampler", {"gpu": GetRaises()}),
        ("ProcessSampler", {"gpu": {"device": EvilInt(0)}}),
        ("ProcessSampler", {"ram_total": 10**400}),
        ("Stdout/Stderr", {"line": Evil()}),
        ("Stdout/Stderr", {"line": DEEP_LIST}),
    ],
)
def test_raising_projection_loses_the_envelope_and_counts_once(sampler: str, row: Any) -> None:
    good = env(sampler, [{"line": "ok", "gpus": [], **STEP}])
    bad = env(sampler, [{"line": "ok", **STEP}, row])
    batch = records_from_payload([good, bad, good], observed_timestamp_unix_ns=OBSERVED)
    check_batch(batch, OBSERVED)
    alone = records_from_payload(good, observed_timestamp_unix_ns=OBSERVED)
    assert batch.records == alone.records * 2
    assert batch.skipped == 1


def test_runtime_environment_is_best_effort_row_by_row() -> None:
    row = {
        "ts": 5,
        "seq": Evil(),
        "topology": Evil(),
        "distributed_initialized": Evil(),
        "distributed_backend": DEEP_LIST,
        "training_strategy": WeirdStr(),
        "strategy_source": 10**5000,
        "strategy_confidence": float("nan"),
    }
    item = env("RuntimeEnvironmentSampler", [row], table="RuntimeEnvironmentTable")
    batch = records_from_payload(item, observed_timestamp_unix_ns=1)
    check_batch(batch, 1)
    (record,) = batch.records
    assert batch.skipped == 0
    assert (record.timestamp_unix_ns, record.seq) == (5, None)
    assert (record.topology, record.distributed_initialized) == (None, None)
    assert record.distributed_backend is None
    assert record.training_strategy == "weird"
    assert record.strategy_source == _str_or_none(10**5000)  # Python's int-to-str limit
    assert record.strategy_confidence == "nan"


def _str_or_none(value: Any) -> str | None:
    try:
        return str(value)
    except ValueError:
        return None


def test_tables_mapping_whose_get_raises() -> None:
    # Rows are read through .values(), so only the runtime sampler (tables.get) fails.
    tables = GetRaises(T=[STEP])
    batch = records_from_payload(
        [
            {"meta": {"sampler": "StepTimeSampler"}, "body": {"tables": tables}},
            {"meta": {"sampler": "RuntimeEnvironmentSampler"}, "body": {"tables": tables}},
        ],
        observed_timestamp_unix_ns=1,
    )
    assert [type(r) for r in batch.records] == [StepTimeRecord]
    assert batch.skipped == 1


def test_non_str_keys_and_values_are_stringified() -> None:
    events = {
        (1, 2): {None: {"cpu_ms": 1}},
        b"name": {1.5: {"n_calls": True}},
        WeirdStr(): {SubStr("cuda:0"): {"is_gpu": True}},
        float("nan"): {"cpu": {"duration_ms": float("inf")}},
    }
    batch = records_from_payload(env("StepTimeSampler", [{**STEP, "events": events}]))
    check_batch(batch, None)
    (record,) = batch.records
    assert list(record.events) == ["(1, 2)", "b'name'", "weird", "nan"]
    assert record.events["(1, 2)"]["None"]["cpu_ms"] == 1.0
    assert record.events["b'name'"]["1.5"]["n_calls"] == 1
    assert record.events["weird"]["cuda:0"]["is_gpu"] is True
    assert math.isinf(record.events["nan"]["cpu"]["duration_ms"])


def test_str_subclasses_become_plain_str() -> None:
    row = {"device": SubStr("cuda:0"), "seq": 1}
    (record,) = records_from_payload(
        env("StepMemorySampler", [row], {"hostname": SubStr("h")})
    ).records
    assert type(record.device) is str
    assert type(record.hostname) is str
    lines = records_from_payload(
        env("Stdout/Stderr", [{"line": SubStr("x")}, {"line": WeirdStr()}])
    )
    assert [line.line for line in lines.records] == ["x", "weird"]
    assert [type(line.line) for line in lines.records] == [str, str]


def test_huge_and_special_numbers_keep_their_types() -> None:
    gpus = [[float("nan"), float("inf"), -float("inf"), -0.0, True, 2**64]]
    row = {"seq": 2**64, "ts": 2**80, "cpu": True, "gpu_count": False, "gpus": gpus}
    batch = records_from_payload(env("SystemSampler", [row]), observed_timestamp_unix_ns=1)
    check_batch(batch, 1)
    system, gpu = batch.records
    assert isinstance(system, SystemRecord)
    assert isinstance(gpu, SystemGpuRecord)
    assert (system.seq, system.timestamp_unix_ns, system.cpu_percent, system.gpu_count) == (
        2**64,
        2**80,
        1.0,
        0,
    )
    assert math.isnan(gpu.util)
    assert (gpu.power_usage_w, gpu.power_limit_w) == (1.0, float(2**64))
    memory = records_from_payload(
        env("StepMemorySampler", [{"step": True, "peak_alloc": 10**300}]),
        observed_timestamp_unix_ns=1,
    ).records
    assert isinstance(memory[0], StepMemoryRecord)
    assert memory[0].step == 1
    assert type(memory[0].step) is int
    assert memory[0].peak_alloc_bytes == 1e300
