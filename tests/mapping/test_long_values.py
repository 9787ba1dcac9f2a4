"""Issue 9 item 15: integers past Python's int-to-text limit, and event keys that collide.

- A 5,000-digit integer can reach a record only from a caller's own Python payload
  (JSON, msgpack and SQLite decoders refuse one). The mapper keeps it, as it keeps
  every int, and the jsonl exporter writes it exactly instead of raising.
- Two event names (or devices) that stringify alike keep TraceML 0.5.0's outcome,
  the later replacing the earlier: records equal the rows 0.5.0 writes
  (docs/runtime.md, "Other choices where the contract is silent").
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from oracle import assert_matches_reference, reference
from traceml_exporter_sdk import ExporterContext, JsonlExporter, records_from_payload
from traceml_exporter_sdk.jsonl import encode_line

HUGE = 10**5000 + 987_654_321
STATS = {"is_gpu": False, "duration_ms": 1.0, "cpu_ms": 1.0, "gpu_ms": None, "n_calls": 1}


@contextmanager
def no_digit_limit() -> Iterator[None]:
    """Reading the lines back needs the allowance the writer does without."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(limit)


def step(events: Any, timestamp: Any = 1, rank: Any = 0) -> dict[str, Any]:
    return {
        "meta": {"global_rank": rank, "sampler": "StepTimeSampler"},
        "body": {
            "tables": {"T": [{"seq": 0, "timestamp": timestamp, "step": 1, "events": events}]}
        },
    }


def test_encode_line_writes_an_integer_past_the_digit_limit_exactly() -> None:
    data = {"a": HUGE, "b": [-HUGE, 2**70], "c": "\x00long-int-0", "d": float("inf")}
    line = encode_line(data)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    with no_digit_limit():
        assert json.loads(line) == {**data, "d": None}


def test_long_integers_reach_the_jsonl_file_exactly(tmp_path: Path) -> None:
    payload = step({"fwd": {"cpu": {**STATS, "n_calls": HUGE}}}, timestamp=-HUGE, rank=HUGE)
    batch = records_from_payload(payload, observed_timestamp_unix_ns=1)
    assert batch.skipped == 0
    context = ExporterContext.create(tmp_path, "step_time", True)
    exporter = JsonlExporter(context)
    exporter.open()
    exporter.write(batch.records)
    exporter.close()
    lines = (context.export_dir / "step_time.jsonl").read_bytes().splitlines()
    with no_digit_limit():
        [record] = [json.loads(line) for line in lines[:-1]]
    assert record["timestamp_unix_ns"] == -HUGE
    assert record["rank"] == record["global_rank"] == HUGE
    assert record["events"]["fwd"]["cpu"]["n_calls"] == HUGE
    assert json.loads(lines[-1])["written_records"] == 1


@pytest.mark.parametrize(
    "events",
    [
        {1: {"cpu": STATS}, "1": {}},  # the later spelling has no device: the name goes
        {1: {"cpu": STATS}, "1": {"cuda:0": STATS}},  # the later one replaces the earlier
        {"1": {"cpu": STATS}, 1: {"cpu": "not stats"}},
        {"fwd": {0: STATS, "0": {**STATS, "n_calls": 2}}},  # devices: the later wins
        {"fwd": {"0": STATS, 0: "not stats"}},  # a passed-over device replaces nothing
    ],
    ids=["name-emptied", "name-replaced", "name-not-stats", "device-replaced", "device-skipped"],
)
def test_colliding_event_keys_match_traceml_0_5_0(events: dict[Any, Any]) -> None:
    payload = step(events)
    assert reference(payload)[1] == 0
    assert_matches_reference(payload)


def test_colliding_event_name_drops_the_earlier_event() -> None:
    """The decision pinned: a valid earlier event is gone when the later spelling is empty."""
    [record] = records_from_payload(
        step({1: {"cpu": STATS}, "1": {}}), observed_timestamp_unix_ns=1
    ).records
    assert record.events == {}
