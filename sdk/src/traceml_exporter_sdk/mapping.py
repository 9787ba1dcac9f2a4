"""``records_from_payload``: one admitted telemetry payload -> a RecordBatch.

Two paths build the records of an envelope, both from the coercions of ``_build.coerce``:

- the fast path (``_build.fast_builders``): each shipped sampler's builder fills the records
  straight from the row dicts, taking values that already have their field's type
  as they are. It runs first for every envelope whose sampler's projection is the
  shipped one. A builder that raises has its records removed, and the envelope
  goes the careful way;
- the careful path (``_build.projection``): the projection builds row tuples exactly as
  TraceML's SQLite writers do, then each row becomes its record. It is the
  reference (``tests/mapping/test_differential.py`` holds it equal to traceml-ai 0.5.0's
  writers, ``tests/mapping/test_fast_path.py`` the fast path equal to it), and it decides
  whatever the fast path could not build. It also runs when a projection in
  ``PROJECTION_BY_SAMPLER`` is not the shipped one (``shipped[0] is projection``
  below): a test that patches a projection gets exactly what it patched.

The msgspec decoder of ``replay --payloads`` (``_build.msgspec_lines``) and the SQLite
rows (``_bridge.sqlite_rows``: backfill and follow) are two more ways in, with the same coercions.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from ._build.fast_builders import FAST_BUILDERS, FastBuilder
from ._build.projection import (
    PROJECTION_BY_SAMPLER,
    TABLE_RECORDS,
    Projection,
    normalise_envelope,
    sampler_of,
)
from .records import Record, RecordBatch
from .streams import validate_stream_filter

__all__ = ["records_from_payload"]

_FAST: dict[str, tuple[Projection, FastBuilder]] = {
    sampler: (PROJECTION_BY_SAMPLER[sampler], build) for sampler, build in FAST_BUILDERS.items()
}
"""Sampler -> its shipped projection and that projection's fast builder."""


def records_from_payload(
    payload: Any,
    *,
    observed_timestamp_unix_ns: int | None = None,
    streams: Collection[str] | None = None,
) -> RecordBatch:
    """Build the export records of one telemetry payload (a dict or a list of dicts).

    Records keep payload order and, inside an envelope, the writer's table
    order; duplicates pass through. ``skipped`` counts units, not rows: an item
    that does not normalise (or fails otherwise), a projection that raises (its
    envelope loses every row of that projection's tables), a row that does not
    fit its record, and each row of a table that has no record. Rows of streams
    left out by ``streams`` are neither built nor counted.

    Raises:
        ValueError: only for bad arguments, before the payload is read: a
            ``streams`` that is a string, empty, names an unknown STREAM or cannot
            be read as a collection of names; an ``observed_timestamp_unix_ns``
            that is not an int (bool included) or None.
    """
    selected = validate_stream_filter(streams)
    observed_given = _observed_stamp(observed_timestamp_unix_ns)
    if type(payload) is list:
        items = payload
    elif isinstance(payload, list):
        try:
            items = list(payload)
        except Exception:
            # A list subclass that cannot be iterated: the payload is one failed item.
            return RecordBatch([], 1)
    else:
        items = [payload]
    records: list[Record] = []
    skipped = 0
    for item in items:
        try:
            envelope = normalise_envelope(item)
            if envelope is None:
                skipped += 1
                continue
            meta, tables = envelope
            sampler = sampler_of(meta)
            projection = PROJECTION_BY_SAMPLER.get(sampler) if sampler is not None else None
            if projection is None:
                continue
            if selected is not None and not any(
                (record_type := TABLE_RECORDS.get(table)) is None or record_type.STREAM in selected
                for table in projection.tables
            ):
                continue
        except Exception:
            skipped += 1
            continue
        observed = time.time_ns() if observed_given is None else observed_given
        shipped = _FAST.get(sampler)  # type: ignore[arg-type]
        if shipped is not None and shipped[0] is projection:
            fast = shipped[1]
            mark = len(records)
            try:
                fast(meta, tables, observed, records)
            except Exception:
                # The careful projection decides whatever the fast one could not build.
                del records[mark:]
            else:
                if selected is not None and len(projection.tables) > 1:
                    records[mark:] = [r for r in records[mark:] if r.STREAM in selected]
                continue
        skipped += _careful(projection, meta, tables, observed, selected, records)
    return RecordBatch(records, skipped)


def _observed_stamp(value: Any) -> int | None:
    """The checked ``observed_timestamp_unix_ns``: None, or a plain int of nanoseconds."""
    if value is None or type(value) is int:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    raise ValueError(
        f"observed_timestamp_unix_ns must be an int (Unix nanoseconds) or None, "
        f"got {type(value).__name__}"
    )


def _careful(
    projection: Projection,
    meta: Any,
    tables: Any,
    observed: int,
    selected: frozenset[str] | None,
    records: list[Record],
) -> int:
    """Project through the row tuples, as TraceML's writers do; return the skipped units."""
    try:
        rows_by_table = projection.build(meta, tables, observed)
    except Exception:
        return 1
    skipped = 0
    append = records.append
    for table in projection.tables:
        rows = rows_by_table.get(table)
        if not rows:
            continue
        record_type = TABLE_RECORDS.get(table)
        if record_type is None:
            skipped += len(rows)
            continue
        if selected is not None and record_type.STREAM not in selected:
            continue
        for row in rows:
            try:
                append(record_type(*row))
            except Exception:
                skipped += 1
    return skipped
