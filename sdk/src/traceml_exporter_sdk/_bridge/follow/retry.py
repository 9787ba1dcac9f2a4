"""How long a follower waits before it makes a new exporter after a failure.

Exponential backoff with jitter (the OpenTelemetry Collector's retry, without its
five-minute limit): the rows wait in TraceML's database, not in memory, so a
follower can wait out an outage of any length; ``max_outage`` bounds it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

__all__ = ["Backoff"]


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
