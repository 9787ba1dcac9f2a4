"""Hostile values (objects whose dunders raise or lie, deep nesting) and the strategies that
put them anywhere in a payload (``hostile_payloads``), and ``check_batch``: the fields
of every record keep their types."""

from __future__ import annotations

import typing
from typing import Any

from hypothesis import reject
from hypothesis import strategies as st
from traceml_exporter_sdk import (
    RECORD_TYPES,
    RecordBatch,
    StdoutStderrRecord,
)

OBSERVED = 1_700_000_000_000_000_000
# BoolInt: CPython warns that __int__ returned a bool, then converts it.
SAMPLERS = [
    "RuntimeEnvironmentSampler",
    "SystemSampler",
    "ProcessSampler",
    "StepTimeSampler",
    "StepMemorySampler",
    "Stdout/Stderr",
]
ROW_KEYS = [
    "seq",
    "ts",
    "timestamp",
    "step",
    "events",
    "device",
    "peak_alloc",
    "peak_resv",
    "cpu",
    "ram_used",
    "ram_total",
    "gpu_available",
    "gpu_count",
    "gpus",
    "cpu_cores",
    "gpu",
    "topology",
    "distributed_initialized",
    "distributed_backend",
    "training_strategy",
    "strategy_source",
    "strategy_confidence",
    "line",
]
META_KEYS = [
    "rank",
    "global_rank",
    "local_rank",
    "world_size",
    "local_world_size",
    "node_rank",
    "hostname",
    "pid",
    "timestamp",
    "session_id",
]
STAT_KEYS = ["is_gpu", "duration_ms", "cpu_ms", "gpu_ms", "n_calls"]


# -- hostile objects -------------------------------------------------------------------


class BoomError(Exception):
    pass


def _boom(*_: Any, **__: Any) -> Any:
    raise BoomError


class Evil:
    """Every conversion and comparison raises (repr stays safe for reports)."""

    __str__ = __int__ = __float__ = __index__ = __bool__ = __eq__ = __len__ = _boom
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return "Evil()"


class EvilInt(int):
    __str__ = __int__ = __float__ = __index__ = __eq__ = __format__ = _boom
    __hash__ = int.__hash__

    def __repr__(self) -> str:
        return "EvilInt()"


class EvilFloat(float):
    __str__ = __int__ = __float__ = __eq__ = _boom
    __hash__ = float.__hash__

    def __repr__(self) -> str:
        return "EvilFloat()"


class EvilStr(str):
    __str__ = __eq__ = _boom
    __hash__ = str.__hash__

    def __repr__(self) -> str:
        return "EvilStr()"


