"""Payloads whose values are near their fields' types (subclasses, ints for floats) for the
fast path against the careful one, and ``canon``/``key`` to compare records."""

from __future__ import annotations

import copy
import importlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import strategies as st
from oracle import EVENT_NAMES
from traceml_exporter_sdk import records_from_payload

mapping_module = importlib.import_module("traceml_exporter_sdk.mapping")


@contextmanager
def careful_only() -> Iterator[None]:
    fast = mapping_module._FAST
    mapping_module._FAST = {}
    try:
        yield
    finally:
        mapping_module._FAST = fast


ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def canon(value: Any) -> Any:
    """A comparable form that tells 1 from 1.0 and True from 1 and keeps NaN equal to NaN."""
    if isinstance(value, dict):
        return [(canon(k), canon(v)) for k, v in value.items()]
    if type(value) is float and value != value:
        return (float, "nan")
    if type(value) is str:  # str() of a planted object: its copy has another address
        return (str, ADDRESS.sub("", value))
    return (type(value), value)


def key(records: list[Any]) -> list[Any]:
    return [(type(r), [canon(getattr(r, name)) for name in r.COLUMNS]) for r in records]


def both(payload: Any, streams: Any = None) -> tuple[Any, Any]:
    twin = copy.deepcopy(payload)
    fast = records_from_payload(payload, observed_timestamp_unix_ns=1, streams=streams)
    with careful_only():
        careful = records_from_payload(twin, observed_timestamp_unix_ns=1, streams=streams)
    return (key(fast.records), fast.skipped), (
        key(careful.records),
        careful.skipped,
    )


class IntSub(int):
    pass


class FloatSub(float):
    pass


class StrSub(str):
    pass


# Values next to each field's exact type: what the fast path must hand to the careful one.
near = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0.0, 1.0, -0.0]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "7", "cuda:0", 10**400, IntSub(3), FloatSub(2.5), StrSub("cpu")]),
)
stats = st.fixed_dictionaries(
    {},
    optional=dict.fromkeys(["is_gpu", "duration_ms", "cpu_ms", "gpu_ms", "n_calls", "x"], near),
)
event_maps = st.dictionaries(
    st.sampled_from([*EVENT_NAMES, "0", ""]),
    st.dictionaries(st.sampled_from(["cpu", "cuda:0", "1"]), stats, max_size=3),
    max_size=5,
)
ROW_KEYS = {
    "StepTimeSampler": ["seq", "timestamp", "step"],
    "StepMemorySampler": ["seq", "ts", "device", "step", "peak_alloc", "peak_resv"],
    "SystemSampler": ["seq", "ts", "cpu", "ram_used", "ram_total", "gpu_available", "gpu_count"],
    "ProcessSampler": [
        "seq",
        "ts",
        "cpu",
        "cpu_cores",
        "ram_used",
        "ram_total",
        "gpu_available",
        "gpu_count",
    ],
}


@st.composite
def near_typed_envelopes(draw: st.DrawFn) -> dict[str, Any]:
    """Envelopes of the right shape whose values are exact types or their neighbours."""
    sampler = draw(st.sampled_from(sorted(ROW_KEYS)))
    meta = draw(
        st.fixed_dictionaries(
            {"sampler": st.just(sampler)},
            optional=dict.fromkeys(
                ["rank", "global_rank", "local_rank", "world_size", "node_rank", "hostname"], near
            ),
        )
    )
    extra: dict[str, Any] = {}
    if sampler == "StepTimeSampler":
        extra["events"] = event_maps
    elif sampler == "SystemSampler":
        extra["gpus"] = st.lists(st.lists(near, min_size=5, max_size=7), max_size=3)
    elif sampler == "ProcessSampler":
        extra["gpu"] = st.one_of(
            near,
            st.fixed_dictionaries(
                {},
                optional=dict.fromkeys(["device", "mem_used", "mem_reserved", "mem_total"], near),
            ),
        )
    row = st.fixed_dictionaries({}, optional={**dict.fromkeys(ROW_KEYS[sampler], near), **extra})
    return {"meta": meta, "body": {"tables": {"T": draw(st.lists(row, max_size=4))}}}
