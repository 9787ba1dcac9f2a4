"""Rows of a SQLite table taken as they are equal the same rows coerced field by field.

The backfill builds a record straight from a row whose values are all of their
fields' types (``sqlite_rows.RowConverter``: a whole page checked column by
column, else learnt per tuple of value types) and coerces any other. Any value of
any SQLite type in any column, in both table layouts: the record built that way is
the one the per-field coercers build.
"""

from __future__ import annotations

import dataclasses
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from traceml_exporter_sdk._bridge import sqlite_rows
from traceml_exporter_sdk._bridge.sqlite_rows import RowConverter
from traceml_exporter_sdk._bridge.sqlite_source import TABLE_BY_STREAM, open_database
from traceml_exporter_sdk.records import RECORD_TYPES

# The values that are nearly of a field's type come first: 1.0 for an int, "1" for
# a flag, "" for a line, an int for a float; then any value of each SQLite type.
NEAR = [None, 0, 1, 2, -1, 2**63 - 1, 0.0, 1.0, 1.5, math.inf, "", "0", "1", "x", b"", b"\x01"]
values = st.one_of(
    st.sampled_from(NEAR),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.binary(max_size=3),
)
EVENTS = '{"fwd":{"cpu":{"is_gpu":true,"duration_ms":2.0,"cpu_ms":1.0,"gpu_ms":null,"n_calls":1}}}'
RENAMED_050 = {"observed_timestamp_unix_ns": "recv_ts_ns", "timestamp_unix_ns": "sample_ts_s"}


def table_columns(names: tuple[str, ...], layout: str) -> list[str]:
    """The table's columns for a record's ``names``; no declared types, so values keep theirs."""
    out = []
    for name in names:
        if name == "events":
            out.append("events_json")
        elif layout == "traceml-0.5.0":
            out.append(RENAMED_050.get(name, name))
        else:
            out.append(name)
    return out


def key(record: Any) -> list[tuple[str, str, Any]]:
    """Field values with their types (``1 == 1.0 == True`` must not pass), NaN-safe."""
    return [(name, type(value).__name__, repr(value)) for name, value in record.to_dict().items()]


def typed_row(record_type: Any, layout: str) -> dict[str, Any]:
    """A row whose every value is of its field's type (and 0.5.0's REAL seconds)."""
    hints = {f.name: str(f.type).split(" ")[0] for f in dataclasses.fields(record_type)}
    row = {n: {"int": 1, "float": 1.5, "str": "x"}[hints[n]] for n in plain(record_type)}
    if layout == "traceml-0.5.0" and "timestamp_unix_ns" in row:
        row["timestamp_unix_ns"] = 1700000000.5  # becomes None, exactly as coerced
    return row


def plain(record_type: Any) -> list[str]:
    return [n for n in record_type.COLUMNS if n != "events"]


def assert_exact_equals_coerced(
    record_type: Any, layout: str, rows: list[dict[str, Any]], database: Path
) -> RowConverter:
    """Store ``rows`` (the first of the record's own types) and read them back both ways;
    the converter that took them as they are."""
    names = record_type.COLUMNS
    database.unlink(missing_ok=True)
    table = TABLE_BY_STREAM[record_type.STREAM]
    columns = table_columns(names, layout)
    with sqlite3.connect(database) as conn:
        conn.execute(
            f"CREATE TABLE {table} (id INTEGER PRIMARY KEY AUTOINCREMENT, {', '.join(columns)})"
        )
        marks = ", ".join("?" * len(columns))
        conn.executemany(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})",
            [[{**row, "events": EVENTS}[n] for n in names] for row in rows],
        )
    conn.close()
    source = open_database(database, (record_type.STREAM,))
    try:
        (plan,) = source.tables
        assert plan.layout == layout
        read = source.connection.execute(plan.query, (0, len(rows) + 1)).fetchall()
    finally:
        source.close()
    converter = RowConverter(record_type.STREAM)
    as_read: list[tuple[int, str]] = []
    coerced: list[tuple[int, str]] = []
    built = converter.records(read, lambda i, reason: as_read.append((i, reason)))
    reference = RowConverter(record_type.STREAM, trust_types=False)
    expected = reference.records(read, lambda i, reason: coerced.append((i, reason)))
    assert [key(r) for r in built] == [key(r) for r in expected]
    assert as_read == coerced
    if converter._known:  # the page went row by row
        typed = tuple(map(type, read[0]))  # the whole row: id and events_json too
        assert converter._known[typed], "a row of the record's own types must be taken as it is"
    return converter