class EvilKey:
    """Hashes like a key the mapper reads, so looking that key up calls ``__eq__``."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __hash__(self) -> int:
        return hash(self.key)

    __eq__ = __str__ = _boom

    def __repr__(self) -> str:
        return f"EvilKey({self.key!r})"


class SubStr(str):
    pass


class WeirdStr:
    """``__str__`` returns a str subclass: the record must still hold a plain str."""

    def __str__(self) -> str:
        return SubStr("weird")

    def __repr__(self) -> str:
        return "WeirdStr()"


class IntLike:
    """A number-like object (numpy-ish) that converts fine."""

    def __int__(self) -> int:
        return 7

    def __index__(self) -> int:
        return 7

    def __float__(self) -> float:
        return 7.5

    def __str__(self) -> str:
        return "intlike"


class BoolInt:
    """``__int__`` returns a bool (deprecated, still allowed by CPython)."""

    def __int__(self) -> int:
        return True

    def __str__(self) -> str:
        return "boolint"


class EvilDict(dict[Any, Any]):
    """A mapping whose reads raise."""

    get = __getitem__ = items = values = keys = __iter__ = __len__ = __contains__ = _boom

    def __repr__(self) -> str:
        return "EvilDict()"


class GetRaises(dict[Any, Any]):
    """A real dict (iterable, sized) whose ``.get`` alone raises."""

    get = _boom


class EvilList(list[Any]):
    __iter__ = __len__ = __getitem__ = _boom

    def __repr__(self) -> str:
        return "EvilList()"


class ListLike(list[Any]):
    """A list subclass that iterates fine."""


def _deep(depth: int, container: str) -> Any:
    value: Any = 1
    for _ in range(depth):
        if container == "list":
            value = [value]
        elif container == "tuple":
            value = (value,)
        else:
            value = {"k": value}
    return value


DEEP_LIST = _deep(100_000, "list")
DEEP_DICT = _deep(100_000, "dict")
DEEP_TUPLE = _deep(100_000, "tuple")

HOSTILE = [
    Evil(),
    EvilInt(5),
    EvilFloat(1.5),
    EvilStr("seq"),
    EvilKey("seq"),
    EvilKey("sampler"),
    WeirdStr(),
    SubStr("sub"),
    IntLike(),
    BoolInt(),
    b"bytes",
    bytearray(b"ba"),
    10**400,
    -(10**400),
    10**5000,
    2**64,
    -(2**63),
    float("nan"),
    float("inf"),
    -float("inf"),
    -0.0,
    DEEP_LIST,
    DEEP_DICT,
    EvilDict(),
    GetRaises(seq=1, ts=2),
    EvilList([1]),
    ListLike([1, 2]),
    (1, 2),
    frozenset({1}),
    object(),
    1j,
]


# Values that convert without raising, so they reach the records' fields.
CONVERTIBLE = [
    WeirdStr(),
    SubStr("sub"),
    IntLike(),
    BoolInt(),
    b"bytes",
    2**64,
    10**400,
    float("nan"),
    float("inf"),
    True,
    False,
    (1, 2),
    1j,
]
SHARED = {id(value) for value in HOSTILE} | {id(DEEP_TUPLE)}


def pick(*options: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, chosen with the given weights (``one_of`` would flatten)."""
    choices = [strategy for weight, strategy in options for _ in range(weight)]
    return st.sampled_from(choices).flatmap(lambda strategy: strategy)


def one_of_objects(objects: list[Any]) -> st.SearchStrategy[Any]:
    """``sampled_from`` by index: hypothesis reprs the elements of ``sampled_from``."""

    def get(index: int) -> Any:
        return objects[index]

    return st.integers(0, len(objects) - 1).map(get)


keys = st.one_of(
    st.text(max_size=4),
    st.sampled_from(ROW_KEYS + META_KEYS + STAT_KEYS),
    st.integers(),
    st.none(),
    st.booleans(),
    st.floats(),
    st.tuples(st.integers(0, 2)),
    one_of_objects([DEEP_TUPLE, Evil(), EvilInt(2), EvilStr("k"), WeirdStr(), IntLike()]),
)
scalars = pick(
    (1, st.none()),
    (1, st.booleans()),
    (1, st.integers()),
    (1, st.integers(min_value=2**62)),
    (1, st.floats()),
    (1, st.text(max_size=6)),
    (1, st.binary(max_size=4)),
    (3, one_of_objects(HOSTILE)),
)
anything = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(keys, inner, max_size=4),
        st.builds(ListLike, st.lists(inner, max_size=3)),
        st.builds(GetRaises, st.dictionaries(keys, inner, max_size=3)),
    ),
    max_leaves=6,
)


# -- well-formed payloads, then hostile values planted anywhere in them ------------------

# Objects that convert without raising: they reach the records' fields, where a
# coercion that forgets to normalise (a str subclass, a bool for an int) shows.
SAFE_ODD = [WeirdStr(), SubStr("sub"), IntLike(), BoolInt(), b"bytes"]
benign = pick(
    (2, st.none()),
    (1, st.booleans()),
    (3, st.integers(-5, 100)),
    (1, st.integers(-(2**63), 2**63)),
    (2, st.floats(allow_nan=True, allow_infinity=True)),
    (1, st.text(max_size=5)),
    (3, one_of_objects(SAFE_ODD)),
)
odd_keys = one_of_objects([WeirdStr(), SubStr("fwd"), IntLike(), b"k", None, 2.5])
times = pick((3, st.integers(0, 2**63)), (1, st.floats(0, 2e9)), (1, benign))


