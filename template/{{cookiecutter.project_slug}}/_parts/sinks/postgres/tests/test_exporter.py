"""Unit tests of the PostgreSQL layout and its guarantees, against a real server.

The conformance suite checks the contract; these check the tables, the value
rules, delivery across a killed backend or a failing commit, and cleanup.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from exporter_calls import is_permanent, one_folder_named_two_ways, open_with, run, written
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from sink_support import Database, proxy_to
from traceml_exporter_sdk import (
    ExporterContext,
    ExportRecord,
    ExportWorker,
    StdoutStderrRecord,
    StepMemoryRecord,
    StepTimeRecord,
)
from traceml_exporter_sdk.records import RECORD_TYPES
from traceml_exporter_sdk.testing import expected_by_stream
from traceml_exporter_sdk.testing.fault_proxy import unused_port
from traceml_exporter_sdk.testing.strategies import record_batches

from traceml_exporter_example._postgres_connection import Timeouts
from traceml_exporter_example._postgres_schema import (
    STREAM_COLUMNS,
    UNIQUE_VIEW_SUFFIX,
    binary_types,
    column_type,
    ensure_table,
    layout_for,
)
from traceml_exporter_example.exporter import (
    APPLICATION_NAME,
    CONNINFO_ENV,
    SCHEMA_ENV,
    TIMEOUT_ENV,
    ExampleExporter,
    make_exporter,
)

ByStream = dict[str, list[dict[str, Any]]]
NS = 1_712_345_678_901_234_567
QUICK = Timeouts(connect_s=2, statement_s=1.0, call_s=4.0, stall_margin_s=0.5)
"""Short bounds, so a test of a fault takes seconds (a stall counts after 1.5 s)."""


@pytest.fixture
def schema(monkeypatch: pytest.MonkeyPatch) -> str:
    """A schema of this test's own, which the factory picks up from TRACEML_POSTGRES_SCHEMA."""
    name = f"t_{secrets.token_hex(4)}"
    monkeypatch.setenv(SCHEMA_ENV, name)
    return name


def exporter_backends(postgres: Database) -> list[int]:
    rows = postgres.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (APPLICATION_NAME,)
    )
    return [pid for (pid,) in rows]


def table(schema: str, name: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(name))


def old_table(postgres: Database, schema: str, stream: str, columns: str) -> sql.Composed:
    """A table an older exporter made (``columns``: its SQL column list), in a new schema."""
    postgres.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    name = table(schema, stream)
    postgres.execute(sql.SQL("CREATE TABLE {} ({})").format(name, sql.SQL(columns)))
    return name


def count(postgres: Database, schema: str, stream: str) -> int:
    """Rows of ``stream`` another connection sees, i.e. committed ones."""
    ((n,),) = postgres.execute(sql.SQL("SELECT count(*) FROM {}").format(table(schema, stream)))
    return int(n)


@pytest.fixture
def opened(context: ExporterContext, schema: str) -> Iterator[ExampleExporter]:
    """An open exporter; closed at the end unless the test closed it or it failed."""
    del schema  # requested for its TRACEML_POSTGRES_SCHEMA
    exporter = make_exporter(context)
    exporter.open()
    yield exporter
    if exporter._state == "open":
        exporter.close()


def test_factory_only_stores_settings(context: ExporterContext, postgres: Database) -> None:
    before = exporter_backends(postgres)
    exporter = make_exporter(context)
    assert isinstance(exporter, ExampleExporter)
    assert exporter.schema == "traceml"
    assert exporter_backends(postgres) == before
    assert not context.session_root.exists()


def test_stream_columns_are_the_sdks() -> None:
    assert {t.STREAM: t.COLUMNS for t in RECORD_TYPES} == STREAM_COLUMNS


def test_tables_hold_the_columns_in_order_with_their_types(
    context: ExporterContext, schema: str, postgres: Database
) -> None:
    run(context)
    rows = postgres.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = %s ORDER BY table_name, ordinal_position",
        (schema,),
    )
    columns: dict[str, list[tuple[str, str]]] = {}
    for name, column, kind in rows:
        columns.setdefault(name, []).append((column, kind))
    assert set(STREAM_COLUMNS) <= set(columns)
    step = dict(columns["step_time"])
    assert [c for c, _ in columns["step_time"]] == [
        "_row_id", "_run_id", "_session_root", "schema_version",
        *STREAM_COLUMNS["step_time"], "_exact",
    ]  # fmt: skip
    assert step["events"] == "jsonb"
    assert step["observed_timestamp_unix_ns"] == "bigint"
    assert dict(columns["step_memory"])["peak_alloc_bytes"] == "double precision"
    assert dict(columns["stdout_stderr"])["line"] == "text"


