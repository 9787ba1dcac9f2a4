"""The seven export records against the contract's tables (export-records-contract.txt).

The expected field lists below are copied from the contract by hand, not derived
from the code, so a drifting field name, order or type fails here.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from typing import Any

import pytest
import traceml_exporter_sdk as sdk
from payloads import envelope
from traceml_exporter_sdk import (
    RECORD_TYPE_BY_STREAM,
    RECORD_TYPES,
    SCHEMA_VERSION,
    ProcessRecord,
    RecordBatch,
    RuntimeEnvironmentRecord,
    StdoutStderrRecord,
    StepMemoryRecord,
    StepTimeRecord,
    SystemGpuRecord,
    SystemRecord,
    records_from_payload,
    stream_key,
)

EVENTS = dict[str, dict[str, sdk.EventStats]]

# (name, type, nullable), in table order, from the contract's record tables.
COMMON: list[tuple[str, Any, bool]] = [
    ("observed_timestamp_unix_ns", int, False),
    ("rank", int, True),
    ("global_rank", int, True),
    ("local_rank", int, True),
    ("world_size", int, True),
    ("local_world_size", int, True),
    ("node_rank", int, True),
    ("hostname", str, True),
    ("timestamp_unix_ns", int, True),
    ("seq", int, True),
]
NO_RANK = [field for field in COMMON if field[0] != "rank"]

CONTRACT: dict[type[Any], tuple[str, str, list[tuple[str, Any, bool]]]] = {
    StepTimeRecord: (
        "step_time",
        "step_time_samples",
        [*COMMON, ("step", int, True), ("events", EVENTS, False)],
    ),
    StepMemoryRecord: (
        "step_memory",
        "step_memory_samples",
        [
            *COMMON,
            ("device", str, True),
            ("step", int, True),
            ("peak_alloc_bytes", float, True),
            ("peak_reserved_bytes", float, True),
        ],
    ),
    SystemRecord: (
        "system",
        "system_samples",
        [
            *NO_RANK,
            ("cpu_percent", float, True),
            ("ram_used_bytes", float, True),
            ("ram_total_bytes", float, True),
            ("gpu_available", int, True),
            ("gpu_count", int, True),
        ],
    ),
    SystemGpuRecord: (
        "system_gpu",
        "system_gpu_samples",
        [
            *NO_RANK,
            ("gpu_idx", int, False),
            ("util", float, True),
            ("mem_used_bytes", float, True),
            ("mem_total_bytes", float, True),
            ("temperature_c", float, True),
            ("power_usage_w", float, True),
            ("power_limit_w", float, True),
        ],
    ),
    ProcessRecord: (
        "process",
        "process_samples",
        [
            *COMMON,
            ("cpu_percent", float, True),
            ("cpu_logical_core_count", int, True),
            ("ram_used_bytes", float, True),
            ("ram_total_bytes", float, True),
            ("gpu_available", int, True),
            ("gpu_count", int, True),
            ("gpu_device_index", int, True),
            ("gpu_mem_used_bytes", float, True),
            ("gpu_mem_reserved_bytes", float, True),
            ("gpu_mem_total_bytes", float, True),
        ],
    ),
    RuntimeEnvironmentRecord: (
        "runtime_environment",
        "runtime_environment",
        [
            ("observed_timestamp_unix_ns", int, False),
            ("rank", int, True),
            ("global_rank", int, True),
            ("local_rank", int, True),
            ("world_size", int, True),
            ("local_world_size", int, True),
            ("node_rank", int, True),
            ("hostname", str, True),
            ("pid", int, True),
            ("timestamp_unix_ns", int, True),
            ("seq", int, True),
            ("topology", str, True),
            ("distributed_initialized", int, True),
            ("distributed_backend", str, True),
            ("training_strategy", str, True),
            ("strategy_source", str, True),
            ("strategy_confidence", str, True),
        ],
    ),
    StdoutStderrRecord: (
        "stdout_stderr",
        "stdout_stderr_samples",
        [
            ("observed_timestamp_unix_ns", int, False),
            ("rank", int, True),
            ("timestamp_unix_ns", int, True),
            ("line", str, False),
        ],
    ),
}

ALL_CLASSES = list(CONTRACT)
NULLABLE = [
    (cls, name, typ)
    for cls, (_, _, fields) in CONTRACT.items()
    for name, typ, null in fields
    if null
]


def _sample_value(name: str, typ: Any, i: int) -> Any:
    if typ is int:
        return 1000 + i
    if typ is float:
        return 0.5 + i
    if typ is str:
        return f"{name}-{i}"
    return {"_traceml_internal:step_time": {"cpu": _stats(cpu_ms=1.5)}}


def _stats(**overrides: Any) -> sdk.EventStats:
    stats: dict[str, Any] = {
        "is_gpu": False,
        "duration_ms": 1.0,
        "cpu_ms": 1.0,
        "gpu_ms": None,
        "n_calls": 1,
    }
    stats.update(overrides)
    return typing.cast(sdk.EventStats, stats)


def _full_values(cls: type[Any]) -> dict[str, Any]:
    return {name: _sample_value(name, typ, i) for i, (name, typ, _) in enumerate(CONTRACT[cls][2])}


def _make(cls: type[Any], **overrides: Any) -> Any:
    values = _full_values(cls)
    values.update(overrides)
    return cls(**values)


# -- class attributes and fields ------------------------------------------------


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_fields_names_order_and_types_match_contract(cls: type[Any]) -> None:
    expected = CONTRACT[cls][2]
    fields = dataclasses.fields(cls)
    assert [f.name for f in fields] == [name for name, _, _ in expected]
    hints = typing.get_type_hints(cls)
    for name, typ, nullable in expected:
        assert hints[name] == (typ | None if nullable else typ), name


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_class_attributes(cls: type[Any]) -> None:
    stream, _, expected = CONTRACT[cls]
    assert stream == cls.STREAM
    assert cls.SCHEMA_VERSION == 1
    assert SCHEMA_VERSION == 1
    assert tuple(name for name, _, _ in expected) == cls.COLUMNS
    assert type(cls.COLUMNS) is tuple
    # Class attributes, not dataclass fields.
    assert {"STREAM", "SCHEMA_VERSION", "COLUMNS"}.isdisjoint(
        f.name for f in dataclasses.fields(cls)
    )


def test_system_records_have_no_rank_and_stdout_has_no_global_rank() -> None:
    assert "rank" not in SystemRecord.COLUMNS
    assert "rank" not in SystemGpuRecord.COLUMNS
    assert "global_rank" not in StdoutStderrRecord.COLUMNS
    assert RuntimeEnvironmentRecord.COLUMNS.index("pid") == (
        RuntimeEnvironmentRecord.COLUMNS.index("hostname") + 1
    )
    assert RuntimeEnvironmentRecord.COLUMNS.index("timestamp_unix_ns") == (
        RuntimeEnvironmentRecord.COLUMNS.index("pid") + 1
    )


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_to_dict_key_order_and_values(cls: type[Any]) -> None:
    values = _full_values(cls)
    record = cls(**values)
    out = record.to_dict()
    assert list(out) == ["stream", "schema_version", *(name for name, _, _ in CONTRACT[cls][2])]
    assert out["stream"] == CONTRACT[cls][0]
    assert out["schema_version"] == 1
    for name, value in values.items():
        assert out[name] == value
        assert out[name] is getattr(record, name)
    # A fresh dict each call: a caller may pop keys (the jsonl exporter drops hostname).
    out.pop("stream")
    assert record.to_dict()["stream"] == CONTRACT[cls][0]
    assert record.to_dict() is not record.to_dict()


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_positional_construction_follows_columns(cls: type[Any]) -> None:
    values = _full_values(cls)
    record = cls(*values.values())
    assert record == cls(**values)
    assert tuple(getattr(record, name) for name in cls.COLUMNS) == tuple(values.values())
    with pytest.raises(TypeError):
        cls(*list(values.values())[:-1])
    with pytest.raises(TypeError):
        cls(*values.values(), None)


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_frozen(cls: type[Any]) -> None:
    record = _make(cls)
    for name in cls.COLUMNS:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, name, None)
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(record, name)
    with pytest.raises((dataclasses.FrozenInstanceError, AttributeError, TypeError)):
        record.extra = 1
    assert not hasattr(record, "__dict__")
    assert record.to_dict() == _make(cls).to_dict()


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_equal_values_give_equal_records(cls: type[Any]) -> None:
    assert _make(cls) == _make(cls)
    first = CONTRACT[cls][2][0][0]
    assert _make(cls) != _make(cls, **{first: 1})


# -- None stays None, zero stays zero ---------------------------------------------


def _zero(typ: Any) -> Any:
    return {int: 0, float: 0.0, str: ""}[typ]


@pytest.mark.parametrize(
    ("cls", "name", "typ"), NULLABLE, ids=[f"{c.__name__}.{n}" for c, n, _ in NULLABLE]
)
def test_constructor_keeps_none_and_zero(cls: type[Any], name: str, typ: Any) -> None:
    none = _make(cls, **{name: None})
    assert getattr(none, name) is None
    assert none.to_dict()[name] is None
    zero = _make(cls, **{name: _zero(typ)})
    for value in (getattr(zero, name), zero.to_dict()[name]):
        assert value == _zero(typ)
        assert value is not None
        assert type(value) is typ


def _payload_for(stream: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A full envelope of the sampler behind ``stream``, and its one row (to edit)."""
    row: dict[str, Any]
    table = "T"
    if stream == "step_time":
        sampler = "StepTimeSampler"
        row = {"seq": 7, "timestamp": 1_700_000_000_000_000_001, "step": 12, "events": {}}
    elif stream == "step_memory":
        sampler = "StepMemorySampler"
        row = {
            "seq": 7,
            "ts": 1_700_000_000_000_000_001,
            "device": "cuda:0",
            "step": 12,
            "peak_alloc": 1024.0,
            "peak_resv": 2048.0,
        }
    elif stream in ("system", "system_gpu"):
        sampler = "SystemSampler"
        row = {
            "seq": 7,
            "ts": 1_700_000_000_000_000_001,
            "cpu": 12.5,
            "ram_used": 1e9,
            "ram_total": 2e9,
            "gpu_available": True,
            "gpu_count": 1,
            "gpus": [[50.0, 1e9, 8e9, 60.0, 200.0, 300.0]],
        }
    elif stream == "process":
        sampler = "ProcessSampler"
        row = {
            "seq": 7,
            "ts": 1_700_000_000_000_000_001,
            "cpu": 150.0,
            "cpu_cores": 8,
            "ram_used": 1e9,
            "ram_total": 2e9,
            "gpu_available": True,
            "gpu_count": 1,
            "gpu": {"device": 1, "mem_used": 1e9, "mem_reserved": 2e9, "mem_total": 8e9},
        }
    elif stream == "runtime_environment":
        sampler = "RuntimeEnvironmentSampler"
        row = {
            "seq": 7,
            "ts": 1_700_000_000_000_000_001,
            "topology": "single_node_multi_process",
            "distributed_initialized": True,
            "distributed_backend": "gloo",
            "training_strategy": "ddp",
            "strategy_source": "runtime_model",
            "strategy_confidence": "high",
        }
        table = "RuntimeEnvironmentTable"
    else:
        sampler = "Stdout/Stderr"
        row = {"line": "hello"}
    return envelope(sampler=sampler, rank=3, pid=4242, table=table, rows=[row]), row


