"""Crafted cases for every rule of ``records_from_payload`` in the contract.

Each test names the rule it checks (export-records-contract.txt and
wire-format.md) and asserts the exact records and ``skipped`` count.
"""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from payloads import T0, envelope, meta
from traceml_exporter_sdk import (
    ProcessRecord,
    RuntimeEnvironmentRecord,
    StdoutStderrRecord,
    StepMemoryRecord,
    StepTimeRecord,
    SystemGpuRecord,
    SystemRecord,
    records_from_payload,
)
from traceml_exporter_sdk._build import projection as projection_module

mapping_module = importlib.import_module("traceml_exporter_sdk.mapping")

ALL_STREAMS = [
    "step_time",
    "step_memory",
    "system",
    "system_gpu",
    "process",
    "runtime_environment",
    "stdout_stderr",
]
NS = T0
FORWARD = "_traceml_internal:forward_time"


# -- payload builders ------------------------------------------------------------


def step_row(step: int, seq: int = 0, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "seq": seq,
        "timestamp": NS + step,
        "step": step,
        "events": {FORWARD: {"cuda:0": {"is_gpu": True, "cpu_ms": 1.0, "gpu_ms": 2.0}}},
    }
    row.update(extra)
    return row


def memory_row(step: int, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "seq": step,
        "ts": NS + step,
        "device": "cuda:0",
        "step": step,
        "peak_alloc": 1.0,
        "peak_resv": 2.0,
    }
    row.update(extra)
    return row


def gpu(util: Any = 50.0) -> list[Any]:
    return [util, 1e9, 8e9, 60.0, 200.0, 300.0]


def system_row(seq: int, gpus: Any, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "seq": seq,
        "ts": NS + seq,
        "cpu": 10.0,
        "ram_used": 1.0,
        "ram_total": 2.0,
        "gpu_available": True,
        "gpu_count": len(gpus) if isinstance(gpus, list) else 0,
        "gpus": gpus,
    }
    row.update(extra)
    return row


def process_row(seq: int, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"seq": seq, "ts": NS + seq, "cpu": 120.0, "cpu_cores": 8, "gpu": None}
    row.update(extra)
    return row


def runtime_envelope(rank: int = 0, **row: Any) -> dict[str, Any]:
    return envelope(
        sampler="RuntimeEnvironmentSampler", rows=[row], rank=rank, table="RuntimeEnvironmentTable"
    )


def kinds(records: list[Any]) -> list[tuple[str, Any]]:
    """(STREAM, the field that identifies the row inside the test) per record."""
    out = []
    for r in records:
        if isinstance(r, StepTimeRecord | StepMemoryRecord):
            out.append((r.STREAM, (r.global_rank, r.step)))
        elif isinstance(r, SystemGpuRecord):
            out.append((r.STREAM, (r.seq, r.gpu_idx)))
        elif isinstance(r, SystemRecord | ProcessRecord):
            out.append((r.STREAM, r.seq))
        elif isinstance(r, RuntimeEnvironmentRecord):
            out.append((r.STREAM, r.global_rank))
        else:
            out.append((r.STREAM, r.line))
    return out


def mixed_payload() -> list[dict[str, Any]]:
    return [
        envelope(sampler="StepTimeSampler", rows=[step_row(1), step_row(2)], rank=0),
        envelope(sampler="SystemSampler", rows=[system_row(5, [gpu(), gpu()])], rank=0),
        envelope(sampler="ProcessSampler", rows=[process_row(6)], rank=1),
        envelope(sampler="StepMemorySampler", rows=[memory_row(1)], rank=1),
        runtime_envelope(rank=1, topology="ddp"),
        envelope(sampler="Stdout/Stderr", rows=[{"line": "hello"}], rank=1),
    ]


# -- streams validation ------------------------------------------------------------


class Tripwire(dict[str, Any]):
    """A payload that records every read: validation must fail before any."""

    reads: list[str]

    def __init__(self) -> None:
        super().__init__()
        self.reads = []

    def get(self, key: Any, default: Any = None) -> Any:
        self.reads.append(key)
        raise AssertionError("payload was read")

    def __getitem__(self, key: Any) -> Any:
        self.reads.append(key)
        raise AssertionError("payload was read")


class TripwireList(list[Any]):
    def __iter__(self) -> Iterator[Any]:
        raise AssertionError("payload was iterated")


@pytest.mark.parametrize(
    ("streams", "match"),
    [
        ("step_time", "string"),
        ("", "string"),
        (b"step_time", "string"),
        ([], "empty"),
        (set(), "empty"),
        ((), "empty"),
        (frozenset(), "empty"),
        (["step_time", "bogus"], "'bogus'"),
        (["all"], "'all'"),
        (["system", "gpu"], "'gpu'"),
        ({"StepTime"}, "'StepTime'"),
    ],
)
def test_bad_streams_raise_before_payload_processing(streams: Any, match: str) -> None:
    payloads: list[Any] = [Tripwire(), TripwireList([Tripwire()])]
    for payload in payloads:
        with pytest.raises(ValueError, match=match) as info:
            records_from_payload(payload, streams=streams)
        message = str(info.value)
        for name in ALL_STREAMS:
            assert name in message, (name, message)
    assert payloads[0].reads == []


