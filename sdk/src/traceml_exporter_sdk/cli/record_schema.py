"""JSON Schema (draft 2020-12) and markdown tables for each record's ``to_dict()``.

Types and nullability come from the record dataclasses themselves; units and
the "None means" text come from ``FIELD_NOTES``, the one table that holds the
contract's per-field text. A test checks that every field of every record has
a note, so a field added to a record without its contract text fails loudly.

The JSON Lines exporter omits ``hostname`` unless ``exporter_hostname`` is on,
so ``hostname`` is the one field a schema does not require.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, Union

from ..records import RECORD_TYPE_BY_STREAM, RECORD_TYPES, SCHEMA_VERSION, EventStats
from ..streams import ALL_STREAMS

__all__ = [
    "COMMON",
    "FIELD_NOTES",
    "JSON_SCHEMA_DIALECT",
    "FieldNote",
    "field_note",
    "json_schema",
    "markdown",
    "missing_notes",
    "record_schema",
]

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

COMMON = "*"
"""The ``FIELD_NOTES`` key of the contract's common-fields table."""

EVENT_STATS = "step_time.events"
"""The ``FIELD_NOTES`` key of the ``events[name][device]`` stats fields."""

OPTIONAL_FIELDS = frozenset({"hostname"})
"""Fields an exporter may leave out (``hostname`` unless ``include_hostname``)."""


@dataclass(frozen=True, slots=True)
class FieldNote:
    """The contract's Unit and "None means" cells for one field ("" when empty)."""

    unit: str
    none_means: str


FIELD_NOTES: dict[tuple[str, str], FieldNote] = {
    # -- common fields (the contract's "Common fields" table) ---------------------
    (COMMON, "observed_timestamp_unix_ns"): FieldNote(
        "ns since Unix epoch", "never None; when the record was built, once per envelope"
    ),
    (COMMON, "rank"): FieldNote("", "legacy alias of global_rank, same value"),
    (COMMON, "global_rank"): FieldNote("", "the rank sent no usable global rank"),
    (COMMON, "local_rank"): FieldNote("", "the rank sent no local rank"),
    (COMMON, "world_size"): FieldNote("", "the rank sent no world size"),
    (COMMON, "local_world_size"): FieldNote("", "the rank sent no local world size"),
    (COMMON, "node_rank"): FieldNote("", "the rank sent no node rank"),
    (COMMON, "hostname"): FieldNote("", "the rank sent no hostname"),
    (COMMON, "timestamp_unix_ns"): FieldNote(
        "ns since Unix epoch",
        "the row had no integer source time, for example a rank older than integer timestamps",
    ),
    (COMMON, "seq"): FieldNote("", "the row had no sample counter"),
    # -- StepTimeRecord ----------------------------------------------------------
    ("step_time", "step"): FieldNote("", "the row had no integer step"),
    ("step_time", "events"): FieldNote("", "never None; empty map when the row had no events"),
    (EVENT_STATS, "is_gpu"): FieldNote("", "the rank did not send it"),
    (EVENT_STATS, "duration_ms"): FieldNote("milliseconds", "the rank did not send it"),
    (EVENT_STATS, "cpu_ms"): FieldNote("milliseconds", "the rank did not send it"),
    (EVENT_STATS, "gpu_ms"): FieldNote(
        "milliseconds",
        "the rank did not send it; None unless every call of that phase in the step "
        "measured the GPU clock",
    ),
    (EVENT_STATS, "n_calls"): FieldNote("", "the rank did not send it"),
    # -- StepMemoryRecord --------------------------------------------------------
    ("step_memory", "device"): FieldNote("", "the row named no device"),
    ("step_memory", "step"): FieldNote("", "the row had no integer step"),
    ("step_memory", "peak_alloc_bytes"): FieldNote("bytes", "the row had no peak"),
    ("step_memory", "peak_reserved_bytes"): FieldNote("bytes", "the row had no peak"),
    # -- SystemRecord ------------------------------------------------------------
    ("system", "cpu_percent"): FieldNote("percent", "not measured"),
    ("system", "ram_used_bytes"): FieldNote("bytes", "not measured"),
    ("system", "ram_total_bytes"): FieldNote("bytes", "not measured"),
    ("system", "gpu_available"): FieldNote("0 or 1", "not reported"),
    ("system", "gpu_count"): FieldNote("", "not reported"),
    # -- SystemGpuRecord ---------------------------------------------------------
    ("system_gpu", "gpu_idx"): FieldNote("", "never None; the GPU's position in the snapshot"),
    ("system_gpu", "util"): FieldNote("percent", "not measured"),
    ("system_gpu", "mem_used_bytes"): FieldNote("bytes", "not measured"),
    ("system_gpu", "mem_total_bytes"): FieldNote("bytes", "not measured"),
    ("system_gpu", "temperature_c"): FieldNote("degrees C", "not measured"),
    ("system_gpu", "power_usage_w"): FieldNote("watts", "not measured"),
    ("system_gpu", "power_limit_w"): FieldNote("watts", "not measured"),
    # -- ProcessRecord -----------------------------------------------------------
    ("process", "cpu_percent"): FieldNote("percent", "not measured"),
    ("process", "cpu_logical_core_count"): FieldNote("", "not reported"),
    ("process", "ram_used_bytes"): FieldNote("bytes", "not measured"),
    ("process", "ram_total_bytes"): FieldNote("bytes", "not measured"),
    ("process", "gpu_available"): FieldNote("0 or 1", "not reported"),
    ("process", "gpu_count"): FieldNote("", "not reported"),
    ("process", "gpu_device_index"): FieldNote("", "the row had no GPU device"),
    ("process", "gpu_mem_used_bytes"): FieldNote("bytes", "not measured"),
    ("process", "gpu_mem_reserved_bytes"): FieldNote("bytes", "not measured"),
    ("process", "gpu_mem_total_bytes"): FieldNote("bytes", "not measured"),
    # -- RuntimeEnvironmentRecord ------------------------------------------------
    ("runtime_environment", "pid"): FieldNote("", "the rank sent no process id"),
    ("runtime_environment", "topology"): FieldNote("", "not reported"),
    ("runtime_environment", "distributed_initialized"): FieldNote("0 or 1", "not reported"),
    ("runtime_environment", "distributed_backend"): FieldNote("", "not reported"),
    ("runtime_environment", "training_strategy"): FieldNote("", "not reported"),
    ("runtime_environment", "strategy_source"): FieldNote("", "not reported"),
    ("runtime_environment", "strategy_confidence"): FieldNote("", "not reported"),
    # -- StdoutStderrRecord ------------------------------------------------------
    ("stdout_stderr", "rank"): FieldNote(
        "", "the rank's global_rank; this record has no global_rank field"
    ),
    ("stdout_stderr", "line"): FieldNote("", "never None; empty lines are not recorded"),
}
"""The contract's Unit and "None means" text: ``(stream or COMMON, field) -> FieldNote``.

A stream's own entry wins over the common one (StdoutStderrRecord's ``rank``).
``EVENT_STATS`` keys the ``events[name][device]`` stats map of StepTimeRecord.
"""

