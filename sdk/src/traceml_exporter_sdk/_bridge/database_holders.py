"""Which processes write a run's database, and whether they still run (Linux ``/proc``).

TraceML's aggregator is the process with the database open; its parent is the
launcher, which marks the run's manifest after the aggregator exits. Where
``/proc`` cannot tell, nothing is known, and the follower ends on the manifest or
its idle timeout alone.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["DatabaseWriters", "database_holders"]


def database_holders(database: Path) -> set[int] | None:
    """Pids (other than ours) with ``database`` open; None where /proc cannot tell."""
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return None
    target = os.path.realpath(database)
    mine = os.getpid()
    with os.scandir(proc) as entries:
        return {
            int(entry.name)
            for entry in entries
            if entry.name.isdigit() and int(entry.name) != mine and _holds(entry.path, target)
        }


def _holds(proc_dir: str, target: str) -> bool:
    """Whether the process of ``/proc/<pid>`` has the file ``target`` open."""
    with contextlib.suppress(OSError), os.scandir(f"{proc_dir}/fd") as fds:
        for fd in fds:  # closed on an early return too (an unclosed iterator holds an fd)
            with contextlib.suppress(OSError):
                if os.readlink(fd.path) == target:
                    return True
    return False


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first); None
    once the process is gone or reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs: a zombie (killed, not yet reaped) does not."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


class DatabaseWriters:
    """The processes found with a database open (the aggregator) and their parents."""

    def __init__(self, database: Path) -> None:
        self.database = database
        self.holders: set[int] | None = None
        """Pids found with the database open; None: not looked for, or /proc cannot tell."""
        self.launchers: set[int] | None = None
        """Their parents (init and us left out); None: not known."""
        self.parents: dict[int, int] = {}
        """Each holder's parent when it was first found (by this follower or, through
        ``restore``, by an earlier one)."""
        self._started: dict[int, str] = {}
        """Each holder's start time (``/proc/<pid>/stat``), which tells it from a later
        process given the same pid."""

    def known(self) -> dict[str, Any]:
        """The holders found, each with its start time and first parent: what a follower
        started again needs to tell an orphan from a run looked after."""
        return {
            str(pid): {"started": self._started[pid], "parent": parent}
            for pid, parent in self.parents.items()
            if pid in self._started
        }

    def restore(self, known: Mapping[str, Any]) -> None:
        """Take the first parents an earlier follower saw, for those of its holders that
        still run (the same pid with the same start time)."""
        for pid_text, seen in known.items():
            with contextlib.suppress(TypeError, ValueError, KeyError):
                pid, started, parent = int(pid_text), str(seen["started"]), int(seen["parent"])
                fields = _stat(pid)
                if fields is not None and len(fields) > 19 and fields[19] == started:
                    self.parents.setdefault(pid, parent)
                    self._started.setdefault(pid, started)

    def find(self) -> None:
        """Note who has the database open now, and their parents."""
        holders = database_holders(self.database)
        if holders is None:
            return
        self.holders = holders
        if holders:
            for pid in holders:
                fields = _stat(pid)
                if fields is not None and len(fields) > 19:
                    self.parents.setdefault(pid, int(fields[1]))
                    self._started.setdefault(pid, fields[19])
            parents = {self.parents[pid] for pid in holders if pid in self.parents}
            self.launchers = parents - {0, 1, os.getpid()}

    def alive(self) -> bool:
        """Whether a process found with the database open (found now if never looked
        for) still has it open; True where /proc cannot tell."""
        if self.holders is None:
            self.find()
            if self.holders is None:
                return True
        target = os.path.realpath(self.database)
        return any(_holds(f"/proc/{pid}", target) for pid in self.holders)

    def launchers_gone(self) -> bool:
        """Whether the holders' parents are known and none of them runs any more."""
        return self.launchers is not None and not any(map(_alive, self.launchers))

    def attended(self) -> bool:
        """Whether the run is alive and looked after: a process found with the database
        open still has it, and still has the parent it had then (its launcher lives).

        False where /proc cannot tell, and for an aggregator that is gone or orphaned
        (re-parented after its launcher died, or found with init as its parent, as a
        follower started after the launcher's death finds it): only then may a quiet run
        be given up.
        """
        if self.holders is None:
            self.find()
            if self.holders is None:
                return False
        target = os.path.realpath(self.database)
        for pid in self.holders:
            fields = _stat(pid)
            if fields is None or fields[0] in ("Z", "X") or not _holds(f"/proc/{pid}", target):
                continue
            parent = self.parents.get(pid)
            if parent is not None and parent > 1 and int(fields[1]) == parent and _alive(parent):
                return True
        return False
