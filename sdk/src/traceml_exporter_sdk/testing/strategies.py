"""Hypothesis strategies for the seven export records (public API; needs ``hypothesis``).

One strategy per record class, plus ``records()`` and ``record_batches()`` over
several streams, for property tests of an exporter::

    from hypothesis import given
    from traceml_exporter_sdk.testing import strategies as st_records

    @given(st_records.record_batches())
    def test_roundtrip(batch): ...

Each record strategy is derived from its class's fields and type hints
(``value_space.field_specs``), so a field added to a record class is drawn
without a change here, and a field of an unknown type is a ``TypeError``.
Values follow the contract's types and the value space's edges: any nullable
field may be None, ints are any int64 with its ends and the other
``INT_EDGES`` drawn often, floats any double with ``FLOAT_EDGES`` (-0.0,
subnormals, the largest) drawn often, strings include unicode, ``\\n``, ``\\r``,
U+2028 and the corpus's ``HOSTILE_TEXT`` (a lone surrogate, NUL and other
control characters, U+2029, U+0085, a 128 KiB text; stdout lines also the
1 MiB ``LONG_LINE``), stdout lines are never empty, events maps may be empty. The contract's rules hold (``RULES``:
``gpu_available`` is 0 or 1, ...), and the identity fields are consistent
(``rank == global_rank``). Floats are finite unless ``non_finite=True`` (NaN
and the infinities, which a JSON sink writes as null). ``foreign=True``
builds TraceML-like look-alike classes instead of the SDK's (see
``corpus.foreign_class``). This is the only module of the SDK that imports
hypothesis.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from hypothesis import strategies as st

from ..records import (
    RECORD_TYPE_BY_STREAM,
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
from ..streams import ALL_STREAMS
from .corpus import HOSTILE_TEXT, LONG_LINE, foreign_class
from .value_space import (
    FLOAT_EDGES,
    INT64_MAX,
    INT64_MIN,
    INT_EDGES,
    NON_FINITE,
    RULES,
    STR_EDGES,
    FieldSpec,
    Rule,
    field_specs,
    is_events,
)

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
MAX_NS = INT64_MAX  # int64, what a nanosecond clock can hold

LONG_TEXT = LONG_LINE[: 128 * 1024]
"""The long text of every text field: 128 KiB, past the 64 KiB limits many sinks assume
(stdout lines also draw the whole ``LONG_LINE``, over 1 MiB)."""

EDGE_TEXT = (*STR_EDGES, *(t for t in HOSTILE_TEXT if t is not LONG_LINE), LONG_TEXT)
"""Strings every text strategy draws often: the value space's and the corpus's hostile text."""


def timestamps_ns() -> st.SearchStrategy[int]:
    """19-digit Unix nanosecond integers."""
    return st.integers(min_value=MIN_NS, max_value=MAX_NS)


def texts(*, min_size: int = 0) -> st.SearchStrategy[str]:
    """Text with unicode, line breaks (``\\n``, ``\\r``, U+2028) and tabs, and ``EDGE_TEXT``.

    Generated text is valid UTF-8; lone surrogates, NUL and a 128 KiB text
    come from the ``EDGE_TEXT`` edges.
    """
    alphabet = st.characters(codec="utf-8")
    edges = st.sampled_from([t for t in EDGE_TEXT if len(t) >= min_size])
    return st.one_of(edges, st.text(alphabet, min_size=min_size, max_size=40))


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


def _small_ints() -> st.SearchStrategy[int]:
    return st.integers(min_value=0, max_value=4096)


def _ints(rule: Rule | None = None) -> st.SearchStrategy[int]:
    """Any int64, int64's ends and the value space's other edges drawn often."""
    if rule is not None and rule.values is not None:
        return st.sampled_from(rule.values)
    low = INT64_MIN if rule is None or rule.min_value is None else rule.min_value
    edges = [v for v in INT_EDGES if v >= low]
    return st.one_of(st.sampled_from(edges), st.integers(min_value=low, max_value=INT64_MAX))


def _floats(non_finite: bool = False) -> st.SearchStrategy[float]:
    """Any double, the value space's edges (-0.0, subnormals, the largest) drawn often;
    NaN and the infinities only with ``non_finite``."""
    edges = (NON_FINITE if non_finite else (-0.0,)) + FLOAT_EDGES
    drawn = st.floats(allow_nan=non_finite, allow_infinity=non_finite, width=64)
    return st.one_of(st.sampled_from(edges), drawn)


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
        _maybe(_ints()),
        _maybe(_ints()),
        _maybe(_ints()),
        _maybe(st.one_of(st.sampled_from(["node-a", "node-b.cluster.local"]), texts(min_size=1))),
    )


def event_stats(*, non_finite: bool = False) -> st.SearchStrategy[dict[str, Any]]:
    """One ``events[name][device]`` map, its keys and types read off ``EventStats``."""
    return st.fixed_dictionaries(
        {spec.name: _field(spec, non_finite) for spec in field_specs(EventStats)}
    )


def events_maps(*, non_finite: bool = False) -> st.SearchStrategy[dict[str, dict[str, Any]]]:
    """``events[name][device]`` maps, often empty."""
    names = st.one_of(
        st.sampled_from(
            [
                "_traceml_internal:forward_time",
                "_traceml_internal:backward_time",
                "_traceml_internal:step_time",
            ]
        ),
        texts(),
    )
    devices = st.one_of(st.sampled_from(["cpu", "cuda:0", "cuda:1"]), texts())
    return st.dictionaries(
        names,
        st.dictionaries(devices, event_stats(non_finite=non_finite), min_size=1, max_size=2),
        max_size=4,
    )


def _field(spec: FieldSpec, non_finite: bool) -> st.SearchStrategy[Any]:
    """The values of one field, from its type hint and the contract's rule for it.

    Raises:
        TypeError: the field's type is one this module has no strategy for.
    """
    rule = RULES.get(spec.name)
    kind = spec.kind
    strategy: st.SearchStrategy[Any]
    if kind is int:
        strategy = _ints(rule)
    elif kind is float:
        strategy = _floats(non_finite)
    elif kind is str and spec.name == "line":  # where TraceML's long text comes from
        strategy = st.one_of(texts(min_size=1), st.just(LONG_LINE))
    elif kind is str:
        strategy = texts(min_size=0 if rule is None else rule.min_size or 0)
    elif kind is bool:
        strategy = st.booleans()
    elif is_events(kind):
        strategy = events_maps(non_finite=non_finite)
    else:
        raise TypeError(f"field {spec.name}: no strategy for type {kind!r}")
    return _maybe(strategy) if spec.nullable else strategy


_IDENTITY = ("rank", "global_rank", "local_rank", "world_size", "local_world_size", "node_rank")


def _record(cls: type[Any], foreign: bool, non_finite: bool = False) -> st.SearchStrategy[Any]:
    """Records of ``cls`` with every field drawn from its type hint (``_field``); the
    identity fields are kept consistent (``identities``) and the nanosecond stamps are
    19-digit where the field is a timestamp, as TraceML's are."""
    target = foreign_class(cls.STREAM) if foreign else cls
    specs = field_specs(cls)
    fields = {s.name: _field(s, non_finite) for s in specs if s.name not in _IDENTITY}
    for spec in specs:
        if spec.name.endswith("timestamp_unix_ns"):
            stamps = st.one_of(timestamps_ns(), _ints(RULES.get(spec.name)))
            fields[spec.name] = _maybe(stamps) if spec.nullable else stamps
    fields.pop("hostname", None)

    def build(ident: dict[str, Any], values: dict[str, Any]) -> Any:
        merged = {**ident, **values}
        return target(*(merged[name] for name in cls.COLUMNS))

    return st.builds(build, identities(), st.fixed_dictionaries(fields))


