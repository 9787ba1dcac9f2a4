"""The mapper's fast path (fast_builders.py) against its careful path (projection.py).

``records_from_payload`` builds each envelope with the per-table fast builder and
falls back to the careful projection when that raises. With the fast builders
switched off, the careful path alone must give the same records (compared by
type and value, field by field, NaN equal to itself)
and the same skipped count, for the differential test's payloads and the fuzz
test's hostile ones.
"""

from __future__ import annotations

import copy
import importlib
from typing import Any

import pytest
from hostile import hostile_payloads
from hostile import streams as hostile_streams
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from near_typed import (
    both,
    careful_only,
    key,
    near_typed_envelopes,
)
from oracle import payloads
from traceml_exporter_sdk import records_from_payload
from traceml_exporter_sdk._build.fast_builders import FAST_BUILDERS
from traceml_exporter_sdk.testing import load_corpus

pytestmark = pytest.mark.filterwarnings("ignore:__int__ returned non-int:DeprecationWarning")
mapping_module = importlib.import_module("traceml_exporter_sdk.mapping")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(near_typed_envelopes(), min_size=1, max_size=3))
def test_fast_equals_careful_on_near_typed_payloads(payload: Any) -> None:
    fast, careful = both(payload)
    assert fast == careful


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads)
def test_fast_equals_careful_on_differential_payloads(payload: Any) -> None:
    fast, careful = both(payload)
    assert fast == careful


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), hostile_streams)
def test_fast_equals_careful_on_hostile_payloads(data: st.DataObject, streams: Any) -> None:
    try:
        payload, _ = data.draw(hostile_payloads())
        twin = copy.deepcopy(payload)
    except Exception:
        reject()  # a planted object that breaks drawing or copying: nothing to compare
    fast = records_from_payload(payload, observed_timestamp_unix_ns=1, streams=streams)
    with careful_only():
        careful = records_from_payload(twin, observed_timestamp_unix_ns=1, streams=streams)
    assert key(fast.records) == key(careful.records)
    assert fast.skipped == careful.skipped


def test_fast_path_builds_the_corpus_without_falling_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Well-typed payloads of a sampler with a fast builder never reach the careful path
    (runtime_environment and stdout_stderr have none: ``bench_fastpath.py``)."""

    payloads = load_corpus()
    for payload in payloads:
        fast, careful_result = both(payload)
        assert fast == careful_result

    real = mapping_module._careful

    def careful(projection: Any, *rest: Any) -> int:
        if projection.sampler in FAST_BUILDERS:
            raise AssertionError(f"{projection.sampler} fell back to the careful path")
        return real(projection, *rest)

    monkeypatch.setattr(mapping_module, "_careful", careful)
    batches = [records_from_payload(p, observed_timestamp_unix_ns=1) for p in payloads]
    assert {r.STREAM for b in batches for r in b.records} == {
        "step_time", "step_memory", "system", "system_gpu", "process", "runtime_environment",
        "stdout_stderr",
    }  # fmt: skip


def test_partial_system_selection_keeps_only_the_selected_stream() -> None:
    payload = {
        "meta": {"sampler": "SystemSampler", "global_rank": 0},
        "body": {"tables": {"T": [{"seq": 1, "gpus": [[1.0] * 6, [2.0] * 6]}]}},
    }
    for streams in ({"system"}, {"system_gpu"}, {"system", "system_gpu"}):
        fast, careful = both(payload, streams)
        assert fast == careful
        assert fast[0]
