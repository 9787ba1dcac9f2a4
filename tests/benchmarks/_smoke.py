"""Smoke mode: with ``TRACEML_BENCH_SMOKE=1`` each benchmark runs once, on a few records.

CI runs every script this way (``nox -s bench_smoke``), so a benchmark that no longer
runs (a renamed module, a changed API) fails CI instead of the next person who asks
for figures. The figures and PASS/MISS of a smoke run mean nothing.
"""

from __future__ import annotations

import os

SMOKE = os.environ.get("TRACEML_BENCH_SMOKE", "") not in ("", "0")


def scaled(full: int, smoke: int) -> int:
    """``full`` normally, ``smoke`` in smoke mode."""
    return smoke if SMOKE else full
