"""Resource snapshots the checks compare: file descriptors, threads, files, audit events.

A ``Snapshot`` taken before a run tells which threads and descriptors the run
added; ``audit_events`` sees sockets, sqlite3 connections and processes opened
(``sys.addaudithook``); ``thread_exceptions`` sees exceptions that escaped a
thread (``threading.excepthook``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "FD_DIR",
    "Snapshot",
    "audit_events",
    "describe_fd",
    "describe_threads",
    "file_states",
    "leftover_files",
    "lost_files",
    "open_fds",
    "thread_exceptions",
    "tree",
    "tree_digest",
    "tree_entries",
]


# -- resource snapshots ------------------------------------------------------------


def _fd_dir() -> str | None:
    for candidate in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(candidate):
            return candidate
    return None


FD_DIR = _fd_dir()


def open_fds() -> dict[int, tuple[int, int]]:
    """Every open fd of this process -> (st_dev, st_ino); empty where it cannot be listed."""
    if FD_DIR is None:
        return {}
    out: dict[int, tuple[int, int]] = {}
    for name in os.listdir(FD_DIR):
        try:
            fd = int(name)
            st = os.fstat(fd)
        except (ValueError, OSError):
            continue  # the listing's own fd, closed by now
        out[fd] = (st.st_dev, st.st_ino)
    return out


def describe_fd(fd: int) -> str:
    try:
        return f"fd {fd} -> {os.readlink(f'{FD_DIR}/{fd}')}"
    except OSError:
        return f"fd {fd}"


@dataclass(frozen=True)
class Snapshot:
    """Threads and fds alive at one moment, to tell what an exporter added."""

    threads: frozenset[threading.Thread]
    fds: frozenset[tuple[int, tuple[int, int]]]

    @classmethod
    def take(cls) -> Snapshot:
        # No gc.collect() first: a finalizer of an earlier run that closes its file
        # mid-check only removes an fd, and fds are told apart by (fd, dev, inode),
        # so a reused number still counts as new. The exporter under test is kept
        # alive by its CallLog, so the collector cannot hide its own leaks.
        return cls(frozenset(threading.enumerate()), frozenset(open_fds().items()))

    def new_threads(
        self, exclude: Iterable[threading.Thread | None] = (), *, non_daemon_only: bool = False
    ) -> list[threading.Thread]:
        skip = {t for t in exclude if t is not None}
        return [
            t
            for t in threading.enumerate()
            if t not in self.threads
            and t not in skip
            and t.is_alive()
            and not (non_daemon_only and t.daemon)
        ]

    def new_fds(self) -> list[int]:
        return sorted(fd for fd, ident in open_fds().items() if (fd, ident) not in self.fds)

    def wait_released(
        self,
        exclude: Iterable[threading.Thread | None] = (),
        *,
        grace: float = 2.0,
        non_daemon_only: bool = False,
        fds: bool = True,
    ) -> tuple[list[threading.Thread], list[int]]:
        """Poll until the threads and fds added since the snapshot are gone, or ``grace`` ends."""
        exclude = list(exclude)
        deadline = time.monotonic() + grace
        while True:
            threads = self.new_threads(exclude, non_daemon_only=non_daemon_only)
            leaked = self.new_fds() if fds else []
            if (not threads and not leaked) or time.monotonic() >= deadline:
                return threads, leaked
            time.sleep(0.02)

    def left_behind(self, worker: threading.Thread | None, grace: float) -> str:
        """What the exporter still holds ``grace`` seconds on (its threads, its fds), as
        one clause for a failure message, or "" when it let go of everything."""
        threads, fds = self.wait_released([worker], grace=grace)
        problems = []
        if threads:
            problems.append(f"thread(s) still alive: {describe_threads(threads)}")
        if fds:
            problems.append(f"file descriptor(s) still open: {', '.join(map(describe_fd, fds))}")
        return "; ".join(problems)


def describe_threads(threads: Iterable[threading.Thread]) -> str:
    return ", ".join(
        f"{t.name!r} ({'daemon' if t.daemon else 'non-daemon'}, target "
        f"{getattr(getattr(t, '_target', None), '__qualname__', '?')})"
        for t in threads
    )


def tree(root: Path) -> dict[str, int]:
    """Relative path -> size of every file under ``root`` (empty if it does not exist)."""
    out: dict[str, int] = {}
    if not root.exists():
        return out
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath, name)
            try:
                out[str(path.relative_to(root))] = path.stat().st_size
            except OSError:
                continue
    return out


def file_states(root: Path) -> dict[str, tuple[int, int]]:
    """Relative path -> (inode, size) of every file under ``root``."""
    out: dict[str, tuple[int, int]] = {}
    for rel in tree(root):
        with contextlib.suppress(OSError):
            stat = (root / rel).stat()
            out[rel] = (stat.st_ino, stat.st_size)
    return out


def lost_files(before: dict[str, tuple[int, int]], root: Path) -> list[str]:
    """Files of ``before`` now gone from ``root``, or cut shorter in place (same inode): what
    a restart that opens with mode "w" does. A file replaced whole (a new inode, such as a
    summary rewritten atomically) is a rewrite, not a loss."""
    after = file_states(root)
    lost = []
    for rel, (inode, size) in sorted(before.items()):
        now = after.get(rel)
        if now is None or (now[0] == inode and now[1] < size):
            lost.append(rel)
    return lost


_LEFTOVER = re.compile(
    r"(?i)(\.(lock|lck|pid|tmp|temp|part|partial|swp)$|^\.?lock$|^LOCK$|~$|^\.~|\.tmp\.|^tmp)"
)
"""Names of what a writer holds only while it runs: lock files and temporary names."""


def leftover_files(root: Path, before: Iterable[str] = ()) -> list[str]:
    """Lock files and temporary files under ``root`` (not in ``before``), as
    ``export_dir/...`` where they are under it."""
    known = set(before)
    found = []
    for rel in sorted(tree(root)):
        if rel in known:
            continue
        name = Path(rel).name
        if _LEFTOVER.search(name):
            shown = rel.removeprefix(str(Path("aggregator", "export")) + os.sep)
            found.append(f"export_dir/{shown}" if shown != rel else rel)
    return found


def tree_digest(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``root``."""
    out: dict[str, str] = {}
    for rel in tree(root):
        try:
            out[rel] = hashlib.sha256((root / rel).read_bytes()).hexdigest()
        except OSError:
            out[rel] = "<unreadable>"
    return out


