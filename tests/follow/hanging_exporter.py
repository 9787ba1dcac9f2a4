"""Exporters for the follower's truth tests: a sink that hangs, and one given a bad setting.

``make_hanging``: the jsonl exporter whose ``HANG_IN`` call (``open``, ``write``,
``flush`` or ``close``) blocks while the file ``HANG_FLAG`` exists, once
``HANG_AFTER_RECORDS`` records were written in all (a sink that stops answering
mid-run, and answers again when the flag goes). ``make_bad_port``: ``open`` parses
a port that is not a number, as a conninfo ``port=notanumber`` would.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from failing_exporter import NoOpExporter
from traceml_exporter_sdk.jsonl import make_exporter as make_jsonl


class HangingJsonl:
    def __init__(self, context: Any) -> None:
        self._inner = make_jsonl(context)
        self._flag = Path(os.environ["HANG_FLAG"])
        self._method = os.environ.get("HANG_IN", "write")
        self._after = int(os.environ.get("HANG_AFTER_RECORDS", "0"))
        self._written = 0

    def _maybe_hang(self, method: str) -> None:
        if method != self._method or self._written < self._after:
            return
        while self._flag.exists():
            time.sleep(0.05)

    def open(self) -> None:
        self._maybe_hang("open")
        self._inner.open()

    def write(self, records: Sequence[Any]) -> None:
        self._maybe_hang("write")
        self._inner.write(records)
        self._written += len(records)

    def flush(self) -> None:
        self._maybe_hang("flush")
        self._inner.flush()

    def close(self, *, dropped_batches: int = 0) -> None:
        self._maybe_hang("close")
        self._inner.close(dropped_batches=dropped_batches)


def make_hanging(context: Any) -> HangingJsonl:
    return HangingJsonl(context)


class BadPort(NoOpExporter):
    """A sink whose setting cannot be parsed: no new instance will ever open."""

    def __init__(self, context: Any) -> None:
        self._port = os.environ.get("SINK_PORT", "notanumber")

    def open(self) -> None:
        int(self._port)


def make_bad_port(context: Any) -> BadPort:
    return BadPort(context)