# Where each nullable field comes from in the payload: (place, key), place being
# "meta", "row", "gpus" (index into the GPU entry) or "gpu" (the process gpu dict).
SOURCES: dict[str, tuple[str, Any]] = {
    "global_rank": ("meta", "global_rank"),
    "local_rank": ("meta", "local_rank"),
    "world_size": ("meta", "world_size"),
    "local_world_size": ("meta", "local_world_size"),
    "node_rank": ("meta", "node_rank"),
    "hostname": ("meta", "hostname"),
    "pid": ("meta", "pid"),
    "seq": ("row", "seq"),
    "step": ("row", "step"),
    "device": ("row", "device"),
    "peak_alloc_bytes": ("row", "peak_alloc"),
    "peak_reserved_bytes": ("row", "peak_resv"),
    "cpu_percent": ("row", "cpu"),
    "ram_used_bytes": ("row", "ram_used"),
    "ram_total_bytes": ("row", "ram_total"),
    "gpu_available": ("row", "gpu_available"),
    "gpu_count": ("row", "gpu_count"),
    "cpu_logical_core_count": ("row", "cpu_cores"),
    "topology": ("row", "topology"),
    "distributed_initialized": ("row", "distributed_initialized"),
    "distributed_backend": ("row", "distributed_backend"),
    "training_strategy": ("row", "training_strategy"),
    "strategy_source": ("row", "strategy_source"),
    "strategy_confidence": ("row", "strategy_confidence"),
    "util": ("gpus", 0),
    "mem_used_bytes": ("gpus", 1),
    "mem_total_bytes": ("gpus", 2),
    "temperature_c": ("gpus", 3),
    "power_usage_w": ("gpus", 4),
    "power_limit_w": ("gpus", 5),
    "gpu_device_index": ("gpu", "device"),
    "gpu_mem_used_bytes": ("gpu", "mem_used"),
    "gpu_mem_reserved_bytes": ("gpu", "mem_reserved"),
    "gpu_mem_total_bytes": ("gpu", "mem_total"),
}
BOOL01 = {"gpu_available", "distributed_initialized"}


