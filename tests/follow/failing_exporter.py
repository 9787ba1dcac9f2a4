"""An exporter whose ``write`` raises on the Nth call (``FAIL_AFTER_WRITES``), for the
follower's fault tests; it keeps nothing, so it has nothing to release."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any


class FailingExporter:
    def __init__(self, context: Any) -> None:
        self._left = int(os.environ.get("FAIL_AFTER_WRITES", "1"))

    def open(self) -> None:
        pass

    def write(self, records: Sequence[Any]) -> None:
        self._left -= 1
        if self._left <= 0:
            raise OSError("the sink went away")

    def flush(self) -> None:
        pass

    def close(self, *, dropped_batches: int = 0) -> None:
        pass


def make_exporter(context: Any) -> FailingExporter:
    return FailingExporter(context)
