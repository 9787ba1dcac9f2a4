"""Following live TraceML 0.5.0 runs: one run (``follower``) or a logs folder (``service``).

``run`` is the run folder and its files, ``database`` its read-only connections,
``ledger`` the bookmark, ``result`` how a follow ended, ``loss`` why rows were not
exported, ``lock`` one follower per run, ``retry`` the wait between exporters after a
failure, ``status`` what a follower shows (progress line, ``status.json``; ``metrics``
serves ``/metrics``).
"""

from __future__ import annotations

from .follower import BOOKMARK_VERSION, Follower
from .lock import RunLock, RunLockedError
from .result import End, FollowResult, record_follow
from .retry import Backoff
from .run import FollowError, RunFolder, ended_without_telemetry, run_complete, runs_under
from .status import RunStatus, progress_line, write_status

__all__ = [
    "BOOKMARK_VERSION",
    "Backoff",
    "End",
    "FollowError",
    "FollowResult",
    "Follower",
    "RunFolder",
    "RunLock",
    "RunLockedError",
    "RunStatus",
    "ended_without_telemetry",
    "progress_line",
    "record_follow",
    "run_complete",
    "runs_under",
    "write_status",
]
