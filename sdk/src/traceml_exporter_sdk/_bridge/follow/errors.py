"""Why a follow could not start or go on, as types a caller tells apart (the CLI maps
each to its documented exit code); every message is one line saying what was wrong and
what is accepted."""

from __future__ import annotations

from .lock import RunLockedError
from .run import FollowError

__all__ = [
    "ExporterNotFoundError",
    "FollowError",
    "MetricsAddressError",
    "MetricsUnavailableError",
    "NoReadableTableError",
    "RunLockedError",
    "RunNotFoundError",
    "StoppedWaitingError",
]


class RunNotFoundError(FollowError):
    """No run to follow: the folder, its manifest or its database missing after ``wait``,
    a folder of runs rather than one, or a run that ended without a database."""


class NoReadableTableError(FollowError):
    """The run's database holds no readable table of the selected streams."""


class StoppedWaitingError(FollowError):
    """The stop event was set while waiting for the run: nothing was exported."""


class ExporterNotFoundError(FollowError):
    """The exporter setting names no importable factory (a new exporter cannot fix it)."""


class MetricsUnavailableError(FollowError):
    """``metrics_port`` was set and prometheus_client is not installed."""


class MetricsAddressError(FollowError):
    """``/metrics`` cannot listen on ``metrics_host:metrics_port`` (a port in use)."""