def step_time_records(
    *, foreign: bool = False, non_finite: bool = False
) -> st.SearchStrategy[StepTimeRecord]:
    """StepTimeRecord: step and a decoded events map."""
    return _record(StepTimeRecord, foreign, non_finite)


def step_memory_records(
    *, foreign: bool = False, non_finite: bool = False
) -> st.SearchStrategy[StepMemoryRecord]:
    """StepMemoryRecord: device, step and the two peaks (bytes, None when absent)."""
    return _record(StepMemoryRecord, foreign, non_finite)


def system_records(
    *, foreign: bool = False, non_finite: bool = False
) -> st.SearchStrategy[SystemRecord]:
    """SystemRecord (no rank field)."""
    return _record(SystemRecord, foreign, non_finite)


def system_gpu_records(
    *, foreign: bool = False, non_finite: bool = False
) -> st.SearchStrategy[SystemGpuRecord]:
    """SystemGpuRecord (no rank field; gpu_idx never None)."""
    return _record(SystemGpuRecord, foreign, non_finite)


def process_records(
    *, foreign: bool = False, non_finite: bool = False
) -> st.SearchStrategy[ProcessRecord]:
    """ProcessRecord: CPU, RAM and the process's GPU memory."""
    return _record(ProcessRecord, foreign, non_finite)


def runtime_environment_records(
    *, foreign: bool = False, non_finite: bool = False
) -> st.SearchStrategy[RuntimeEnvironmentRecord]:
    """RuntimeEnvironmentRecord: pid, topology, torch.distributed state, strategy."""
    return _record(RuntimeEnvironmentRecord, foreign, non_finite)


def stdout_stderr_records(
    *, foreign: bool = False, non_finite: bool = False
) -> st.SearchStrategy[StdoutStderrRecord]:
    """StdoutStderrRecord: only observed stamp, rank, timestamp and a non-empty line."""
    return _record(StdoutStderrRecord, foreign, non_finite)


def records(
    streams: Collection[str] | None = None, *, foreign: bool = False, non_finite: bool = False
) -> st.SearchStrategy[Record]:
    """A record of any of ``streams`` (STREAM names; None means every record class)."""
    names = ALL_STREAMS if streams is None else tuple(streams)
    unknown = [name for name in names if name not in RECORD_TYPE_BY_STREAM]
    if unknown or not names:
        raise ValueError(f"streams must name some of {', '.join(ALL_STREAMS)}; got {list(names)!r}")
    return st.one_of([_record(RECORD_TYPE_BY_STREAM[n], foreign, non_finite) for n in names])


@st.composite
def _batches(
    draw: st.DrawFn,
    streams: Collection[str] | None,
    foreign: bool,
    min_size: int,
    max_size: int,
    non_finite: bool,
) -> list[Any]:
    items: st.SearchStrategy[list[Any]] = st.lists(
        records(streams, foreign=foreign, non_finite=non_finite),
        min_size=min_size,
        max_size=max_size,
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
    non_finite: bool = False,
) -> st.SearchStrategy[list[Record]]:
    """A write batch: records of several streams interleaved, sometimes with a duplicate."""
    return _batches(streams, foreign, min_size, max_size, non_finite)
