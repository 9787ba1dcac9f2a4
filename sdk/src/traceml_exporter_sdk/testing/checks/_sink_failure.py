"""A run whose sink breaks for good after the first flush (``break_sink``), as several
failure checks drive it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from ...context import ExporterContext
from ...worker import ExportWorker
from .._harness import WORKER_THREAD, CallLog, recording_factory
from .._resources import Snapshot, open_fds
from ..environment import Env, failure_hint
from ._common import corpus

__all__ = ["SinkFailure", "fds_on", "neutralise"]


class SinkFailure:
    """One run where the sink breaks for good after the first batch was flushed."""

    def __init__(self, env: Env, breaking: Callable[[ExporterContext], None] | None = None) -> None:
        self.context = env.context()
        self.log = CallLog(keep_records=False)
        self.before = Snapshot.take()
        batches = corpus()
        worker = ExportWorker(
            recording_factory(env.factory, self.log),
            self.context,
            queue_size=len(batches) + 1,
            flush_interval_s=1e-9,
            thread_name=WORKER_THREAD,
        )
        self.worker = worker
        worker.start()
        worker.submit_records(batches[0])
        deadline = time.monotonic() + 30
        while not any(c.method == "flush" and c.done for c in self.log.calls):
            if worker.failure is not None or time.monotonic() > deadline:
                break
            time.sleep(0.005)
        self.early = worker.failure
        if self.early is not None:
            worker.shutdown(5)
            return
        devnull_before = fds_on("/dev/full")
        (breaking or env.hooks.break_sink)(self.context)
        self.broken_at = time.monotonic()
        for batch in batches[1:]:
            worker.submit_records(batch)
        self.report = worker.shutdown(float(env.settings.failure_timeout))
        self.elapsed = time.monotonic() - self.broken_at
        neutralise(fds_on("/dev/full") - devnull_before)

    def require_healthy_start(self) -> None:
        if self.early is not None:
            failure = f"{self.early.method}: {self.early.error}"
            pytest.fail(
                f"the exporter failed before the sink was broken: {failure}{failure_hint(failure)}",
                pytrace=False,
            )


def fds_on(target: str) -> set[int]:
    """This process's descriptors open on ``target`` (``break_sink`` aims them at /dev/full)."""
    out = set()
    for fd in open_fds():
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                out.add(fd)
        except OSError:
            continue
    return out


def neutralise(fds: set[int]) -> None:
    """Point fds that break_sink aimed at /dev/full to a fresh in-memory file, so late
    finalizers pass; a new file each time (not /dev/null), so a leaked fd of this run is
    never mistaken for an fd a snapshot saw before (fds are told apart by inode)."""
    if not fds:
        return
    memfd = getattr(os, "memfd_create", None)
    null = memfd("traceml-conformance-broken-sink") if memfd else os.open(os.devnull, os.O_RDWR)
    try:
        for fd in fds:
            try:
                os.dup2(null, fd)
            except OSError:
                continue
    finally:
        os.close(null)
