"""One follower per run: an ``flock`` on ``aggregator/follow/lock``.

The kernel releases the lock when its holder's file is closed, so a follower
killed with SIGKILL leaves nothing stale; the file keeps the holder's pid for the
message a second follower gets.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from ..._export import run_files
from .run import FollowError

__all__ = ["RunLock", "RunLockedError"]


class RunLockedError(Exception):
    """Another process follows this run; the message names it."""


class RunLock:
    """Held from ``acquire`` until ``release`` (or the process ends)."""

    def __init__(self, path: Path, root: Path | None = None) -> None:
        self.path = path
        self.root = root if root is not None else path.parents[2]
        """The run folder: ``path`` is opened under it through no link (``_export.run_files``)."""
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        """Take the lock at once or raise.

        Raises:
            RunLockedError: another process holds it.
            FollowError: the lock or a folder on its way is a link or another user's.
            OSError: the folder cannot be written.
        """
        parts = self.path.parent.relative_to(self.root).parts
        try:
            with run_files.open_folder(self.root, parts, create=True) as folder:
                fd = folder.open_file(self.path.name, os.O_RDWR | os.O_CREAT, run_files.PRIVATE)
        except run_files.UnsafePathError as exc:
            raise FollowError(str(exc)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise RunLockedError(
                f"{self.path.parents[2]} is already being followed (pid {holder} holds "
                f"{self.path}); one follower per run, or its rows would be exported twice"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None