def _row_of(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


stats = _row_of(**dict.fromkeys(STAT_KEYS, benign))
events = st.dictionaries(
    pick((3, st.sampled_from(["fwd", "bwd", "step"])), (1, st.integers(0, 2)), (1, odd_keys)),
    st.dictionaries(
        pick((3, st.sampled_from(["cuda:0", "cpu"])), (1, odd_keys)),
        pick((4, stats), (1, benign)),
        max_size=2,
    ),
    max_size=3,
)
gpu_entry = st.lists(benign, min_size=5, max_size=7)
ROWS = {
    "StepTimeSampler": _row_of(seq=benign, timestamp=times, step=benign, events=events),
    "StepMemorySampler": _row_of(
        seq=benign,
        ts=times,
        device=pick((3, st.just("cuda:0")), (1, benign), (1, st.just(SubStr("cuda:1")))),
        step=benign,
        peak_alloc=benign,
        peak_resv=benign,
    ),
    "SystemSampler": _row_of(
        seq=benign,
        ts=times,
        cpu=benign,
        ram_used=benign,
        ram_total=benign,
        gpu_available=benign,
        gpu_count=benign,
        gpus=st.lists(gpu_entry, max_size=3),
    ),
    "ProcessSampler": _row_of(
        seq=benign,
        ts=times,
        cpu=benign,
        cpu_cores=benign,
        ram_used=benign,
        ram_total=benign,
        gpu_available=benign,
        gpu_count=benign,
        gpu=pick(
            (1, st.none()),
            (2, _row_of(device=benign, mem_used=benign, mem_reserved=benign, mem_total=benign)),
        ),
    ),
    "RuntimeEnvironmentSampler": _row_of(
        ts=times,
        seq=benign,
        topology=benign,
        distributed_initialized=benign,
        distributed_backend=benign,
        training_strategy=benign,
        strategy_source=benign,
        strategy_confidence=benign,
    ),
    "Stdout/Stderr": _row_of(
        line=pick((1, benign), (1, one_of_objects(SAFE_ODD)), (2, st.text(min_size=1, max_size=5)))
    ),
}
metas = _row_of(**dict.fromkeys(META_KEYS, benign))


@st.composite
def envelopes(draw: st.DrawFn) -> dict[str, Any]:
    """A valid envelope of one of the six samplers (its rows never fail to project)."""
    sampler = draw(st.sampled_from(SAMPLERS))
    meta = draw(metas)
    meta["sampler"] = sampler
    table = "RuntimeEnvironmentTable" if sampler == "RuntimeEnvironmentSampler" else "T"
    tables = {table: draw(st.lists(ROWS[sampler], min_size=1, max_size=3))}
    if draw(st.booleans()):
        return {"meta": meta, "body": {"tables": tables}}
    return {**meta, "tables": tables}


def _slots(
    value: Any, parent: Any = None, key: Any = None, depth: int = 0
) -> list[tuple[Any, Any]]:
    """Every (container, key) place in the plain dict/list tree, the root as (None, None).

    Stops 14 levels down (an envelope is about 11 deep), so planted deep values are not
    walked into.
    """
    out = [(parent, key)]
    if id(value) in SHARED:
        return out  # never edit the module's shared hostile objects
    if depth < 14 and type(value) is dict:
        for k, v in value.items():
            out += _slots(v, value, k, depth + 1)
    elif depth < 14 and type(value) is list:
        for i, v in enumerate(value):
            out += _slots(v, value, i, depth + 1)
    return out


INSERTED_KEYS = ROW_KEYS + META_KEYS + STAT_KEYS + ["meta", "body", "tables", "sampler"]


@st.composite
def hostile_payloads(draw: st.DrawFn) -> tuple[Any, int]:
    """A well-formed payload with 0-4 hostile plants; returns it and the plant count."""
    payload: Any = draw(pick((1, envelopes()), (4, st.lists(envelopes(), min_size=1, max_size=4))))
    plants = draw(pick((1, st.just(0)), (4, st.integers(1, 4))))
    for _ in range(plants):
        slots = _slots(payload)
        parent, key = slots[draw(st.integers(0, len(slots) - 1))]
        current = payload if parent is None else parent[key]
        how = draw(st.sampled_from(["replace", "replace", "wrap", "key", "anything"]))
        if how == "key" and type(current) is dict:
            name = draw(st.sampled_from(INSERTED_KEYS))
            # ``name in current`` would call the __eq__ of an EvilKey planted before.
            taken = {
                k.key if type(k) is EvilKey else k for k in current if type(k) in (str, EvilKey)
            }
            hostile_key = draw(
                pick(
                    (1, st.just(EvilKey(name)) if name not in taken else st.just(Evil())),
                    (1, one_of_objects([Evil(), EvilInt(7), DEEP_TUPLE, b"k", None, 1.5])),
                )
            )
            value = draw(pick((2, benign), (1, one_of_objects(HOSTILE))))
            try:
                current[hostile_key] = value
            except BoomError:
                # a key equal in hash to one planted before (two EvilInt(7)): the dict
                # compares them and the __eq__ raises; the payload cannot hold both
                reject()
            continue
        if how == "wrap" and type(current) is dict:
            new: Any = draw(st.sampled_from([GetRaises, EvilDict]))(current)
        elif how == "wrap" and type(current) is list:
            new = draw(st.sampled_from([EvilList, ListLike]))(current)
        elif how == "anything":
            new = draw(anything)
        else:
            new = draw(pick((1, one_of_objects(HOSTILE)), (1, one_of_objects(CONVERTIBLE))))
        if parent is None:
            payload = new
        else:
            parent[key] = new
    return payload, plants


streams = st.one_of(
    st.none(), st.sets(st.sampled_from([t.STREAM for t in RECORD_TYPES]), min_size=1)
)


# -- type checks --------------------------------------------------------------------------

HINTS = {cls: typing.get_type_hints(cls) for cls in RECORD_TYPES}


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__}>"


