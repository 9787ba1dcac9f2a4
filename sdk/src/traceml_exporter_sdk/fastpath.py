"""The mapper's fast path: one envelope straight to records, per table, no row tuples.

Each builder here is the projection of the same name in ``projection.py`` (the
careful path, which stays the reference), written out per table: every value that
already has its field's exact type is taken as it is, anything else goes through
the careful path's own coercion, so the records are equal by construction. The
records are filled field by field (``records.twin``) or built with
``records.builder``, never through an intermediate tuple.

A builder appends to the caller's list and may raise; the caller then removes what
it appended and runs the careful projection, which decides (``mapping.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .projection import (
    _as_str,
    _bool01,
    _float,
    _int,
    _opt_int,
    _opt_str,
    _rows_of,
    _time,
)
from .projection import _events as _careful_events
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
    builder,
    twin,
)

__all__ = ["FAST_BUILDERS"]

Meta = Mapping[Any, Any]
FastBuilder = Callable[[Meta, Mapping[Any, Any], int, list[Record]], None]

_new = object.__new__
_STEP_TIME_FIELDS = twin(StepTimeRecord)
_STEP_MEMORY_FIELDS = twin(StepMemoryRecord)
_PROCESS_FIELDS = twin(ProcessRecord)
_SYSTEM_FIELDS = twin(SystemRecord)
_SYSTEM_GPU_FIELDS = twin(SystemGpuRecord)
_RUNTIME = builder(RuntimeEnvironmentRecord)
_STDOUT = builder(StdoutStderrRecord)


def _identity(
    meta: Meta,
) -> tuple[int | None, int | None, int | None, int | None, int | None, int | None, str | None]:
    """``projection._identity`` with the plain int/str/None values taken as they are."""
    get = meta.get
    global_rank = get("global_rank")
    if not (type(global_rank) is int or global_rank is None):
        global_rank = _opt_int(global_rank)
    if global_rank is None:
        rank = get("rank")
        if not (type(rank) is int or rank is None):
            rank = _opt_int(rank)
    else:
        rank = global_rank
    local_rank = get("local_rank")
    world_size = get("world_size")
    local_world_size = get("local_world_size")
    node_rank = get("node_rank")
    hostname = get("hostname")
    return (
        rank,
        global_rank,
        local_rank if type(local_rank) is int or local_rank is None else _opt_int(local_rank),
        world_size if type(world_size) is int or world_size is None else _opt_int(world_size),
        local_world_size
        if type(local_world_size) is int or local_world_size is None
        else _opt_int(local_world_size),
        node_rank if type(node_rank) is int or node_rank is None else _opt_int(node_rank),
        hostname if type(hostname) is str or hostname is None else _opt_str(hostname),
    )


def _f(value: Any) -> float | None:
    """``_float`` with ints and None handled before the call (the usual odd values)."""
    if type(value) is int:
        return float(value)
    if value is None:
        return None
    return _float(value)


class FloatNCalls(Exception):  # noqa: N818 - a signal, not an error
    """Raised by ``_events(raw, strict=True)`` at an ``n_calls`` that is a float."""


def _events(raw: Any, strict: bool = False) -> dict[str, dict[str, EventStats]]:
    """``projection._events`` for a map of plain dicts with str keys; else the careful one.

    With str keys no two names (or devices) collide, so an event is kept exactly when
    it has a device, in the careful path's order. A stats dict with all five keys is
    read by index. ``strict`` raises FloatNCalls at a float ``n_calls``: a
    JSON decoder may have turned a long integer into one (see ``backfill``).
    """
    if type(raw) is not dict:
        return _careful_events(raw)
    out: dict[str, dict[str, EventStats]] = {}
    for name, by_device in raw.items():
        if type(name) is not str or type(by_device) is not dict:
            return _careful_events(raw)
        devices: dict[str, EventStats] = {}
        for device, stats in by_device.items():
            if type(device) is not str or type(stats) is not dict:
                return _careful_events(raw)
            try:
                is_gpu = stats["is_gpu"]
                duration = stats["duration_ms"]
                cpu = stats["cpu_ms"]
                gpu = stats["gpu_ms"]
                n_calls = stats["n_calls"]
            except KeyError:
                get = stats.get
                is_gpu = get("is_gpu")
                duration = get("duration_ms")
                cpu = get("cpu_ms")
                gpu = get("gpu_ms")
                n_calls = get("n_calls")
            if not (type(n_calls) is int or n_calls is None):
                if strict and type(n_calls) is float:
                    raise FloatNCalls
                n_calls = _int(n_calls)
            devices[device] = {
                "is_gpu": is_gpu if is_gpu is True or is_gpu is False else None,
                "duration_ms": duration
                if type(duration) is float or duration is None
                else _f(duration),
                "cpu_ms": cpu if type(cpu) is float or cpu is None else _f(cpu),
                "gpu_ms": gpu if type(gpu) is float or gpu is None else _f(gpu),
                "n_calls": n_calls,
            }
        if devices:
            out[name] = devices
    return out


# The builders below fill each record field by field (``records.twin``): a record of
# 12 to 20 fields costs a third less than passing them to a constructor.


def _step_time(meta: Meta, tables: Mapping[Any, Any], observed: int, out: list[Record]) -> None:
    rows = _rows_of(tables)
    if not rows:
        return
    rank, global_rank, local_rank, world_size, local_world_size, node_rank, hostname = _identity(
        meta
    )
    append = out.append
    new = _new
    fields = _STEP_TIME_FIELDS
    record = StepTimeRecord
    for row in rows:
        get = row.get
        r = new(fields)
        r.observed_timestamp_unix_ns = observed
        r.rank = rank
        r.global_rank = global_rank
        r.local_rank = local_rank
        r.world_size = world_size
        r.local_world_size = local_world_size
        r.node_rank = node_rank
        r.hostname = hostname
        ts = get("timestamp")
        r.timestamp_unix_ns = ts if type(ts) is int else _time(ts)
        seq = get("seq")
        r.seq = seq if type(seq) is int else _int(seq)
        step = get("step")
        r.step = step if type(step) is int else _int(step)
        r.events = _events(get("events"))
        r.__class__ = record
        append(r)


def _step_memory(meta: Meta, tables: Mapping[Any, Any], observed: int, out: list[Record]) -> None:
    rows = _rows_of(tables)
    if not rows:
        return
    rank, global_rank, local_rank, world_size, local_world_size, node_rank, hostname = _identity(
        meta
    )
    append = out.append
    new = _new
    fields = _STEP_MEMORY_FIELDS
    record = StepMemoryRecord
    for row in rows:
        get = row.get
        r = new(fields)
        r.observed_timestamp_unix_ns = observed
        r.rank = rank
        r.global_rank = global_rank
        r.local_rank = local_rank
        r.world_size = world_size
        r.local_world_size = local_world_size
        r.node_rank = node_rank
        r.hostname = hostname
        ts = get("ts")
        r.timestamp_unix_ns = ts if type(ts) is int else _time(ts)
        seq = get("seq")
        r.seq = seq if type(seq) is int else _int(seq)
        device = get("device")
        r.device = device if type(device) is str else _str_or_none(device)
        step = get("step")
        r.step = step if type(step) is int else _int(step)
        # Byte counts arrive as ints (torch's memory stats): converted here, not in _f.
        alloc = get("peak_alloc")
        r.peak_alloc_bytes = (
            alloc if type(alloc) is float else float(alloc) if type(alloc) is int else _f(alloc)
        )
        resv = get("peak_resv")
        r.peak_reserved_bytes = (
            resv if type(resv) is float else float(resv) if type(resv) is int else _f(resv)
        )
        r.__class__ = record
        append(r)


def _str_or_none(value: Any) -> str | None:
    """``projection._str``: a str subclass becomes a plain str, anything else None."""
    return _as_str(value) if isinstance(value, str) else None


def _system(meta: Meta, tables: Mapping[Any, Any], observed: int, out: list[Record]) -> None:
    rows = _rows_of(tables)
    if not rows:
        return
    global_rank, local_rank, world_size, local_world_size, node_rank, hostname = _identity(meta)[1:]
    # The writer's table order: every system row, then every GPU row of the envelope.
    gpu_records: list[Record] = []
    append = out.append
    append_gpu = gpu_records.append
    new = _new
    fields = _SYSTEM_FIELDS
    gpu_fields = _SYSTEM_GPU_FIELDS
    record = SystemRecord
    gpu_record = SystemGpuRecord
    for row in rows:
        get = row.get
        ts = get("ts")
        seq = get("seq")
        if type(ts) is not int:
            ts = _time(ts)
        if type(seq) is not int:
            seq = _int(seq)
        gpus = get("gpus")
        if type(gpus) is list or isinstance(gpus, list):
            for gpu_idx, gpu in enumerate(gpus):
                if not (type(gpu) is list or isinstance(gpu, list)) or len(gpu) < 6:
                    continue
                util, mem_used, mem_total, temp, power, limit = (
                    gpu[0],
                    gpu[1],
                    gpu[2],
                    gpu[3],
                    gpu[4],
                    gpu[5],
                )
                g = new(gpu_fields)
                g.observed_timestamp_unix_ns = observed
                g.global_rank = global_rank
                g.local_rank = local_rank
                g.world_size = world_size
                g.local_world_size = local_world_size
                g.node_rank = node_rank
                g.hostname = hostname
                g.timestamp_unix_ns = ts
                g.seq = seq
                g.gpu_idx = gpu_idx
                g.util = util if type(util) is float else _f(util)
                g.mem_used_bytes = mem_used if type(mem_used) is float else _f(mem_used)
                g.mem_total_bytes = mem_total if type(mem_total) is float else _f(mem_total)
                g.temperature_c = temp if type(temp) is float else _f(temp)
                g.power_usage_w = power if type(power) is float else _f(power)
                g.power_limit_w = limit if type(limit) is float else _f(limit)
                g.__class__ = gpu_record
                append_gpu(g)
        r = new(fields)
        r.observed_timestamp_unix_ns = observed
        r.global_rank = global_rank
        r.local_rank = local_rank
        r.world_size = world_size
        r.local_world_size = local_world_size
        r.node_rank = node_rank
        r.hostname = hostname
        r.timestamp_unix_ns = ts
        r.seq = seq
        cpu = get("cpu")
        r.cpu_percent = cpu if type(cpu) is float else _f(cpu)
        ram_used = get("ram_used")
        r.ram_used_bytes = ram_used if type(ram_used) is float else _f(ram_used)
        ram_total = get("ram_total")
        r.ram_total_bytes = ram_total if type(ram_total) is float else _f(ram_total)
        r.gpu_available = _bool01(get("gpu_available"))
        gpu_count = get("gpu_count")
        r.gpu_count = gpu_count if type(gpu_count) is int else _int(gpu_count)
        r.__class__ = record
        append(r)
    out += gpu_records


def _process(meta: Meta, tables: Mapping[Any, Any], observed: int, out: list[Record]) -> None:
    rows = _rows_of(tables)
    if not rows:
        return
    rank, global_rank, local_rank, world_size, local_world_size, node_rank, hostname = _identity(
        meta
    )
    append = out.append
    new = _new
    fields = _PROCESS_FIELDS
    record = ProcessRecord
    for row in rows:
        get = row.get
        gpu = get("gpu")
        if type(gpu) is dict or isinstance(gpu, dict):
            gget = gpu.get
            device = gget("device")
            mem_used = gget("mem_used")
            mem_reserved = gget("mem_reserved")
            mem_total = gget("mem_total")
            if type(device) is not int:
                device = _int(device)
            if type(mem_used) is not float:
                mem_used = _f(mem_used)
            if type(mem_reserved) is not float:
                mem_reserved = _f(mem_reserved)
            if type(mem_total) is not float:
                mem_total = _f(mem_total)
        else:
            device = mem_used = mem_reserved = mem_total = None
        r = new(fields)
        r.observed_timestamp_unix_ns = observed
        r.rank = rank
        r.global_rank = global_rank
        r.local_rank = local_rank
        r.world_size = world_size
        r.local_world_size = local_world_size
        r.node_rank = node_rank
        r.hostname = hostname
        ts = get("ts")
        r.timestamp_unix_ns = ts if type(ts) is int else _time(ts)
        seq = get("seq")
        r.seq = seq if type(seq) is int else _int(seq)
        cpu = get("cpu")
        r.cpu_percent = cpu if type(cpu) is float else _f(cpu)
        cores = get("cpu_cores")
        r.cpu_logical_core_count = cores if type(cores) is int else _int(cores)
        ram_used = get("ram_used")
        r.ram_used_bytes = ram_used if type(ram_used) is float else _f(ram_used)
        ram_total = get("ram_total")
        r.ram_total_bytes = ram_total if type(ram_total) is float else _f(ram_total)
        r.gpu_available = _bool01(get("gpu_available"))
        gpu_count = get("gpu_count")
        r.gpu_count = gpu_count if type(gpu_count) is int else _int(gpu_count)
        r.gpu_device_index = device
        r.gpu_mem_used_bytes = mem_used
        r.gpu_mem_reserved_bytes = mem_reserved
        r.gpu_mem_total_bytes = mem_total
        r.__class__ = record
        append(r)


def _runtime_environment(
    meta: Meta, tables: Mapping[Any, Any], observed: int, out: list[Record]
) -> None:
    rows = tables.get("RuntimeEnvironmentTable") if isinstance(tables, dict) else None
    if not isinstance(rows, list):
        return
    identity = _identity(meta)
    pid = _opt_int(meta.get("pid"))
    for row in rows:
        if not isinstance(row, dict):
            continue
        get = row.get
        out.append(
            _RUNTIME(
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


def _stdout_stderr(meta: Meta, tables: Mapping[Any, Any], observed: int, out: list[Record]) -> None:
    rows = _rows_of(tables)
    if not rows:
        return
    rank = _identity(meta)[0]
    ts = _time(meta.get("timestamp"))
    for row in rows:
        line = row.get("line")
        if line is None:
            continue
        if type(line) is not str:
            line = _as_str(line)
        if line:
            out.append(_STDOUT(observed, rank, ts, line))


FAST_BUILDERS: dict[str, FastBuilder] = {
    "RuntimeEnvironmentSampler": _runtime_environment,
    "SystemSampler": _system,
    "ProcessSampler": _process,
    "StepTimeSampler": _step_time,
    "StepMemorySampler": _step_memory,
    "Stdout/Stderr": _stdout_stderr,
}
"""Sampler -> its fast builder (the projections of ``projection.PROJECTIONS``)."""
