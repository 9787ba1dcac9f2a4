"""Feed an ``ExportWorker`` from a reader without dropping, and stop early without losing track.

A replay must not drop a batch, so it waits for room in the worker's queue
instead of letting ``submit`` drop. That wait has a deadline: when the worker
takes no batch for ``timeout`` seconds (the exporter stalled), reading stops.
Ctrl-C stops reading too. Either way, what was already submitted is drained
(within the shutdown timeout) and closed, and the early stop is written to
``finalization_warning.json`` under a ``replay`` block, next to the worker's
``export`` block, so an export that holds only part of its input says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..worker import ExportWorker
from .report import ExportReport, write_warning_file

__all__ = ["Stop", "feed", "record_stop", "shut_down", "wait_for_room"]

StopKind = Literal["interrupted", "stalled"]


@dataclass(frozen=True, slots=True)
class Stop:
    """Why reading stopped before the end of the input, and after how many items."""

    kind: StopKind
    submitted: int | None
    """Items handed to the worker; None: the whole input was read (Ctrl-C at shutdown)."""
    timeout: float = 0.0

    def describe(self, where: str) -> str:
        """One sentence: what happened, ``where`` reading stopped, and what it means."""
        if self.submitted is None:
            return (
                "interrupted (Ctrl-C) while waiting for the exporter to finish; the whole "
                "input was read, the exporter was given up on as at a shutdown timeout"
            )
        if self.kind == "interrupted":
            what = "interrupted (Ctrl-C)"
        else:
            what = f"the exporter took no batch for {self.timeout:g} s (--shutdown-timeout)"
        return (
            f"{what}; reading stopped after {self.submitted:,} items, {where}; "
            "the rest of the input was not replayed"
        )


def wait_for_room(worker: ExportWorker, limit: int, timeout: float) -> bool:
    """Back-pressure: wait while the worker's queue holds ``limit`` batches.

    False when the worker took no batch for ``timeout`` seconds (a stalled
    exporter); True once there is room, or when the worker thread has ended
    (its ``submit`` then drops and counts). One producer: the queue only
    shrinks between this check and the next submit.
    """
    thread = worker.thread
    if thread is None or worker.queued_batches < limit:
        return True
    # Full: let the worker drain half of it before the next look, so the reader
    # wakes (and takes the GIL from the worker) rarely.
    low = limit // 2
    pause = 0.0005
    last = worker.queued_batches
    deadline = time.monotonic() + timeout
    while (queued := worker.queued_batches) > low and thread.is_alive():
        if queued < last:
            last = queued
            deadline = time.monotonic() + timeout
        elif time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.005)
    return True


def feed(
    worker: ExportWorker,
    items: Iterable[Any],
    submit: Callable[[Any], object],
    *,
    limit: int,
    timeout: float,
    progress: Callable[[int], None] | None = None,
) -> Stop | None:
    """Submit every item with back-pressure; the ``Stop`` when reading ended early.

    A Ctrl-C while reading or waiting is caught here: the caller then drains
    and closes the worker as at a normal end. Read errors propagate.
    """
    submitted = 0
    try:
        for item in items:
            if not wait_for_room(worker, limit, timeout):
                return Stop("stalled", submitted, timeout)
            submit(item)
            submitted += 1
            if progress is not None:
                progress(submitted)
    except KeyboardInterrupt:
        return Stop("interrupted", submitted)
    return None


def shut_down(worker: ExportWorker, timeout: float) -> tuple[ExportReport, bool]:
    """``worker.shutdown(timeout)``; a Ctrl-C during it stops waiting (the report is
    then a timed-out one). Returns the report and whether Ctrl-C was pressed."""
    try:
        return worker.shutdown(timeout), False
    except KeyboardInterrupt:
        return worker.shutdown(0.0), True


def record_stop(worker: ExportWorker, report: ExportReport, stop: Stop, where: str) -> ExportReport:
    """Write ``finalization_warning.json`` with the worker's ``export`` block and a
    ``replay`` block saying why and where reading stopped; return the report with
    the file's path (or why it could not be written)."""
    block = {
        "stopped": stop.kind,
        "message": stop.describe(where),
        "submitted_items": stop.submitted,
        "stopped_at": where,
    }
    path, error = write_warning_file(
        worker.context.session_root,
        {"export": report.warning_block(), "replay": block},
        worker.warning_path,
    )
    return replace(report, warning_path=path, warning_error=error)
