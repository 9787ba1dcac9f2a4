"""The seven export records: one frozen dataclass per SQLite projection table.

Field names, order and types follow TraceML's export-records contract. Code that
consumes records (exporters, the worker, the conformance suite) relies only on
``STREAM``, ``COLUMNS``, the fields and ``to_dict()``, because in production the
records are TraceML's own classes, not these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypedDict, TypeVar

__all__ = [
    "RECORD_TYPES",
    "RECORD_TYPE_BY_STREAM",
    "SCHEMA_VERSION",
    "EventStats",
    "ExportRecord",
    "ProcessRecord",
    "Record",
    "RecordBatch",
    "RuntimeEnvironmentRecord",
    "StdoutStderrRecord",
    "StepMemoryRecord",
    "StepTimeRecord",
    "SystemGpuRecord",
    "SystemRecord",
    "stream_key",
]

SCHEMA_VERSION = 1


class EventStats(TypedDict):
    """One phase of one step on one device: ``events[name][device]``."""

    is_gpu: bool | None
    duration_ms: float | None
    cpu_ms: float | None
    gpu_ms: float | None
    n_calls: int | None


class ExportRecord(Protocol):
    """What every record offers, whoever defined its class (SDK or TraceML)."""

    STREAM: ClassVar[str]
    SCHEMA_VERSION: ClassVar[int]
    COLUMNS: ClassVar[tuple[str, ...]]

    def to_dict(self) -> dict[str, Any]: ...


class _RecordBase:
    """Class attributes and ``to_dict`` shared by the seven record classes."""

    __slots__ = ()

    STREAM: ClassVar[str]
    SCHEMA_VERSION: ClassVar[int] = SCHEMA_VERSION
    COLUMNS: ClassVar[tuple[str, ...]]

    def to_dict(self) -> dict[str, Any]:
        """Return ``stream``, ``schema_version``, then every field in order.

        Replaced per class by generated code (see ``_finish``); StepTimeRecord's
        ``events`` is the record's own map, not a copy, so treat it as read-only.
        """
        out: dict[str, Any] = {"stream": self.STREAM, "schema_version": self.SCHEMA_VERSION}
        for name in self.COLUMNS:
            out[name] = getattr(self, name)
        return out


_R = TypeVar("_R", bound=type[_RecordBase])

_SET_CLASS = object.__dict__["__class__"].__set__
_BUILDERS: dict[type[Any], Callable[..., Any]] = {}
_TWINS: dict[type[Any], type[Any]] = {}


def builder(record_type: type[Any]) -> Callable[..., Any]:
    """The fast positional constructor of an SDK record class: ``builder(cls)(*fields)``.

    Equal to ``cls(*fields)``; the mapper and the backfill reader use it per row.
    """
    return _BUILDERS[record_type]


def twin(record_type: type[Any]) -> type[Any]:
    """The record class's twin (see ``_finish``), for code that fills records field by field.

    ``r = object.__new__(twin(cls))``, set every field, then ``r.__class__ = cls``.
    """
    return _TWINS[record_type]


def _finish(stream: str) -> Any:
    """Set STREAM and COLUMNS, and swap in generated ``to_dict``/``__init__``.

    A frozen dataclass stores each field through ``object.__setattr__`` (its own
    ``__setattr__`` raises), about 45 ns a field. The generated code fills a twin
    class instead: same slots, same base, no ``__setattr__`` of its own, so each
    store is the interpreter's plain slot store; then the instance's class is set
    to the record class, which the identical layout allows. The record that comes
    out is the frozen dataclass, every guarantee kept (``__setattr__`` still
    raises); building it costs a third of what it did.
    """

    def wrap(cls: _R) -> _R:
        names = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
        cls.STREAM = stream
        cls.COLUMNS = names
        fields_class = type(f"_{cls.__name__}Fields", cls.__bases__, {"__slots__": names})
        namespace: dict[str, Any] = {
            "_new": object.__new__,
            "_twin": fields_class,
            "_cls": cls,
            "_set_class": _SET_CLASS,
        }
        params = ", ".join(names)
        stores = "".join(f"    self.{name} = {name}\n" for name in names)
        dict_items = [f"'stream': {stream!r}", f"'schema_version': {SCHEMA_VERSION}"]
        dict_items += [f"{name!r}: self.{name}" for name in names]
        source = (
            f"def __init__(self, {params}):\n    _set_class(self, _twin)\n{stores}"
            "    self.__class__ = _cls\n"
            f"def build({params}):\n    self = _new(_twin)\n{stores}"
            "    self.__class__ = _cls\n    return self\n"
            "def to_dict(self):\n    return {" + ", ".join(dict_items) + "}\n"
        )
        exec(source, namespace)  # noqa: S102 - generated from the class's own field names
        init = namespace["__init__"]
        init.__qualname__ = f"{cls.__qualname__}.__init__"
        init.__doc__ = cls.__init__.__doc__
        to_dict = namespace["to_dict"]
        to_dict.__qualname__ = f"{cls.__qualname__}.to_dict"
        to_dict.__doc__ = _RecordBase.to_dict.__doc__
        build = namespace["build"]
        build.__qualname__ = f"builder({cls.__qualname__})"
        cls.__init__ = init  # type: ignore[method-assign]
        cls.to_dict = to_dict  # type: ignore[method-assign]
        _BUILDERS[cls] = build
        _TWINS[cls] = fields_class
        return cls

    return wrap


@_finish("step_time")
@dataclass(frozen=True, slots=True)
class StepTimeRecord(_RecordBase):
    """One step of one rank, with the decoded events map (``events[name][device]``)."""

    observed_timestamp_unix_ns: int
    rank: int | None
    global_rank: int | None
    local_rank: int | None
    world_size: int | None
    local_world_size: int | None
    node_rank: int | None
    hostname: str | None
    timestamp_unix_ns: int | None
    seq: int | None
    step: int | None
    events: dict[str, dict[str, EventStats]]


@_finish("step_memory")
@dataclass(frozen=True, slots=True)
class StepMemoryRecord(_RecordBase):
    """Peak allocated and reserved memory on one device during one step."""

    observed_timestamp_unix_ns: int
    rank: int | None
    global_rank: int | None
    local_rank: int | None
    world_size: int | None
    local_world_size: int | None
    node_rank: int | None
    hostname: str | None
    timestamp_unix_ns: int | None
    seq: int | None
    device: str | None
    step: int | None
    peak_alloc_bytes: float | None
    peak_reserved_bytes: float | None


@_finish("system")
@dataclass(frozen=True, slots=True)
class SystemRecord(_RecordBase):
    """One host-level system snapshot; no ``rank`` field, as its row has none."""

    observed_timestamp_unix_ns: int
    global_rank: int | None
    local_rank: int | None
    world_size: int | None
    local_world_size: int | None
    node_rank: int | None
    hostname: str | None
    timestamp_unix_ns: int | None
    seq: int | None
    cpu_percent: float | None
    ram_used_bytes: float | None
    ram_total_bytes: float | None
    gpu_available: int | None
    gpu_count: int | None


@_finish("system_gpu")
@dataclass(frozen=True, slots=True)
class SystemGpuRecord(_RecordBase):
    """One GPU of a system snapshot; ``gpu_idx`` is its position in the snapshot."""

    observed_timestamp_unix_ns: int
    global_rank: int | None
    local_rank: int | None
    world_size: int | None
    local_world_size: int | None
    node_rank: int | None
    hostname: str | None
    timestamp_unix_ns: int | None
    seq: int | None
    gpu_idx: int
    util: float | None
    mem_used_bytes: float | None
    mem_total_bytes: float | None
    temperature_c: float | None
    power_usage_w: float | None
    power_limit_w: float | None


@_finish("process")
@dataclass(frozen=True, slots=True)
class ProcessRecord(_RecordBase):
    """One training-process snapshot of one rank."""

    observed_timestamp_unix_ns: int
    rank: int | None
    global_rank: int | None
    local_rank: int | None
    world_size: int | None
    local_world_size: int | None
    node_rank: int | None
    hostname: str | None
    timestamp_unix_ns: int | None
    seq: int | None
    cpu_percent: float | None
    cpu_logical_core_count: int | None
    ram_used_bytes: float | None
    ram_total_bytes: float | None
    gpu_available: int | None
    gpu_count: int | None
    gpu_device_index: int | None
    gpu_mem_used_bytes: float | None
    gpu_mem_reserved_bytes: float | None
    gpu_mem_total_bytes: float | None


@_finish("runtime_environment")
@dataclass(frozen=True, slots=True)
class RuntimeEnvironmentRecord(_RecordBase):
    """A rank's topology, torch.distributed state and detected training strategy."""

    observed_timestamp_unix_ns: int
    rank: int | None
    global_rank: int | None
    local_rank: int | None
    world_size: int | None
    local_world_size: int | None
    node_rank: int | None
    hostname: str | None
    pid: int | None
    timestamp_unix_ns: int | None
    seq: int | None
    topology: str | None
    distributed_initialized: int | None
    distributed_backend: str | None
    training_strategy: str | None
    strategy_source: str | None
    strategy_confidence: str | None


