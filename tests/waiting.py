"""``wait_for``: the one bounded poll of the tests (a wait that fails, never one that hangs)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T],
    what: str = "the condition",
    timeout: float = 20.0,
    every: float = 0.005,
) -> T:
    """Call ``predicate`` every ``every`` seconds until it returns something true, and
    return that; after ``timeout`` seconds fail the test, naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)
