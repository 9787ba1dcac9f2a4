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

from .coerce import (
    as_str,
    bool01,
    careful_events,
    identity_fields,
    opt_int,
    opt_str,
    rows_of,
    to_float,
    to_int,
    to_str,
    unix_ns,
)
from ..records import (
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
    return opt_str(value)


def _is_mapping(value: Any) -> bool:
    return type(value) is dict or isinstance(value, Mapping)


# -- projections, in writer order ---------------------------------------------


def _runtime_environment(meta: Meta, tables: Mapping[Any, Any], observed: int) -> Rows:
    out: list[Row] = []
    rows = tables.get("RuntimeEnvironmentTable") if isinstance(tables, dict) else None
    if isinstance(rows, list):
        ident = identity_fields(meta)
        pid = opt_int(meta.get("pid"))
        for row in rows:
            if not isinstance(row, dict):
                continue
            get = row.get
            out.append(
                (
                    observed,
                    *ident,
                    pid,
                    unix_ns(get("ts")),
                    opt_int(get("seq")),
                    opt_str(get("topology")),
                    bool01(get("distributed_initialized")),
                    opt_str(get("distributed_backend")),
                    opt_str(get("training_strategy")),
                    opt_str(get("strategy_source")),
                    opt_str(get("strategy_confidence")),
                )
            )
    return {"runtime_environment": out}


# Each projection keeps the identity in locals rather than splicing ``*ident`` into
# every row: a flat tuple display builds about twice as fast.


def _system(meta: Meta, tables: Mapping[Any, Any], observed: int) -> Rows:
    samples: list[Row] = []
    gpu_samples: list[Row] = []
    rows = rows_of(tables)
    if rows:
        # No rank column: the legacy alias is ignored.
        global_rank, local_rank, world_size, local_world_size, node_rank, hostname = (
            identity_fields(meta)[1:]
        )
        for row in rows:
            get = row.get
            ts = unix_ns(get("ts"))
            seq = to_int(get("seq"))
            gpus = get("gpus")
            if isinstance(gpus, list):
                for gpu_idx, gpu in enumerate(gpus):
                    if not (isinstance(gpu, list) and len(gpu) >= 6):
                        continue
                    # Eight GPUs a snapshot: plain floats skip the to_float call.
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
                            util if type(util) is float else to_float(util),
                            mem_used if type(mem_used) is float else to_float(mem_used),
                            mem_total if type(mem_total) is float else to_float(mem_total),
                            temp if type(temp) is float else to_float(temp),
                            power if type(power) is float else to_float(power),
                            limit if type(limit) is float else to_float(limit),
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
                    to_float(get("cpu")),
                    to_float(get("ram_used")),
                    to_float(get("ram_total")),
                    bool01(get("gpu_available")),
                    to_int(get("gpu_count")),
                )
            )
    return {"system_samples": samples, "system_gpu_samples": gpu_samples}


def _process(meta: Meta, tables: Mapping[Any, Any], observed: int) -> Rows:
    out: list[Row] = []
    rows = rows_of(tables)
    if rows:
        rank, global_rank, local_rank, world_size, local_world_size, node_rank, hostname = (
            identity_fields(meta)
        )
        for row in rows:
            get = row.get
            gpu = get("gpu")
            if isinstance(gpu, dict):
                device: int | None = to_int(gpu.get("device"))
                mem_used: float | None = to_float(gpu.get("mem_used"))
                mem_reserved: float | None = to_float(gpu.get("mem_reserved"))
                mem_total: float | None = to_float(gpu.get("mem_total"))
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
                    unix_ns(get("ts")),
                    to_int(get("seq")),
                    to_float(get("cpu")),
                    to_int(get("cpu_cores")),
                    to_float(get("ram_used")),
                    to_float(get("ram_total")),
                    bool01(get("gpu_available")),
                    to_int(get("gpu_count")),
                    device,
                    mem_used,
                    mem_reserved,
                    mem_total,
                )
            )
    return {"process_samples": out}


def _step_time(meta: Meta, tables: Mapping[Any, Any], observed: int) -> Rows:
    out: list[Row] = []
    rows = rows_of(tables)
    if rows:
        rank, global_rank, local_rank, world_size, local_world_size, node_rank, hostname = (
            identity_fields(meta)
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
                    unix_ns(get("timestamp")),
                    to_int(get("seq")),
                    to_int(get("step")),
                    careful_events(get("events")),
                )
            )
    return {"step_time_samples": out}


def _step_memory(meta: Meta, tables: Mapping[Any, Any], observed: int) -> Rows:
    out: list[Row] = []
    rows = rows_of(tables)
    if rows:
        rank, global_rank, local_rank, world_size, local_world_size, node_rank, hostname = (
            identity_fields(meta)
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
                    unix_ns(get("ts")),
                    to_int(get("seq")),
                    to_str(get("device")),
                    to_int(get("step")),
                    to_float(get("peak_alloc")),
                    to_float(get("peak_resv")),
                )
            )
    return {"step_memory_samples": out}


def _stdout_stderr(meta: Meta, tables: Mapping[Any, Any], observed: int) -> Rows:
    out: list[Row] = []
    rows = rows_of(tables)
    if rows:
        rank = identity_fields(meta)[0]
        ts = unix_ns(meta.get("timestamp"))
        for row in rows:
            line = row.get("line")
            if line is None:
                continue
            if type(line) is not str:
                line = as_str(line)
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
