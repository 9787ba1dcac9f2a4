"""A one-line progress display on stderr for long replays."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


class Progress:
    """A one-line progress display on stderr, only when stderr is a terminal."""

    def __init__(self, label: str, total: int, unit: str) -> None:
        self.enabled = sys.stderr.isatty()
        self.label = label
        self.total = total
        self.unit = unit
        self._last = 0.0
        self._shown = False

    def update(self, done: int, count: int, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.2:
            return
        self._last = now
        pct = f"{100 * done / self.total:5.1f}% " if self.total else ""
        width = 30
        filled = int(width * done / self.total) if self.total else 0
        bar = f"[{'#' * filled}{'.' * (width - filled)}] " if self.total else ""
        sys.stderr.write(f"\r{self.label}: {bar}{pct}{count:,} {self.unit}")
        sys.stderr.flush()
        self._shown = True

    def finish(self) -> None:
        if self._shown:
            sys.stderr.write("\n")
            sys.stderr.flush()