@pytest.mark.parametrize(
    "streams",
    [
        ["step_time"],
        ("step_time",),
        {"step_time"},
        frozenset({"step_time"}),
        {"step_time": 1},
        ["step_time", "step_time"],
    ],
)
def test_streams_accepts_any_collection_of_names(streams: Any) -> None:
    batch = records_from_payload(mixed_payload(), observed_timestamp_unix_ns=1, streams=streams)
    assert kinds(batch.records) == [("step_time", (0, 1)), ("step_time", (0, 2))]
    assert batch.skipped == 0


def test_streams_none_keeps_every_stream() -> None:
    batch = records_from_payload(mixed_payload(), observed_timestamp_unix_ns=1, streams=None)
    assert {r.STREAM for r in batch.records} == set(ALL_STREAMS)
    assert batch.skipped == 0


# -- observed stamp ----------------------------------------------------------------


class FakeTime:
    def __init__(self) -> None:
        self.counter = itertools.count(101)
        self.calls = 0

    def time_ns(self) -> int:
        self.calls += 1
        return next(self.counter)


class NoTime:
    def time_ns(self) -> int:
        raise AssertionError("time.time_ns() called although a stamp was given")


def test_given_observed_stamp_is_used_for_every_envelope(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mapping_module, "time", NoTime())
    batch = records_from_payload(mixed_payload(), observed_timestamp_unix_ns=NS + 7)
    assert len(batch.records) == 9
    assert {r.observed_timestamp_unix_ns for r in batch.records} == {NS + 7}


def test_observed_stamp_is_taken_once_per_envelope(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTime()
    monkeypatch.setattr(mapping_module, "time", fake)
    payload = [
        envelope(sampler="StepTimeSampler", rows=[step_row(1), step_row(2), step_row(3)], rank=0),
        envelope(
            sampler="SystemSampler", rows=[system_row(1, [gpu(), gpu()]), system_row(2, [gpu()])]
        ),
        envelope(sampler="StepTimeSampler", rows=[step_row(1)], rank=1),
        envelope(sampler="Stdout/Stderr", rows=[{"line": "a"}, {"line": "b"}], rank=1),
    ]
    batch = records_from_payload(payload)
    assert fake.calls == 4
    stamps = [r.observed_timestamp_unix_ns for r in batch.records]
    assert stamps == [101, 101, 101] + [102] * 5 + [103] + [104, 104]


def test_observed_stamp_defaults_to_wall_clock_ns() -> None:
    import time

    before = time.time_ns()
    batch = records_from_payload(mixed_payload())
    after = time.time_ns()
    assert batch.records
    for record in batch.records:
        assert type(record.observed_timestamp_unix_ns) is int
        assert before <= record.observed_timestamp_unix_ns <= after


# -- stream selection ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("streams", "expected"),
    [
        ({"system"}, [("system", 5)]),
        ({"system_gpu"}, [("system_gpu", (5, 0)), ("system_gpu", (5, 1))]),
        ({"process", "stdout_stderr"}, [("process", 6), ("stdout_stderr", "hello")]),
        ({"runtime_environment"}, [("runtime_environment", 1)]),
        ({"step_memory"}, [("step_memory", (1, 1))]),
    ],
)
def test_only_selected_streams_are_built(streams: set[str], expected: list[Any]) -> None:
    batch = records_from_payload(mixed_payload(), observed_timestamp_unix_ns=1, streams=streams)
    assert kinds(batch.records) == expected
    assert batch.skipped == 0


def broken_system_envelope() -> dict[str, Any]:
    # float(10**400) raises OverflowError: the system projection fails.
    return envelope(sampler="SystemSampler", rows=[system_row(1, [gpu(), gpu(10**400)])])


def test_unselected_failing_projection_is_neither_run_nor_counted() -> None:
    payload = [envelope(sampler="StepTimeSampler", rows=[step_row(1)]), broken_system_envelope()]
    batch = records_from_payload(payload, observed_timestamp_unix_ns=1, streams={"step_time"})
    assert kinds(batch.records) == [("step_time", (0, 1))]
    assert batch.skipped == 0
    # The same payload with the system streams selected loses the snapshot.
    for streams in ({"system"}, {"system_gpu"}, None):
        batch = records_from_payload(payload, observed_timestamp_unix_ns=1, streams=streams)
        assert [r for r in batch.records if r.STREAM.startswith("system")] == []
        assert batch.skipped == 1


def test_unselected_rows_that_do_not_fit_are_not_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    def build(meta: Any, tables: Any, observed: int) -> dict[str, list[tuple[Any, ...]]]:
        return {"system_samples": [(observed,)], "system_gpu_samples": [(observed, 1)]}

    patched = projection_module.Projection(
        "SystemSampler", ("system_samples", "system_gpu_samples"), build
    )
    monkeypatch.setitem(projection_module.PROJECTION_BY_SAMPLER, "SystemSampler", patched)
    payload = [
        envelope(sampler="SystemSampler", rows=[system_row(1, [])]),
        envelope(sampler="StepTimeSampler", rows=[step_row(1)]),
    ]
    assert (
        records_from_payload(payload, observed_timestamp_unix_ns=1, streams={"step_time"}).skipped
        == 0
    )
    assert (
        records_from_payload(payload, observed_timestamp_unix_ns=1, streams={"system"}).skipped == 1
    )
    assert records_from_payload(payload, observed_timestamp_unix_ns=1).skipped == 2


