"""A run's database file as the follower touches it: read-only connections that leave the
folder as TraceML left it, a cheap sign of change, and TraceML's last close finished."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import apsw

from ..database_holders import database_holders
from ..sqlite_connect import (
    DATABASE_ERRORS,
    BackfillError,
    Connection,
    connect_read_only,
    open_run_database,
)
from .run import RunFolder, run_complete

__all__ = ["Signature", "connect", "files_signature", "finish_traceml_close"]

Signature = tuple[tuple[int, int, int] | None, ...]
"""(size, mtime, inode) of the database and of its ``-wal`` (None: no ``-wal``)."""


def _wal(database: Path) -> Path:
    return database.with_name(database.name + "-wal")


def connect(folder: RunFolder) -> Connection:
    """A read-only connection, immutable once no one has the database open.

    While TraceML's writer has the database open, its ``-wal`` file exists; its
    last close removes it. A read-only connection made after that would make
    the ``-wal`` and ``-shm`` files again and could not remove them, so a
    database without a ``-wal`` that no process has open (or whose run is
    marked complete) is read as immutable, and the run folder is left as
    TraceML left it.

    Raises:
        BackfillError: the database cannot be opened.
    """
    database = folder.database
    immutable = False
    if not os.path.lexists(_wal(database)):
        immutable = run_complete(folder.manifest()) or database_holders(database) == set()
    return connect_read_only(database, immutable=immutable, root=folder.root)


def files_signature(database: Path) -> Signature | None:
    """What the database's files look like now; None without a database. Every commit
    writes the ``-wal``, and a checkpoint the database, so a commit changes it."""
    out: list[tuple[int, int, int] | None] = []
    for path in (database, _wal(database)):
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            if path is database:
                return None
            out.append(None)
            continue
        out.append((st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(out)


def finish_traceml_close(folder: RunFolder) -> None:
    """Remove the ``-wal`` and ``-shm`` TraceML's last close left because a read of
    ours overlapped it, as that close does when it is the last one.

    Only where the run is marked complete, no process has the database open, and the
    ``-wal`` is empty (TraceML's closing checkpoint ran whole and truncated it): then
    opening and closing a connection that may write copies nothing into the
    database, and SQLite removes both files. Anything else is left as it is.
    """
    database = folder.database
    try:
        if os.stat(_wal(database), follow_symlinks=False).st_size != 0:
            return
    except OSError:
        return
    if not run_complete(folder.manifest()) or database_holders(database) != set():
        return
    with contextlib.suppress(*DATABASE_ERRORS, BackfillError):
        # only the run owner's own files, through no link (one planted there would
        # fold another user's -wal into their database)
        connection = open_run_database(
            database, folder.root, flags=apsw.SQLITE_OPEN_READWRITE, owner_only=True
        )
        try:
            connection.execute("PRAGMA schema_version").fetchall()
        finally:
            connection.close()
