"""Hypothesis strategies for the seven export records (public API; needs ``hypothesis``).

One strategy per record class, plus ``records()`` and ``record_batches()`` over
several streams, for property tests of an exporter::

    from hypothesis import given
    from traceml_exporter_sdk.testing import strategies as st_records

    @given(st_records.record_batches())
    def test_roundtrip(batch): ...

Values follow the contract's types and edge cases: any nullable field may be
None, numbers include 0 and 0.0, timestamps are 19-digit nanosecond integers,
strings include unicode, ``\\n``, ``\\r`` and U+2028, and the corpus's
``HOSTILE_TEXT`` (a lone surrogate, NUL and other control characters, U+2029,
U+0085, a 128 KiB line), stdout lines are never empty, events maps may be
empty. Floats are finite (JSON has no NaN). ``foreign=True`` builds TraceML-like look-alike classes instead of the SDK's
(see ``corpus.foreign_class``). This is the only module of the SDK that
imports hypothesis.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from hypothesis import strategies as st

from ..records import (
    RECORD_TYPE_BY_STREAM,
    ProcessRecord,
    Record,
    RuntimeEnvironmentRecord,
    StdoutStderrRecord,
    StepMemoryRecord,
    StepTimeRecord,
    SystemGpuRecord,
    SystemRecord,
)
from ..streams import ALL_STREAMS
from .corpus import HOSTILE_TEXT, foreign_class

__all__ = [
    "event_stats",
    "events_maps",
    "identities",
    "process_records",
    "record_batches",
    "records",
    "runtime_environment_records",
    "stdout_stderr_records",
    "step_memory_records",
    "step_time_records",
    "system_gpu_records",
    "system_records",
    "texts",
    "timestamps_ns",
]

MIN_NS = 1_000_000_000_000_000_000  # 2001-09-09, the first 19-digit nanosecond
MAX_NS = 9_223_372_036_854_775_807  # int64, what a nanosecond clock can hold

EDGE_TEXT = (
    "",
    "0",
    "null",
    "ünïcødé 日本語 🚀",
    "line\nbreak",
    "para\u2028sep",
    "cr\r\nlf",
    "\t",
    *HOSTILE_TEXT,
)
"""Strings every text strategy draws often: edge values and the corpus's hostile text."""


def timestamps_ns() -> st.SearchStrategy[int]:
    """19-digit Unix nanosecond integers."""
    return st.integers(min_value=MIN_NS, max_value=MAX_NS)


def texts(*, min_size: int = 0) -> st.SearchStrategy[str]:
    """Text with unicode, line breaks (``\\n``, ``\\r``, U+2028) and tabs, and ``EDGE_TEXT``.

    Generated text is valid UTF-8; lone surrogates, NUL and the 128 KiB line
    come from the ``HOSTILE_TEXT`` edges.
    """
    alphabet = st.characters(codec="utf-8")
    edges = st.sampled_from([t for t in EDGE_TEXT if len(t) >= min_size])
    return st.one_of(edges, st.text(alphabet, min_size=min_size, max_size=40))


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


def _small_ints() -> st.SearchStrategy[int]:
    return st.integers(min_value=0, max_value=4096)


def _floats() -> st.SearchStrategy[float]:
    return st.one_of(st.just(0.0), st.floats(allow_nan=False, allow_infinity=False, width=64))


def _bool01() -> st.SearchStrategy[int | None]:
    return st.sampled_from([None, 0, 1])


