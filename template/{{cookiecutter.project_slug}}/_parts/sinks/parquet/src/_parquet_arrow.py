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
import operator
from collections.abc import Callable, Sequence
from typing import Any, cast

import pyarrow as pa

from ._contract import permanent
from ._parquet_events import CONTRACT_VERSION, EVENTS_TYPE, check_stats_keys
from ._parquet_text import EXACT_TEXT, TEXT_RULE, exact_text, to_array

__all__ = [
    "FIELD_TYPES",
    "INT_RULE",
    "JSON_ENCODING",
    "TEXT_RULE",
    "UNKNOWN_FIELD_RULE",
    "dictionary_columns",
    "statistics_columns",
    "stream_schema",
    "to_arrow",
]

INT_RULE = (
    "integers are int64; a value outside [-2**63, 2**63 - 1] cannot be stored "
    "exactly, so storing it (at the flush, or the write that stages it) raises "
    "OverflowError naming the stream and field: the exporter fails loudly rather "
    "than store a wrong or null value"
)
UNKNOWN_FIELD_RULE = (
    "a field this exporter has no type for (a later schema_version) is stored as "
    "its JSON text in a string column marked with the field metadata "
    "traceml.encoding=json, which read_export decodes"
)

_INT = pa.int64()
_FLOAT = pa.float64()
_TEXT = pa.string()

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
    """The schema of ``stream``'s files: ``columns`` in order, each with its declared type,
    then ``EXACT_TEXT`` (see ``TEXT_RULE``)."""
    fields: list[pa.Field[Any]] = []
    for name in columns:
        declared = FIELD_TYPES.get(name)
        if declared is None:
            fields.append(pa.field(name, _TEXT, metadata=JSON_ENCODING))
        else:
            fields.append(pa.field(name, declared))
    fields.append(pa.field(EXACT_TEXT, _TEXT))
    metadata: dict[bytes | str, bytes | str] = {b"traceml.stream": stream.encode()}
    return pa.schema(fields, metadata=metadata)


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The Parquet column paths worth dictionary encoding: text, map keys included.

    Numbers are left plain: measured values rarely repeat, and trying a
    dictionary for them costs time and, once compressed, bytes.
    """
    out: list[str] = []

    def visit(path: str, type_: pa.DataType) -> None:
        if pa.types.is_string(type_):
            out.append(path)
        elif pa.types.is_map(type_):
            visit(f"{path}.key_value.key", type_.key_type)
            visit(f"{path}.key_value.value", type_.item_type)
        elif pa.types.is_struct(type_):
            for child in type_:
                visit(f"{path}.{child.name}", child.type)

    for field in schema:
        visit(field.name, field.type)
    return out


def statistics_columns(schema: pa.Schema) -> list[str]:
    """The columns given min/max statistics: every top-level one but the nested ``events``.

    Readers prune files and row groups on these (a time range, a rank); the
    statistics of the map's leaves would cost about a quarter of the write time.
    """
    return [field.name for field in schema if not pa.types.is_nested(field.type)]


def _column(
    stream: str, field: pa.Field[Any], values: Sequence[Any], where: Callable[[], str]
) -> pa.Array[Any]:
    """One column as an Arrow array of its declared type; errors name what and where, and
    are permanent (``_contract`` rule 8: the same records are refused again)."""
    try:
        if field.metadata == JSON_ENCODING:
            values = [None if v is None else json.dumps(v, ensure_ascii=False) for v in values]
        return to_array(values, field.type)
    except OverflowError as error:
        raise permanent(
            OverflowError(
                f"{where()}: {stream}.{field.name} holds an integer outside int64, which this "
                f"exporter refuses rather than store it inexactly: {error}"
            )
        ) from error
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as error:
        raise permanent(
            ValueError(
                f"{where()}: {stream}.{field.name} holds a value that is not {field.type}: {error}"
            )
        ) from error


def to_arrow(
    schema: pa.Schema,
    constants: Sequence[Any],
    rows: Sequence[Sequence[Any]],
    where: Callable[[], str],
) -> pa.RecordBatch:
    """One record batch: ``constants`` fill the first columns, ``rows`` (tuples) the rest.

    The rows go to pyarrow as one struct array, converted in C; only when that
    fails (a lone surrogate, an integer beyond int64, a value of another type)
    or a column holds JSON text are they converted column by column, which
    applies ``TEXT_RULE`` or says which field is wrong.
    """
    fields = list(schema)
    first = [
        pa.repeat(pa.scalar(value, field.type), len(rows))
        for field, value in zip(fields, constants, strict=False)
    ]
    rest = fields[len(constants) : -1]  # the last one is EXACT_TEXT
    if constants[1] != CONTRACT_VERSION and any(field.type == EVENTS_TYPE for field in rest):
        at = [field.type for field in rest].index(EVENTS_TYPE)
        check_stats_keys(map(operator.itemgetter(at), rows))
    if not any(field.metadata == JSON_ENCODING for field in rest):
        try:
            struct = cast("pa.StructArray", pa.array(rows, type=pa.struct(rest)))
        except (ValueError, TypeError, OverflowError, pa.ArrowException):
            pass  # the column-by-column conversion below says what is wrong
        else:
            exact = pa.nulls(len(rows), type=_TEXT)
            return pa.RecordBatch.from_arrays([*first, *struct.flatten(), exact], schema=schema)
    stream = schema.metadata[b"traceml.stream"].decode()
    columns = zip(*rows, strict=True) if rows else [()] * len(rest)
    arrays = [
        _column(stream, field, values, where) for field, values in zip(rest, columns, strict=True)
    ]
    exact_column = exact_text([field.name for field in rest], rows)
    return pa.RecordBatch.from_arrays([*first, *arrays, exact_column], schema=schema)