RECORD_TEXT: dict[str, tuple[str, str]] = {
    "step_time": ("step of a rank", "(global_rank, step)"),
    "step_memory": ("step and device of a rank", "(global_rank, device, step)"),
    "system": ("host snapshot of a node's local rank 0", "(global_rank, seq)"),
    "system_gpu": ("GPU in that host snapshot", "(global_rank, seq, gpu_idx)"),
    "process": ("process snapshot of a rank", "(global_rank, seq)"),
    "runtime_environment": ("rank process, at most once", "global_rank"),
    "stdout_stderr": ("captured line of a rank", "none; read the lines in file order"),
}
"""The contract's "One record per" and "Key" columns, per STREAM."""


def field_note(stream: str, name: str) -> FieldNote:
    """The note for one field of one stream (its own entry, else the common one).

    Raises:
        KeyError: the contract table has no text for that field.
    """
    note = FIELD_NOTES.get((stream, name)) or FIELD_NOTES.get((COMMON, name))
    if note is None:
        raise KeyError(f"no contract text for field {name!r} of stream {stream!r}")
    return note


# -- types ---------------------------------------------------------------------

_JSON_TYPES: dict[type, str] = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    type(None): "null",
}
_SHORT_NAMES: dict[type, str] = {bool: "bool", int: "int", float: "float", str: "str"}


def _union_args(tp: Any) -> tuple[Any, ...]:
    if typing.get_origin(tp) in (Union, types.UnionType):
        return typing.get_args(tp)
    return (tp,)


def _type_schema(tp: Any, stream: str, note_key: str) -> dict[str, Any]:
    """JSON Schema of one annotation: a scalar, an optional scalar, a map, a TypedDict."""
    members = _union_args(tp)
    if all(m in _JSON_TYPES for m in members):
        names = [_JSON_TYPES[m] for m in members]
        return {"type": names[0] if len(names) == 1 else names}
    if len(members) == 1 and typing.get_origin(tp) is dict:
        _key, value = typing.get_args(tp)
        return {"type": "object", "additionalProperties": _type_schema(value, stream, note_key)}
    if len(members) == 1 and typing.is_typeddict(tp):
        hints = typing.get_type_hints(tp)
        props = {
            name: _describe(_type_schema(hint, stream, note_key), field_note(note_key, name))
            for name, hint in hints.items()
        }
        return {
            "type": "object",
            "properties": props,
            "required": list(hints),
            "additionalProperties": False,
        }
    raise TypeError(f"no JSON Schema mapping for annotation {tp!r}")


def _short_type(tp: Any) -> str:
    members = [m for m in _union_args(tp) if m is not type(None)]
    if len(members) == 1 and members[0] in _SHORT_NAMES:
        return _SHORT_NAMES[members[0]]
    if typing.get_origin(tp) is dict:
        return "map"
    return str(tp)