def _check_scalar(value: Any, hint: Any, where: str) -> None:
    allowed = typing.get_args(hint) or (hint,)
    if value is None:
        assert type(None) in allowed, f"{where}: None in a field that is never None"
        return
    plain = [t for t in allowed if t is not type(None)]
    assert len(plain) == 1, where
    assert type(value) is plain[0], f"{where}: {type(value).__name__} is not {plain[0].__name__}"


def _check_events(events: Any, where: str) -> None:
    assert type(events) is dict, where
    for name, by_device in events.items():
        assert type(name) is str, where
        assert type(by_device) is dict, where
        assert by_device, f"{where}: an event with no devices is dropped"
        for device, stats in by_device.items():
            assert type(device) is str, where
            assert type(stats) is dict, where
            assert list(stats) == STAT_KEYS, where
            assert stats["is_gpu"] is None or type(stats["is_gpu"]) is bool, where
            for key in ("duration_ms", "cpu_ms", "gpu_ms"):
                assert stats[key] is None or type(stats[key]) is float, (where, key)
            assert stats["n_calls"] is None or type(stats["n_calls"]) is int, where


def check_batch(batch: Any, observed: int | None) -> None:
    assert type(batch) is RecordBatch
    assert type(batch.skipped) is int
    assert batch.skipped >= 0
    assert type(batch.records) is list
    for record in batch.records:
        cls = type(record)
        assert cls in HINTS
        for name in cls.COLUMNS:
            value = getattr(record, name)
            where = f"{cls.__name__}.{name}={_safe_repr(value)[:200]}"
            if name == "events":
                _check_events(value, where)
            else:
                _check_scalar(value, HINTS[cls][name], where)
        if observed is not None:
            assert record.observed_timestamp_unix_ns == observed
        if isinstance(record, StdoutStderrRecord):
            assert record.line != ""
        assert list(record.to_dict())[2:] == list(cls.COLUMNS)


# -- properties -----------------------------------------------------------------------------
