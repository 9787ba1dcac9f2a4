"""The sample payload corpus shipped with the SDK, and look-alike record classes.

``load_corpus()`` returns the telemetry payloads of a short two-node DDP run
(``testing/data/corpus.jsonl``, one payload per line, in the shape of TraceML's
wire format): every sampler and so all seven streams, four ranks on two
nodes, and the edge values of the contract (None beside a measured 0, unicode,
``\\n`` and U+2028 inside stdout lines, 19-digit nanosecond integers, empty
events, GPU lists with two GPUs, none, or a partly unmeasured one, a rank with
no hostname, a rank older than integer timestamps). Every record it yields is
distinct and every stream key is unique.

``load_hostile_corpus()`` and ``hostile_batches()`` are kept apart from it: one
payload of stdout lines holding ``HOSTILE_TEXT`` (and, in ``hostile_batches()``,
records of every class with that text in every str field) (a lone surrogate, NUL and
other control characters, U+2028, U+2029, U+0085 and a 128 KiB line), which
the ``hostile_text`` check sends, so a sink that chokes on them fails that
check by name rather than every check at once.

``value_space_batches()`` adds records generated from the record classes'
fields and type hints (``value_space``): every nullable field None, every
field at the edge values of its type; the checks send them after the corpus.
``non_finite_batches()`` holds -0.0, NaN and the infinities in every float field,
for the ``special_floats`` check alone.

``corpus_batches()`` turns it into records, one batch per payload, with
deterministic ``observed_timestamp_unix_ns`` stamps. ``as_foreign()`` copies
records into classes that look like the SDK's (same name, ``STREAM``,
``SCHEMA_VERSION``, ``COLUMNS``, fields and ``to_dict()``) but are different
types, as TraceML's own record classes are in production.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Iterable, Sequence
from functools import cache
from importlib import resources
from typing import Any

from ..mapping import records_from_payload
from ..records import RECORD_TYPE_BY_STREAM, RECORD_TYPES, ExportRecord, Record
from .value_space import value_space_records

__all__ = [
    "CORPUS_FILE",
    "HOSTILE_FILE",
    "HOSTILE_TEXT",
    "LONG_LINE",
    "OBSERVED_BASE_NS",
    "as_foreign",
    "as_mixed",
    "corpus_batches",
    "corpus_records",
    "foreign_class",
    "hostile_batches",
    "load_corpus",
    "load_hostile_corpus",
    "non_finite_batches",
    "value_space_batches",
]

CORPUS_FILE = "data/corpus.jsonl"
"""The corpus, relative to the ``traceml_exporter_sdk.testing`` package."""

HOSTILE_FILE = "data/hostile.jsonl"
"""The hostile-text payloads, relative to the ``traceml_exporter_sdk.testing`` package."""

LONG_LINE = "a 1 MiB line, multibyte: é日🚀 " + "0123456789abcdef" * 65_536
"""The longest stdout line the suite sends: over 1 MiB of UTF-8, past the 64 KiB buffers
and limits many sinks and readers assume. TraceML 0.5.0 bounds a captured line only by
its transport frame (a 4-byte length: 4 GiB of msgpack), which no test can send."""

HOSTILE_TEXT = (
    "a lone high surrogate \ud800 in the middle",
    "\udfff",
    "NUL \x00 inside",
    "\x00",
    "line\u2028separator, paragraph\u2029separator",
    "next line \x85 (U+0085), form feed \x0c, vertical tab \x0b",
    "escape \x1b[31mred\x1b[0m, bell \x07, delete \x7f",
    'quote " backslash \\ slash / and a \\u escape written out',
    LONG_LINE,
)
"""Text that is legal in a record but breaks careless sinks (UTF-8 encoders, C strings,
line splitters, fixed buffers); every string is a valid ``str`` and never empty."""

OBSERVED_BASE_NS = 1_764_230_400_000_000_000
"""``observed_timestamp_unix_ns`` of the first payload; payload ``i`` gets base + i."""

FOREIGN_MODULE = "traceml_ai.aggregator.export"


@cache
def _corpus_text() -> str:
    return resources.files(__package__).joinpath(CORPUS_FILE).read_text(encoding="utf-8")


def load_corpus() -> list[Any]:
    """Return the sample payloads, each a list of telemetry envelopes (a fresh copy)."""
    return [json.loads(line) for line in _corpus_text().splitlines() if line.strip()]


@cache
def _hostile_text() -> str:
    return resources.files(__package__).joinpath(HOSTILE_FILE).read_text(encoding="utf-8")


def load_hostile_corpus() -> list[Any]:
    """Return the hostile-text payloads (stdout lines holding ``HOSTILE_TEXT``), a fresh copy."""
    return [json.loads(line) for line in _hostile_text().split("\n") if line.strip()]


def hostile_batches(
    streams: Collection[str] | None = None, *, observed_base_ns: int = OBSERVED_BASE_NS
) -> list[list[Record]]:
    """The hostile-text payloads as records, one batch per payload (see ``corpus_batches``),
    then records generated from the record classes with ``HOSTILE_TEXT`` in every str
    field, event names and devices included (``value_space``), one batch per stream."""
    out: list[list[Record]] = []
    for index, payload in enumerate(load_hostile_corpus()):
        batch = records_from_payload(
            payload, observed_timestamp_unix_ns=observed_base_ns + index, streams=streams
        ).records
        if batch:
            out.append(batch)
    generated = value_space_records(RECORD_TYPES, texts=HOSTILE_TEXT)
    return out + _by_class(generated, streams)


def corpus_batches(
    streams: Collection[str] | None = None,
    *,
    observed_base_ns: int = OBSERVED_BASE_NS,
    repeat: int = 1,
) -> list[list[Record]]:
    """The corpus as records: one batch per payload, in payload order.

    Payload ``i`` (counting through every repeat) is stamped
    ``observed_base_ns + i``, so repeats are distinct records. ``streams``
    keeps only those STREAM names (None keeps all); payloads left with no
    records give no batch.
    """
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    payloads = load_corpus()
    out: list[list[Record]] = []
    index = 0
    for _ in range(repeat):
        for payload in payloads:
            batch = records_from_payload(
                payload, observed_timestamp_unix_ns=observed_base_ns + index, streams=streams
            ).records
            index += 1
            if batch:
                out.append(batch)
    return out


def _by_class(records: list[Record], streams: Collection[str] | None) -> list[list[Record]]:
    out: dict[str, list[Record]] = {}
    for record in records:
        if streams is None or record.STREAM in streams:
            out.setdefault(record.STREAM, []).append(record)
    return list(out.values())


def value_space_batches(streams: Collection[str] | None = None) -> list[list[Record]]:
    """Generated records at the contract's edge values, one batch per stream (see
    ``value_space``): every nullable field None in some record, every finite edge value
    of every field's type. ``streams`` keeps only those STREAM names."""
    return _by_class(_value_space(False), streams)


