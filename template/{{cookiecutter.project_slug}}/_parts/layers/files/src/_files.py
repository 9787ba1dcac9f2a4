"""The sinks' files, written so a crash keeps them whole and no planted link is followed.

A file is replaced atomically (:func:`replacing`: written under a hidden temporary
name, fsynced, renamed, its folder fsynced), so a reader sees the old file or the new
one, never half of one, and the rename itself survives a crash of the machine. A
receipt line is appended and fsynced (:func:`append_line`), so what ``close()``
reported survives as the records it describes do.

The export folder lives in a run folder that other users may write, and the exporter
may run as root (``traceml-exporter follow``): :func:`export_folder` refuses an export
folder (or the ``aggregator/`` above it) that is a link or another user's, temporary
names are random and created exclusively, and no file is opened through a link.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = [
    "append_line",
    "export_folder",
    "fsync_path",
    "open_append",
    "refuse_link",
    "replacing",
    "write_atomically",
]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def refuse_link(path: Path) -> None:
    """Raise when ``path`` is a symbolic link (one another user may have planted).

    Raises:
        OSError: it is one.
    """
    if path.is_symlink():
        raise OSError(f"{path} is a symbolic link: refused (a sink writes through no link)")


def export_folder(path: Path, levels: int = 2) -> Path:
    """Make ``path`` and check it: its last ``levels`` folders (``aggregator/export``
    of a run folder) must be real folders of the owner of the folder above them (or of
    this process); those made by root are given to that owner. Returns ``path``.

    Raises:
        OSError: one is a link, not a folder, or another user's.
    """
    anchor = path.parents[levels - 1] if levels else path
    anchor.mkdir(parents=True, exist_ok=True)
    owner = anchor.stat()
    folder = anchor
    for name in path.parts[len(anchor.parts) :]:
        folder = folder / name
        with contextlib.suppress(FileExistsError):
            folder.mkdir()
            if os.geteuid() == 0 and owner.st_uid != 0:
                os.lchown(folder, owner.st_uid, owner.st_gid)
        found = folder.lstat()
        if not stat.S_ISDIR(found.st_mode):
            raise OSError(f"{folder} is a link or not a folder: refused")
        if found.st_uid not in (owner.st_uid, os.geteuid()):
            raise OSError(
                f"{folder} belongs to uid {found.st_uid}, not to {anchor}'s owner: refused"
            )
    return path


def open_append(path: Path) -> IO[bytes]:
    """``path`` opened to append (made if missing), never through a link.

    Raises:
        OSError: it is a link or not a regular file, or cannot be opened.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file: refused")
        return os.fdopen(fd, "ab")
    except BaseException:
        os.close(fd)
        raise


def fsync_path(path: Path) -> None:
    """fsync a file, or a folder (which makes the renames in it durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def replacing(path: Path, *, durable: bool = True) -> Iterator[Path]:
    """The temporary path (made empty, exclusively, under a random name) to write
    ``path``'s new content to; when the block ends, it
    replaces ``path`` (fsynced before the rename, the folder after, when ``durable``),
    or, when the block raises, it is removed and ``path`` is left as it was."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | os.O_CLOEXEC
    os.close(os.open(tmp, flags, 0o644))  # random and exclusive: never a planted file
    try:
        yield tmp
        if durable:
            fsync_path(tmp)
        os.replace(tmp, path)
        if durable:
            fsync_path(path.parent)
    except BaseException:
        with contextlib.suppress(OSError):  # the failure is raised, not this one
            tmp.unlink(missing_ok=True)
        raise


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` (its folder made if missing) with ``data``, durably."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        tmp.write_bytes(data)


def append_line(path: Path, line: str) -> None:
    """Append ``line`` and a newline to ``path`` (made with its folder if missing), fsynced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_append(path) as handle:
        handle.write((line + "\n").encode())
        handle.flush()
        os.fsync(handle.fileno())
