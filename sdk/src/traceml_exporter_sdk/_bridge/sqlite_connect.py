"""Opening a TraceML SQLite database for reading: a file checked to be one, opened
read-only, and under a run folder opened through no link another user planted
(``docs/follow.md``, "Threat model")."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import apsw

from .._export import run_files

__all__ = [
    "DATABASE_ERRORS",
    "SQLITE_MAGIC",
    "BackfillError",
    "Connection",
    "Cursor",
    "connect_read_only",
    "open_run_database",
]

SQLITE_MAGIC = b"SQLite format 3\x00"
DATABASE_ERRORS = (apsw.Error, sqlite3.DatabaseError)
"""What a failed read raises: apsw's errors, or ``sqlite3``'s from a caller's connection."""


class Cursor(Protocol):
    def fetchall(self) -> list[Any]: ...
    def fetchone(self) -> Any: ...
    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What the reader needs of a connection: apsw's (its own) or ``sqlite3``'s (a caller's)."""

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Cursor: ...
    def close(self) -> None: ...


class BackfillError(Exception):
    """The file is not a readable SQLite database; the message says why."""


def connect_read_only(
    path: Path, *, immutable: bool = False, root: Path | None = None
) -> Connection:
    """A read-only connection to ``path``, in autocommit mode (no transaction left open).

    ``immutable``: the file will not change and has no WAL content (a finished run):
    SQLite then makes no ``-wal``/``-shm`` files beside it. One thread reads through
    a connection at a time, so it is opened without SQLite's per-call mutex (NOMUTEX),
    a fifth of the cost of fetching a row.

    ``root``: the run folder ``path`` is under, whose files another user may have
    planted: the database is then opened only through no link (``open_run_database``).

    Raises:
        BackfillError: the file is missing, unreadable, or not a SQLite database, or
            (with ``root``) a link or another user's.
    """
    if root is not None:
        return open_run_database(path, root, flags=apsw.SQLITE_OPEN_READONLY, immutable=immutable)
    try:
        with path.open("rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        raise BackfillError(f"database not found: {path}") from None
    except IsADirectoryError:
        raise BackfillError(f"{path} is a directory, not a SQLite database") from None
    except OSError as exc:
        raise BackfillError(f"cannot read {path}: {exc}") from None
    if head and head != SQLITE_MAGIC:
        raise BackfillError(f"{path} is not a SQLite database")
    mode = "ro&immutable=1" if immutable else "ro"
    try:
        connection = apsw.Connection(
            f"{path.resolve().as_uri()}?mode={mode}",
            flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI | apsw.SQLITE_OPEN_NOMUTEX,
        )
    except DATABASE_ERRORS as exc:
        raise BackfillError(f"{path} cannot be read as a SQLite database: {exc}") from None
    connection.set_busy_timeout(5000)
    return connection


def open_run_database(
    path: Path, root: Path, *, flags: int, immutable: bool = False, owner_only: bool = False
) -> apsw.Connection:
    """A connection to the database ``path`` under the run folder ``root``, never through
    a link another user planted: every folder from ``root`` down is opened without
    following links and must be the run owner's (``_export.run_files``), as must the file, its
    ``-wal`` and ``-shm``; SQLite is told to refuse a link (``SQLITE_OPEN_NOFOLLOW``),
    and the file it opened must be the one checked. ``owner_only``: files of this
    process are refused too (a read-write open writes only the run owner's database).

    Raises:
        BackfillError: it is missing, refused, or not a SQLite database.
    """
    parts = path.parent.relative_to(root).parts
    try:
        with run_files.open_folder(root, parts) as folder:
            checked = _checked_database(folder, path.name, owner_only)
            try:
                connection = apsw.Connection(
                    f"{path.as_uri()}?mode={'ro&immutable=1' if immutable else 'ro'}"
                    if flags & apsw.SQLITE_OPEN_READONLY
                    else path.as_uri(),
                    flags=flags
                    | apsw.SQLITE_OPEN_URI
                    | apsw.SQLITE_OPEN_NOMUTEX
                    | apsw.SQLITE_OPEN_NOFOLLOW,
                )
            except DATABASE_ERRORS as exc:
                raise BackfillError(f"{path} cannot be read as a SQLite database: {exc}") from None
            now = folder.lstat(path.name)
            if now is None or (now.st_dev, now.st_ino) != (checked.st_dev, checked.st_ino):
                connection.close()  # nothing was read: closing it touches no file
                raise BackfillError(f"{path} was replaced while it was opened: refused")
    except FileNotFoundError:
        raise BackfillError(f"database not found: {path}") from None
    except OSError as exc:
        raise BackfillError(str(exc) if isinstance(exc, run_files.UnsafePathError) else
                            f"cannot read {path}: {exc.strerror or exc}") from None  # fmt: skip
    connection.set_busy_timeout(5000)
    return connection


def _checked_database(folder: run_files.Folder, name: str, owner_only: bool) -> os.stat_result:
    """The status of the database ``name`` in ``folder``, once it and its ``-wal`` and
    ``-shm`` are found to be regular files of the run's owner, with a SQLite header.

    Raises:
        UnsafePathError, OSError, BackfillError: they are not.
    """
    fd = folder.open_file(name)
    try:
        st = os.fstat(fd)
        head = os.read(fd, len(SQLITE_MAGIC))
    finally:
        os.close(fd)
    if head and head != SQLITE_MAGIC:
        raise BackfillError(f"{folder.path / name} is not a SQLite database")
    for part, found in [(name, st)] + [
        (name + suffix, folder.lstat(name + suffix)) for suffix in ("-wal", "-shm")
    ]:
        if found is None:
            continue
        if not stat.S_ISREG(found.st_mode):
            raise run_files.UnsafePathError(
                f"{folder.path / part} is a link or not a regular file: refused"
            )
        folder.check(found, part, file=True)
        if owner_only and found.st_uid != folder.uid:
            raise run_files.UnsafePathError(
                f"{folder.path / part} belongs to uid {found.st_uid}, not to the run's "
                f"owner (uid {folder.uid}): not opened for writing"
            )
    return st
