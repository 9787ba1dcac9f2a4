"""The explicit Arrow schema of each stream, and rows turned into Arrow columns.

A stream's schema is declared from the record's field names (``COLUMNS``),
never inferred from values, so a first batch whose column is all ``None``
still gets the column's real type. Every field of TraceML's export-records
contract (schema_version 1) has its type below; the rules for values that a
type cannot hold are the module's ``TEXT_RULE``, ``INT_RULE`` and
``UNKNOWN_FIELD_RULE``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

__all__ = [
    "EVENTS_TYPE",
    "FIELD_TYPES",
    "INT_RULE",
    "JSON_ENCODING",
    "STATS_KEYS",
    "STATS_TYPE",
    "TEXT_RULE",
    "UNKNOWN_FIELD_RULE",
    "clean_text",
    "stream_schema",
    "to_arrow",
]

INT_RULE = (
    "integers are int64; a value outside [-2**63, 2**63 - 1] cannot be stored "
    "exactly, so storing it (at the flush, or the write that stages it) raises "
    "OverflowError naming the stream and field: the exporter fails loudly rather "
    "than store a wrong or null value"
)
TEXT_RULE = (
    "text is UTF-8; a lone surrogate (which UTF-8 cannot encode) is stored as "
    "U+FFFD, a surrogate pair given as two code points as the character it "
    "encodes; NUL, U+2028 and every other character are stored unchanged"
)
UNKNOWN_FIELD_RULE = (
    "a field this exporter has no type for (a later schema_version) is stored as "
    "its JSON text in a string column marked with the field metadata "
    "traceml.encoding=json, which read_export decodes"
)

_INT = pa.int64()
_FLOAT = pa.float64()
_TEXT = pa.string()

STATS_KEYS = frozenset({"is_gpu", "duration_ms", "cpu_ms", "gpu_ms", "n_calls"})
STATS_TYPE = pa.struct(
    [
        ("is_gpu", pa.bool_()),
        ("duration_ms", _FLOAT),
        ("cpu_ms", _FLOAT),
        ("gpu_ms", _FLOAT),
        ("n_calls", _INT),
    ]
)
EVENTS_TYPE = pa.map_(_TEXT, pa.map_(_TEXT, STATS_TYPE))
"""``events[name][device]``: a Parquet MAP of MAPs of the five stats, native to DuckDB and polars."""

_INT_FIELDS = (
    "schema_version observed_timestamp_unix_ns rank global_rank local_rank world_size "
    "local_world_size node_rank pid timestamp_unix_ns seq step gpu_idx gpu_available "
    "gpu_count cpu_logical_core_count gpu_device_index distributed_initialized"
)
_FLOAT_FIELDS = (
    "peak_alloc_bytes peak_reserved_bytes cpu_percent ram_used_bytes ram_total_bytes util "
    "mem_used_bytes mem_total_bytes temperature_c power_usage_w power_limit_w "
    "gpu_mem_used_bytes gpu_mem_reserved_bytes gpu_mem_total_bytes"
)
_TEXT_FIELDS = (
    "stream hostname device topology distributed_backend training_strategy "
    "strategy_source strategy_confidence line"
)

FIELD_TYPES: dict[str, pa.DataType] = {
    **dict.fromkeys(_INT_FIELDS.split(), _INT),
    **dict.fromkeys(_FLOAT_FIELDS.split(), _FLOAT),
    **dict.fromkeys(_TEXT_FIELDS.split(), _TEXT),
    "events": EVENTS_TYPE,
}
"""Arrow type of every field of the contract, by name (a name has one type in every stream)."""

JSON_ENCODING: dict[bytes | str, bytes | str] = {b"traceml.encoding": b"json"}
"""Field metadata of a column holding JSON text (see ``UNKNOWN_FIELD_RULE``)."""


def stream_schema(stream: str, columns: Sequence[str]) -> pa.Schema:
    """The schema of ``stream``'s files: ``columns`` in order, each with its declared type."""
    fields: list[pa.Field[Any]] = []
    for name in columns:
        declared = FIELD_TYPES.get(name)
        if declared is None:
            fields.append(pa.field(name, _TEXT, metadata=JSON_ENCODING))
        else:
            fields.append(pa.field(name, declared))
    metadata: dict[bytes | str, bytes | str] = {b"traceml.stream": stream.encode()}
    return pa.schema(fields, metadata=metadata)


def clean_text(text: str) -> str:
    """``text`` as UTF-8 can hold it, by ``TEXT_RULE``."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _clean(value: Any) -> Any:
    """``value`` with ``clean_text`` applied to every string in it, map keys included."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {_clean(key): _clean(item) for key, item in value.items()}
    return value


def _check_stats(stream: str, events: Sequence[Any]) -> None:
    """Refuse a stats map with a key the struct has no field for, rather than drop it."""
    keys = STATS_KEYS
    for by_name in events:
        if not by_name:
            continue
        for by_device in by_name.values():
            for stats in by_device.values():
                if not stats.keys() <= keys:
                    extra = sorted(set(stats) - keys)
                    raise ValueError(
                        f"{stream}.events has stats keys {extra}; schema_version 1 defines "
                        f"{sorted(keys)}, and this exporter stores only those"
                    )


def _array(values: Sequence[Any], type_: pa.DataType) -> pa.Array[Any]:
    try:
        array: pa.Array[Any] = pa.array(values, type=type_)
    except UnicodeEncodeError:  # a lone surrogate somewhere: apply TEXT_RULE, then retry
        array = pa.array([_clean(v) for v in values], type=type_)
    return array


def _column(
    stream: str, field: pa.Field[Any], values: Sequence[Any], where: Callable[[], str]
) -> pa.Array[Any]:
    """One column as an Arrow array of its declared type; errors name what and where."""
    if field.metadata == JSON_ENCODING:
        values = [None if v is None else json.dumps(v, ensure_ascii=False) for v in values]
    try:
        return _array(values, field.type)
    except OverflowError as error:
        raise OverflowError(
            f"{where()}: {stream}.{field.name} holds an integer outside int64, which this "
            f"exporter refuses rather than store it inexactly: {error}"
        ) from error
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise ValueError(
            f"{where()}: {stream}.{field.name} holds a value that is not {field.type}: {error}"
        ) from error


def to_arrow(
    stream: str, schema: pa.Schema, rows: Sequence[Sequence[Any]], where: Callable[[], str]
) -> pa.RecordBatch:
    """Rows (tuples in ``schema`` order) as one record batch; ``where()`` names the sink."""
    columns = list(zip(*rows, strict=True))
    if "events" in schema.names:
        _check_stats(stream, columns[schema.get_field_index("events")])
    arrays = [
        _column(stream, field, values, where) for field, values in zip(schema, columns, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