def _set_source(
    stream: str, name: str, envelope: dict[str, Any], row: dict[str, Any], value: Any
) -> None:
    meta = envelope["meta"]
    if name == "rank":
        # The legacy alias: meta.rank is used when global_rank is absent.
        meta["global_rank"] = None
        meta["rank"] = value
    elif name == "timestamp_unix_ns":
        if stream == "stdout_stderr":
            meta["timestamp"] = value
        else:
            row["timestamp" if stream == "step_time" else "ts"] = value
    else:
        place, key = SOURCES[name]
        if place == "meta":
            meta[key] = value
        elif place == "row":
            row[key] = value
        elif place == "gpus":
            row["gpus"][0][key] = value
        else:
            row["gpu"][key] = value


def _source_zero(name: str, typ: Any) -> Any:
    # bool01 fields: the row's False is the measured 0 (a raw 0 is not a bool).
    return False if name in BOOL01 else _zero(typ)


@pytest.mark.parametrize(
    ("cls", "name", "typ"), NULLABLE, ids=[f"{c.__name__}.{n}" for c, n, _ in NULLABLE]
)
def test_mapper_keeps_none_and_zero(cls: type[Any], name: str, typ: Any) -> None:
    stream = cls.STREAM
    results = {}
    for label, source in (("none", None), ("zero", _source_zero(name, typ))):
        envelope, row = _payload_for(stream)
        _set_source(stream, name, envelope, row, source)
        batch = records_from_payload([envelope], observed_timestamp_unix_ns=5)
        assert batch.skipped == 0
        matching = [r for r in batch.records if type(r) is cls]
        assert len(matching) == 1, label
        results[label] = matching[0]
    assert getattr(results["none"], name) is None
    assert results["none"].to_dict()[name] is None
    zero = getattr(results["zero"], name)
    assert zero == _zero(typ)
    assert type(zero) is typ
    assert type(results["zero"].to_dict()[name]) is typ


