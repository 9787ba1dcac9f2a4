"""What a caller of the follower sees while it runs: a status snapshot at each change of
state and every ``status_interval`` (``on_status``), one-line notices (``on_event``),
and each run's ``status.json``, kept current.

A snapshot is ``RunStatus.snapshot()``: the keys of ``status.json`` (docs/follow.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from ..._export.shown import shown
from .lock import RunLockedError
from .run import RunFolder
from .status import ENDED, RunStatus, write_status

__all__ = ["STATUS_INTERVAL_S", "Notice", "OnEvent", "OnStatus", "Watched", "Watcher"]

STATUS_INTERVAL_S = 5.0
"""How often ``status.json`` is rewritten while nothing changes."""

NoticeKind = Literal["metrics", "waiting", "passed", "refused", "elsewhere", "stale-warning"]


@dataclass(frozen=True)
class Notice:
    """A line the follower has for people: ``metrics`` (where ``/metrics`` listens, and
    ``port``), ``waiting`` (for the run, or the runs of a logs folder), ``passed`` (a run
    not followed, and why), ``elsewhere`` (a run another process follows) or
    ``stale-warning`` (a run ended complete, but an earlier ``finalization_warning.json``
    saying otherwise could not be removed)."""

    kind: NoticeKind
    line: str
    port: int | None = None


OnStatus = Callable[[Mapping[str, Any]], None]
OnEvent = Callable[[Notice], None]


class Watched(Protocol):
    """A run's follow as the watcher sees it (``service.FollowJob``)."""

    @property
    def folder(self) -> RunFolder: ...
    @property
    def status(self) -> RunStatus: ...
    @property
    def error(self) -> Exception | None: ...
    @property
    def done(self) -> bool: ...


class Watcher:
    """Gives the jobs' snapshots to ``on_status`` and keeps each run's ``status.json``."""

    def __init__(
        self,
        on_status: OnStatus | None,
        on_event: OnEvent | None,
        interval: float,
    ) -> None:
        self.on_status = on_status
        self.on_event = on_event
        self.interval = interval
        self._shown: dict[Path, tuple[str, float]] = {}
        self._saved: dict[Path, float] = {}

    def notice(self, kind: NoticeKind, line: str, port: int | None = None) -> None:
        if self.on_event is not None:
            self.on_event(Notice(kind, shown(line), port))

    def tick(self, job: Watched, *, final: bool = False) -> None:
        """A snapshot when the state changed or the interval passed; the status file when
        the state changed or ``STATUS_INTERVAL_S`` passed. A follow that is over is shown
        once, when its job has said how it ended (``final``, or its thread done); a
        deleted run's status is not written (that would make its folder again), nor
        that of a run still awaited (nothing is written before it is followed)."""
        snapshot = job.status.snapshot()
        state = snapshot["state"]
        ended = state in ENDED
        if ended and not (final or job.done):
            return  # its end is being written down: shown once it is
        now = time.monotonic()
        root = job.folder.root
        last, shown_at = self._shown.get(root, ("", -1e9))
        changed = state != last
        due = self.interval > 0 and now - shown_at >= self.interval and not ended
        if changed or due:
            self._shown[root] = (state, now)
            if self.on_status is not None:
                self.on_status(snapshot)
        if state in ("deleted", "waiting") or not job.folder.manifest_path.exists():
            return
        if changed or final or now - self._saved.get(root, -1e9) >= STATUS_INTERVAL_S:
            self._saved[root] = now
            if job.error is None or not isinstance(job.error, RunLockedError):
                write_status(job.folder.status_path, snapshot, root=root)