LAYOUTS = ["contract", "traceml-0.5.0"]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("record_type", RECORD_TYPES, ids=lambda t: t.STREAM)
def test_every_near_value_in_every_column(record_type: Any, layout: str, tmp_path: Path) -> None:
    """One value changed at a time, each of ``NEAR`` in each column."""
    typed = typed_row(record_type, layout)
    rows = [typed] + [{**typed, name: value} for name in typed for value in NEAR]
    assert_exact_equals_coerced(record_type, layout, rows, tmp_path / "db.sqlite")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("record_type", RECORD_TYPES, ids=lambda t: t.STREAM)
def test_a_page_of_own_types_is_taken_whole(record_type: Any, layout: str, tmp_path: Path) -> None:
    """Every value of its field's type: the page is checked column by column, not row by
    row, and a flag other than 0 or 1, or an empty line, is still coerced."""
    typed = typed_row(record_type, layout)
    rows = [typed] + [
        {**typed, name: value}
        for name in plain(record_type)
        for value in NEAR
        if type(value) is type(typed[name])
    ]
    converter = assert_exact_equals_coerced(record_type, layout, rows, tmp_path / "db.sqlite")
    assert not converter._known, "a page of the record's own types is taken whole"
    near = {**typed, plain(record_type)[0]: "1"}  # one text in an int column
    converter = assert_exact_equals_coerced(
        record_type, layout, [*rows, near], tmp_path / "db.sqlite"
    )
    assert converter._known, "a page with a value of another type goes row by row"


@pytest.mark.parametrize("record_type", RECORD_TYPES, ids=lambda t: t.STREAM)
def test_only_rows_that_need_it_are_coerced(
    record_type: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row of its fields' own types with flags 0 or 1 is not coerced (the value checks
    read the right columns); one with a flag of 2 is, to None."""
    calls: list[int] = []
    coerce = sqlite_rows._coerce
    monkeypatch.setattr(sqlite_rows, "_coerce", lambda *args: calls.append(1) or coerce(*args))
    typed = typed_row(record_type, "contract")
    row = (1, *(typed[name] for name in plain(record_type)))
    if record_type.STREAM == "step_time":
        row = (*row, EVENTS)
    records = RowConverter(record_type.STREAM).records([row, row], pytest.fail)
    assert len(records) == 2
    assert calls == [], "a row of its fields' own types was coerced"
    names = plain(record_type)
    flags = [i for i, n in enumerate(names, 1) if n in ("gpu_available", "distributed_initialized")]
    for index in flags:
        [record] = RowConverter(record_type.STREAM).records(
            [(*row[:index], 2, *row[index + 1 :])], pytest.fail
        )
        assert getattr(record, names[index - 1]) is None
    assert len(calls) == len(flags)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("record_type", RECORD_TYPES, ids=lambda t: t.STREAM)
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_exact_rows_equal_coerced_rows(
    record_type: Any, layout: str, data: st.DataObject, tmp_path: Path
) -> None:
    """Up to three values of any SQLite type replaced at once."""
    typed = typed_row(record_type, layout)
    changes = st.dictionaries(st.sampled_from(plain(record_type)), values, max_size=3)
    rows = [typed, *({**typed, **change} for change in data.draw(st.lists(changes, max_size=6)))]
    assert_exact_equals_coerced(record_type, layout, rows, tmp_path / "db.sqlite")
