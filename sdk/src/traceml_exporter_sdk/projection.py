"""Telemetry envelope -> projection table rows, as TraceML's SQLite writers do it.

Each projection accepts one sampler and writes one or more tables; a row is a
tuple of the table's columns in order, minus the autoincrement id, with the
two differences the contract names: ``timestamp_unix_ns`` keeps only integer
nanoseconds and step_time rows carry the decoded ``events`` map instead of
``events_json`` text. The coercions mirror traceml-ai 0.5.0's
``aggregator/sqlite_writers`` (see ``wire-format.md``); ``tests/`` checks them
against that code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .records import (
    EventStats,
    ProcessRecord,
    Record,
    RuntimeEnvironmentRecord,
    StdoutStderrRecord,
    StepMemoryRecord,
    StepTimeRecord,
    SystemGpuRecord,
    SystemRecord,
)

__all__ = ["PROJECTIONS", "TABLE_RECORDS", "Projection", "normalise_envelope"]

Row = tuple[Any, ...]
Rows = dict[str, list[Row]]
Meta = Mapping[Any, Any]


@dataclass(frozen=True, slots=True)
class Projection:
    """One sampler's projection: the tables it writes, in writer order, and its builder."""

    sampler: str
    tables: tuple[str, ...]
    build: Callable[[Meta, Mapping[Any, Any], int], Rows]


def normalise_envelope(raw: Any) -> tuple[Meta, Mapping[Any, Any]] | None:
    """Return ``(meta, tables)`` for a canonical or legacy flat envelope, else None.

    Canonical: ``{"meta": {...}, "body": {"tables": {...}}}``; legacy flat: the
    meta keys at top level beside a ``"tables"`` mapping. A body without a
    tables mapping gives an envelope with no tables.
    """
    if not _is_mapping(raw):
        return None
    meta = raw.get("meta")
    body = raw.get("body")
    if _is_mapping(meta) and _is_mapping(body):
        tables = body.get("tables")
        return meta, (tables if _is_mapping(tables) else {})
    tables = raw.get("tables")
    if _is_mapping(tables):
        return raw, tables
    return None


def sampler_of(meta: Meta) -> str | None:
    """The envelope's ``meta.sampler`` as a string (best effort, like TraceML)."""
    value = meta.get("sampler")
    if type(value) is str:
        return value
    return _opt_str(value)


def _is_mapping(value: Any) -> bool:
    return type(value) is dict or isinstance(value, Mapping)


# -- coercions ---------------------------------------------------------------
# ``_opt_*``: identity and best-effort fields (anything that raises is None).
# ``_int``/``_float``/``_str``/``_bool01``/``_time``: strict row fields.


def _opt_int(value: Any) -> int | None:
    if type(value) is int or value is None:
        return value
    try:
        return int(value)
    except Exception:
        return None


def _opt_str(value: Any) -> str | None:
    if type(value) is str or value is None:
        return value
    try:
        return _as_str(value)
    except Exception:
        return None


def _as_str(value: Any) -> str:
    """``str(value)`` as a plain ``str``: ``__str__`` may return a str subclass.

    Raises whatever ``str(value)`` raises, as TraceML's ``str()`` does.
    """
    out = str(value)
    return out if type(out) is str else str.__str__(out)


def _int(value: Any) -> int | None:
    if type(value) is int:
        return value
    return int(value) if isinstance(value, int) else None


def _float(value: Any) -> float | None:
    if type(value) is float:
        return value
    return float(value) if isinstance(value, (int, float)) else None


def _str(value: Any) -> str | None:
    if type(value) is str:
        return value
    return _as_str(value) if isinstance(value, str) else None


def _bool01(value: Any) -> int | None:
    if value is True:
        return 1
    if value is False:
        return 0
    return None


def _time(value: Any) -> int | None:
    """Integer Unix nanoseconds; float seconds from older ranks give None."""
    if type(value) is int:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    return None


def _identity(
    meta: Meta,
) -> tuple[int | None, int | None, int | None, int | None, int | None, int | None, str | None]:
    """``(rank, global_rank, local_rank, world_size, local_world_size, node_rank, hostname)``."""
    global_rank = _opt_int(meta.get("global_rank"))
    rank = global_rank if global_rank is not None else _opt_int(meta.get("rank"))
    return (
        rank,
        global_rank,
        _opt_int(meta.get("local_rank")),
        _opt_int(meta.get("world_size")),
        _opt_int(meta.get("local_world_size")),
        _opt_int(meta.get("node_rank")),
        _opt_str(meta.get("hostname")),
    )


