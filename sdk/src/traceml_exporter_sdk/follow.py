"""Follow live TraceML 0.5.0 runs from Python: the library ``traceml-exporter follow`` is
a thin shell around (docs/follow.md, "Embedding it").

``follow_run`` follows one run folder to its end and returns a ``FollowResult`` (what
was exported, what was lost and why); ``follow_logs_dir`` follows every run of a logs
folder until its ``stop`` event is set. Both take keyword-only ``FollowSettings``, call
``on_status`` with a snapshot (``status.json``'s keys) at each change of state and every
``status_interval``, ``on_event`` with a ``Notice`` line, and serve ``/metrics`` from
the start when ``metrics_port`` is set. Nothing is printed, no signal handler is
installed and no process-wide setting is changed: that is the caller's to decide.
Importing it loads none of the follower's heavier modules: they load once a follow
has its ``/metrics`` up.
"""

from __future__ import annotations

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