# -- skipped: items that do not normalise ------------------------------------------------


class RaisingGet(dict[str, Any]):
    def get(self, key: Any, default: Any = None) -> Any:
        raise RuntimeError("get")


@pytest.mark.parametrize(
    "item",
    [
        None,
        42,
        "StepTimeSampler",
        b"{}",
        [],
        # a nested list is not an envelope
        [envelope(sampler="StepTimeSampler", rows=[step_row(1)])],
        {},
        {"meta": meta(sampler="StepTimeSampler")},  # canonical without body, no flat tables
        {"meta": meta(sampler="StepTimeSampler"), "body": [1]},
        {"meta": [1], "body": {"tables": {"T": [step_row(1)]}}},
        {"body": {"tables": {"T": [step_row(1)]}}},
        {**meta(sampler="StepTimeSampler"), "tables": [step_row(1)]},  # flat, tables not a mapping
        RaisingGet(meta=meta(sampler="StepTimeSampler")),  # fails in another way
        {"meta": RaisingGet(), "body": {"tables": {"T": [step_row(1)]}}},
    ],
    ids=repr,
)
def test_item_that_does_not_normalise_counts_once(item: Any) -> None:
    good = envelope(sampler="StepTimeSampler", rows=[step_row(1)])
    batch = records_from_payload([good, item, good], observed_timestamp_unix_ns=1)
    assert kinds(batch.records) == [("step_time", (0, 1)), ("step_time", (0, 1))]
    assert batch.skipped == 1
    if not isinstance(item, list):
        alone = records_from_payload(item, observed_timestamp_unix_ns=1)
        assert alone.records == []
        assert alone.skipped == 1


def test_every_bad_item_counts_once() -> None:
    batch = records_from_payload([None, 1, "x", {}, [], None], observed_timestamp_unix_ns=1)
    assert batch.records == []
    assert batch.skipped == 6


def test_empty_payload_list() -> None:
    batch = records_from_payload([])
    assert batch.records == []
    assert batch.skipped == 0


# -- skipped: a projection that raises ----------------------------------------------------


class BadStr:
    def __str__(self) -> str:
        raise RuntimeError("str")

    def __hash__(self) -> int:
        return 1

    def __eq__(self, other: object) -> bool:
        return self is other


def test_projection_that_raises_loses_all_rows_of_its_envelope_once() -> None:
    bad_memory = envelope(
        sampler="StepMemorySampler",
        rows=[memory_row(1), memory_row(2, peak_alloc=10**400), memory_row(3, peak_resv=10**400)],
        rank=2,
    )
    payload = [envelope(sampler="StepMemorySampler", rows=[memory_row(1)], rank=1), bad_memory]
    batch = records_from_payload(payload, observed_timestamp_unix_ns=1)
    assert kinds(batch.records) == [("step_memory", (1, 1))]
    assert batch.skipped == 1


def test_system_projection_that_raises_loses_snapshot_and_its_gpus() -> None:
    rows = [system_row(1, [gpu(), gpu()]), system_row(2, [gpu(), gpu(10**400), gpu(10**400)])]
    payload = [
        envelope(sampler="SystemSampler", rows=rows),
        envelope(sampler="SystemSampler", rows=[system_row(3, [gpu()])]),
    ]
    batch = records_from_payload(payload, observed_timestamp_unix_ns=1)
    assert kinds(batch.records) == [("system", 3), ("system_gpu", (3, 0))]
    assert batch.skipped == 1


def test_events_key_whose_str_raises_fails_the_step_time_projection() -> None:
    bad = step_row(2, events={BadStr(): {"cpu": {"cpu_ms": 1.0}}})
    payload = [envelope(sampler="StepTimeSampler", rows=[step_row(1), bad, step_row(3)], rank=0)]
    payload.append(envelope(sampler="StepTimeSampler", rows=[step_row(4)], rank=1))
    batch = records_from_payload(payload, observed_timestamp_unix_ns=1)
    assert kinds(batch.records) == [("step_time", (1, 4))]
    assert batch.skipped == 1


@pytest.mark.parametrize(
    "bad_envelope",
    [
        envelope(sampler="ProcessSampler", rows=[process_row(1, ram_used=-(10**400))]),
        envelope(sampler="ProcessSampler", rows=[process_row(1, gpu={"mem_total": 10**400})]),
        envelope(
            sampler="StepTimeSampler",
            rows=[step_row(1, events={FORWARD: {"cpu": {"gpu_ms": 10**400}}})],
        ),
        envelope(
            sampler="StepTimeSampler",
            rows=[step_row(1, events={FORWARD: {BadStr(): {"gpu_ms": 1.0}}})],
        ),
        envelope(
            sampler="StepMemorySampler",
            rows=[memory_row(1, device=type("S", (str,), {"__str__": BadStr.__str__})("x"))],
        ),
        envelope(sampler="Stdout/Stderr", rows=[{"line": "ok"}, {"line": BadStr()}]),
        envelope(sampler="StepTimeSampler", rows=[RaisingGet(step=1)]),
        {"meta": RaisingGet(sampler="StepTimeSampler"), "body": {"tables": {"T": [step_row(1)]}}},
    ],
    ids=[
        "process-float",
        "process-gpu",
        "event-float",
        "device-str",
        "memory-device",
        "line",
        "row-get",
        "meta-get",
    ],
)
def test_each_raising_projection_counts_once(bad_envelope: dict[str, Any]) -> None:
    batch = records_from_payload([bad_envelope, bad_envelope], observed_timestamp_unix_ns=1)
    assert batch.records == []
    assert batch.skipped == 2