@pytest.mark.parametrize("key", ["duration_ms", "cpu_ms", "gpu_ms", "n_calls", "is_gpu"])
def test_event_stats_keep_none_and_zero(key: str) -> None:
    zero: Any = {"n_calls": 0, "is_gpu": False}.get(key, 0.0)
    for source in (None, zero):
        stats = {"is_gpu": True, "duration_ms": 2.0, "cpu_ms": 1.0, "gpu_ms": 2.0, "n_calls": 1}
        stats[key] = source
        envelope, row = _payload_for("step_time")
        row["events"] = {"_traceml_internal:forward_time": {"cuda:0": stats}}
        (record,) = records_from_payload(envelope, observed_timestamp_unix_ns=1).records
        value = record.events["_traceml_internal:forward_time"]["cuda:0"][key]
        assert value == source
        assert type(value) is type(source)


# -- events ------------------------------------------------------------------------


def test_step_time_events_is_a_plain_nested_dict() -> None:
    envelope, row = _payload_for("step_time")
    row["events"] = {
        "_traceml_internal:forward_time": {
            "cuda:0": {"is_gpu": True, "duration_ms": 2, "cpu_ms": 1.5, "gpu_ms": 2.0, "n_calls": 1}
        }
    }
    (record,) = records_from_payload(envelope, observed_timestamp_unix_ns=1).records
    out = record.to_dict()
    assert type(out["events"]) is dict
    by_device = out["events"]["_traceml_internal:forward_time"]
    assert type(by_device) is dict
    assert type(by_device["cuda:0"]) is dict
    assert by_device["cuda:0"] == {
        "is_gpu": True,
        "duration_ms": 2.0,
        "cpu_ms": 1.5,
        "gpu_ms": 2.0,
        "n_calls": 1,
    }
    assert list(by_device["cuda:0"]) == ["is_gpu", "duration_ms", "cpu_ms", "gpu_ms", "n_calls"]
    # to_dict hands out the record's own map (documented: read-only, not a copy),
    # which is what keeps it far cheaper than dataclasses.asdict.
    assert out["events"] is record.events
    assert dataclasses.asdict(record)["events"] == record.events


