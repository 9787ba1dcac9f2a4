"""Following live TraceML 0.5.0 runs: one run (``follower``) or a logs folder (``service``).

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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_WHERE = {
    "BOOKMARK_VERSION": "follower",
    "Follower": "follower",
    "RunLock": "lock",
    "RunLockedError": "lock",
    "End": "result",
    "FollowResult": "result",
    "record_follow": "result",
    "Backoff": "retry",
    "FollowError": "run",
    "RunFolder": "run",
    "ended_without_telemetry": "run",
    "run_complete": "run",
    "runs_under": "run",
    "RunStatus": "status",
    "progress_line": "status",
    "write_status": "status",
}
"""Where each name is defined; imported on first use (PEP 562), so a light module of the
package (``status``, ``metrics``) loads without the follower's."""


def __getattr__(name: str) -> Any:
    """Import a name from its module on first use (PEP 562)."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