# -- skipped: rows that do not fit, tables without a record ----------------------------------


def test_row_that_does_not_fit_its_record_counts_once(monkeypatch: pytest.MonkeyPatch) -> None:
    real = projection_module.PROJECTION_BY_SAMPLER["StepTimeSampler"]

    def build(meta: Any, tables: Any, observed: int) -> dict[str, list[tuple[Any, ...]]]:
        rows = real.build(meta, tables, observed)["step_time_samples"]
        return {"step_time_samples": [rows[0], rows[1][:-1], rows[2] + (None,), rows[3]]}

    monkeypatch.setitem(
        projection_module.PROJECTION_BY_SAMPLER,
        "StepTimeSampler",
        projection_module.Projection("StepTimeSampler", real.tables, build),
    )
    payload = envelope(sampler="StepTimeSampler", rows=[step_row(i) for i in range(1, 5)])
    batch = records_from_payload(payload, observed_timestamp_unix_ns=1)
    assert kinds(batch.records) == [("step_time", (0, 1)), ("step_time", (0, 4))]
    assert batch.skipped == 2


def test_rows_of_a_table_mapped_to_the_wrong_record_each_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # step_time rows have 12 columns, StepMemoryRecord 14: none fits. The fast builders
    # hard-code their record classes, so the careful path alone sees the patched map.
    monkeypatch.setattr(mapping_module, "_FAST", {})
    monkeypatch.setitem(projection_module.TABLE_RECORDS, "step_time_samples", StepMemoryRecord)
    payload = [
        envelope(sampler="StepTimeSampler", rows=[step_row(1), step_row(2), step_row(3)]),
        envelope(sampler="StepMemorySampler", rows=[memory_row(1)]),
    ]
    batch = records_from_payload(payload, observed_timestamp_unix_ns=1)
    assert kinds(batch.records) == [("step_memory", (0, 1))]
    assert batch.skipped == 3


def test_table_without_a_record_counts_each_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mapping_module, "_FAST", {})  # as above: the careful path's rule
    monkeypatch.delitem(projection_module.TABLE_RECORDS, "system_gpu_samples")
    payload = [
        envelope(
            sampler="SystemSampler",
            rows=[system_row(1, [gpu(), gpu(), gpu()]), system_row(2, [gpu()])],
        ),
        envelope(sampler="SystemSampler", rows=[system_row(3, [])]),
    ]
    batch = records_from_payload(payload, observed_timestamp_unix_ns=1)
    assert kinds(batch.records) == [("system", 1), ("system", 2), ("system", 3)]
    assert batch.skipped == 4


def test_extra_projection_table_without_a_record_counts_each_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = projection_module.PROJECTION_BY_SAMPLER["ProcessSampler"]

    def build(meta: Any, tables: Any, observed: int) -> dict[str, list[tuple[Any, ...]]]:
        rows = real.build(meta, tables, observed)
        rows["process_extra"] = [(observed,)] * 5
        return rows

    monkeypatch.setitem(
        projection_module.PROJECTION_BY_SAMPLER,
        "ProcessSampler",
        projection_module.Projection("ProcessSampler", (*real.tables, "process_extra"), build),
    )
    batch = records_from_payload(
        envelope(sampler="ProcessSampler", rows=[process_row(1)]), observed_timestamp_unix_ns=1
    )
    assert kinds(batch.records) == [("process", 1)]
    assert batch.skipped == 5


def test_every_projection_table_has_a_record() -> None:
    expected = {
        "RuntimeEnvironmentSampler": [("runtime_environment", RuntimeEnvironmentRecord)],
        "SystemSampler": [
            ("system_samples", SystemRecord),
            ("system_gpu_samples", SystemGpuRecord),
        ],
        "ProcessSampler": [("process_samples", ProcessRecord)],
        "StepTimeSampler": [("step_time_samples", StepTimeRecord)],
        "StepMemorySampler": [("step_memory_samples", StepMemoryRecord)],
        "Stdout/Stderr": [("stdout_stderr_samples", StdoutStderrRecord)],
    }
    assert [p.sampler for p in projection_module.PROJECTIONS] == list(expected)
    for projection in projection_module.PROJECTIONS:
        assert projection.tables, projection.sampler
        for table in projection.tables:
            assert table in projection_module.TABLE_RECORDS, (projection.sampler, table)
        assert [(t, projection_module.TABLE_RECORDS[t]) for t in projection.tables] == expected[
            projection.sampler
        ]
    written = {t for p in projection_module.PROJECTIONS for t in p.tables}
    assert written == set(projection_module.TABLE_RECORDS)


# -- order and duplicates ---------------------------------------------------------------


def test_records_keep_payload_order_across_ranks_and_streams() -> None:
    payload = [
        envelope(sampler="StepTimeSampler", rows=[step_row(1), step_row(2)], rank=1),
        envelope(sampler="StepTimeSampler", rows=[step_row(1)], rank=0),
        envelope(sampler="StepMemorySampler", rows=[memory_row(2), memory_row(1)], rank=1),
        envelope(sampler="StepTimeSampler", rows=[step_row(3), step_row(2)], rank=1),  # not sorted
    ]
    batch = records_from_payload(payload, observed_timestamp_unix_ns=1)
    assert kinds(batch.records) == [
        ("step_time", (1, 1)),
        ("step_time", (1, 2)),
        ("step_time", (0, 1)),
        ("step_memory", (1, 2)),
        ("step_memory", (1, 1)),
        ("step_time", (1, 3)),
        ("step_time", (1, 2)),
    ]