def test_the_readme_ddl_is_what_open_creates(
    context: ExporterContext, schema: str, postgres: Database
) -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text("utf-8")
    pattern = re.compile(r"CREATE TABLE traceml\.(\w+) \((.*?)\n\);", re.DOTALL)
    documented = {
        name: [tuple(part.split()[:2]) for part in body.replace("\n", " ").split(",")]
        for name, body in pattern.findall(readme)
    }
    assert set(documented) == set(STREAM_COLUMNS)
    run(context)
    for stream, columns in documented.items():
        rows = postgres.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
            (schema, stream),
        )
        assert [(name, kind.split()[0]) for name, kind in rows] == columns, stream


def test_rows_are_to_dict_without_hostname(
    context: ExporterContext, schema: str, records: list[ExportRecord]
) -> None:
    del schema
    run(context, records[:4], records[4:])
    assert written(context) == expected_by_stream(records)


def test_hostname_kept_when_asked(
    hostname_context: ExporterContext, schema: str, records: list[ExportRecord]
) -> None:
    del schema
    run(hostname_context, records)
    assert written(hostname_context) == expected_by_stream(records, include_hostname=True)


def test_nanoseconds_are_exact_and_none_is_null(
    context: ExporterContext, schema: str, records: list[ExportRecord], postgres: Database
) -> None:
    run(context, records)
    rows = postgres.execute(
        sql.SQL(
            "SELECT observed_timestamp_unix_ns, util, power_limit_w FROM {} ORDER BY _row_id"
        ).format(table(schema, "system_gpu"))
    )
    assert rows == [(records[2].to_dict()["observed_timestamp_unix_ns"], 99.5, None),
                    (NS, 0.0, 300.0)]  # fmt: skip


def test_writes_are_committed_by_flush_only(
    opened: ExampleExporter, schema: str, records: list[ExportRecord],
    postgres: Database,
) -> None:  # fmt: skip
    opened.write(records)
    opened.write(records)
    assert count(postgres, schema, "step_time") == 0
    opened.flush()
    assert count(postgres, schema, "step_time") == 6


def test_close_delivers_unflushed_writes_and_logs_the_run(
    context: ExporterContext, schema: str, records: list[ExportRecord], postgres: Database
) -> None:
    run(context, records, dropped=3, flush=False)  # the suite reads the rows back
    ((dropped, per_stream),) = postgres.execute(
        sql.SQL("SELECT dropped_batches, written_records FROM {}").format(
            table(schema, "_export_runs")
        )
    )
    assert dropped == 3
    assert per_stream["step_time"] == 3


def test_a_killed_backend_between_flushes_loses_and_doubles_nothing(
    context: ExporterContext,
    schema: str,
    records: list[ExportRecord],
    postgres: Database,
) -> None:
    del schema
    exporter = make_exporter(context)
    exporter.open()
    exporter.write(records[:4])
    exporter.flush()
    (first,) = exporter_backends(postgres)
    assert postgres.kill_exporters() == 1
    exporter.write(records[4:])  # buffered while no backend exists
    exporter.flush()  # finds the connection lost, reconnects once, sends the buffer again
    (second,) = exporter_backends(postgres)
    assert second != first
    postgres.kill_exporters()
    exporter.close()  # the same once more, at close
    assert written(context) == expected_by_stream(records)


def _commit_trigger(postgres: Database, schema: str, body: str) -> None:
    """A deferred trigger on step_time: ``body`` runs inside COMMIT, after the COPY."""
    postgres.execute(
        sql.SQL(
            "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {} RETURN NULL; "
            "END $$"
        ).format(table(schema, "at_commit"), sql.SQL(body))
    )
    postgres.execute(
        sql.SQL(
            "CREATE CONSTRAINT TRIGGER at_commit AFTER INSERT ON {} DEFERRABLE INITIALLY "
            "DEFERRED FOR EACH ROW EXECUTE FUNCTION {}()"
        ).format(table(schema, "step_time"), table(schema, "at_commit"))
    )


def test_a_commit_that_fails_raises_and_closes(
    opened: ExampleExporter,
    schema: str,
    records: list[ExportRecord],
    postgres: Database,
) -> None:
    opened.write(records[:1])
    opened.flush()
    _commit_trigger(postgres, schema, "RAISE EXCEPTION 'refused at commit';")
    opened.write(records[:1])
    with pytest.raises(psycopg.errors.RaiseException, match="refused at commit") as raised:
        opened.flush()  # a permanent error: no reconnect, raised at once
    assert is_permanent(raised.value)
    assert opened._conn is None
    assert exporter_backends(postgres) == []
    assert count(postgres, schema, "step_time") == 1
    with pytest.raises(RuntimeError, match="failed exporter"):
        opened.close()


