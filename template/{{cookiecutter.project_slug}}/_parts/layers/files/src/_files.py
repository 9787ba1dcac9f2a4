"""The sinks' files, written so a crash keeps them whole.

A file is replaced atomically (:func:`replacing`: written under a hidden temporary
name, fsynced, renamed, its folder fsynced), so a reader sees the old file or the new
one, never half of one, and the rename itself survives a crash of the machine. A
receipt line is appended and fsynced (:func:`append_line`), so what ``close()``
reported survives as the records it describes do.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["append_line", "fsync_path", "replacing", "write_atomically"]


def fsync_path(path: Path) -> None:
    """fsync a file, or a folder (which makes the renames in it durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def replacing(path: Path, *, durable: bool = True) -> Iterator[Path]:
    """The temporary path to write ``path``'s new content to; when the block ends, it
    replaces ``path`` (fsynced before the rename, the folder after, when ``durable``),
    or, when the block raises, it is removed and ``path`` is left as it was."""
    tmp = path.with_name(f".{path.name}.tmp")
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
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())