def test_writer_table_order_system_before_its_gpus() -> None:
    payload = envelope(
        sampler="SystemSampler", rows=[system_row(1, [gpu(), gpu()]), system_row(2, [gpu()])]
    )
    batch = records_from_payload(payload, observed_timestamp_unix_ns=1)
    assert kinds(batch.records) == [
        ("system", 1),
        ("system", 2),
        ("system_gpu", (1, 0)),
        ("system_gpu", (1, 1)),
        ("system_gpu", (2, 0)),
    ]


def test_rows_are_read_from_every_table_list_in_order() -> None:
    item = {
        "meta": meta(sampler="StepTimeSampler"),
        "body": {
            "tables": {
                "StepTimeTable": [step_row(1)],
                "junk": {"not": "a list"},
                "Other": [step_row(2), "not a row", None, step_row(3)],
            }
        },
    }
    batch = records_from_payload(item, observed_timestamp_unix_ns=1)
    assert kinds(batch.records) == [
        ("step_time", (0, 1)),
        ("step_time", (0, 2)),
        ("step_time", (0, 3)),
    ]
    assert batch.skipped == 0


def test_duplicates_pass_through() -> None:
    item = envelope(sampler="StepTimeSampler", rows=[step_row(1), step_row(1)])
    batch = records_from_payload([item, item], observed_timestamp_unix_ns=1)
    assert len(batch.records) == 4
    assert all(r == batch.records[0] for r in batch.records)
    assert batch.skipped == 0


# -- envelope forms -------------------------------------------------------------------------


def test_legacy_flat_envelopes_map_like_canonical_ones() -> None:
    canonical = mixed_payload()
    flat = [{**item["meta"], "tables": item["body"]["tables"]} for item in canonical]
    a = records_from_payload(canonical, observed_timestamp_unix_ns=1)
    b = records_from_payload(flat, observed_timestamp_unix_ns=1)
    assert len(a.records) == 9
    assert a == b


def test_canonical_form_wins_over_flat_tables() -> None:
    item = {
        "meta": meta(sampler="StepTimeSampler", rank=3),
        "body": {"tables": {"T": [step_row(1)]}},
        "tables": {"T": [step_row(9)]},
        "sampler": "StepMemorySampler",
    }
    (record,) = records_from_payload(item, observed_timestamp_unix_ns=1).records
    assert (type(record), record.global_rank, record.step) == (StepTimeRecord, 3, 1)


def test_flat_form_used_when_meta_is_not_a_mapping() -> None:
    item = {
        **meta(sampler="StepTimeSampler", rank=2),
        "meta": "junk",
        "tables": {"T": [step_row(5)]},
    }
    (record,) = records_from_payload(item, observed_timestamp_unix_ns=1).records
    assert (record.global_rank, record.step) == (2, 5)


@pytest.mark.parametrize("body", [{}, {"tables": None}, {"tables": [step_row(1)]}, {"tables": "x"}])
def test_body_without_tables_gives_no_rows_and_no_loss(body: dict[str, Any]) -> None:
    batch = records_from_payload({"meta": meta(sampler="StepTimeSampler"), "body": body})
    assert batch.records == []
    assert batch.skipped == 0


@pytest.mark.parametrize("sampler", ["UnknownSampler", "stepTimeSampler", "", None, 5, "system"])
def test_unknown_sampler_gives_no_rows_and_is_not_a_loss(sampler: Any) -> None:
    item = envelope(sampler="StepTimeSampler", rows=[step_row(1)])
    item["meta"]["sampler"] = sampler
    batch = records_from_payload([item, envelope(sampler="Stdout/Stderr", rows=[{"line": "x"}])])
    assert kinds(batch.records) == [("stdout_stderr", "x")]
    assert batch.skipped == 0


def test_missing_sampler_gives_no_rows() -> None:
    item = envelope(sampler="StepTimeSampler", rows=[step_row(1)])
    del item["meta"]["sampler"]
    assert records_from_payload(item) == records_from_payload([])


def test_runtime_environment_reads_only_its_table() -> None:
    item = {
        "meta": meta(sampler="RuntimeEnvironmentSampler", rank=1),
        "body": {
            "tables": {
                "Other": [{"topology": "other"}],
                "RuntimeEnvironmentTable": [{"topology": "ddp"}, "junk", {"topology": "fsdp"}],
                "runtime_environment": [{"topology": "other"}],
            }
        },
    }
    batch = records_from_payload(item, observed_timestamp_unix_ns=1)
    assert [r.topology for r in batch.records] == ["ddp", "fsdp"]
    assert batch.skipped == 0
    item["body"]["tables"] = {"Other": [{"topology": "other"}]}
    assert records_from_payload(item).records == []
    item["body"]["tables"] = {"RuntimeEnvironmentTable": {"topology": "ddp"}}
    assert records_from_payload(item).records == []