def test_a_commit_lost_once_is_sent_again_exactly_once(
    opened: ExampleExporter,
    context: ExporterContext,
    schema: str,
    records: list[ExportRecord],
    postgres: Database,
) -> None:
    postgres.execute(sql.SQL("CREATE SEQUENCE {}").format(table(schema, "kills")))
    kills = table(schema, "kills").as_string()
    _commit_trigger(
        postgres,
        schema,
        f"IF nextval('{kills}') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF;",
    )
    opened.write(records)
    opened.flush()  # the first COMMIT dies with its backend; the reconnect sends it again
    assert count(postgres, schema, "step_time") == 3
    opened.close()
    assert len(written(context)["step_time"]) == 3


@pytest.mark.usefixtures("schema")
def test_a_commit_whose_answer_is_lost_is_not_sent_again(
    context: ExporterContext,
    records: list[ExportRecord],
    postgres: Database,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with proxy_to(postgres.server) as proxy:
        monkeypatch.setenv(CONNINFO_ENV, f"host=127.0.0.1 port={proxy.port}")
        exporter = make_exporter(context)
        exporter.open()
        exporter.write(records)
        proxy.lose_answer_after(b"COMMIT")
        exporter.flush()  # committed, answer lost: the reconnect finds its _export_flushes row
        assert proxy.dropped == 1
        exporter.close()
    monkeypatch.delenv(CONNINFO_ENV)
    assert written(context) == expected_by_stream(records)


def test_a_commit_lost_twice_raises_the_servers_message(
    opened: ExampleExporter,
    schema: str,
    records: list[ExportRecord],
    postgres: Database,
) -> None:
    _commit_trigger(postgres, schema, "PERFORM pg_terminate_backend(pg_backend_pid());")
    opened.timeouts = QUICK
    opened.write(records)
    with pytest.raises(
        psycopg.OperationalError, match=r"(?s)terminat.*gave up after \d+ attempts"
    ) as raised:
        opened.flush()  # retried, each time killed in COMMIT, until the call's deadline
    assert not is_permanent(raised.value)  # the follower tries again later
    assert opened._conn is None
    assert exporter_backends(postgres) == []
    assert count(postgres, schema, "step_time") == 0


def test_a_permanent_error_raises_at_once_without_a_reconnect(
    opened: ExampleExporter,
    schema: str,
    records: list[ExportRecord],
    postgres: Database,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    connects: list[object] = []
    real = opened._connect

    def counted(deadline: float) -> psycopg.Connection[Any]:
        connects.append(1)
        return real(deadline)

    monkeypatch.setattr(opened, "_connect", counted)
    postgres.execute(
        sql.SQL("ALTER TABLE {} ADD CONSTRAINT refuse_all CHECK (step < 0)").format(
            table(schema, "step_time")
        )
    )
    opened.write(records)
    with pytest.raises(psycopg.errors.CheckViolation, match="refuse_all") as raised:
        opened.flush()
    assert is_permanent(raised.value)
    assert connects == []
    assert exporter_backends(postgres) == []
    assert count(postgres, schema, "system_gpu") == 0  # the whole flush, not a part of it


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("PGUSER", "no_such_role", 'role "no_such_role" does not exist'),
        ("PGDATABASE", "no_such_database", 'database "no_such_database" does not exist'),
        (CONNINFO_ENV, "host=127.0.0.1 port", 'missing "=" after "port"'),
        (TIMEOUT_ENV, "1", "TRACEML_POSTGRES_TIMEOUT_S='1' is not a duration from 2 s"),
        (TIMEOUT_ENV, "soon", "TRACEML_POSTGRES_TIMEOUT_S='soon' is not a duration"),
    ],
)
@pytest.mark.usefixtures("schema")
def test_a_setting_no_wait_can_fix_fails_open_at_once_as_permanent(
    context: ExporterContext,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    message: str,
) -> None:
    """A wrong role or database name, a malformed conninfo, a bad deadline: ``follow``
    ends at once rather than wait for ever (``permanent``, rule 8 of ``_contract``)."""
    monkeypatch.setenv(variable, value)
    exporter = make_exporter(context)  # the factory never raises
    started = time.monotonic()
    with pytest.raises((psycopg.Error, ValueError), match=re.escape(message)) as raised:
        exporter.open()
    assert time.monotonic() - started < 5
    assert is_permanent(raised.value)
    assert exporter._conn is None


