"""Follow live TraceML 0.5.0 runs from Python: the library ``traceml-exporter follow`` is
a thin shell around (docs/follow.md, "Embedding it").

``follow_run`` follows one run folder to its end and returns a ``FollowResult`` (what
was exported, what was lost and why); ``follow_logs_dir`` follows every run of a logs
folder until its ``stop`` event is set. Both take keyword-only ``FollowSettings``, call
``on_status`` with a snapshot (``status.json``'s keys) at each change of state and every
``status_interval``, ``on_event`` with a ``Notice`` line, and serve ``/metrics`` from
the start when ``metrics_port`` is set. Nothing is printed, no signal handler is
installed and no process-wide setting is changed: that is the caller's to decide.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._bridge.follow.ending import ENDS
    from ._bridge.follow.errors import (
        ExporterNotFoundError,
        FollowError,
        MetricsAddressError,
        MetricsUnavailableError,
        NoReadableTableError,
        RunLockedError,
        RunNotFoundError,
        StoppedWaitingError,
    )
    from ._bridge.follow.loss import REASONS, LossReason
    from ._bridge.follow.result import End, FollowResult
    from ._bridge.follow.session import (
        RunEnd,
        ServiceResult,
        StopEvent,
        follow_logs_dir,
        follow_run,
    )
    from ._bridge.follow.settings import Exporter, FollowSettingError, FollowSettings
    from ._bridge.follow.status import progress_line
    from ._bridge.follow.watch import Notice, OnEvent, OnStatus

__all__ = [
    "ENDS",
    "REASONS",
    "End",
    "Exporter",
    "ExporterNotFoundError",
    "FollowError",
    "FollowResult",
    "FollowSettingError",
    "FollowSettings",
    "LossReason",
    "MetricsAddressError",
    "MetricsUnavailableError",
    "NoReadableTableError",
    "Notice",
    "OnEvent",
    "OnStatus",
    "RunEnd",
    "RunLockedError",
    "RunNotFoundError",
    "ServiceResult",
    "StopEvent",
    "StoppedWaitingError",
    "follow_logs_dir",
    "follow_run",
    "progress_line",
]

_WHERE = {
    "ENDS": "ending",
    "End": "result",
    "Exporter": "settings",
    "ExporterNotFoundError": "errors",
    "FollowError": "errors",
    "FollowResult": "result",
    "FollowSettingError": "settings",
    "FollowSettings": "settings",
    "LossReason": "loss",
    "MetricsAddressError": "errors",
    "MetricsUnavailableError": "errors",
    "NoReadableTableError": "errors",
    "Notice": "watch",
    "OnEvent": "watch",
    "OnStatus": "watch",
    "REASONS": "loss",
    "RunEnd": "session",
    "RunLockedError": "errors",
    "RunNotFoundError": "errors",
    "ServiceResult": "session",
    "StopEvent": "session",
    "StoppedWaitingError": "errors",
    "follow_logs_dir": "session",
    "follow_run": "session",
    "progress_line": "status",
}
"""Where each name is defined (in ``_bridge.follow``); imported from there on first use,
so ``/metrics`` is served before the follower's heavier modules are loaded."""


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use (PEP 562)."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"._bridge.follow.{module}", __package__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