def _rows_of(tables: Mapping[Any, Any]) -> list[dict[Any, Any]]:
    """Every dict row of every list in ``tables`` (TraceML ignores table names)."""
    if not isinstance(tables, dict):
        return []
    return [
        row
        for rows in tables.values()
        if isinstance(rows, list)
        for row in rows
        if isinstance(row, dict)
    ]


# -- projections, in writer order ---------------------------------------------


def _runtime_environment(meta: Meta, tables: Mapping[Any, Any], observed: int) -> Rows:
    out: list[Row] = []
    rows = tables.get("RuntimeEnvironmentTable") if isinstance(tables, dict) else None
    if isinstance(rows, list):
        identity = _identity(meta)
        pid = _opt_int(meta.get("pid"))
        for row in rows:
            if not isinstance(row, dict):
                continue
            get = row.get
            out.append(
                (
                    observed,
                    *identity,
                    pid,
                    _time(get("ts")),
                    _opt_int(get("seq")),
                    _opt_str(get("topology")),
                    _bool01(get("distributed_initialized")),
                    _opt_str(get("distributed_backend")),
                    _opt_str(get("training_strategy")),
                    _opt_str(get("strategy_source")),
                    _opt_str(get("strategy_confidence")),
                )
            )
    return {"runtime_environment": out}


# Each projection keeps the identity in locals rather than splicing ``*ident`` into
# every row: a flat tuple display builds about twice as fast.


def _system(meta: Meta, tables: Mapping[Any, Any], observed: int) -> Rows:
    samples: list[Row] = []
    gpu_samples: list[Row] = []
    rows = _rows_of(tables)
    if rows:
        # No rank column: the legacy alias is ignored.
        global_rank, local_rank, world_size, local_world_size, node_rank, hostname = _identity(
            meta
        )[1:]
        for row in rows:
            get = row.get
            ts = _time(get("ts"))
            seq = _int(get("seq"))
            gpus = get("gpus")
            if isinstance(gpus, list):
                for gpu_idx, gpu in enumerate(gpus):
                    if not (isinstance(gpu, list) and len(gpu) >= 6):
                        continue
                    # Eight GPUs a snapshot: plain floats skip the _float call.
                    util, mem_used, mem_total, temp, power, limit = (
                        gpu[0],
                        gpu[1],
                        gpu[2],
                        gpu[3],
                        gpu[4],
                        gpu[5],
                    )
                    gpu_samples.append(
                        (
                            observed,
                            global_rank,
                            local_rank,
                            world_size,
                            local_world_size,
                            node_rank,
                            hostname,
                            ts,
                            seq,
                            gpu_idx,
                            util if type(util) is float else _float(util),
                            mem_used if type(mem_used) is float else _float(mem_used),
                            mem_total if type(mem_total) is float else _float(mem_total),
                            temp if type(temp) is float else _float(temp),
                            power if type(power) is float else _float(power),
                            limit if type(limit) is float else _float(limit),
                        )
                    )
            samples.append(
                (
                    observed,
                    global_rank,
                    local_rank,
                    world_size,
                    local_world_size,
                    node_rank,
                    hostname,
                    ts,
                    seq,
                    _float(get("cpu")),
                    _float(get("ram_used")),
                    _float(get("ram_total")),
                    _bool01(get("gpu_available")),
                    _int(get("gpu_count")),
                )
            )
    return {"system_samples": samples, "system_gpu_samples": gpu_samples}


def _process(meta: Meta, tables: Mapping[Any, Any], observed: int) -> Rows:
    out: list[Row] = []
    rows = _rows_of(tables)
    if rows:
        rank, global_rank, local_rank, world_size, local_world_size, node_rank, hostname = (
            _identity(meta)
        )
        for row in rows:
            get = row.get
            gpu = get("gpu")
            if isinstance(gpu, dict):
                device: int | None = _int(gpu.get("device"))
                mem_used: float | None = _float(gpu.get("mem_used"))
                mem_reserved: float | None = _float(gpu.get("mem_reserved"))
                mem_total: float | None = _float(gpu.get("mem_total"))
            else:
                device = mem_used = mem_reserved = mem_total = None
            out.append(
                (
                    observed,
                    rank,
                    global_rank,
                    local_rank,
                    world_size,
                    local_world_size,
                    node_rank,
                    hostname,
                    _time(get("ts")),
                    _int(get("seq")),
                    _float(get("cpu")),
                    _int(get("cpu_cores")),
                    _float(get("ram_used")),
                    _float(get("ram_total")),
                    _bool01(get("gpu_available")),
                    _int(get("gpu_count")),
                    device,
                    mem_used,
                    mem_reserved,
                    mem_total,
                )
            )
    return {"process_samples": out}