def test_a_permission_denied_is_permanent(
    context: ExporterContext, schema: str, postgres: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A role without CREATE on the database cannot make the schema: SQLSTATE 42501."""
    del schema
    name = f"weak_{secrets.token_hex(4)}"
    postgres.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    monkeypatch.setenv("PGUSER", name)
    try:
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as raised:
            make_exporter(context).open()
    finally:
        postgres.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))
    assert is_permanent(raised.value)


@pytest.mark.parametrize("fault", ["refusing", "stopped"])
def test_a_database_that_lets_no_one_in_fails_open_at_once_as_transient(
    context: ExporterContext, schema: str, postgres: Database, fault: str
) -> None:
    """Closed to connections by its owner, or no server on the port: raised at once (no
    retry opens it in seconds) but not permanent, so ``follow`` waits for it."""
    del schema
    if fault == "refusing":
        postgres.refuse_connections()
    else:
        os.environ[CONNINFO_ENV] = f"host=127.0.0.1 port={unused_port()}"  # mend_sink: removed
    exporter = make_exporter(context)
    expected = "not currently accepting connections" if fault == "refusing" else "refused"
    with pytest.raises(psycopg.OperationalError, match=expected) as raised:
        exporter.open()
    assert not is_permanent(raised.value)
    assert exporter._conn is None


def test_nul_surrogates_and_out_of_range_values_follow_the_rule(
    context: ExporterContext, schema: str, postgres: Database
) -> None:
    events: dict[str, Any] = {
        "phase\x00": {"cpu\udcff": {"is_gpu": False, "duration_ms": math.nan, "cpu_ms": 1.5,
                                     "gpu_ms": math.inf, "n_calls": 2**80}},
    }  # fmt: skip
    hostile: list[ExportRecord] = [
        StdoutStderrRecord(NS, 0, NS, "a\x00b \udcff c"),
        StdoutStderrRecord(NS, 2**70, -(2**64), "fine"),
        StepTimeRecord(NS, 0, 0, 0, 1, 1, 0, None, NS, 1, 1, events),
        StdoutStderrRecord(NS, 1, None, "after them, still written"),
        StdoutStderrRecord(NS, 1, NS, "\u2028 a very long line " * 200_000),  # 4.6 MB
    ]
    run(context, hostile)
    stored = postgres.execute(
        sql.SQL("SELECT rank, timestamp_unix_ns, line, _exact FROM {} ORDER BY _row_id").format(
            table(schema, "stdout_stderr")
        )
    )
    assert stored[0][2] == "a\ufffdb \ufffd c"
    assert stored[1][:2] == (None, None)  # out of bigint's range: NULL in the column ...
    exact = {"rank": str(2**70), "timestamp_unix_ns": str(-(2**64))}
    assert stored[1][3] == exact  # ... and their exact values here
    assert stored[2] == (1, None, "after them, still written", None)
    assert stored[3][2] == hostile[4].to_dict()["line"]
    ((kept,),) = postgres.execute(
        sql.SQL("SELECT events FROM {}").format(table(schema, "step_time"))
    )
    assert kept == {"phase\ufffd": {"cpu\ufffd": {"is_gpu": False, "duration_ms": None,
                                                   "cpu_ms": 1.5, "gpu_ms": None,
                                                   "n_calls": 2**80}}}  # fmt: skip
    back = written(context)
    assert [row["line"] for row in back["stdout_stderr"]] == [
        r.to_dict()["line"] for r in hostile if r.STREAM == "stdout_stderr"
    ]
    assert back["stdout_stderr"][1]["rank"] == 2**70
    restored = back["step_time"][0]["events"]["phase\x00"]["cpu\udcff"]
    assert math.isnan(restored["duration_ms"])
    assert restored["gpu_ms"] == math.inf
    assert restored["n_calls"] == 2**80


class _Dict:
    """A record stand-in: ``rows`` only calls ``to_dict()``."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def to_dict(self) -> dict[str, Any]:
        return self.data


_ANY_TEXT = st.text(st.characters(codec=None, blacklist_categories=()), max_size=5)
_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "bigint": st.one_of(
        st.none(), st.integers(-(2**63), 2**63 - 1), st.integers(-(2**70), 2**70), st.booleans()
    ),
    "double precision": st.one_of(st.none(), st.floats(), st.integers(-(2**60), 2**60)),
    "text": st.one_of(st.none(), _ANY_TEXT),
    "jsonb": st.one_of(
        st.none(),
        st.dictionaries(_ANY_TEXT, st.one_of(st.none(), st.floats(), st.integers())),
    ),
}
"""Values of each column kind, odd ones among them (out of range, NUL, NaN, a bool)."""


