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

__all__ = ["RunLock", "RunLockedError"]


class RunLockedError(Exception):
    """Another process follows this run; the message names it."""


class RunLock:
    """Held from ``acquire`` until ``release`` (or the process ends)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        """Take the lock at once or raise.

        Raises:
            RunLockedError: another process holds it.
            OSError: the folder cannot be written.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
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
