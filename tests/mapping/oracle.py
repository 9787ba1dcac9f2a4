"""traceml-ai 0.5.0's own projection as the oracle (``reference``, ``assert_matches_reference``),
and hypothesis strategies of payloads in the shape of the wire format (``payloads``, ``events``)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from hypothesis import strategies as st
from traceml_ai.aggregator.sqlite_writers import (
    process,
    runtime_environment,
    stdout_stderr,
    step_memory,
    step_time,
    system,
)
from traceml_ai.telemetry.envelope import normalize_telemetry_envelope
from traceml_exporter_sdk import records_from_payload
from traceml_exporter_sdk._build.projection import TABLE_RECORDS

# TraceML's writer order (aggregator/sqlite_writer.py _PROJECTION_WRITERS).
WRITERS: list[ModuleType] = [
    runtime_environment,
    system,
    process,
    step_time,
    step_memory,
    stdout_stderr,
]
OBSERVED = 1_700_000_000_123_456_789
BEST_EFFORT_TIME = {runtime_environment, stdout_stderr}  # float() in a try, not isinstance
RENAMED = {
    "recv_ts_ns": "observed_timestamp_unix_ns",
    "sample_ts_s": "timestamp_unix_ns",
    "events_json": "events",
}
EVENT_NAMES = [
    "_traceml_internal:dataloader_next",
    "_traceml_internal:forward_time",
    "_traceml_internal:backward_time",
    "_traceml_internal:optimizer_step",
    "_traceml_internal:step_time",
]
SAMPLERS = [
    "RuntimeEnvironmentSampler",
    "SystemSampler",
    "ProcessSampler",
    "StepTimeSampler",
    "StepMemorySampler",
    "Stdout/Stderr",
]
TABLE_NAMES = [
    "StepTimeTable",
    "step_memory",
    "SystemTable",
    "ProcessTable",
    "RuntimeEnvironmentTable",
    "stdout_stderr",
]


# -- the reference: 0.5.0's aggregator loop, with losses counted ---------------------------


def _raw_meta(item: Mapping[Any, Any]) -> Mapping[Any, Any]:
    meta, body = item.get("meta"), item.get("body")
    if isinstance(meta, Mapping) and isinstance(body, Mapping):
        return meta
    return item


def _dict_rows(tables: Any) -> list[dict[Any, Any]]:
    if not isinstance(tables, dict):
        return []
    return [
        r for rows in tables.values() if isinstance(rows, list) for r in rows if isinstance(r, dict)
    ]


def _raw_times(writer: ModuleType, item: Mapping[Any, Any], tables: Any) -> dict[str, list[Any]]:
    """The raw source time of each row ``writer`` builds, per table, in its order."""
    if writer is runtime_environment:
        rows = tables.get("RuntimeEnvironmentTable") if isinstance(tables, dict) else None
        rows = rows if isinstance(rows, list) else []
        return {"runtime_environment": [r.get("ts") for r in rows if isinstance(r, dict)]}
    if writer is stdout_stderr:
        raw = _raw_meta(item).get("timestamp")
        kept = [r for r in _dict_rows(tables) if r.get("line") is not None and str(r.get("line"))]
        return {"stdout_stderr_samples": [raw] * len(kept)}
    if writer is system:
        rows = _dict_rows(tables)
        gpus = [
            r.get("ts")
            for r in rows
            if isinstance(r.get("gpus"), list)
            for g in r["gpus"]
            if isinstance(g, list) and len(g) >= 6
        ]
        return {"system_samples": [r.get("ts") for r in rows], "system_gpu_samples": gpus}
    key = "timestamp" if writer is step_time else "ts"
    table = {process: "process_samples", step_memory: "step_memory_samples"}.get(
        writer, "step_time_samples"
    )
    return {table: [r.get(key) for r in _dict_rows(tables)]}


def reference(payload: Any) -> tuple[list[tuple[str, tuple[Any, ...], Any]], int]:
    """``[(table, row, raw source time)]`` and the skipped units, as 0.5.0 would lose them."""
    items = payload if isinstance(payload, list) else [payload]
    out: list[tuple[str, tuple[Any, ...], Any]] = []
    skipped = 0
    for item in items:
        try:
            envelope = normalize_telemetry_envelope(item)
        except Exception:
            skipped += 1
            continue
        if envelope is None:
            skipped += 1
            continue
        for writer in WRITERS:
            if not writer.accepts_sampler(envelope.meta.sampler):
                continue
            try:
                rows_by_table = writer.build_rows(envelope, OBSERVED)
            except Exception:
                skipped += 1
                continue
            raw_times = _raw_times(writer, item, envelope.tables)
            for table, rows in rows_by_table.items():
                assert len(rows) == len(raw_times[table]), table
                out.extend(
                    (table, row, raw) for row, raw in zip(rows, raw_times[table], strict=True)
                )
    return out, skipped


# -- comparison --------------------------------------------------------------------------------


def same(a: Any, b: Any) -> bool:
    """Equal and of the same type all the way down, with NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def _reference_seconds(writer_table: str, raw: Any) -> Any:
    """What 0.5.0 stores in ``sample_ts_s`` for the raw time (checks our alignment)."""
    if writer_table in ("runtime_environment", "stdout_stderr_samples"):
        try:
            return float(raw) if raw is not None else None
        except Exception:
            return None
    return float(raw) if isinstance(raw, (int, float)) else None