def identities() -> st.SearchStrategy[dict[str, Any]]:
    """The common identity fields, consistent (rank == global_rank) or None."""

    def build(
        rank: int | None, local: int | None, world: int | None, host: str | None
    ) -> dict[str, Any]:
        return {
            "rank": rank,
            "global_rank": rank,
            "local_rank": local,
            "world_size": world,
            "local_world_size": None if world is None else max(1, world // 2),
            "node_rank": None if rank is None else rank // 2,
            "hostname": host,
        }

    return st.builds(
        build,
        _maybe(st.integers(min_value=0, max_value=1023)),
        _maybe(st.integers(min_value=0, max_value=7)),
        _maybe(st.integers(min_value=1, max_value=1024)),
        _maybe(st.one_of(st.sampled_from(["node-a", "node-b.cluster.local"]), texts(min_size=1))),
    )


def event_stats() -> st.SearchStrategy[dict[str, Any]]:
    """One ``events[name][device]`` map: is_gpu, duration_ms, cpu_ms, gpu_ms, n_calls."""

    def build(
        is_gpu: bool | None,
        duration_ms: float | None,
        cpu_ms: float | None,
        gpu_ms: float | None,
        n_calls: int | None,
    ) -> dict[str, Any]:
        return {
            "is_gpu": is_gpu,
            "duration_ms": duration_ms,
            "cpu_ms": cpu_ms,
            "gpu_ms": gpu_ms,
            "n_calls": n_calls,
        }

    return st.builds(
        build,
        _maybe(st.booleans()),
        _maybe(_floats()),
        _maybe(_floats()),
        _maybe(_floats()),
        _maybe(_small_ints()),
    )


def events_maps() -> st.SearchStrategy[dict[str, dict[str, Any]]]:
    """``events[name][device]`` maps, often empty."""
    names = st.one_of(
        st.sampled_from(
            [
                "_traceml_internal:forward_time",
                "_traceml_internal:backward_time",
                "_traceml_internal:step_time",
            ]
        ),
        texts(min_size=1),
    )
    devices = st.one_of(st.sampled_from(["cpu", "cuda:0", "cuda:1"]), texts(min_size=1))
    return st.dictionaries(
        names, st.dictionaries(devices, event_stats(), min_size=1, max_size=2), max_size=4
    )


def _common(with_rank: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    def build(
        ident: dict[str, Any], observed: int, ts: int | None, seq: int | None
    ) -> dict[str, Any]:
        out = {"observed_timestamp_unix_ns": observed, **ident, "timestamp_unix_ns": ts, "seq": seq}
        if not with_rank:
            del out["rank"]
        return out

    return st.builds(
        build, identities(), timestamps_ns(), _maybe(timestamps_ns()), _maybe(_small_ints())
    )


def _record(
    cls: type[Any], foreign: bool, **fields: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    target = foreign_class(cls.STREAM) if foreign else cls
    with_rank = "rank" in cls.COLUMNS

    def build(common: dict[str, Any], extra: dict[str, Any]) -> Any:
        values = {**common, **extra}
        return target(*(values[name] for name in cls.COLUMNS))

    return st.builds(build, _common(with_rank), st.fixed_dictionaries(fields))


def step_time_records(*, foreign: bool = False) -> st.SearchStrategy[StepTimeRecord]:
    """StepTimeRecord: step and a decoded events map."""
    return _record(StepTimeRecord, foreign, step=_maybe(_small_ints()), events=events_maps())


def step_memory_records(*, foreign: bool = False) -> st.SearchStrategy[StepMemoryRecord]:
    """StepMemoryRecord: device, step and the two peaks (bytes, None when absent)."""
    return _record(
        StepMemoryRecord,
        foreign,
        device=_maybe(st.sampled_from(["cpu", "cuda:0", "cuda:7"])),
        step=_maybe(_small_ints()),
        peak_alloc_bytes=_maybe(_floats()),
        peak_reserved_bytes=_maybe(_floats()),
    )


def system_records(*, foreign: bool = False) -> st.SearchStrategy[SystemRecord]:
    """SystemRecord (no rank field)."""
    return _record(
        SystemRecord,
        foreign,
        cpu_percent=_maybe(_floats()),
        ram_used_bytes=_maybe(_floats()),
        ram_total_bytes=_maybe(_floats()),
        gpu_available=_bool01(),
        gpu_count=_maybe(st.integers(min_value=0, max_value=16)),
    )


def system_gpu_records(*, foreign: bool = False) -> st.SearchStrategy[SystemGpuRecord]:
    """SystemGpuRecord (no rank field; gpu_idx never None)."""
    return _record(
        SystemGpuRecord,
        foreign,
        gpu_idx=st.integers(min_value=0, max_value=15),
        util=_maybe(_floats()),
        mem_used_bytes=_maybe(_floats()),
        mem_total_bytes=_maybe(_floats()),
        temperature_c=_maybe(_floats()),
        power_usage_w=_maybe(_floats()),
        power_limit_w=_maybe(_floats()),
    )


def process_records(*, foreign: bool = False) -> st.SearchStrategy[ProcessRecord]:
    """ProcessRecord: CPU, RAM and the process's GPU memory."""
    return _record(
        ProcessRecord,
        foreign,
        cpu_percent=_maybe(_floats()),
        cpu_logical_core_count=_maybe(st.integers(min_value=1, max_value=512)),
        ram_used_bytes=_maybe(_floats()),
        ram_total_bytes=_maybe(_floats()),
        gpu_available=_bool01(),
        gpu_count=_maybe(st.integers(min_value=0, max_value=16)),
        gpu_device_index=_maybe(st.integers(min_value=0, max_value=15)),
        gpu_mem_used_bytes=_maybe(_floats()),
        gpu_mem_reserved_bytes=_maybe(_floats()),
        gpu_mem_total_bytes=_maybe(_floats()),
    )


def runtime_environment_records(
    *, foreign: bool = False
) -> st.SearchStrategy[RuntimeEnvironmentRecord]:
    """RuntimeEnvironmentRecord: pid, topology, torch.distributed state, strategy."""
    return _record(
        RuntimeEnvironmentRecord,
        foreign,
        pid=_maybe(st.integers(min_value=1, max_value=4_194_304)),
        topology=_maybe(st.sampled_from(["single_process", "multi_node_multi_process"])),
        distributed_initialized=_bool01(),
        distributed_backend=_maybe(st.sampled_from(["nccl", "gloo"])),
        training_strategy=_maybe(st.sampled_from(["ddp", "fsdp", "single"])),
        strategy_source=_maybe(st.sampled_from(["runtime_model", "env"])),
        strategy_confidence=_maybe(st.sampled_from(["high", "low"])),
    )


def stdout_stderr_records(*, foreign: bool = False) -> st.SearchStrategy[StdoutStderrRecord]:
    """StdoutStderrRecord: only observed stamp, rank, timestamp and a non-empty line."""
    target = foreign_class("stdout_stderr") if foreign else StdoutStderrRecord
    return st.builds(
        target,
        observed_timestamp_unix_ns=timestamps_ns(),
        rank=_maybe(st.integers(min_value=0, max_value=1023)),
        timestamp_unix_ns=_maybe(timestamps_ns()),
        line=texts(min_size=1),
    )


_BY_STREAM: dict[str, Callable[..., st.SearchStrategy[Any]]] = {
    "step_time": step_time_records,
    "step_memory": step_memory_records,
    "system": system_records,
    "system_gpu": system_gpu_records,
    "process": process_records,
    "runtime_environment": runtime_environment_records,
    "stdout_stderr": stdout_stderr_records,
}


def records(
    streams: Collection[str] | None = None, *, foreign: bool = False
) -> st.SearchStrategy[Record]:
    """A record of any of ``streams`` (STREAM names; None means all seven)."""
    names = ALL_STREAMS if streams is None else tuple(streams)
    unknown = [name for name in names if name not in RECORD_TYPE_BY_STREAM]
    if unknown or not names:
        raise ValueError(f"streams must name some of {', '.join(ALL_STREAMS)}; got {list(names)!r}")
    return st.one_of([_BY_STREAM[name](foreign=foreign) for name in names])


@st.composite
def _batches(
    draw: st.DrawFn,
    streams: Collection[str] | None,
    foreign: bool,
    min_size: int,
    max_size: int,
) -> list[Any]:
    items: st.SearchStrategy[list[Any]] = st.lists(
        records(streams, foreign=foreign), min_size=min_size, max_size=max_size
    )
    batch: list[Any] = draw(items)
    duplicate: bool = draw(st.booleans())
    if batch and duplicate:
        at: int = draw(st.integers(0, len(batch)))
        batch.insert(at, draw(st.sampled_from(batch)))
    return batch


def record_batches(
    streams: Collection[str] | None = None,
    *,
    foreign: bool = False,
    min_size: int = 1,
    max_size: int = 20,
) -> st.SearchStrategy[list[Record]]:
    """A write batch: records of several streams interleaved, sometimes with a duplicate."""
    return _batches(streams, foreign, min_size, max_size)