def non_finite_batches(streams: Collection[str] | None = None) -> list[list[Record]]:
    """Generated records with -0.0, NaN, +inf and -inf in every float field (events stats
    too), one batch per stream that has a float field."""
    return _by_class(_value_space(True), streams)


@cache
def _value_space_cached(non_finite: bool) -> tuple[Record, ...]:
    return tuple(value_space_records(RECORD_TYPES, non_finite=non_finite))


def _value_space(non_finite: bool) -> list[Record]:
    """Fresh copies (events maps are mutable, and an exporter may change them)."""
    return [
        type(r)(*(_copy(getattr(r, n)) for n in r.COLUMNS)) for r in _value_space_cached(non_finite)
    ]


def _copy(value: Any) -> Any:
    if type(value) is dict:
        return {k: _copy(v) for k, v in value.items()}
    return value


def corpus_records(
    streams: Collection[str] | None = None, *, observed_base_ns: int = OBSERVED_BASE_NS
) -> list[Record]:
    """Every record of the corpus in payload order (see ``corpus_batches``)."""
    return [
        r for batch in corpus_batches(streams, observed_base_ns=observed_base_ns) for r in batch
    ]


def _foreign_to_dict(self: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"stream": self.STREAM, "schema_version": self.SCHEMA_VERSION}
    for name in self.COLUMNS:
        out[name] = getattr(self, name)
    return out


@cache
def foreign_class(stream: str) -> type[Any]:
    """A frozen dataclass that mirrors the SDK's record class for ``stream`` but is another type.

    Same class name, ``STREAM``, ``SCHEMA_VERSION``, ``COLUMNS``, fields and
    ``to_dict()``; built at runtime with ``dataclasses.make_dataclass`` and
    placed in module ``traceml_ai.aggregator.export``. ``isinstance`` against
    any SDK class is False for its instances.
    """
    try:
        sdk_class = RECORD_TYPE_BY_STREAM[stream]
    except KeyError:
        raise ValueError(
            f"unknown STREAM {stream!r}; known: {', '.join(RECORD_TYPE_BY_STREAM)}"
        ) from None
    cls = dataclasses.make_dataclass(
        sdk_class.__name__,
        [(f.name, f.type) for f in dataclasses.fields(sdk_class)],
        namespace={
            "STREAM": sdk_class.STREAM,
            "SCHEMA_VERSION": sdk_class.SCHEMA_VERSION,
            "COLUMNS": sdk_class.COLUMNS,
            "to_dict": _foreign_to_dict,
        },
        frozen=True,
        slots=True,
    )
    cls.__module__ = FOREIGN_MODULE
    cls.__qualname__ = sdk_class.__name__
    return cls


def as_foreign(records: Iterable[ExportRecord]) -> list[Any]:
    """Copy records into their ``foreign_class`` look-alikes (same values, other types)."""
    out = []
    for record in records:
        cls = foreign_class(record.STREAM)
        out.append(cls(*(getattr(record, name) for name in record.COLUMNS)))
    return out


def as_mixed(records: Sequence[ExportRecord]) -> list[Any]:
    """Every other record of each stream as its look-alike, the rest unchanged: a batch in
    which one stream arrives in two classes, order kept."""
    seen: dict[str, int] = {}
    out: list[Any] = []
    for record in records:
        turn = seen[record.STREAM] = seen.get(record.STREAM, -1) + 1
        out.append(as_foreign([record])[0] if turn % 2 else record)
    return out