def tree_entries(root: Path) -> set[str]:
    """Every file and directory under ``root``, relative."""
    if not root.exists():
        return set()
    return {str(p.relative_to(root)) for p in root.rglob("*")}


# -- audit events (sockets and friends) -------------------------------------------

_AUDIT_EVENTS = frozenset(
    {
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "sqlite3.connect",
        "subprocess.Popen",
        "os.fork",
        "os.posix_spawn",
    }
)


class _AuditState:
    installed = False
    thread: int | None = None
    events: list[tuple[str, str]] | None = None


def _audit_hook(event: str, args: tuple[Any, ...]) -> None:
    events = _AuditState.events
    if events is None or event not in _AUDIT_EVENTS:
        return
    if threading.get_ident() == _AuditState.thread:
        events.append((event, repr(args)[:160]))


@contextmanager
def audit_events() -> Iterator[list[tuple[str, str]]]:
    """Collect socket, sqlite3 and process events raised on this thread inside the block.

    Audit hooks cannot be removed, so one hook is installed per process, on
    first use, and stays idle (one attribute test) outside these blocks.
    """
    if not _AuditState.installed:
        sys.addaudithook(_audit_hook)
        _AuditState.installed = True
    events: list[tuple[str, str]] = []
    _AuditState.thread = threading.get_ident()
    _AuditState.events = events
    try:
        yield events
    finally:
        _AuditState.events = None
        _AuditState.thread = None


@contextmanager
def thread_exceptions() -> Iterator[list[str]]:
    """Collect exceptions that escape any thread's ``run`` inside the block."""
    caught: list[str] = []
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        name = args.thread.name if args.thread is not None else "<unknown>"
        caught.append(f"{name}: {args.exc_type.__name__}: {args.exc_value}")

    threading.excepthook = hook
    try:
        yield caught
    finally:
        threading.excepthook = previous
