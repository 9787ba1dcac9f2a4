"""Smoke mode: with ``TRACEML_BENCH_SMOKE=1`` each benchmark runs once, on a few records.

CI runs every script this way (``nox -s bench_smoke``), so a benchmark that no longer
runs (a renamed module, a changed API) fails CI instead of the next person who asks
for figures. A smoke run's figures mean nothing, so it prints no PASS or MISS: each
script ends with ``summary``, which in smoke mode says how many targets it measured
(``nox -s bench_smoke`` fails a script that measured none).
"""

from __future__ import annotations

import os

SMOKE = os.environ.get("TRACEML_BENCH_SMOKE", "") not in ("", "0")


def scaled(full: int, smoke: int) -> int:
    """``full`` normally, ``smoke`` in smoke mode."""
    return smoke if SMOKE else full


def verdict(ok: bool) -> str:
    """``PASS`` or ``MISS`` against a target; in smoke mode no verdict."""
    if SMOKE:
        return "(smoke)"
    return "PASS" if ok else "MISS"


def summary(results: list[bool]) -> str:
    """The closing line: targets met, or (smoke mode) how many were measured."""
    if SMOKE:
        return f"smoke: {len(results)} targets measured, no verdicts"
    return f"{sum(results)}/{len(results)} targets PASS"