@settings(max_examples=300, deadline=None)
@given(stream=st.sampled_from(sorted(STREAM_COLUMNS)), size=st.integers(1, 8), data=st.data())
def test_rows_of_a_batch_are_row_of_each(stream: str, size: int, data: st.DataObject) -> None:
    """``Layout.rows`` (checked a column at a time) gives exactly ``Layout.row`` of each record."""
    columns = STREAM_COLUMNS[stream]
    layout = layout_for(stream, columns, include_hostname=data.draw(st.booleans()))
    plain = [r.to_dict() for r in data.draw(record_batches([stream], max_size=5))]
    batch = []
    for _ in range(size):
        row = dict(data.draw(st.sampled_from(plain)))
        for name in data.draw(st.lists(st.sampled_from(columns), max_size=2)):
            row[name] = data.draw(_VALUES[column_type(name)])
        batch.append(_Dict(row))
    binary = data.draw(st.booleans())
    prefix = ("00000000-0000-0000-0000-000000000000", "root")
    want = [layout.row(r.to_dict(), prefix, binary=binary) for r in batch]
    assert list(layout.rows(batch, prefix, binary=binary)) == want


@pytest.mark.parametrize(
    "odd",
    [
        {"step": 2**64},
        {"step": True},
        {"device": "cu\x00da"},
        {"device": "cu\udcffda"},
        {"peak_alloc_bytes": 3},
        {"peak_alloc_bytes": "3"},
    ],
)
def test_rows_check_each_chunk_on_its_own(odd: dict[str, Any]) -> None:
    """One odd value sends its chunk through ``row``; every row is still ``row``'s."""
    memory = StepMemoryRecord(NS, 0, 0, 0, 1, 1, 0, None, NS, 1, "cuda:0", 1, 1.0, 2.0)
    batch: list[Any] = [memory] * 1_100
    batch[700] = _Dict({**memory.to_dict(), **odd})
    layout = layout_for("step_memory", memory.COLUMNS, include_hostname=False)
    prefix = ("00000000-0000-0000-0000-000000000000", "root")
    got = list(layout.rows(batch, prefix))
    assert got == [layout.row(r.to_dict(), prefix) for r in batch]
    assert got[700] != got[699]


def test_an_older_table_is_reused_and_widened(
    context: ExporterContext, schema: str, records: list[ExportRecord], postgres: Database
) -> None:
    old = old_table(postgres, schema, "stdout_stderr", "rank integer, line varchar(200)")
    postgres.execute(sql.SQL("INSERT INTO {} VALUES (7, 'from the old exporter')").format(old))
    run(context, records[6:7])
    assert written(context)["stdout_stderr"] == [records[6].to_dict()]
    rows = postgres.execute(sql.SQL("SELECT rank, line FROM {} ORDER BY _row_id").format(old))
    assert rows == [(7, "from the old exporter"), (0, records[6].to_dict()["line"])]
    kinds = dict(
        postgres.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'stdout_stderr'",
            (schema,),
        )
    )
    assert (kinds["rank"], kinds["line"]) == ("bigint", "text")


def test_fresh_tables_load_as_binary_copy(schema: str, postgres: Database) -> None:
    """Every stream's new table has only types whose binary COPY form the rows match."""
    postgres.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    kwargs = postgres.server.conninfo_kwargs(dbname=postgres.name)
    with psycopg.connect(**kwargs) as conn, conn.cursor() as cur:
        for stream, columns in STREAM_COLUMNS.items():
            types = ensure_table(cur, schema, stream, columns)
            for include_hostname in (False, True):
                layout = layout_for(stream, columns, include_hostname=include_hostname)
                assert binary_types(layout.columns, types) is not None, stream


def test_an_int_in_a_float_column_and_a_numeric_column_are_stored_exactly(
    context: ExporterContext, schema: str, postgres: Database
) -> None:
    """Binary COPY takes an int for ``double precision``; an older ``numeric`` column goes as text."""
    old_table(postgres, schema, "stdout_stderr", "rank numeric, line text")
    memory = StepMemoryRecord(NS, 0, 0, 0, 1, 1, 0, None, NS, 1, "cuda:0", 1, 2**40, None)
    line = StdoutStderrRecord(NS, 2**62, NS, "kept as it is")
    run(context, [memory, line])
    assert written(context) == expected_by_stream([memory, line])
    rows = postgres.execute(
        sql.SQL("SELECT peak_alloc_bytes, peak_reserved_bytes FROM {}").format(
            table(schema, "step_memory")
        )
    )
    assert rows == [(float(2**40), None)]
    rows = postgres.execute(sql.SQL("SELECT rank FROM {}").format(table(schema, "stdout_stderr")))
    assert rows == [(2**62,)]


def test_a_column_that_cannot_be_widened_raises_at_open(
    context: ExporterContext, schema: str, postgres: Database
) -> None:
    old_table(postgres, schema, "stdout_stderr", "line integer")
    exporter = make_exporter(context)
    with pytest.raises(psycopg.errors.DatatypeMismatch, match="cannot be widened") as raised:
        exporter.open()
    assert is_permanent(raised.value)
    assert exporter._conn is None
    assert exporter_backends(postgres) == []
    assert count(postgres, schema, "stdout_stderr") == 0  # still there, never dropped


