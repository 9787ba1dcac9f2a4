"""A JSON Lines payload straight to records with msgspec, for ``replay`` (optional).

Decoding a line with orjson builds every events map as dicts, and the mapper then
builds it again, normalised. Here msgspec decodes a StepTimeSampler envelope's rows
into typed structs and ``msgspec.to_builtins`` turns each events map into the
normalised dicts in C (stats keys in the contract's order, missing ones None,
unknown ones dropped). Other envelopes are decoded as plain values and mapped by
``records_from_payload`` one by one.

msgspec accepts only what the careful path would read the same way: a value of
another type (a float step, ``is_gpu`` 1, a boolean duration), NaN, a BOM, a lone
surrogate, a body that is not an object... make it raise, and then the whole line
goes the usual way (``PayloadReader.decode_line`` and ``records_from_payload``),
which decides. ``tests/mapping/test_fast_decode.py`` checks the two agree.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any

from .coerce import drop_deviceless, identity_fields
from .projection import sampler_of
from ..mapping import records_from_payload
from ..records import Record, RecordBatch, StepTimeRecord, twin

__all__ = ["LineMapper", "line_mapper"]

LineMapper = Callable[[bytes], RecordBatch]

_new = object.__new__
_FIELDS = twin(StepTimeRecord)


def line_mapper(streams: tuple[str, ...]) -> LineMapper | None:
    """A function from one JSON line to its records, or None without msgspec.

    The function raises on anything it does not read exactly as the careful path.
    A line of StepTimeSampler envelopes only (a replay's bulk) is decoded in one
    pass, bodies typed; any other line in two (meta first, then each body by its
    sampler). Both give the same records; which is tried first follows the line
    before, so a file of other samplers does not pay a wasted typed pass per line.
    """
    try:
        types = importlib.import_module("traceml_exporter_sdk._build.step_structs")
    except ImportError:
        return None
    decode_line = types.decode_line
    decode_step_line = types.decode_step_line
    decode_step_body = types.decode_step_body
    decode_body = types.decode_body
    to_builtins = types.to_builtins
    selected = tuple(streams)
    want_steps = "step_time" in selected
    steps_only = True  # the last line held StepTimeSampler envelopes only

    def map_steps(line: bytes) -> RecordBatch | None:
        """One pass, or None when the line is not StepTimeSampler's alone."""
        try:
            decoded = decode_step_line(line)
        except Exception:
            return None
        envelopes = decoded if type(decoded) is list else [decoded]
        for envelope in envelopes:
            if sampler_of(envelope.meta) != "StepTimeSampler":
                return None
        records: list[Record] = []
        if want_steps:
            for envelope in envelopes:
                _steps(envelope.meta, envelope.body.tables, records, to_builtins)
        return RecordBatch(records, 0)

    def map_line(line: bytes) -> RecordBatch:
        nonlocal steps_only
        if steps_only:
            batch = map_steps(line)
            if batch is not None:
                return batch
        decoded = decode_line(line)
        envelopes = decoded if type(decoded) is list else [decoded]
        records: list[Record] = []
        skipped = 0
        others = False
        for envelope in envelopes:
            meta = envelope.meta
            if sampler_of(meta) != "StepTimeSampler":
                others = True
                item = {"meta": meta, "body": decode_body(envelope.body)}
                batch = records_from_payload(item, streams=selected)
                records += batch.records
                skipped += batch.skipped
                continue
            body = decode_step_body(envelope.body)
            if want_steps:
                _steps(meta, body.tables, records, to_builtins)
        steps_only = not others
        return RecordBatch(records, skipped)

    return map_line


def _steps(
    meta: dict[str, Any], tables: dict[str, Any], out: list[Record], to_builtins: Any
) -> None:
    """``_build.fast_builders._step_time`` for typed rows: the same fields, values already checked."""
    if not tables:
        return
    rank, global_rank, local_rank, world_size, local_world_size, node_rank, hostname = (
        identity_fields(meta)
    )
    observed = time.time_ns()
    append = out.append
    fields = _FIELDS
    record = StepTimeRecord
    for rows in tables.values():
        # One to_builtins call per table: per row, the call cost a tenth of the row.
        for row, events in zip(rows, to_builtins([row.events for row in rows]), strict=True):
            events = drop_deviceless(events)
            r = _new(fields)
            r.observed_timestamp_unix_ns = observed
            r.rank = rank
            r.global_rank = global_rank
            r.local_rank = local_rank
            r.world_size = world_size
            r.local_world_size = local_world_size
            r.node_rank = node_rank
            r.hostname = hostname
            r.timestamp_unix_ns = row.timestamp
            r.seq = row.seq
            r.step = row.step
            r.events = events
            r.__class__ = record
            append(r)