def assert_matches_reference(payload: Any) -> None:
    expected, expected_skipped = reference(payload)
    batch = records_from_payload(payload, observed_timestamp_unix_ns=OBSERVED)
    tables = {record_type: table for table, record_type in TABLE_RECORDS.items()}
    assert [tables[type(r)] for r in batch.records] == [table for table, _, _ in expected]
    for record, (table, row, raw) in zip(batch.records, expected, strict=True):
        assert len(record.COLUMNS) == len(row), table
        for name, column in zip(record.COLUMNS, row, strict=True):
            value = getattr(record, name)
            if name == "timestamp_unix_ns":
                assert same(column, _reference_seconds(table, raw)), (table, raw, column)
                wanted = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
                assert same(value, wanted), (table, name, raw, value)
            elif name == "events":
                assert same(value, json.loads(column)), (value, column)
            else:
                assert same(value, column), (table, name, value, column)
    assert batch.skipped == expected_skipped


# -- strategies ----------------------------------------------------------------------------------


def pick(*options: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, chosen with the given weights.

    ``st.one_of`` flattens nested ``one_of``s and picks a branch uniformly, so a
    branch like ``mixed`` (itself many branches) would crowd out the rest.
    """
    choices = [strategy for weight, strategy in options for _ in range(weight)]
    return st.sampled_from(choices).flatmap(lambda strategy: strategy)


INT64 = st.integers(-(2**63) + 1, 2**63 - 1)
small_ints = st.integers(-3, 70)
ints = pick((3, small_ints), (1, INT64))
floats = st.floats(allow_nan=True, allow_infinity=True)
digits = st.from_regex(r"-?[0-9]{1,3}", fullmatch=True)
texts = st.text(max_size=4)
scalars = st.one_of(st.none(), ints, floats, st.booleans(), texts, digits)
mixed = pick(
    (6, scalars),
    (1, st.lists(small_ints, max_size=2)),
    (1, st.dictionaries(texts, small_ints, max_size=1)),
)
numbers = pick((2, st.none()), (3, ints), (3, floats), (1, st.booleans()), (1, mixed))
times = pick(
    (1, st.none()),
    (2, st.integers(0, 2**62)),
    (2, st.integers(1_600_000_000 * 10**9, 1_800_000_000 * 10**9)),
    (2, st.floats(1.6e9, 1.8e9)),
    (1, floats),
    (1, st.booleans()),
    (1, digits),
    (1, mixed),
)
bool01 = pick((3, st.booleans()), (1, st.none()), (1, st.integers(0, 1)), (1, mixed))
meta_values = pick(
    (2, st.none()),
    (4, small_ints),
    (2, digits),
    (1, floats),
    (1, st.booleans()),
    (1, texts),
    (1, mixed),
)


def optional_keys(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


stats = optional_keys(
    is_gpu=pick((3, st.booleans()), (1, st.none()), (1, st.integers(0, 1)), (1, mixed)),
    duration_ms=numbers,
    cpu_ms=numbers,
    gpu_ms=numbers,
    n_calls=pick((2, st.integers(0, 3)), (2, numbers)),
    extra=mixed,
)
devices = st.dictionaries(
    pick((4, st.sampled_from(["cuda:0", "cpu", "0"])), (1, st.integers(0, 2)), (1, st.none())),
    pick((5, stats), (1, mixed)),
    max_size=2,
)
events = pick(
    (
        6,
        st.dictionaries(
            pick(
                (5, st.sampled_from(EVENT_NAMES)),
                (1, st.integers(0, 2)),
                (1, st.sampled_from(["0", "1"])),
                (1, texts),
            ),
            pick((5, devices), (1, mixed)),
            max_size=5,
        ),
    ),
    (1, mixed),
)
gpu_entries = pick(
    (4, st.lists(numbers, min_size=6, max_size=7)),
    (1, st.lists(numbers, min_size=4, max_size=7)),
    (1, mixed),
)

ROWS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "StepTimeSampler": optional_keys(
        seq=numbers, timestamp=times, ts=times, step=numbers, events=events
    ),
    "StepMemorySampler": optional_keys(
        seq=numbers,
        ts=times,
        device=pick((3, st.sampled_from(["cuda:0", "cpu"])), (1, mixed)),
        step=numbers,
        peak_alloc=numbers,
        peak_resv=numbers,
    ),
    "SystemSampler": optional_keys(
        seq=numbers,
        ts=times,
        cpu=numbers,
        ram_used=numbers,
        ram_total=numbers,
        gpu_available=bool01,
        gpu_count=numbers,
        gpus=pick((5, st.lists(gpu_entries, max_size=5)), (1, mixed)),
    ),
    "ProcessSampler": optional_keys(
        seq=numbers,
        ts=times,
        pid=numbers,
        cpu=numbers,
        cpu_cores=numbers,
        ram_used=numbers,
        ram_total=numbers,
        gpu_available=bool01,
        gpu_count=numbers,
        gpu=pick(
            (2, st.none()),
            (
                3,
                optional_keys(
                    device=numbers, mem_used=numbers, mem_reserved=numbers, mem_total=numbers
                ),
            ),
            (1, mixed),
        ),
    ),
    "RuntimeEnvironmentSampler": optional_keys(
        ts=times,
        seq=pick((3, numbers), (1, digits)),
        topology=pick(
            (3, st.sampled_from(["single_process", "single_node_multi_process"])), (1, mixed)
        ),
        distributed_initialized=bool01,
        distributed_backend=pick((3, st.just("gloo")), (1, mixed)),
        training_strategy=pick((3, st.just("ddp")), (1, mixed)),
        strategy_source=pick((3, st.just("runtime_model")), (1, mixed)),
        strategy_confidence=mixed,
    ),
    "Stdout/Stderr": optional_keys(
        line=pick(
            (1, st.none()),
            (1, st.just("")),
            (3, st.sampled_from([" ", "\n", "\t", " \n", "0"])),
            (5, st.text(max_size=8)),
            (1, mixed),
        )
    ),
}


@st.composite
def envelopes(draw: st.DrawFn) -> Any:
    """One payload item: mostly a canonical or flat envelope of one sampler's rows."""
    kind = draw(st.sampled_from(SAMPLERS))
    sampler = draw(
        pick(
            (12, st.just(kind)),
            (1, st.sampled_from(SAMPLERS)),
            (1, st.sampled_from(["UnknownSampler", ""])),
            (1, meta_values),
        )
    )
    rows = pick((8, ROWS[kind]), (1, ROWS[draw(st.sampled_from(SAMPLERS))]), (1, mixed))
    if kind == "RuntimeEnvironmentSampler":
        names = pick((4, st.just("RuntimeEnvironmentTable")), (1, st.sampled_from(TABLE_NAMES)))
    else:
        names = pick((4, st.sampled_from(TABLE_NAMES)), (1, texts))
    tables = draw(
        pick(
            (
                10,
                st.dictionaries(
                    names,
                    pick((6, st.lists(rows, max_size=3)), (1, mixed)),
                    min_size=1,
                    max_size=2,
                ),
            ),
            (1, mixed),
        )
    )
    meta = draw(
        optional_keys(
            rank=meta_values,
            global_rank=meta_values,
            local_rank=meta_values,
            world_size=meta_values,
            local_world_size=meta_values,
            node_rank=meta_values,
            hostname=pick((3, st.sampled_from(["node-0", "node-1"])), (1, meta_values)),
            pid=meta_values,
            timestamp=times,
            session_id=meta_values,
        )
    )
    if draw(st.integers(0, 9)):
        meta["sampler"] = sampler
    form = draw(st.sampled_from(["canonical"] * 5 + ["flat"] * 3 + ["no-tables", "junk"]))
    if form == "canonical":
        return {"meta": meta, "body": {"tables": tables}}
    if form == "flat":
        return {**meta, "tables": tables}
    if form == "no-tables":
        body = draw(st.one_of(st.just({}), st.fixed_dictionaries({"tables": mixed})))
        return {"meta": meta, "body": body}
    return draw(st.one_of(mixed, st.just({"meta": meta}), st.just({"body": {"tables": tables}})))


payloads = pick((1, envelopes()), (3, st.lists(envelopes(), max_size=4)))
