"""How long a follower waits before it makes a new exporter after a failure, and which
failures it does not retry.

Exponential backoff with jitter (the OpenTelemetry Collector's retry, without its
five-minute limit): the rows wait in TraceML's database, not in memory, so a
follower can wait out an outage of any length; ``max_outage`` bounds it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ..._export.report import ExportFailure

__all__ = ["SETTING_ERRORS", "Backoff", "permanent"]

SETTING_ERRORS = (ValueError, TypeError)
"""What ``open`` raises for a setting it cannot use (never for a sink that is down)."""


@dataclass(frozen=True)
class Backoff:
    """``initial`` seconds, times ``multiplier`` each try, at most ``maximum``; each wait
    drawn uniformly within ``±jitter`` of that; ``max_outage`` seconds of failures at most."""

    initial: float = 0.5
    multiplier: float = 2.0
    maximum: float = 15.0
    jitter: float = 0.5
    max_outage: float = math.inf

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The wait before try ``attempt`` (1 for the first retry)."""
        base = min(self.maximum, self.initial * self.multiplier ** min(max(0, attempt - 1), 64))
        spread = (rng or random).uniform(1 - self.jitter, 1 + self.jitter)
        return float(min(self.maximum, base * spread))


def permanent(failure: ExportFailure) -> bool:
    """Whether a new exporter cannot fix ``failure``: the exporter marked it permanent, its
    factory failed, or ``open`` raised ``ValueError`` or ``TypeError``, a setting it cannot
    parse (``int("notanumber")`` for a port, a conninfo that does not parse): ``open``
    gets the same settings every time, so it would fail the same way for ever, while a
    network failure is an ``OSError`` or the client's own error class. The worker itself
    has no such rule (TraceML's has none): retrying is the follower's decision."""
    if failure.permanent:
        return True
    raised = failure.error_type
    return failure.method == "open" and raised is not None and issubclass(raised, SETTING_ERRORS)