def test_empty_events_is_an_empty_map_not_none() -> None:
    envelope, row = _payload_for("step_time")
    del row["events"]
    (record,) = records_from_payload(envelope, observed_timestamp_unix_ns=1).records
    assert record.events == {}
    assert type(record.events) is dict


# -- record tables, lookups and keys -------------------------------------------------


def test_record_types_in_contract_order() -> None:
    assert (
        StepTimeRecord,
        StepMemoryRecord,
        SystemRecord,
        SystemGpuRecord,
        ProcessRecord,
        RuntimeEnvironmentRecord,
        StdoutStderrRecord,
    ) == RECORD_TYPES


def test_record_type_by_stream() -> None:
    assert {
        "step_time": StepTimeRecord,
        "step_memory": StepMemoryRecord,
        "system": SystemRecord,
        "system_gpu": SystemGpuRecord,
        "process": ProcessRecord,
        "runtime_environment": RuntimeEnvironmentRecord,
        "stdout_stderr": StdoutStderrRecord,
    } == RECORD_TYPE_BY_STREAM
    assert list(RECORD_TYPE_BY_STREAM) == [cls.STREAM for cls in RECORD_TYPES]


def test_everything_public_is_importable_from_the_package() -> None:
    for name in sdk.__all__:
        assert hasattr(sdk, name), name
    for cls in ALL_CLASSES:
        assert cls.__name__ in sdk.__all__


KEYS: list[tuple[type[Any], Callable[[Any], Any]]] = [
    (StepTimeRecord, lambda r: (r.global_rank, r.step)),
    (StepMemoryRecord, lambda r: (r.global_rank, r.device, r.step)),
    (SystemRecord, lambda r: (r.global_rank, r.seq)),
    (SystemGpuRecord, lambda r: (r.global_rank, r.seq, r.gpu_idx)),
    (ProcessRecord, lambda r: (r.global_rank, r.seq)),
    (RuntimeEnvironmentRecord, lambda r: r.global_rank),
    (StdoutStderrRecord, lambda r: None),
]


