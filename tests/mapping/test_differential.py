"""Differential test: the SDK's records against traceml-ai 0.5.0's own projection.

For hypothesis-generated payloads, ``records_from_payload`` must give, per
envelope and in the same order, one record per row that 0.5.0's
``normalize_telemetry_envelope`` + ``sqlite_writers.<name>.build_rows`` give, with
every field equal to the row's column, except the two differences the contract
documents:

- time: the row's ``sample_ts_s`` keeps float seconds; the record's
  ``timestamp_unix_ns`` is the raw value when that is an ``int`` (not ``bool``),
  else None;
- events: the row's ``events_json`` text equals the record's ``events`` after
  ``json.loads`` (NaN-aware).

Known divergences, kept out of the generated payloads (ints stay in
``|x| < 2**63``) and pinned by the two ``test_divergence_*`` tests below:

- an int above ~1e308 in a *time* field makes 0.5.0's ``float()`` raise, so
  0.5.0 loses the envelope, while the SDK keeps the integer nanoseconds;
- an int of more than 4300 digits in an event's ``n_calls`` makes 0.5.0's
  ``json.dumps`` raise (Python's int-to-str limit), so 0.5.0 loses the envelope,
  while the SDK's map keeps the int.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import (
    EVENT_NAMES,
    OBSERVED,
    RENAMED,
    ROWS,
    SAMPLERS,
    WRITERS,
    assert_matches_reference,
    payloads,
    reference,
    same,
)
from payloads import meta
from traceml_exporter_sdk import records_from_payload
from traceml_exporter_sdk._build.projection import TABLE_RECORDS


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads)
def test_records_match_traceml_0_5_0(payload: Any) -> None:
    assert_matches_reference(payload)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(SAMPLERS), min_size=1, max_size=4), st.data())
def test_well_formed_envelopes_match_traceml_0_5_0(kinds: list[str], data: st.DataObject) -> None:
    """Envelopes of the right shape (canonical, one table, rows of their sampler)."""
    payload = []
    for kind in kinds:
        # each rank field drawn on its own: the projection must not assume they agree
        rank_meta = meta(
            sampler=kind,
            rank=data.draw(st.integers(0, 63)),
            global_rank=data.draw(st.integers(0, 63)),
            local_rank=data.draw(st.integers(0, 7)),
            world_size=64,
            ranks_per_node=8,
            node_rank=data.draw(st.integers(0, 7)),
            hostname=data.draw(st.sampled_from(["node-0", "node-1"])),
            pid=data.draw(st.integers(1, 2**22)),
            timestamp=data.draw(st.one_of(st.integers(0, 2**62), st.floats(1.6e9, 1.8e9))),
        )
        table = "RuntimeEnvironmentTable" if kind == "RuntimeEnvironmentSampler" else kind
        rows = data.draw(st.lists(ROWS[kind], max_size=4))
        payload.append({"meta": rank_meta, "body": {"tables": {table: rows}}})
    assert_matches_reference(payload)


# -- fixed cases --------------------------------------------------------------------------------


def test_reference_columns_are_the_record_fields() -> None:
    """Each record's COLUMNS are 0.5.0's SQLite columns minus id, with the three renames."""
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        for writer in WRITERS:
            writer.init_schema(conn)
        for table, record_type in TABLE_RECORDS.items():
            columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
            assert columns[0] == "id"
            assert tuple(RENAMED.get(c, c) for c in columns[1:]) == record_type.COLUMNS, table


def test_realistic_payload_matches() -> None:
    def stats(ms: float) -> dict[str, Any]:
        return {"is_gpu": False, "duration_ms": ms, "cpu_ms": ms, "gpu_ms": None, "n_calls": 1}

    payload = []
    for rank in range(2):
        shape: dict[str, Any] = {
            "rank": rank,
            "world_size": 2,
            "hostname": "host",
            "pid": 100 + rank,
        }
        payload += [
            {
                "meta": meta(sampler="StepTimeSampler", timestamp=1.7e9, **shape),
                "body": {
                    "tables": {
                        "StepTimeTable": [
                            {
                                "seq": 3,
                                "timestamp": 1_700_000_000_000_000_000 + step,
                                "step": step,
                                "events": {name: {"cpu": stats(1.5)} for name in EVENT_NAMES},
                            }
                            for step in range(3)
                        ]
                    }
                },
            },
            {
                "meta": meta(sampler="SystemSampler", timestamp=1.7e9, **shape),
                "body": {
                    "tables": {
                        "SystemTable": [
                            {
                                "seq": 1,
                                "ts": 1.7e9,
                                "cpu": 12.0,
                                "ram_used": 1e9,
                                "ram_total": 2e9,
                                "gpu_available": False,
                                "gpu_count": 0,
                                "gpus": [],
                            }
                        ]
                    }
                },
            },
        ]
    expected, _ = reference(payload)
    assert len(expected) == 8
    assert_matches_reference(payload)


def _step_envelope(timestamp: Any, n_calls: Any) -> dict[str, Any]:
    return {
        "meta": {"global_rank": 0, "sampler": "StepTimeSampler"},
        "body": {
            "tables": {
                "StepTimeTable": [
                    {
                        "seq": 0,
                        "timestamp": timestamp,
                        "step": 1,
                        "events": {EVENT_NAMES[0]: {"cpu": {"n_calls": n_calls}}},
                    }
                ]
            }
        },
    }


def test_divergence_huge_int_time() -> None:
    """Documented: 0.5.0's float() overflows on an int time above ~1e308; the SDK keeps it."""
    payload = _step_envelope(10**400, 1)
    assert reference(payload) == ([], 1)
    batch = records_from_payload(payload, observed_timestamp_unix_ns=OBSERVED)
    assert batch.skipped == 0
    assert batch.records[0].timestamp_unix_ns == 10**400


def test_divergence_huge_int_n_calls() -> None:
    """Documented: 0.5.0's json.dumps refuses an int over 4300 digits; the SDK's map keeps it."""
    huge = 10**5000
    payload = _step_envelope(0, huge)
    assert reference(payload) == ([], 1)
    batch = records_from_payload(payload, observed_timestamp_unix_ns=OBSERVED)
    assert batch.skipped == 0
    assert batch.records[0].events[EVENT_NAMES[0]]["cpu"]["n_calls"] == huge


def test_comparison_catches_differences() -> None:
    """The oracle is not vacuous: a changed field or count fails it."""
    assert not same(1, 1.0)
    assert not same(True, 1)
    assert same(float("nan"), float("nan"))
    assert not same({"a": 1.0}, {"a": None})
    payload = _step_envelope(5, 1)
    rows, skipped = reference(payload)
    assert skipped == 0
    assert len(rows) == 1
    assert rows[0][1][8] == 5.0  # sample_ts_s keeps float seconds
