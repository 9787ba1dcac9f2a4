"""The mapper's fast path: one envelope straight to records, per table, no row tuples.

Each builder here is the projection of the same name in ``_build.projection`` (the
careful path, which stays the reference), written out per table: every value that
already has its field's exact type is taken as it is, anything else goes through
the careful path's own coercion, so the records are equal by construction. The
records are filled field by field (``records.twin``), never through an
intermediate tuple.

A builder appends to the caller's list and may raise; the caller then removes what
it appended and runs the careful projection, which decides (``mapping.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .coerce import (
    bool01,
    fast_float,
    identity_fields,
    normalised_events,
    rows_of,
    to_int,
    to_str,
    unix_ns,
)
from ..records import (
    ProcessRecord,
    Record,
    StepMemoryRecord,
    StepTimeRecord,
    SystemGpuRecord,
    SystemRecord,
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


# The builders below fill each record field by field (``records.twin``): a record of
# 12 to 20 fields costs a third less than passing them to a constructor.


def _step_time(meta: Meta, tables: Mapping[Any, Any], observed: int, out: list[Record]) -> None:
    rows = rows_of(tables)
    if not rows:
        return
    rank, global_rank, local_rank, world_size, local_world_size, node_rank, hostname = (
        identity_fields(meta)
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
        r.timestamp_unix_ns = ts if type(ts) is int else unix_ns(ts)
        seq = get("seq")
        r.seq = seq if type(seq) is int else to_int(seq)
        step = get("step")
        r.step = step if type(step) is int else to_int(step)
        r.events = normalised_events(get("events"))
        r.__class__ = record
        append(r)


def _step_memory(meta: Meta, tables: Mapping[Any, Any], observed: int, out: list[Record]) -> None:
    rows = rows_of(tables)
    if not rows:
        return
    rank, global_rank, local_rank, world_size, local_world_size, node_rank, hostname = (
        identity_fields(meta)
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
        r.timestamp_unix_ns = ts if type(ts) is int else unix_ns(ts)
        seq = get("seq")
        r.seq = seq if type(seq) is int else to_int(seq)
        device = get("device")
        r.device = device if type(device) is str else to_str(device)
        step = get("step")
        r.step = step if type(step) is int else to_int(step)
        # Byte counts arrive as ints (torch's memory stats): converted here, not in fast_float.
        alloc = get("peak_alloc")
        r.peak_alloc_bytes = (
            alloc
            if type(alloc) is float
            else float(alloc)
            if type(alloc) is int
            else fast_float(alloc)
        )
        resv = get("peak_resv")
        r.peak_reserved_bytes = (
            resv if type(resv) is float else float(resv) if type(resv) is int else fast_float(resv)
        )
        r.__class__ = record
        append(r)


def _system(meta: Meta, tables: Mapping[Any, Any], observed: int, out: list[Record]) -> None:
    rows = rows_of(tables)
    if not rows:
        return
    global_rank, local_rank, world_size, local_world_size, node_rank, hostname = identity_fields(
        meta
    )[1:]
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
            ts = unix_ns(ts)
        if type(seq) is not int:
            seq = to_int(seq)
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
                g.util = util if type(util) is float else fast_float(util)
                g.mem_used_bytes = mem_used if type(mem_used) is float else fast_float(mem_used)
                g.mem_total_bytes = mem_total if type(mem_total) is float else fast_float(mem_total)
                g.temperature_c = temp if type(temp) is float else fast_float(temp)
                g.power_usage_w = power if type(power) is float else fast_float(power)
                g.power_limit_w = limit if type(limit) is float else fast_float(limit)
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
        r.cpu_percent = cpu if type(cpu) is float else fast_float(cpu)
        ram_used = get("ram_used")
        r.ram_used_bytes = ram_used if type(ram_used) is float else fast_float(ram_used)
        ram_total = get("ram_total")
        r.ram_total_bytes = ram_total if type(ram_total) is float else fast_float(ram_total)
        r.gpu_available = bool01(get("gpu_available"))
        gpu_count = get("gpu_count")
        r.gpu_count = gpu_count if type(gpu_count) is int else to_int(gpu_count)
        r.__class__ = record
        append(r)
    out += gpu_records


def _process(meta: Meta, tables: Mapping[Any, Any], observed: int, out: list[Record]) -> None:
    rows = rows_of(tables)
    if not rows:
        return
    rank, global_rank, local_rank, world_size, local_world_size, node_rank, hostname = (
        identity_fields(meta)
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
                device = to_int(device)
            if type(mem_used) is not float:
                mem_used = fast_float(mem_used)
            if type(mem_reserved) is not float:
                mem_reserved = fast_float(mem_reserved)
            if type(mem_total) is not float:
                mem_total = fast_float(mem_total)
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
        r.timestamp_unix_ns = ts if type(ts) is int else unix_ns(ts)
        seq = get("seq")
        r.seq = seq if type(seq) is int else to_int(seq)
        cpu = get("cpu")
        r.cpu_percent = cpu if type(cpu) is float else fast_float(cpu)
        cores = get("cpu_cores")
        r.cpu_logical_core_count = cores if type(cores) is int else to_int(cores)
        ram_used = get("ram_used")
        r.ram_used_bytes = ram_used if type(ram_used) is float else fast_float(ram_used)
        ram_total = get("ram_total")
        r.ram_total_bytes = ram_total if type(ram_total) is float else fast_float(ram_total)
        r.gpu_available = bool01(get("gpu_available"))
        gpu_count = get("gpu_count")
        r.gpu_count = gpu_count if type(gpu_count) is int else to_int(gpu_count)
        r.gpu_device_index = device
        r.gpu_mem_used_bytes = mem_used
        r.gpu_mem_reserved_bytes = mem_reserved
        r.gpu_mem_total_bytes = mem_total
        r.__class__ = record
        append(r)


FAST_BUILDERS: dict[str, FastBuilder] = {
    "SystemSampler": _system,
    "ProcessSampler": _process,
    "StepTimeSampler": _step_time,
    "StepMemorySampler": _step_memory,
}
"""Sampler -> its fast builder (of ``_build.projection.PROJECTIONS``). Only where one wins by
at least 1.3x over the careful path alone (``tests/benchmarks/bench_fastpath.py``):
runtime_environment and stdout_stderr, whose builders were copies of the careful
projections and measured 1.05x and 1.1-1.3x, have none."""
