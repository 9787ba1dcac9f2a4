"""Exporters that fail on purpose, for the follower's fault tests, one that shows the
context it was given, and ``NoOpExporter``, which does nothing (the base of those that
act in one method only; the benchmarks' exporter that costs nothing).

``make_exporter``: ``write`` raises on the Nth call (``FAIL_AFTER_WRITES``); it keeps
nothing, so it has nothing to release. ``make_flaky``: the jsonl exporter whose first
``FAIL_INSTANCES`` instances on a folder raise in their Nth ``write`` (a sink outage
that ends), or in ``open`` with ``FAIL_IN=open``; ``FAIL_PERMANENT=1`` marks the error
permanent (a class attribute, as a sink package would, with nothing from the SDK);
``FAIL_MESSAGE`` is the error's text (a secret a real sink's error may quote).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from traceml_exporter_sdk.jsonl import make_exporter as make_jsonl


class SinkDownError(OSError):
    """A transient failure: the sink went away."""


class SinkRefusedError(Exception):
    """A permanent one: the sink refuses these credentials."""

    permanent = True


def _error() -> Exception:
    said = os.environ.get("FAIL_MESSAGE")  # what a real sink's error may quote
    if os.environ.get("FAIL_PERMANENT") == "1":
        return SinkRefusedError(said or "the sink refused the credentials")
    return SinkDownError(said or "the sink went away")


class NoOpExporter:
    """Takes everything and does nothing with it."""

    def open(self) -> None:
        pass

    def write(self, records: Sequence[Any]) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self, *, dropped_batches: int = 0) -> None:
        pass


class FailingExporter(NoOpExporter):
    def __init__(self, context: Any) -> None:
        self._left = int(os.environ.get("FAIL_AFTER_WRITES", "1"))

    def write(self, records: Sequence[Any]) -> None:
        self._left -= 1
        if self._left <= 0:
            raise _error()


def make_exporter(context: Any) -> FailingExporter:
    return FailingExporter(context)


class FlakyJsonl:
    """jsonl, but instance number ``k`` (counted in a file beside the export) fails while
    ``k <= FAIL_INSTANCES``: in ``open`` (``FAIL_IN=open``) or its ``FAIL_AFTER_WRITES``-th
    ``write``; with ``FAIL_AFTER_RECORDS=N`` only once N records were written in all (a
    sink that goes down mid-run). A failing method releases what it holds first."""

    def __init__(self, context: Any) -> None:
        self._context = context
        self._inner: Any = None
        self._writes = 0
        self._fails = False
        self._state = Path(context.session_root) / "aggregator"

    def _count(self, name: str, add: int = 0) -> int:
        path = self._state / name
        value = int(path.read_text() or 0) if path.exists() else 0
        if add:  # the run's aggregator/ is there (a deleted run folder is not made again)
            path.write_text(str(value + add))
        return value + add

    def _down(self) -> bool:
        return self._fails and self._count("flaky-records") >= int(
            os.environ.get("FAIL_AFTER_RECORDS", "0")
        )

    def open(self) -> None:
        number = self._count("flaky-instances", 1)
        self._fails = number <= int(os.environ.get("FAIL_INSTANCES", "1"))
        if self._down() and (
            os.environ.get("FAIL_IN") == "open" or os.environ.get("FAIL_AFTER_RECORDS")
        ):
            raise _error()
        self._inner = make_jsonl(self._context)
        self._inner.open()

    def write(self, records: Sequence[Any]) -> None:
        self._writes += 1
        if self._down() and self._writes >= int(os.environ.get("FAIL_AFTER_WRITES", "1")):
            self._inner.close()
            raise _error()
        self._inner.write(records)
        self._count("flaky-records", len(records))

    def flush(self) -> None:
        self._inner.flush()

    def close(self, *, dropped_batches: int = 0) -> None:
        self._inner.close(dropped_batches=dropped_batches)


def make_flaky(context: Any) -> FlakyJsonl:
    return FlakyJsonl(context)


class SessionRootProbe(NoOpExporter):
    """Writes the ``session_root`` it was given to ``<export_dir>/session_root.txt``, once
    per instance (one line each): what a sink would key the run by."""

    def __init__(self, context: Any) -> None:
        self._context = context

    def open(self) -> None:
        Path(self._context.export_dir).mkdir(parents=True, exist_ok=True)
        with open(Path(self._context.export_dir) / "session_root.txt", "a") as fh:
            fh.write(f"{self._context.session_root}\n")


def make_probe(context: Any) -> SessionRootProbe:
    return SessionRootProbe(context)
