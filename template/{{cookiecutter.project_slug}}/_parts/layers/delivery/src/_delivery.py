"""How a network sink delivers, written once: deadlines, backoff, retries and settings.

Every network sink (otlp, postgres, prometheus, mlflow) bounds each ``open``,
``flush`` and ``close`` by one deadline (:func:`until`), retries inside it only
what its own classifier calls transient (:func:`retry`, with :class:`Backoff`'s
exponential delays and jitter) and raises the rest at once; waiting out a long
outage is ``traceml-exporter follow``'s job (``_contract`` rule 8). The settings
side is shared too: one reading of the environment (:func:`environment`), of
``key=value`` lists (:func:`key_values`) and of durations (:func:`duration`), and
one redaction of secrets (:func:`redact`) for every message that may carry them.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import unquote

from ._contract import SettingsError

__all__ = [
    "REDACTED",
    "Backoff",
    "duration",
    "environment",
    "key_values",
    "redact",
    "retry",
    "time_left",
    "until",
]

_T = TypeVar("_T")
REDACTED = "<redacted>"


# -- deadlines and retries ----------------------------------------------------------------


def until(seconds: float) -> float:
    """The deadline (``time.monotonic()``) of a call of ``seconds`` starting now."""
    return time.monotonic() + seconds


def time_left(deadline: float) -> float:
    """Seconds left before ``deadline`` (negative once it passed)."""
    return deadline - time.monotonic()


@dataclass(frozen=True)
class Backoff:
    """Exponential delays with jitter: ``first_s`` doubling up to ``cap_s``, times
    ``U(1 - jitter, 1 + jitter)`` so that many exporters do not retry in step."""

    first_s: float
    cap_s: float
    jitter: float
    _random: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry ``attempt`` (0, 1, ...)."""
        base = min(self.cap_s, self.first_s * 2.0**attempt)
        return float(base * self._random.uniform(1 - self.jitter, 1 + self.jitter))


def retry(  # noqa: PLR0913 - one retry policy, keyword-only
    attempt: Callable[[], _T],
    *,
    deadline: float,
    backoff: Backoff,
    transient: Callable[[BaseException], bool],
    give_up: Callable[[BaseException, int, float], BaseException],
    wait_at_least: Callable[[BaseException], float] = lambda _error: 0.0,
    reserve_s: float = 0.0,
) -> _T:
    """``attempt()`` until it returns, retrying what ``transient`` accepts, all by ``deadline``.

    Anything ``transient`` refuses is raised at once. Before each retry the loop waits
    ``max(backoff.delay(n), wait_at_least(error))`` (a server's ``Retry-After``); when
    that wait, plus ``reserve_s`` for the next attempt to do anything, would end past
    the deadline, it raises ``give_up(error, attempts, wait)`` from the last error
    instead of sleeping in vain.
    """
    tries = 0
    while True:
        try:
            return attempt()
        except Exception as error:
            if not transient(error):
                raise
            tries += 1
            wait = max(backoff.delay(tries - 1), wait_at_least(error))
            if time.monotonic() + wait + reserve_s > deadline:
                raise give_up(error, tries, wait) from error
        time.sleep(wait)


# -- settings -----------------------------------------------------------------------------


def environment(
    prefixes: Iterable[str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The variables of ``environ`` (default ``os.environ``) whose names start with one of
    ``prefixes``, copied: the factory keeps them, ``open()`` parses them."""
    source = os.environ if environ is None else environ
    starts = tuple(prefixes)
    return {name: value for name, value in source.items() if name.startswith(starts)}


def key_values(text: str, variable: str, example: str) -> dict[str, str]:
    """``key=value,key=value`` with percent-encoded keys and values (OpenTelemetry's format
    for headers and resource attributes); ``SettingsError`` naming ``variable`` otherwise."""
    out: dict[str, str] = {}
    for number, item in enumerate(text.split(","), 1):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key, value = unquote(key.strip()), unquote(value.strip())
        if not sep or not key:
            raise SettingsError(  # the item itself is not shown: it may hold a secret
                f"item {number} of {variable} is not key=value; expected a comma "
                f"separated list such as {example!r}"
            )
        out[key] = value
    return out


_UNITS = {"ms": 0.001, "s": 1.0}


def duration(  # noqa: PLR0913 - one variable's whole convention, keyword-only
    text: str,
    variable: str,
    *,
    default_s: float,
    bare: str = "s",
    least_s: float = 0.0,
    most_s: float = math.inf,
) -> float:
    """Seconds from a timeout variable: a number with the unit ``ms`` or ``s`` (``500ms``,
    ``2.5s``), or a bare number in the variable's own unit ``bare`` (milliseconds for the
    OTLP variables, as their specification says; seconds for the others). Empty gives
    ``default_s``; anything else, or a value outside (``least_s``, ``most_s``] (``least_s``
    itself allowed when it is above 0), is a ``SettingsError`` naming ``variable``."""
    given = text.strip()
    if not given:
        return default_s
    number, unit = given, bare
    for suffix in _UNITS:  # "ms" before "s"
        if given.lower().endswith(suffix):
            number, unit = given[: -len(suffix)], suffix
            break
    try:
        seconds = float(number.strip()) * _UNITS[unit]
    except ValueError:
        seconds = math.nan
    low_ok = seconds >= least_s if least_s > 0 else seconds > 0
    if not (low_ok and seconds <= most_s and math.isfinite(seconds)):
        low = f"from {least_s:g} s" if least_s > 0 else "above 0"
        high = f" up to {most_s:g} s" if math.isfinite(most_s) else ""
        raise SettingsError(
            f"{variable}={text!r} is not a duration {low}{high}; give a number with ms or s "
            f"('500ms', '2.5s'), or a bare number of {'milliseconds' if bare == 'ms' else 'seconds'}"
            f" (default {default_s * (1000 if bare == 'ms' else 1):g}{bare})"
        )
    return seconds


def redact(text: str, secrets: Iterable[str], mask: str = REDACTED) -> str:
    """``text`` with every secret replaced by ``mask`` (longest first, so no part of a
    longer secret is left showing)."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, mask)
    return text