@pytest.mark.parametrize(
    ("declared", "why"),
    [
        ("numeric(30,-6)", r"multiple of 10\^6"),
        ("numeric(5,-2)", r"multiple of 10\^2"),
        ("numeric(20,2)", "18 digits left of the point"),
        ("numeric(18,0)", "18 digits left of the point"),
    ],
)
def test_a_numeric_column_that_would_round_or_overflow_raises_at_open(
    context: ExporterContext, schema: str, postgres: Database, declared: str, why: str
) -> None:
    """It once stored nanosecond stamps rounded to milliseconds and every step as 0, exit 0."""
    old_table(postgres, schema, "stdout_stderr", f"rank bigint, timestamp_unix_ns {declared}")
    exporter = make_exporter(context)
    with pytest.raises(psycopg.errors.DatatypeMismatch) as refused:
        exporter.open()
    message = str(refused.value)
    assert is_permanent(refused.value)
    assert f"{schema}.stdout_stderr.timestamp_unix_ns is {declared}" in message
    assert re.search(why, message), message
    assert exporter._conn is None
    assert exporter_backends(postgres) == []


@pytest.mark.parametrize("declared", ["numeric", "numeric(19,0)", "numeric(40,6)"])
def test_a_numeric_column_that_holds_every_bigint_is_used(
    context: ExporterContext, schema: str, postgres: Database, declared: str
) -> None:
    old_table(postgres, schema, "stdout_stderr", f"rank bigint, timestamp_unix_ns {declared}")
    lines = [StdoutStderrRecord(NS, 0, NS, "a"), StdoutStderrRecord(NS, 1, 2**63 - 1, "b")]
    run(context, lines)
    assert written(context) == expected_by_stream(lines)


def test_the_unique_rows_view_keeps_one_row_per_key(
    context: ExporterContext, schema: str, records: list[ExportRecord], postgres: Database
) -> None:
    run(context, records, records)  # every record twice, step 7 of rank 0 four times
    assert len(written(context)["step_time"]) == 6
    view = table(schema, "step_time" + UNIQUE_VIEW_SUFFIX)
    rows = postgres.execute(
        sql.SQL("SELECT global_rank, step, _row_id FROM {} ORDER BY global_rank").format(view)
    )
    assert [row[:2] for row in rows] == [(0, 7), (1, 7)]
    ((first,),) = postgres.execute(
        sql.SQL("SELECT min(_row_id) FROM {} WHERE global_rank = 0").format(
            table(schema, "step_time")
        )
    )
    assert rows[0][2] == first
    gpu = table(schema, "system_gpu" + UNIQUE_VIEW_SUFFIX)
    assert len(postgres.execute(sql.SQL("SELECT * FROM {}").format(gpu))) == 2
    lines = table(schema, "stdout_stderr" + UNIQUE_VIEW_SUFFIX)
    assert len(postgres.execute(sql.SQL("SELECT * FROM {}").format(lines))) == 4


def test_close_ends_the_database_session(
    context: ExporterContext, schema: str, records: list[ExportRecord], postgres: Database
) -> None:
    del schema
    exporter = open_with(context, records, flush=True)
    assert len(exporter_backends(postgres)) == 1
    exporter.close()
    assert exporter_backends(postgres) == []  # the suite checks threads and fds
    with pytest.raises(RuntimeError, match="closed"):
        exporter.flush()


_HOSTILE_TEXT = st.text(st.characters(codec=None, blacklist_categories=()), max_size=40)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(_HOSTILE_TEXT, min_size=1, max_size=4))
def test_any_text_at_all_reads_back_as_written(lines: list[str]) -> None:
    """Any text (NUL, lone surrogates, anything): stored by the documented rule, read back exact."""
    batch: list[ExportRecord] = [StdoutStderrRecord(NS, 0, NS, line) for line in lines]
    with tempfile.TemporaryDirectory() as folder:
        context = ExporterContext.create(folder, "all")
        run(context, batch)
        assert written(context) == expected_by_stream(batch)


# -- faults of the network and the server (issue 20) --------------------------------------


