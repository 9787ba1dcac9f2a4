"""ExampleExporter: one PostgreSQL table per stream, loaded with COPY.

Select it in TraceML with ``traceml_exporter_example.exporter:make_exporter``.

Where: libpq's own environment (``PGHOST``, ``PGPORT``, ``PGDATABASE``,
``PGUSER``, ``PGPASSWORD``, ``PGSSLMODE``, ``PGSERVICE``, ``~/.pgpass`` ...),
read by libpq itself; ``TRACEML_POSTGRES_CONNINFO`` may add a conninfo string
(``"host=db port=5432"``), ``TRACEML_POSTGRES_SCHEMA`` names the schema
(``traceml`` by default) and ``TRACEML_POSTGRES_TIMEOUT_S`` is each call's deadline
(8 s by default, see below). Tables and columns: see ``_postgres_schema.py`` and the
README. A run is keyed by its folder, absolute and resolved (``_session_root``,
``_contract`` rule 9).

Delivery: ``write`` only buffers the records, by stream; ``flush`` (and
``close``) turns them into rows while it streams them with COPY, binary where
the table's types allow (so the server parses one part while Python makes the
next), in one transaction with a row in
``_export_flushes``, and commits; the records are delivered once the commit returns. A
transient failure (a lost connection, a server restarting, a stalled network, a
lock or statement timeout) is retried with backoff on a new connection until the
call's deadline: the new connection first looks for that flush's row in
``_export_flushes`` (if there, the commit had happened), otherwise the same buffer
is sent again, so nothing is lost or doubled. At the deadline the last error is
raised. Any other error (authentication, permissions, a column that cannot be
widened) is raised at once. Every wait is bounded on the client too
(``_postgres_connection``): a failing ``open``, ``flush`` or ``close`` ends within
``Timeouts.call_s`` (``TRACEML_POSTGRES_TIMEOUT_S``, 8 s by default: under TraceML's
shutdown budget; ``statement_timeout`` is five eighths of it). No error carries a
password (``PGPASSWORD``, the conninfo's or a URL's). Errors no wait can fix
(authentication, an unknown database, permissions, a table or rows the server refuses,
a bad setting) are marked ``permanent`` (``_contract`` rule 8), so
``traceml-exporter follow`` ends at once instead of retrying them; see
``refused_for_good``.

The rules of TraceML's export contract this class keeps:

* the factory only stores settings; the connection is made in ``open()``,
  on the export worker's thread, which makes every later call;
* records are told apart by ``record.STREAM``, never by their class;
* ``close(*, dropped_batches=0)`` delivers what was written, logs the run in
  ``_export_runs`` and closes the connection;
* any method that raises has closed its connection first (the worker then
  calls nothing more, not even ``close``).
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from ._contract import ExporterContext, ExportRecord, releasing, run_key
from ._delivery import environment, retry, until
from ._files import append_line
from ._lifecycle import Lifecycle
from ._postgres_connection import (
    BACKOFF,
    MIN_CONNECT_S,
    BoundedConnection,
    Timeouts,
    connect,
    marking_permanent,
    parse_timeouts,
    refused_for_good,
)
from ._postgres_schema import (
    STREAM_COLUMNS,
    Layout,
    binary_types,
    ensure_table,
    layout_for,
    register_binary_dumpers,
)

__all__ = [
    "APPLICATION_NAME",
    "CONNINFO_ENV",
    "DEFAULT_SCHEMA",
    "RECEIPT_FILE",
    "SCHEMA_ENV",
    "TIMEOUT_ENV",
    "ExampleExporter",
    "make_exporter",
]

SCHEMA_ENV = "TRACEML_POSTGRES_SCHEMA"
CONNINFO_ENV = "TRACEML_POSTGRES_CONNINFO"
TIMEOUT_ENV = "TRACEML_POSTGRES_TIMEOUT_S"
"""Seconds one ``open``, ``flush`` or ``close`` may take in all (``Timeouts.within``)."""
DEFAULT_SCHEMA = "traceml"
APPLICATION_NAME = "traceml-exporter"
"""libpq's ``fallback_application_name``: ``PGAPPNAME`` still wins."""
DEFAULT_TIMEOUTS = Timeouts()
"""connect_timeout 5 s, statement_timeout 5 s, lock_timeout 4 s, 8 s for a whole call."""
CONNECT_TIMEOUT_S = DEFAULT_TIMEOUTS.connect_s
STATEMENT_TIMEOUT_MS = int(DEFAULT_TIMEOUTS.statement_s * 1000)
RECEIPT_FILE = "postgres_runs.jsonl"
"""``<export_dir>/postgres_runs.jsonl``: one line per ``open()`` naming the run id and schema."""

FLUSHES_TABLE = "_export_flushes"
RUNS_TABLE = "_export_runs"