def test_runtime_environment_fields() -> None:
    item = runtime_envelope(
        rank=1,
        ts=NS,
        seq="7",
        topology="single_node_multi_process",
        distributed_initialized=True,
        distributed_backend="gloo",
        training_strategy="ddp",
        strategy_source="runtime_model",
        strategy_confidence=0.9,
    )
    (record,) = records_from_payload(item, observed_timestamp_unix_ns=5).records
    assert record == RuntimeEnvironmentRecord(
        5,
        1,
        1,
        1,
        4,
        2,
        0,
        "node-0",
        1001,
        NS,
        7,
        "single_node_multi_process",
        1,
        "gloo",
        "ddp",
        "runtime_model",
        "0.9",
    )


# -- stdout/stderr -------------------------------------------------------------------------


def test_stdout_lines_none_and_empty_are_passed_over() -> None:
    rows = [
        {"line": "a"},
        {"line": None},
        {},
        {"line": ""},
        {"line": " "},
        {"line": 5},
        {"line": False},
    ]
    item = envelope(sampler="Stdout/Stderr", rows=rows, rank=3)
    batch = records_from_payload(item, observed_timestamp_unix_ns=9)
    assert batch.records == [
        StdoutStderrRecord(9, 3, NS, "a"),
        StdoutStderrRecord(9, 3, NS, " "),
        StdoutStderrRecord(9, 3, NS, "5"),
        StdoutStderrRecord(9, 3, NS, "False"),
    ]
    assert batch.skipped == 0


def test_stdout_rank_is_the_resolved_rank_and_time_comes_from_meta() -> None:
    item = envelope(
        sampler="Stdout/Stderr", rows=[{"line": "x", "ts": NS + 5, "timestamp": NS + 6}]
    )
    item["meta"].update(global_rank=None, rank="2", timestamp=NS + 1)
    (record,) = records_from_payload(item, observed_timestamp_unix_ns=9).records
    assert (record.rank, record.timestamp_unix_ns) == (2, NS + 1)
    item["meta"]["timestamp"] = 1_700_000_000.5
    (record,) = records_from_payload(item, observed_timestamp_unix_ns=9).records
    assert record.timestamp_unix_ns is None


# -- timestamps -------------------------------------------------------------------------------

TIME_CASES: list[tuple[Any, Any]] = [
    (NS, NS),
    (0, 0),
    (2**70, 2**70),
    (-5, -5),
    (1_700_000_000.25, None),
    (1.7e18, None),
    (float("nan"), None),
    (True, None),
    (False, None),
    (str(NS), None),
    (None, None),
]


def _time_envelopes(value: Any) -> list[dict[str, Any]]:
    stdout = envelope(sampler="Stdout/Stderr", rows=[{"line": "x"}])
    stdout["meta"]["timestamp"] = value
    return [
        envelope(sampler="StepTimeSampler", rows=[step_row(1, timestamp=value)]),
        envelope(sampler="StepMemorySampler", rows=[memory_row(1, ts=value)]),
        envelope(sampler="SystemSampler", rows=[system_row(1, [gpu()], ts=value)]),
        envelope(sampler="ProcessSampler", rows=[process_row(1, ts=value)]),
        runtime_envelope(ts=value),
        stdout,
    ]


@pytest.mark.parametrize(("raw", "expected"), TIME_CASES, ids=repr)
def test_timestamp_rules(raw: Any, expected: Any) -> None:
    batch = records_from_payload(_time_envelopes(raw), observed_timestamp_unix_ns=1)
    assert [r.STREAM for r in batch.records] == [
        "step_time",
        "step_memory",
        "system",
        "system_gpu",
        "process",
        "runtime_environment",
        "stdout_stderr",
    ]
    for record in batch.records:
        assert record.timestamp_unix_ns == expected, record.STREAM
        assert type(record.timestamp_unix_ns) is type(expected)


def test_step_time_reads_timestamp_not_ts() -> None:
    (record,) = records_from_payload(
        envelope(sampler="StepTimeSampler", rows=[step_row(1, timestamp=None, ts=NS)])
    ).records
    assert record.timestamp_unix_ns is None
    (record,) = records_from_payload(
        envelope(sampler="StepMemorySampler", rows=[memory_row(1, ts=None, timestamp=NS)])
    ).records
    assert record.timestamp_unix_ns is None


# -- system GPUs ------------------------------------------------------------------------------


def test_gpu_idx_counts_passed_over_entries() -> None:
    gpus: list[Any] = [
        gpu(1.0),
        "x",
        gpu(2.0)[:5],
        None,
        gpu(3.0),
        [*gpu(4.0), "extra"],
        {"util": 1},
    ]
    batch = records_from_payload(
        envelope(sampler="SystemSampler", rows=[system_row(1, gpus)]), observed_timestamp_unix_ns=1
    )
    assert batch.skipped == 0
    gpu_records = [r for r in batch.records if isinstance(r, SystemGpuRecord)]
    assert [(r.gpu_idx, r.util) for r in gpu_records] == [(0, 1.0), (4, 3.0), (5, 4.0)]
    assert gpu_records[2] == SystemGpuRecord(
        1, 0, 0, 4, 2, 0, "node-0", NS + 1, 1, 5, 4.0, 1e9, 8e9, 60.0, 200.0, 300.0
    )