def test_a_stalled_network_ends_the_flush_by_its_deadline(
    context: ExporterContext,
    schema: str,
    records: list[ExportRecord],
    postgres: Database,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A proxy that stops forwarding but keeps the connection open: statement_timeout runs
    on the server and never fires; the client's own bound must (it once waited forever)."""
    del schema
    with proxy_to(postgres.server) as proxy:
        monkeypatch.setenv(CONNINFO_ENV, f"host=127.0.0.1 port={proxy.port}")
        exporter = make_exporter(context)
        exporter.timeouts = QUICK
        exporter.open()
        exporter.write(records)
        exporter.flush()
        proxy.stall()
        exporter.write(records)
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError) as raised:
            exporter.flush()  # stalled at COMMIT, then a reconnect that is never answered
        took = time.monotonic() - started
        assert exporter._conn is None
    monkeypatch.delenv(CONNINFO_ENV)
    assert took <= QUICK.call_s + 0.5, took
    assert not is_permanent(raised.value)
    assert f"127.0.0.1:{proxy.port}" in str(raised.value)
    assert "gave up after 2 attempts" in str(raised.value)
    with pytest.raises(RuntimeError, match="failed exporter"):
        exporter.close()
    assert written(context) == expected_by_stream(records)  # the first flush, once


@pytest.mark.usefixtures("schema")
def test_the_deadline_setting_bounds_connect_statements_and_the_whole_call(
    context: ExporterContext,
    records: list[ExportRecord],
    postgres: Database,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TRACEML_POSTGRES_TIMEOUT_S=3: statement_timeout 1.875 s and lock_timeout 1.5 s on
    the server; behind a proxy that stops answering, a flush and an open end within 3 s,
    as transient errors (the follower, not the sink, waits out a long outage)."""
    monkeypatch.setenv(TIMEOUT_ENV, "3")
    with proxy_to(postgres.server) as proxy:
        monkeypatch.setenv(CONNINFO_ENV, f"host=127.0.0.1 port={proxy.port}")
        exporter = make_exporter(context)
        exporter.open()
        assert exporter.timeouts == Timeouts.within(3.0) == Timeouts(3, 1.875, 3.0)
        conn = exporter._conn
        assert conn is not None
        conn.deadline = time.monotonic() + 3
        shown = (
            conn.execute("SHOW statement_timeout").fetchone(),
            conn.execute("SHOW lock_timeout").fetchone(),
        )
        assert shown == (("1875ms",), ("1500ms",))
        exporter.write(records)
        exporter.flush()
        proxy.stall()
        exporter.write(records)
        for call in (exporter.flush, make_exporter(context).open):
            started = time.monotonic()
            with pytest.raises(psycopg.OperationalError) as raised:
                call()
            took = time.monotonic() - started
            assert took <= 3 + 0.5, (call, took)
            assert not is_permanent(raised.value)
    monkeypatch.delenv(CONNINFO_ENV)
    assert written(context) == expected_by_stream(records)  # the first flush, once


def test_a_server_that_never_answers_fails_open_naming_host_and_port(
    context: ExporterContext, schema: str, postgres: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    del schema
    with proxy_to(postgres.server) as proxy:
        proxy.stall()
        monkeypatch.setenv(CONNINFO_ENV, f"host=127.0.0.1 port={proxy.port}")
        exporter = make_exporter(context)
        exporter.timeouts = QUICK
        started = time.monotonic()
        with pytest.raises(psycopg.errors.ConnectionTimeout) as raised:
            exporter.open()
        took = time.monotonic() - started
    assert took < QUICK.connect_s + 1, took
    assert f"the server at 127.0.0.1:{proxy.port} timed out after 2 s" in str(raised.value)
    assert exporter._conn is None


def _step(step: int) -> StepTimeRecord:
    return StepTimeRecord(NS, 0, 0, 0, 1, 1, 0, None, NS + step, step, step, {})


@pytest.mark.usefixtures("schema")
def test_a_run_is_keyed_by_its_resolved_folder(
    tmp_path: Path, postgres: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``logs/run1`` named relatively and absolutely is one run (its steps deduplicate in
    the ``_unique`` view); another folder named run1 is another run."""
    relative, absolute, other = one_folder_named_two_ways(tmp_path, monkeypatch)
    for context in (relative, absolute, other):
        run(context, [_step(1)])
    schema = os.environ[SCHEMA_ENV]
    rows = postgres.execute(
        sql.SQL("SELECT _session_root, count(*) FROM {} GROUP BY 1 ORDER BY 1").format(
            table(schema, "step_time" + UNIQUE_VIEW_SUFFIX)
        )
    )
    folders = sorted(str((tmp_path / name / "run1").resolve()) for name in ("elsewhere", "logs"))
    assert rows == [(folders[0], 1), (folders[1], 1)]
    receipts = (relative.export_dir / "postgres_runs.jsonl").read_text("utf-8").splitlines()
    assert {json.loads(line)["session_root"] for line in receipts} == {folders[1]}


def test_a_server_restart_mid_run_loses_and_doubles_nothing(
    context: ExporterContext, schema: str, postgres: Database
) -> None:
    """1.6 s of downtime once ended the whole run's export; flushes now wait it out."""
    if not postgres.server.owned:
        pytest.skip("needs a throwaway cluster of the tests' own to stop and start")
    downtime: list[float] = []

    def restart() -> None:
        time.sleep(0.3)
        began = time.monotonic()
        postgres.server.stop()
        time.sleep(max(0.0, 1.2 - (time.monotonic() - began)))
        postgres.server.start()
        downtime.append(time.monotonic() - began)

    exporter = make_exporter(context)
    exporter.open()
    restarter = threading.Thread(target=restart)
    restarter.start()
    steps, slowest, after = 0, 0.0, 0
    try:
        for _ in range(500):  # bounded: about 0.02 s a round, and the restart's seconds
            exporter.write([_step(steps + i) for i in range(20)])
            started = time.monotonic()
            exporter.flush()
            slowest = max(slowest, time.monotonic() - started)
            steps += 20
            after += not restarter.is_alive()
            if after >= 5:
                break
            time.sleep(0.02)
    finally:
        restarter.join(timeout=60)
    exporter.close()
    assert downtime, "the server was not restarted"
    assert 1.2 <= downtime[0] < 5, downtime
    assert slowest >= 0.5, "no flush met the downtime"
    rows = postgres.execute(
        sql.SQL("SELECT step, count(*) FROM {} WHERE _run_id = %s GROUP BY step").format(
            table(schema, "step_time")
        ),
        (exporter.run_id,),
    )
    counts = dict(rows)
    assert sorted(counts) == list(range(steps)), "a flushed record is missing"
    assert set(counts.values()) == {1}, "a record was stored twice"


def test_a_lock_timeout_names_the_table(
    context: ExporterContext, schema: str, records: list[ExportRecord], postgres: Database
) -> None:
    exporter = make_exporter(context)
    exporter.timeouts = Timeouts(connect_s=2, statement_s=0.5, call_s=1.0)
    exporter.open()
    exporter.write(records)
    kwargs = postgres.server.conninfo_kwargs(dbname=postgres.name)
    with psycopg.connect(**kwargs) as holder:
        holder.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
            table(schema, "step_time")
        ))  # fmt: skip
        with pytest.raises(psycopg.errors.LockNotAvailable) as raised:
            exporter.flush()
        holder.rollback()
    message = str(raised.value)
    assert message.startswith(f"table {schema}.step_time: canceling statement due to lock timeout")
    assert "lock_timeout" in message