@pytest.mark.parametrize(("cls", "expected"), KEYS, ids=[c.__name__ for c, _ in KEYS])
def test_stream_key(cls: type[Any], expected: Callable[[Any], Any]) -> None:
    record = _make(cls)
    key = stream_key(record)
    assert key == expected(record)
    hash(key)
    if cls is not StdoutStderrRecord:
        assert key is not None
        # Records that differ only in a non-key field share the key.
        other = _make(cls, observed_timestamp_unix_ns=1)
        assert stream_key(other) == key


def test_stream_key_values() -> None:
    assert stream_key(_make(StepTimeRecord, global_rank=2, step=9)) == (2, 9)
    assert stream_key(_make(StepMemoryRecord, global_rank=2, device="cuda:1", step=9)) == (
        2,
        "cuda:1",
        9,
    )
    assert stream_key(_make(SystemRecord, global_rank=0, seq=4)) == (0, 4)
    assert stream_key(_make(SystemGpuRecord, global_rank=0, seq=4, gpu_idx=3)) == (0, 4, 3)
    assert stream_key(_make(ProcessRecord, global_rank=5, seq=4)) == (5, 4)
    assert stream_key(_make(RuntimeEnvironmentRecord, global_rank=5)) == 5
    assert stream_key(_make(StdoutStderrRecord)) is None
    # A step record is not keyed on seq: two steps of one tick have different keys.
    assert stream_key(_make(StepTimeRecord, seq=1, step=1)) != stream_key(
        _make(StepTimeRecord, seq=1, step=2)
    )


@dataclasses.dataclass(frozen=True)
class ForeignStepTime:
    """A record defined elsewhere (as TraceML's own classes are), same STREAM and fields."""

    STREAM: typing.ClassVar[str] = "step_time"
    global_rank: int | None
    step: int | None


@dataclasses.dataclass(frozen=True)
class ForeignGpu:
    STREAM: typing.ClassVar[str] = "system_gpu"
    global_rank: int | None
    seq: int | None
    gpu_idx: int


@dataclasses.dataclass(frozen=True)
class ForeignRuntime:
    STREAM: typing.ClassVar[str] = "runtime_environment"
    global_rank: int | None


@dataclasses.dataclass(frozen=True)
class ForeignLine:
    STREAM: typing.ClassVar[str] = "stdout_stderr"
    line: str


def test_stream_key_works_on_non_sdk_classes() -> None:
    assert stream_key(ForeignStepTime(global_rank=1, step=2)) == (1, 2)  # type: ignore[arg-type]
    assert stream_key(ForeignGpu(global_rank=0, seq=3, gpu_idx=7)) == (0, 3, 7)  # type: ignore[arg-type]
    assert stream_key(ForeignRuntime(global_rank=4)) == 4  # type: ignore[arg-type]
    assert stream_key(ForeignLine(line="x")) is None  # type: ignore[arg-type]


def test_stream_key_unknown_stream_raises() -> None:
    @dataclasses.dataclass
    class Unknown:
        STREAM: typing.ClassVar[str] = "gpu_temperature"
        global_rank: int = 0

    with pytest.raises(ValueError, match="gpu_temperature"):
        stream_key(Unknown())  # type: ignore[arg-type]


# -- RecordBatch ---------------------------------------------------------------------


def test_record_batch() -> None:
    records: list[Any] = [_make(StepTimeRecord), _make(StdoutStderrRecord)]
    batch = RecordBatch(records, 3)
    assert batch.records is records
    assert batch.skipped == 3
    assert [f.name for f in dataclasses.fields(RecordBatch)] == ["records", "skipped"]
    assert batch == RecordBatch(list(records), 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.skipped = 0  # type: ignore[misc]


def test_records_from_payload_returns_a_record_batch() -> None:
    envelope, _ = _payload_for("process")
    batch = records_from_payload(envelope, observed_timestamp_unix_ns=1)
    assert type(batch) is RecordBatch
    assert type(batch.records) is list
    assert type(batch.skipped) is int
