"""Following live TraceML 0.5.0 runs: one run (``follower``) or a logs folder (``service``).
The package imports only its light modules (not ``follower``), so ``/metrics`` is up
before the follower's heavier ones load.

``run`` is the run folder and its files, ``database`` its read-only connections,
``ledger`` the bookmark, ``result`` how a follow ended, ``loss`` why rows were not
exported, ``lock`` one follower per run, ``retry`` the wait between exporters after a
failure and which failures are final, ``status`` what a follower shows (progress line,
``status.json``; ``metrics`` serves ``/metrics``), ``watch`` what a caller is given while
it runs. ``session`` follows one run or a logs folder from the first second to the end
(``ending``), with ``settings`` and typed ``errors``: the public
``traceml_exporter_sdk.follow``.
"""

from __future__ import annotations

from .lock import RunLock, RunLockedError
from .result import End, FollowResult, record_follow
from .retry import Backoff
from .run import FollowError, RunFolder, ended_without_telemetry, run_complete, runs_under
from .status import RunStatus, progress_line, write_status

__all__ = [
    "Backoff",
    "End",
    "FollowError",
    "FollowResult",
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