def test_gpus_not_a_list_gives_no_gpu_records() -> None:
    for gpus in (None, {"0": gpu()}, "gpus", 3):
        batch = records_from_payload(envelope(sampler="SystemSampler", rows=[system_row(1, gpus)]))
        assert kinds(batch.records) == [("system", 1)]
        assert batch.skipped == 0


def test_system_record_values_and_no_legacy_rank() -> None:
    item = envelope(
        sampler="SystemSampler", rows=[system_row(4, [], cpu=3, gpu_available=False, gpu_count=0)]
    )
    item["meta"].update(global_rank=None, rank=7)
    (record,) = records_from_payload(item, observed_timestamp_unix_ns=2).records
    assert record == SystemRecord(2, None, 0, 4, 2, 0, "node-0", NS + 4, 4, 3.0, 1.0, 2.0, 0, 0)
    assert type(record.cpu_percent) is float


# -- other projections ------------------------------------------------------------------------


def test_process_gpu_dict_and_non_dict() -> None:
    rows = [
        process_row(1, gpu={"device": 2, "mem_used": 1, "mem_reserved": 2.5, "mem_total": None}),
        process_row(2, gpu=[2, 1, 2, 3]),
        process_row(3, gpu={"device": "2", "mem_used": "1"}),
    ]
    batch = records_from_payload(
        envelope(sampler="ProcessSampler", rows=rows, rank=1), observed_timestamp_unix_ns=3
    )
    assert [r.to_dict()["gpu_device_index"] for r in batch.records] == [2, None, None]
    assert [
        (r.gpu_mem_used_bytes, r.gpu_mem_reserved_bytes, r.gpu_mem_total_bytes)
        for r in batch.records
    ] == [(1.0, 2.5, None), (None, None, None), (None, None, None)]
    assert batch.records[0] == ProcessRecord(
        3,
        1,
        1,
        1,
        4,
        2,
        0,
        "node-0",
        NS + 1,
        1,
        120.0,
        8,
        None,
        None,
        None,
        None,
        2,
        1.0,
        2.5,
        None,
    )


def test_strict_row_coercions() -> None:
    row = memory_row(1)
    row.update(seq=True, step="3", device=5, peak_alloc=7, peak_resv="8")
    (record,) = records_from_payload(envelope(sampler="StepMemorySampler", rows=[row])).records
    # int: isinstance(v, int), so bool passes as in TraceML; str digits do not.
    assert (record.seq, record.step, record.device) == (1, None, None)
    assert type(record.seq) is int
    assert (record.peak_alloc_bytes, record.peak_reserved_bytes) == (7.0, None)
    assert type(record.peak_alloc_bytes) is float


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (3, 3),
        ("3", 3),
        (3.9, 3),
        ("x", None),
        (None, None),
        (True, 1),
        (float("nan"), None),
        (float("inf"), None),
        (" 4 ", 4),
        ("3.0", None),
    ],
)
def test_identity_coercion(raw: Any, expected: Any) -> None:
    item = envelope(sampler="ProcessSampler", rows=[process_row(1)])
    item["meta"].update(
        global_rank=raw,
        local_rank=raw,
        world_size=raw,
        local_world_size=raw,
        node_rank=raw,
        rank=None,
    )
    (record,) = records_from_payload(item).records
    values = (
        record.rank,
        record.global_rank,
        record.local_rank,
        record.world_size,
        record.local_world_size,
        record.node_rank,
    )
    assert values == (expected,) * 6
    assert all(type(v) is type(expected) for v in values)


def test_rank_alias_and_hostname() -> None:
    item = envelope(sampler="StepTimeSampler", rows=[step_row(1)])
    item["meta"].update(global_rank="x", rank="5", hostname=12)
    (record,) = records_from_payload(item).records
    assert (record.rank, record.global_rank, record.hostname) == (5, None, "12")
    item["meta"].update(global_rank=2, rank=5, hostname=None)
    (record,) = records_from_payload(item).records
    assert (record.rank, record.global_rank, record.hostname) == (2, 2, None)


def test_events_rules() -> None:
    events = {
        FORWARD: {
            "cuda:0": {
                "is_gpu": 1,
                "duration_ms": 2,
                "cpu_ms": "1",
                "gpu_ms": 0,
                "n_calls": 2.0,
                "x": 1,
            },
            "cuda:1": "not stats",
            7: {"is_gpu": False, "n_calls": True},
        },
        "no_devices": {"cuda:0": None},
        "not_a_map": [1, 2],
        3: {"cpu": {}},
    }
    (record,) = records_from_payload(
        envelope(sampler="StepTimeSampler", rows=[step_row(1, events=events)])
    ).records
    assert record.events == {
        FORWARD: {
            "cuda:0": {
                "is_gpu": None,
                "duration_ms": 2.0,
                "cpu_ms": None,
                "gpu_ms": 0.0,
                "n_calls": None,
            },
            "7": {
                "is_gpu": False,
                "duration_ms": None,
                "cpu_ms": None,
                "gpu_ms": None,
                "n_calls": 1,
            },
        },
        "3": {
            "cpu": {
                "is_gpu": None,
                "duration_ms": None,
                "cpu_ms": None,
                "gpu_ms": None,
                "n_calls": None,
            }
        },
    }
    assert type(record.events[FORWARD]["cuda:0"]["gpu_ms"]) is float
    assert type(record.events[FORWARD]["7"]["n_calls"]) is int
    for junk in (None, [], "events", 3):
        (record,) = records_from_payload(
            envelope(sampler="StepTimeSampler", rows=[step_row(1, events=junk)])
        ).records
        assert record.events == {}