def _describe(schema: dict[str, Any], note: FieldNote) -> dict[str, Any]:
    parts = []
    if note.unit:
        parts.append(f"Unit: {note.unit}.")
    if note.none_means.startswith("never None"):
        parts.append(f"N{note.none_means[1:]}.")
    elif note.none_means:
        parts.append(f"None means: {note.none_means}.")
    out: dict[str, Any] = {"description": " ".join(parts)} if parts else {}
    out.update(schema)
    if note.unit:
        out["x-unit"] = note.unit
    if note.unit == "0 or 1":
        out["enum"] = [0, 1, None] if "null" in _types_of(schema) else [0, 1]
    return out


def _types_of(schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type", [])
    return [kind] if isinstance(kind, str) else list(kind)


# -- schemas -------------------------------------------------------------------


def _record_type(stream: str) -> Any:
    try:
        return RECORD_TYPE_BY_STREAM[stream]
    except KeyError:
        raise ValueError(f"unknown stream {stream!r}; streams: {', '.join(ALL_STREAMS)}") from None


def record_schema(stream: str, *, standalone: bool = True) -> dict[str, Any]:
    """The JSON Schema of one stream's ``to_dict()`` (draft 2020-12).

    Every field is required except ``hostname``, which an exporter drops
    unless ``include_hostname``. No other property is allowed.

    Raises:
        ValueError: ``stream`` is not a STREAM name.
    """
    cls = _record_type(stream)
    hints = typing.get_type_hints(cls)
    per, key = RECORD_TEXT[stream]
    properties: dict[str, Any] = {
        "stream": {"description": "The record's STREAM.", "const": stream},
        "schema_version": {
            "description": "The record layout's version (SCHEMA_VERSION).",
            "const": SCHEMA_VERSION,
        },
    }
    for f in dataclasses.fields(cls):
        note_key = EVENT_STATS if f.name == "events" else stream
        properties[f.name] = _describe(
            _type_schema(hints[f.name], stream, note_key), field_note(stream, f.name)
        )
    schema: dict[str, Any] = {}
    if standalone:
        schema["$schema"] = JSON_SCHEMA_DIALECT
        schema["$id"] = f"urn:traceml:export-record:{stream}:v{SCHEMA_VERSION}"
    schema.update(
        {
            "title": cls.__name__,
            "description": (
                f"{cls.__name__}.to_dict(): one record per {per}; key {key}. "
                "hostname is present only when the exporter keeps it (exporter_hostname)."
            ),
            "type": "object",
            "properties": properties,
            "required": [name for name in properties if name not in OPTIONAL_FIELDS],
            "additionalProperties": False,
        }
    )
    return schema


def json_schema(stream: str | None = None) -> dict[str, Any]:
    """One stream's schema, or (``None``) one document that accepts any record.

    The combined document has each stream's schema under ``$defs`` and a
    ``oneOf`` over them; the ``stream`` const makes exactly one match.
    """
    if stream is not None:
        return record_schema(stream)
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        "$id": f"urn:traceml:export-records:v{SCHEMA_VERSION}",
        "title": "TraceML export record",
        "description": "Any record's to_dict(); the stream field names which one.",
        "oneOf": [{"$ref": f"#/$defs/{s}"} for s in ALL_STREAMS],
        "$defs": {s: record_schema(s, standalone=False) for s in ALL_STREAMS},
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(stream: str | None = None) -> str:
    """Markdown tables like the contract's: Field | Type | Unit | None means."""
    streams = [stream] if stream is not None else list(ALL_STREAMS)
    out: list[str] = []
    for name in streams:
        cls = _record_type(name)
        hints = typing.get_type_hints(cls)
        per, key = RECORD_TEXT[name]
        out.append(f"## {cls.__name__}")
        out.append("")
        out.append(f"STREAM `{name}`, schema version {SCHEMA_VERSION}: one record per {per}.")
        out.append(f"Key: {key}.")
        out.append("")
        out.append("| Field | Type | Unit | None means |")
        out.append("|---|---|---|---|")
        for f in dataclasses.fields(cls):
            note = field_note(name, f.name)
            out.append(
                f"| {f.name} | {_short_type(hints[f.name])} | {_cell(note.unit)} "
                f"| {_cell(note.none_means)} |"
            )
        if "events" in hints:
            out.append("")
            out.append("`events[name][device]` holds:")
            out.append("")
            out.append("| Field | Type | Unit | None means |")
            out.append("|---|---|---|---|")
            for stat, hint in typing.get_type_hints(EventStats).items():
                note = field_note(EVENT_STATS, stat)
                out.append(
                    f"| {stat} | {_short_type(hint)} | {_cell(note.unit)} "
                    f"| {_cell(note.none_means)} |"
                )
        out.append("")
    return "\n".join(out)


def missing_notes() -> list[tuple[str, str]]:
    """``(stream, field)`` of every record field without contract text (should be empty)."""
    missing = []
    for cls in RECORD_TYPES:
        for f in dataclasses.fields(cls):
            try:
                field_note(cls.STREAM, f.name)
            except KeyError:
                missing.append((cls.STREAM, f.name))
    for stat in typing.get_type_hints(EventStats):
        if (EVENT_STATS, stat) not in FIELD_NOTES:
            missing.append((EVENT_STATS, stat))
    return missing