@_finish("stdout_stderr")
@dataclass(frozen=True, slots=True)
class StdoutStderrRecord(_RecordBase):
    """One captured stdout/stderr line of a rank (``rank`` is its global rank)."""

    observed_timestamp_unix_ns: int
    rank: int | None
    timestamp_unix_ns: int | None
    line: str


Record = (
    StepTimeRecord
    | StepMemoryRecord
    | SystemRecord
    | SystemGpuRecord
    | ProcessRecord
    | RuntimeEnvironmentRecord
    | StdoutStderrRecord
)
"""Any of the SDK's seven record classes."""

RECORD_TYPES: tuple[type[Record], ...] = (
    StepTimeRecord,
    StepMemoryRecord,
    SystemRecord,
    SystemGpuRecord,
    ProcessRecord,
    RuntimeEnvironmentRecord,
    StdoutStderrRecord,
)
"""The record classes in the contract's record-table order."""

RECORD_TYPE_BY_STREAM: dict[str, type[Record]] = {t.STREAM: t for t in RECORD_TYPES}
"""STREAM name -> record class."""

_KEY_FIELDS: dict[str, tuple[str, ...] | None] = {
    "step_time": ("global_rank", "step"),
    "step_memory": ("global_rank", "device", "step"),
    "system": ("global_rank", "seq"),
    "system_gpu": ("global_rank", "seq", "gpu_idx"),
    "process": ("global_rank", "seq"),
    "runtime_environment": ("global_rank",),
    "stdout_stderr": None,
}


def stream_key(record: ExportRecord) -> Hashable:
    """Return the key that identifies one row of the record's stream.

    ``(global_rank, step)`` for step_time, ... , ``global_rank`` alone for
    runtime_environment and ``None`` for stdout_stderr (read lines in order).
    Works on any record with ``STREAM`` and the fields, not only SDK classes.
    """
    try:
        fields = _KEY_FIELDS[record.STREAM]
    except KeyError:
        raise ValueError(
            f"unknown STREAM {record.STREAM!r}; known streams: {', '.join(_KEY_FIELDS)}"
        ) from None
    if fields is None:
        return None
    if len(fields) == 1:
        return getattr(record, fields[0])  # type: ignore[no-any-return]
    return tuple(getattr(record, name) for name in fields)


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """What ``records_from_payload`` returns: the records and the skipped units."""

    records: list[Record]
    skipped: int
