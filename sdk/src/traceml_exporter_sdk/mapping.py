"""``records_from_payload``: one admitted telemetry payload -> a RecordBatch."""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from .projection import PROJECTION_BY_SAMPLER, TABLE_RECORDS, normalise_envelope, sampler_of
from .records import Record, RecordBatch
from .streams import validate_stream_filter

__all__ = ["records_from_payload"]


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
        ValueError: only for a bad ``streams`` (a string, an empty collection
            or an unknown STREAM name), before the payload is read.
    """
    selected = validate_stream_filter(streams)
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
    append = records.append
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
        observed = (
            time.time_ns() if observed_timestamp_unix_ns is None else observed_timestamp_unix_ns
        )
        try:
            rows_by_table = projection.build(meta, tables, observed)
        except Exception:
            skipped += 1
            continue
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
    return RecordBatch(records, skipped)