Buffer = dict[Layout, list[ExportRecord]]
TableKey = tuple[str, tuple[str, ...]]
"""A stream and its records' ``COLUMNS``: one table made ready for them."""


_REFUSED_FOR_GOOD = "not currently accepting connections"
"""libpq's text for a database closed to connections by its owner (ALLOW_CONNECTIONS false)."""


def _transient(error: BaseException) -> bool:
    """A lost connection, a server going away, a timeout or a serialization failure.

    A database its owner closed to connections is not: no retry opens it in seconds (nor
    is it permanent: its owner may open it again while ``follow`` waits). Neither is what
    ``refused_for_good`` names (a refused password, say).
    """
    if refused_for_good(error):
        return False
    if isinstance(error, psycopg.OperationalError):
        return _REFUSED_FOR_GOOD not in str(error)
    state = getattr(error, "sqlstate", None) or ""
    return isinstance(error, psycopg.Error) and state.startswith("40")


_TIMEOUT_HINTS: dict[type[psycopg.Error], str] = {
    psycopg.errors.LockNotAvailable: "another session held a conflicting lock on it for longer "
    "than lock_timeout",
    psycopg.errors.QueryCanceled: "the statement ran longer than statement_timeout",
}


@contextlib.contextmanager
def _naming(what: str) -> Iterator[None]:
    """Say which table (or lock) a lock or statement timeout was about: the server does not."""
    try:
        yield
    except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled) as error:
        if getattr(error, "traceml_named", False):
            raise
        kind = type(error)
        server = " ".join(str(error).split())
        hint = next(h for k, h in _TIMEOUT_HINTS.items() if isinstance(error, k))
        named = kind(f"{what}: {server} ({hint})")
        setattr(named, "traceml_named", True)  # noqa: B010 - psycopg's class has no such field
        raise named from error