def _events(raw: Any) -> dict[str, dict[str, EventStats]]:
    """Keep ``events[name][device]`` stats exactly as TraceML's ``_normalize_events``."""
    out: dict[str, dict[str, EventStats]] = {}
    if not isinstance(raw, dict):
        return out
    for event_name, by_device in raw.items():
        if not isinstance(by_device, dict):
            continue
        event_key = event_name if type(event_name) is str else _as_str(event_name)
        devices: dict[str, EventStats] = {}
        out[event_key] = devices
        for device, stats in by_device.items():
            if not isinstance(stats, dict):
                continue
            get = stats.get
            is_gpu = get("is_gpu")
            devices[device if type(device) is str else _as_str(device)] = {
                "is_gpu": is_gpu if is_gpu is True or is_gpu is False else None,
                "duration_ms": _float(get("duration_ms")),
                "cpu_ms": _float(get("cpu_ms")),
                "gpu_ms": _float(get("gpu_ms")),
                "n_calls": _int(get("n_calls")),
            }
        if not devices:
            del out[event_key]
    return out


def _step_time(meta: Meta, tables: Mapping[Any, Any], observed: int) -> Rows:
    out: list[Row] = []
    rows = _rows_of(tables)
    if rows:
        rank, global_rank, local_rank, world_size, local_world_size, node_rank, hostname = (
            _identity(meta)
        )
        for row in rows:
            get = row.get
            out.append(
                (
                    observed,
                    rank,
                    global_rank,
                    local_rank,
                    world_size,
                    local_world_size,
                    node_rank,
                    hostname,
                    _time(get("timestamp")),
                    _int(get("seq")),
                    _int(get("step")),
                    _events(get("events")),
                )
            )
    return {"step_time_samples": out}


def _step_memory(meta: Meta, tables: Mapping[Any, Any], observed: int) -> Rows:
    out: list[Row] = []
    rows = _rows_of(tables)
    if rows:
        rank, global_rank, local_rank, world_size, local_world_size, node_rank, hostname = (
            _identity(meta)
        )
        for row in rows:
            get = row.get
            out.append(
                (
                    observed,
                    rank,
                    global_rank,
                    local_rank,
                    world_size,
                    local_world_size,
                    node_rank,
                    hostname,
                    _time(get("ts")),
                    _int(get("seq")),
                    _str(get("device")),
                    _int(get("step")),
                    _float(get("peak_alloc")),
                    _float(get("peak_resv")),
                )
            )
    return {"step_memory_samples": out}


def _stdout_stderr(meta: Meta, tables: Mapping[Any, Any], observed: int) -> Rows:
    out: list[Row] = []
    rows = _rows_of(tables)
    if rows:
        rank = _identity(meta)[0]
        ts = _time(meta.get("timestamp"))
        for row in rows:
            line = row.get("line")
            if line is None:
                continue
            if type(line) is not str:
                line = _as_str(line)
            if line:
                out.append((observed, rank, ts, line))
    return {"stdout_stderr_samples": out}


PROJECTIONS: tuple[Projection, ...] = (
    Projection("RuntimeEnvironmentSampler", ("runtime_environment",), _runtime_environment),
    Projection("SystemSampler", ("system_samples", "system_gpu_samples"), _system),
    Projection("ProcessSampler", ("process_samples",), _process),
    Projection("StepTimeSampler", ("step_time_samples",), _step_time),
    Projection("StepMemorySampler", ("step_memory_samples",), _step_memory),
    Projection("Stdout/Stderr", ("stdout_stderr_samples",), _stdout_stderr),
)
"""Every projection, in the writer's order."""

TABLE_RECORDS: dict[str, type[Record]] = {
    "runtime_environment": RuntimeEnvironmentRecord,
    "system_samples": SystemRecord,
    "system_gpu_samples": SystemGpuRecord,
    "process_samples": ProcessRecord,
    "step_time_samples": StepTimeRecord,
    "step_memory_samples": StepMemoryRecord,
    "stdout_stderr_samples": StdoutStderrRecord,
}
"""Projection table -> the record that carries its rows."""

PROJECTION_BY_SAMPLER: dict[str, Projection] = {p.sampler: p for p in PROJECTIONS}
