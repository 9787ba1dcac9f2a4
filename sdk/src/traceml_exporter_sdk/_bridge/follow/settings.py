"""How a follower is set up: one keyword-only dataclass, the defaults those of
``traceml-exporter follow``'s options (docs/follow.md)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ...context import ExporterContext
from ...streams import parse_export_streams
from .retry import Backoff

__all__ = ["Exporter", "FollowSettingError", "FollowSettings"]

Exporter = str | Callable[[ExporterContext], object]
"""The exporter setting (``"jsonl"``, ``"module:factory"``) or a factory callable."""


class FollowSettingError(ValueError):
    """A setting out of range: ``name`` (the field), what is accepted and what was given."""

    def __init__(self, name: str, accepted: str, value: object) -> None:
        super().__init__(f"{name} must be {accepted}, got {value}")
        self.name = name
        self.accepted = accepted
        self.value = value


_UNBOUNDED = ("flush_interval", "shutdown_timeout", "idle_timeout", "max_outage")
"""Seconds that may be infinite (no limit)."""
_POSITIVE = ("poll_interval", "retry_max_interval", "runs_poll_interval", "stuck_after")


@dataclass(frozen=True, kw_only=True)
class FollowSettings:
    """What a follower is given besides its exporter: which records, how often, how long.

    Raises:
        FollowSettingError: a value out of range (the message names it and what is accepted).
    """

    streams: str | None = None
    """``export_streams`` (None: TraceML's default, step_time)."""
    hostname: bool = False
    """``exporter_hostname``: keep the hostname field."""
    flush_interval: float = 1.0
    """How often the worker flushes the exporter, as TraceML's."""
    wait: float = 120.0
    """How long to wait for the run folder and its database to appear."""
    idle_timeout: float = 300.0
    """End a run with no new row for this long whose aggregator is gone or orphaned."""
    poll_interval: float = 0.25
    """How often to look for new rows (TraceML flushes every 0.5 s)."""
    shutdown_timeout: float = 60.0
    """How long the exporter may take to finish at the end."""
    max_outage: float = math.inf
    """Give up when the exporter has failed for this long."""
    retry_max_interval: float = 15.0
    """The longest wait between two tries of a failing exporter (from 0.5 s, doubling)."""
    runs_poll_interval: float = 2.0
    """For a logs folder: how often to look for new runs."""
    stuck_after: float = 30.0
    """An exporter call running this long shows the run as ``stuck`` (``/healthz`` 503)."""
    status_interval: float = 5.0
    """How often a status snapshot is given to ``on_status`` while nothing changes (it
    is given at each change of state too); 0: only at changes."""
    metrics_port: int | None = None
    """Serve ``/metrics`` and ``/healthz`` on this port from the start (0: any free one);
    None: no server. Needs prometheus_client."""
    metrics_host: str = "127.0.0.1"
    """The address ``/metrics`` listens on."""

    def __post_init__(self) -> None:
        for name in _UNBOUNDED:
            value = getattr(self, name)
            if not value > 0:
                raise FollowSettingError(
                    name, "a positive number of seconds (inf: no limit)", value
                )
        for name in _POSITIVE:
            value = getattr(self, name)
            if not value > 0 or math.isinf(value):
                raise FollowSettingError(name, "a positive number of seconds", value)
        if not self.wait >= 0:
            raise FollowSettingError("wait", "0 or more seconds", self.wait)
        if not (self.status_interval >= 0 and not math.isinf(self.status_interval)):
            raise FollowSettingError(
                "status_interval", "0 (at changes only) or more seconds", self.status_interval
            )
        port = self.metrics_port
        if port is not None and not (type(port) is int and 0 <= port <= 65535):
            raise FollowSettingError("metrics_port", "0-65535", port)
        try:
            parse_export_streams(self.streams)
        except ValueError as exc:
            raise FollowSettingError(
                "streams", f"valid export_streams ({exc})", self.streams
            ) from None

    @property
    def backoff(self) -> Backoff:
        """The wait between exporters after a failure."""
        return Backoff(
            maximum=self.retry_max_interval,
            initial=min(0.5, self.retry_max_interval),
            max_outage=self.max_outage,
        )