_SECRET = "pw-" + secrets.token_hex(8)
_ENV_SECRET = "env-" + secrets.token_hex(8)


@pytest.mark.parametrize(
    "conninfo",
    [
        "postgresql://traceml:{secret}@[::1/nowhere",  # libpq quotes the whole URI back
        "postgresql://traceml:{secret} x@127.0.0.1/nowhere",  # ... or the password alone
        "host=127.0.0.1 port={closed} password={secret}",
        "host=127.0.0.1 port={port} password={secret}",  # trust auth: the run succeeds
    ],
    ids=["bad-ipv6-url", "space-in-password", "closed-port", "delivered"],
)
def test_no_password_reaches_a_file_a_log_or_a_message(
    tmp_path: Path,
    conninfo: str,
    records: list[ExportRecord],
    postgres: Database,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = postgres.server.port or 5432
    settings_text = conninfo.format(secret=_SECRET, closed=unused_port(), port=port)
    monkeypatch.setenv(CONNINFO_ENV, settings_text)
    monkeypatch.setenv("PGPASSWORD", _ENV_SECRET)
    log = logging.FileHandler(tmp_path / "run.log", encoding="utf-8")
    root = logging.getLogger()
    level = root.level
    root.addHandler(log)
    root.setLevel(logging.DEBUG)
    try:
        context = ExporterContext.create(tmp_path / "session", export_streams="all")
        worker = ExportWorker(make_exporter, context).start()
        worker.submit_records(records)
        report = worker.shutdown(30)
    finally:
        root.removeHandler(log)
        root.setLevel(level)
        log.close()
    (tmp_path / "report.txt").write_text(f"{report!r}\n{report.failure}\n", encoding="utf-8")
    if conninfo.endswith("{port} password={secret}"):
        assert report.failure is None
        assert (context.export_dir / "postgres_runs.jsonl").exists()
    else:
        assert report.failure is not None
        assert (context.session_root / "aggregator" / "finalization_warning.json").exists()
    files = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert len(files) >= 3, files
    for path in files:
        data = path.read_bytes()
        for secret in (_SECRET, _ENV_SECRET):
            assert secret.encode() not in data, f"{path} holds the password"