def test_events_names_that_stringify_alike_keep_the_last() -> None:
    # TraceML resets the entry for a repeated stringified name; an empty one is dropped.
    events = {
        1: {"cpu": {"cpu_ms": 1.0}},
        "1": {"cpu": None},
        2: {"cpu": {"cpu_ms": 1.0}},
        "2": {"gpu": {"cpu_ms": 3.0}},
    }
    (record,) = records_from_payload(
        envelope(sampler="StepTimeSampler", rows=[step_row(1, events=events)])
    ).records
    assert list(record.events) == ["2"]
    assert list(record.events["2"]) == ["gpu"]


# -- the contract's "Internal mapping example" -----------------------------------------------

# Copied from the contract's "Internal mapping example"; only the import line names
# the SDK instead of traceml_ai.aggregator.export.
INTERNAL_MAPPING_EXAMPLE = """
from traceml_exporter_sdk import StepTimeRecord, records_from_payload

FORWARD = "_traceml_internal:forward_time"

def forward_cpu_ms(payload):
    \"\"\"Yield (global_rank, step, forward CPU ms) for each step record.\"\"\"
    for record in records_from_payload(payload).records:
        if isinstance(record, StepTimeRecord):
            for stats in record.events.get(FORWARD, {}).values():
                yield record.global_rank, record.step, stats.get("cpu_ms")
"""


def test_internal_mapping_example() -> None:
    def stats(cpu_ms: Any) -> dict[str, Any]:
        return {
            "is_gpu": False,
            "duration_ms": cpu_ms,
            "cpu_ms": cpu_ms,
            "gpu_ms": None,
            "n_calls": 1,
        }

    payload = [
        envelope(
            sampler="StepTimeSampler",
            rows=[
                {"seq": 1, "timestamp": NS, "step": 1, "events": {FORWARD: {"cpu": stats(12.5)}}},
                {"seq": 1, "timestamp": NS, "step": 2, "events": {FORWARD: {"cpu": stats(None)}}},
                {
                    "seq": 2,
                    "timestamp": NS,
                    "step": 3,
                    "events": {"_traceml_internal:backward_time": {"cpu": stats(9.0)}},
                },
            ],
            rank=0,
        ),
        envelope(sampler="StepMemorySampler", rows=[memory_row(1)], rank=0),
        envelope(
            sampler="StepTimeSampler",
            rows=[
                {
                    "seq": 1,
                    "timestamp": NS,
                    "step": 1,
                    "events": {FORWARD: {"cuda:0": stats(3), "cuda:1": stats(4.5)}},
                }
            ],
            rank=1,
        ),
    ]
    namespace: dict[str, Any] = {}
    exec(INTERNAL_MAPPING_EXAMPLE, namespace)
    forward_cpu_ms = namespace["forward_cpu_ms"]
    assert list(forward_cpu_ms(payload)) == [(0, 1, 12.5), (0, 2, None), (1, 1, 3.0), (1, 1, 4.5)]
    assert list(forward_cpu_ms([])) == []


# -- issue 9, item 13: the two arguments are checked, ValueError naming them --------------


class HashRaises(str):
    def __hash__(self) -> int:
        raise RuntimeError("no hash")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no eq")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class Unhashable:
    __hash__ = None  # type: ignore[assignment]


class IterRaises:
    def __iter__(self) -> Any:
        raise RuntimeError("no iter")


@pytest.mark.parametrize("stamp", [True, False, "abc", 1.5, b"1", [1], 10.0**18])
def test_bad_observed_stamp_raises_value_error_naming_it(stamp: Any) -> None:
    payload: list[Any] = [Tripwire()]
    with pytest.raises(ValueError, match="observed_timestamp_unix_ns") as info:
        records_from_payload(payload, observed_timestamp_unix_ns=stamp)
    assert type(stamp).__name__ in str(info.value)
    assert payload[0].reads == []


def test_int_subclass_observed_stamp_becomes_a_plain_int() -> None:
    class Ns(int):
        pass

    batch = records_from_payload(mixed_payload(), observed_timestamp_unix_ns=Ns(5))
    assert batch.records
    assert all(type(r.observed_timestamp_unix_ns) is int for r in batch.records)
    assert {r.observed_timestamp_unix_ns for r in batch.records} == {5}


@pytest.mark.parametrize(
    "streams",
    [[HashRaises("bogus")], [Unhashable()], IterRaises(), 5, [None]],
    ids=["hash-raises-unknown", "unhashable", "iter-raises", "int", "none"],
)
def test_hostile_streams_raise_value_error_naming_it(streams: Any) -> None:
    payload: list[Any] = [Tripwire()]
    with pytest.raises(ValueError, match="streams") as info:
        records_from_payload(payload, streams=streams)
    for name in ALL_STREAMS:
        assert name in str(info.value)
    assert payload[0].reads == []


def test_str_subclass_stream_names_select_as_their_text() -> None:
    batch = records_from_payload(
        mixed_payload(), observed_timestamp_unix_ns=1, streams=[HashRaises("step_time")]
    )
    assert kinds(batch.records) == [("step_time", (0, 1)), ("step_time", (0, 2))]