class ExampleExporter(Lifecycle):
    """COPY every record into the table named by its ``record.STREAM``."""

    def __init__(  # noqa: PLR0913 - keyword-only settings
        self,
        export_dir: Path,
        session_root: Path,
        streams: Sequence[str],
        *,
        include_hostname: bool = False,
        schema: str = DEFAULT_SCHEMA,
        conninfo: str = "",
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        timeout_setting: str = "",
    ) -> None:
        # No connection here: the factory runs on another thread than open/write/flush/close.
        self.export_dir = export_dir
        self.session_root = session_root
        self.session_key = run_key(session_root)
        """The run's key in every table: its folder, absolute and resolved (rule 9)."""
        self.streams = tuple(streams)
        self.include_hostname = include_hostname
        self.schema = schema
        self.conninfo = conninfo
        self.timeouts = timeouts
        self.timeout_setting = timeout_setting.strip()
        """``TRACEML_POSTGRES_TIMEOUT_S`` as the factory read it; ``open()`` checks it."""
        self.run_id = ""
        self._conn: BoundedConnection | None = None
        self._layouts: dict[str, Layout] = {}
        self._tables: dict[TableKey, dict[str, str]] = {}
        """Tables known to exist (committed), with their column types."""
        self._pending: dict[TableKey, dict[str, str]] = {}
        self._rows: Buffer = {}
        self._buffered = 0
        self._written: dict[str, int] = {}
        self._flushes = 0

    # -- the four methods --------------------------------------------------------------

    def open(self) -> None:
        """Connect, create the schema and the selected streams' tables, write the receipt."""
        with self._opening():
            if self.timeout_setting:
                self.timeouts = parse_timeouts(self.timeout_setting, TIMEOUT_ENV)
            self.run_id = str(uuid.uuid4())
            with marking_permanent():
                self._open(self._connect(until(self.timeouts.call_s)))
            self._tables.update(self._pending)
            self._pending = {}

    def _open(self, conn: BoundedConnection) -> None:
        """Make the schema and tables on ``conn``, write the receipt; keep ``conn`` for the run."""
        with releasing(conn.close):
            with conn.transaction(), conn.cursor() as cur:
                self._lock(cur)
                self._create_schema(cur)
                for stream in self.streams:
                    columns = STREAM_COLUMNS.get(stream)
                    if columns is not None:
                        with _naming(f"table {self.schema}.{stream}"):
                            types = ensure_table(cur, self.schema, stream, columns)
                        self._pending[stream, columns] = types
            receipt = {
                "run_id": self.run_id,
                "schema": self.schema,
                "session_root": self.session_key,
                "opened_unix_ns": time.time_ns(),
            }
            append_line(self.export_dir / RECEIPT_FILE, json.dumps(receipt))
        self._conn = conn

    def write(self, records: Sequence[ExportRecord]) -> None:
        """Buffer the batch, by stream; nothing is sent until ``flush``."""
        with self._running("write"):
            layouts = self._layouts
            rows = self._rows
            for record in records:
                stream = record.STREAM
                layout = layouts.get(stream)
                if layout is None or (
                    layout.record_columns is not record.COLUMNS
                    and layout.record_columns != tuple(record.COLUMNS)
                ):
                    layout = layouts[stream] = layout_for(
                        stream, record.COLUMNS, include_hostname=self.include_hostname
                    )
                batch = rows.get(layout)
                if batch is None:
                    rows[layout] = [record]
                else:
                    batch.append(record)
            self._buffered += len(records)

    def flush(self) -> None:
        """COPY the buffer in one transaction and commit; then it counts as delivered."""
        with self._running("flush"):
            conn = self._held(self._conn)
            if not self._rows:
                return
            with marking_permanent():
                self._deliver(conn, closing=None)

    def close(self, *, dropped_batches: int = 0) -> None:
        """Deliver what is buffered, log the run in ``_export_runs`` and close the connection.

        ``dropped_batches`` is the number of payload batches TraceML's worker
        never handed to ``write``: one count for the whole worker.
        """
        with self._closing(), marking_permanent():
            self._deliver(self._held(self._conn), closing=dropped_batches)

    # -- delivery ------------------------------------------------------------------------

    def _deliver(self, conn: BoundedConnection, closing: int | None) -> None:
        """Load and commit; after a transient failure, retry on a new connection until the deadline.

        Each new connection first asks whether the failed attempt had committed
        (``_committed``), so the buffer is sent again only when it had not.
        """
        started = time.monotonic()
        deadline = until(self.timeouts.call_s)
        first: list[BoundedConnection] = [conn]  # the first try only: later ones reconnect

        def gave_up(error: BaseException, attempts: int, _wait: float) -> BaseException:
            return _gave_up(error, attempts, time.monotonic() - started)

        retry(
            lambda: self._attempt(first.pop() if first else None, closing, deadline),
            deadline=deadline,
            backoff=BACKOFF,
            transient=_transient,
            give_up=gave_up,
            reserve_s=MIN_CONNECT_S,  # a new connection needs that much: no attempt left
        )

    def _attempt(
        self, conn: BoundedConnection | None, closing: int | None, deadline: float
    ) -> None:
        """One try (on a new connection when ``conn`` is None), done once delivered.

        A failure is raised; when it is transient its connection is closed first.
        """
        try:
            if conn is None:
                conn = self._connect(deadline)
                self._conn = conn
                if self._committed(conn):
                    self._delivered(self._flushes + 1)
                    return
            conn.deadline = deadline
            self._load(conn, closing)
        except psycopg.Error as error:
            if _transient(error):
                self._conn = None
                if conn is not None:
                    with contextlib.suppress(psycopg.Error):
                        conn.close()
            raise

    def _load(self, conn: BoundedConnection, closing: int | None) -> None:
        seq = self._flushes + 1
        self._pending = {}
        text_prefix = (self.run_id, self.session_key)
        binary_prefix = (uuid.UUID(self.run_id).bytes, self.session_key)
        with conn.transaction(), conn.cursor() as cur:
            for layout, rows in self._rows.items():
                with _naming(f"table {self.schema}.{layout.stream}"):
                    self._copy(cur, layout, rows, (text_prefix, binary_prefix))
            self._insert(
                cur,
                FLUSHES_TABLE,
                {"flush_seq": seq, "records": self._buffered},
            )
            if closing is not None:
                written = dict(self._written)
                for layout, rows in self._rows.items():
                    written[layout.stream] = written.get(layout.stream, 0) + len(rows)
                self._insert(
                    cur,
                    RUNS_TABLE,
                    {"dropped_batches": _as_int(closing), "written_records": json.dumps(written)},
                )
        self._delivered(seq)

    def _copy(
        self,
        cur: psycopg.Cursor[Any],
        layout: Layout,
        rows: list[ExportRecord],
        prefixes: tuple[tuple[str, str], tuple[bytes, str]],
    ) -> None:
        """COPY one stream's buffered records into its table (made first if this run has not)."""
        key = (layout.stream, layout.record_columns)
        table = self._tables.get(key)
        if table is None:
            self._lock(cur)
            self._create_schema(cur)
            table = ensure_table(cur, self.schema, layout.stream, layout.record_columns)
            self._pending[key] = table
        types = binary_types(layout.columns, table)
        copy = sql.SQL("COPY {}.{} ({}) FROM STDIN{}").format(
            sql.Identifier(self.schema),
            sql.Identifier(layout.stream),
            sql.SQL(", ").join(map(sql.Identifier, layout.columns)),
            sql.SQL(" (FORMAT BINARY)" if types else ""),
        )
        # Rows are made while the COPY streams: the server parses the
        # previous ones (jsonb above all) on another core meanwhile.
        prefix = prefixes[0] if types is None else prefixes[1]
        with cur.copy(copy) as pipe:
            if types is not None:
                pipe.set_types(types)
            for row in layout.rows(rows, prefix, binary=types is not None):
                pipe.write_row(row)

    def _delivered(self, seq: int) -> None:
        """The commit of flush ``seq`` happened: the buffer (and any table made) is the server's."""
        for layout, rows in self._rows.items():
            self._written[layout.stream] = self._written.get(layout.stream, 0) + len(rows)
        self._tables.update(self._pending)
        self._pending = {}
        self._rows = {}
        self._buffered = 0
        self._flushes = seq

    def _committed(self, conn: BoundedConnection) -> bool:
        """Whether the flush that failed had committed (its ``_export_flushes`` row exists)."""
        with conn.cursor() as cur:
            found = cur.execute(
                sql.SQL("SELECT 1 FROM {} WHERE run_id = %s AND flush_seq = %s").format(
                    self._meta(FLUSHES_TABLE)
                ),
                (self.run_id, self._flushes + 1),
            ).fetchone()
        return found is not None

    # -- connection ----------------------------------------------------------------------

    def _connect(self, deadline: float) -> BoundedConnection:
        """A connection in autocommit (transactions are explicit) whose waits end by ``deadline``."""
        conn = connect(
            self.conninfo,
            self.timeouts,
            deadline,
            fallback_application_name=APPLICATION_NAME,
        )
        register_binary_dumpers(conn)
        statement_ms = int(self.timeouts.statement_s * 1000)
        lock_ms = statement_ms * 4 // 5  # below statement_timeout, which would fire first
        with releasing(conn.close):
            conn.execute(
                "SELECT set_config('statement_timeout', %s, false), "
                "set_config('lock_timeout', %s, false)",
                (str(statement_ms), str(lock_ms)),
            )
        return conn

    def _release(self) -> None:
        """Close the connection (the reconnected one, after a retry; an open transaction is
        rolled back) and drop the buffer."""
        conn, self._conn = self._conn, None
        self._rows = {}
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _insert(self, cur: psycopg.Cursor[Any], table: str, values: dict[str, object]) -> None:
        """One row of this run (``run_id``, ``session_root``, then ``values``) into ``table``."""
        row = {"run_id": self.run_id, "session_root": self.session_key, **values}
        with _naming(f"table {self.schema}.{table}"):
            cur.execute(
                sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                    self._meta(table),
                    sql.SQL(", ").join(map(sql.Identifier, row)),
                    sql.SQL(", ").join([sql.Placeholder()] * len(row)),
                ),
                tuple(row.values()),
            )

    def _meta(self, name: str) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(name))

    def _lock(self, cur: psycopg.Cursor[Any]) -> None:
        """Serialize DDL between exporters of several runs (held until the commit)."""
        with _naming(f"the DDL lock of schema {self.schema} (another exporter is making tables)"):
            cur.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", ("traceml-ddl:" + self.schema,)
            )

    def _create_schema(self, cur: psycopg.Cursor[Any]) -> None:
        exists = cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,))
        if exists.fetchone() is None:
            cur.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
            )
        cur.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (run_id uuid, flush_seq bigint, "
                "session_root text, records bigint, committed_at timestamptz DEFAULT now(), "
                "PRIMARY KEY (run_id, flush_seq))"
            ).format(self._meta(FLUSHES_TABLE))
        )
        cur.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (run_id uuid, session_root text, "
                "closed_at timestamptz DEFAULT now(), dropped_batches bigint, "
                "written_records jsonb)"
            ).format(self._meta(RUNS_TABLE))
        )


def _gave_up(error: BaseException, attempts: int, elapsed: float) -> BaseException:
    """The last transient error, saying how long it was retried (same class, same message)."""
    message = f"{error}".rstrip() + f" (gave up after {attempts} attempts in {elapsed:.1f} s)"
    try:
        return type(error)(message)
    except TypeError:  # an error class that takes other arguments
        return psycopg.OperationalError(message)


def _as_int(value: Any) -> int | None:
    """``dropped_batches`` as stored: an int, or None for anything else TraceML might pass."""
    return value if type(value) is int else None


def make_exporter(context: ExporterContext) -> ExampleExporter:
    """The factory TraceML calls as ``factory(context)`` on the aggregator's main thread."""
    settings = environment((SCHEMA_ENV, CONNINFO_ENV, TIMEOUT_ENV))
    return ExampleExporter(
        context.export_dir,
        context.session_root,
        context.streams,
        include_hostname=context.include_hostname,
        schema=settings.get(SCHEMA_ENV, "").strip() or DEFAULT_SCHEMA,
        conninfo=settings.get(CONNINFO_ENV, ""),
        timeout_setting=settings.get(TIMEOUT_ENV, ""),
    )
