"""Follow a live TraceML run: tail its SQLite database and feed new rows to an exporter,
riding out the exporter's failures.

TraceML 0.5.0 has no exporter setting; its aggregator writes
``<run>/aggregator/telemetry`` (WAL mode, one transaction per 0.5 s flush). The
follower reads the rows each flush added (``id > last id`` per table, in short
read-only statements, ``_bridge.sqlite_source.SqliteSource.read_page``), turns them into
records exactly as the backfill does, and hands them to an ``ExportWorker``
whose exporter gets ``ExporterContext(session_root=<run>)``, as TraceML's would.

Guarantees (docs/follow.md):

* It never disturbs the run: read-only, no snapshot held across an exporter
  call or a sleep, nothing written into the run folder but the exporter's own
  output and ``aggregator/follow/`` (the bookmark and the follower's
  ``finalization_warning.json``; TraceML's own file of that name is its own).
* At-least-once: the bookmark (last id per table, and the run's identity) is
  saved atomically only after a flush that returned, so a follower killed and
  started again repeats at most what was not yet acknowledged. Dedupe on
  ``stream_key``.
* Every loss is counted: rows pruned before they were read (id gaps), rows that
  fit no record, a run that ended without TraceML marking it complete.
* An outage is waited out: when the exporter fails, nothing more is called on it;
  after a backoff a new one is made with the factory and reading goes on from the
  last acknowledged position, so no row is lost while the database still holds it
  and nothing acknowledged is sent twice. A failure marked permanent ends it.
* "complete" only when every row was acknowledged: what is left at the end is counted
  with its reason (``loss``), and a stop never waits on the exporter past
  ``shutdown_timeout`` (a hung call is abandoned on its daemon thread).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from ..._export.feeding import wait_for_room
from ..._export.report import ExportFailure, ExportReport
from ...worker import ExportWorker
from ..database_holders import DatabaseWriters
from ..sqlite_connect import BackfillError
from ..sqlite_source import (
    PAGE_ROWS,
    SqliteSource,
    open_database,
    plan_tables,
)
from .database import Signature, connect, files_signature, finish_traceml_close
from .ledger import BOOKMARK_VERSION, Ledger
from .loss import tally
from .result import FAILED_ENDS, End, FollowResult
from .retry import Backoff, permanent
from .run import FollowError, RunFolder, run_complete
from .status import RunStatus

__all__ = ["BOOKMARK_VERSION", "Follower"]

QUEUE_LIMIT = 16
"""Batches kept queued in the worker; the follower waits for room, so nothing is dropped."""
ALIVE_CHECK_S = 2.0
"""Idle seconds before the follower looks whether the aggregator still has the database open."""
MANIFEST_GRACE_S = 10.0
"""Seconds to wait, once the aggregator is gone, for TraceML's launcher to mark the manifest
(it does so after its aggregator exits); less when the launcher is seen to be gone too."""
REREAD_S = 1.0
"""Longest the follower goes without reading while the database's files look unchanged."""
PASS_S = 1.0
"""Longest a pass over the tables reads before the loop saves the bookmark and the status."""


class Follower:
    """Tail one run's database into an exporter, made anew after each transient failure.

    ``make_worker()`` gives a new, unstarted ``ExportWorker`` (with a new exporter from
    the factory); ``run`` returns how following ended. ``stop`` ends it from another
    thread (a signal's handler): drained, flushed, bookmark saved.
    """

    def __init__(
        self,
        folder: RunFolder,
        make_worker: Callable[[], ExportWorker],
        *,
        poll_interval: float = 0.25,
        idle_timeout: float = 120.0,
        shutdown_timeout: float = 60.0,
        backoff: Backoff | None = None,
        stop: threading.Event | None = None,
        status: RunStatus | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.folder = folder
        self.make_worker = make_worker
        self.worker = make_worker()
        self.poll_interval = poll_interval
        self.idle_timeout = idle_timeout
        self.shutdown_timeout = shutdown_timeout
        self.backoff = backoff or Backoff()
        self.stop = stop or threading.Event()
        self.status = status or RunStatus(folder.root)
        self._clock = clock
        self._streams = self.worker.context.streams
        self.status.call = self._call_in_progress
        self.ledger = Ledger(folder, self.status)
        self._writers = DatabaseWriters(folder.database)
        self._stalled = False
        self._unchanged: Signature | None = None
        self._reread_at = 0.0
        self._reports: list[ExportReport] = []
        self.read_error: str | None = None

    # -- setup ------------------------------------------------------------------

    def open_source(self) -> tuple[SqliteSource, bool]:
        """Open the database, and resume from the bookmark when there is one.

        Raises:
            FollowError: the bookmark is of another run, unreadable, or ahead of the database.
        """
        refused = self.folder.manifest_refused()
        if refused is not None:
            raise FollowError(refused)
        manifest = self.folder.manifest() or {}
        self.ledger.identity = self.folder.identity(manifest)
        try:
            source = open_database(self.folder.database, self._streams, connect(self.folder))
        except BackfillError as exc:
            raise FollowError(str(exc)) from None
        try:
            resumed = self.ledger.resume(source)
        finally:
            source.close()
        self._writers.restore(self.ledger.writers)
        return source, resumed

    def _call_in_progress(self) -> tuple[str, float] | None:
        return self.worker.call_in_progress

    # -- the loop ---------------------------------------------------------------

    def run(self, source: SqliteSource, resumed: bool) -> FollowResult:
        """Follow until the run ends, a permanent failure, or ``stop``; then drain and close."""
        self.status.update(state="following")
        while True:
            end = self._attempt(source)
            report = self._shut_down(end)
            failure = report.failure
            if failure is None:
                break
            if self.stop.is_set():
                end = "interrupted"
                break
            end = "exporter-failed"
            if permanent(failure):
                self.status.failed(f"{failure.method}: {failure.error}", 0, permanent=True)
                break
            outage = self.status.outage
            if outage is not None and time.time() - outage["started"] >= self.backoff.max_outage:
                self.status.failed(f"{failure.method}: {failure.error}", 0, permanent=True)
                return self._result(end, report, source, resumed, gave_up=True)
            self._after_failure(source, failure)
            waited = self._wait_out(
                source, self.status.outage["tries"] if self.status.outage else 1
            )
            if waited is not None:
                end = waited
                break
            self.worker = self.make_worker()
        return self._result(end, report, source, resumed)

    def start(self) -> None:
        """Start the first exporter (its factory is called on this thread)."""
        self._start_worker()

    def _start_worker(self) -> None:
        if self.worker.thread is None:
            self.worker.start()

    def _attempt(self, source: SqliteSource) -> End:
        """Follow with the current exporter until the run ends, it fails, or a stop."""
        self._start_worker()
        try:
            return self._loop(source)
        except KeyboardInterrupt:
            return "interrupted"
        except BackfillError as exc:
            self.read_error = str(exc)
            return "read-error"

    def _shut_down(self, end: End) -> ExportReport:
        # a failed exporter is called no more: its thread only admits what is queued
        try:
            report = self.worker.shutdown(self.shutdown_timeout)
        except KeyboardInterrupt:
            report = self.worker.shutdown(0.0)
        self._reports.append(report)
        self.ledger.acknowledge(report.delivered_records)
        return report

    def _after_failure(self, source: SqliteSource, failure: ExportFailure) -> None:
        """Forget what the failed exporter was given past its last acknowledgement; it is
        sent again, unless the exporter never opened (then it reached no sink)."""
        resent = self.ledger.forget(source, self._clock())
        if failure.method in ("factory", "open"):
            resent = 0
        self._unchanged = None  # reading went back: what the files look like says nothing
        self._stalled = False
        self.status.failed(f"{failure.method}: {failure.error}", resent)

    def _wait_out(self, source: SqliteSource, tries: int) -> End | None:
        """Back off before the next exporter, counting the rows waiting (and those pruned)
        every poll meanwhile; how the follow ends instead (a stop, the folder deleted)."""
        deadline = self._clock() + self.backoff.delay(tries)
        while True:
            self._count_waiting(source)
            if self._deleted():
                return "deleted"
            left = deadline - self._clock()
            if left <= 0:
                return None
            if self.stop.wait(min(left, self.poll_interval)):
                return "interrupted"

    def _count_waiting(self, source: SqliteSource) -> None:
        """The lag and the rows pruned, from the database as it is now (its own connection)."""
        with contextlib.suppress(BackfillError):
            source.connection = connect(self.folder)
            try:
                self._count_on(source)
            finally:
                source.close()

    def _count_on(self, source: SqliteSource) -> None:
        if source.missing:
            # tables TraceML made since the last pass (or the open) hold rows too
            plan_tables(source, self._streams)
        highest = source.highest_ids()
        if highest:
            self.ledger.lag(source, highest, self._clock(), lowest=source.lowest_ids())

    def _deleted(self) -> bool:
        """The run folder went away (or is going): its manifest is gone, which TraceML
        replaces whole but never removes."""
        return not self.folder.manifest_path.exists()

    def _result(
        self, end: End, report: ExportReport, source: SqliteSource, resumed: bool, **extra: Any
    ) -> FollowResult:
        waiting_before = self.status.lag_rows
        if end != "deleted":
            self._count_waiting(source)
        left = self.status.lag_rows
        if end == "deleted":
            left = max(left, waiting_before)  # the database is gone: what was last counted
        if end == "complete" and (report.timed_out or left):
            end = "timed-out"
        if end == "complete":
            finish_traceml_close(self.folder)
        combined = self._combined(report)
        failure = combined.failure
        lasting = failure is not None and permanent(failure)
        lost = tally(
            end,
            left,
            pruned=max(self.status.rows_pruned, source.pruned_rows),
            skipped=self.ledger.skipped_before + source.skipped,
            timed_out=report.timed_out,
            permanent=lasting,
            gave_up=extra.get("gave_up", False),
        )
        state = "deleted" if end == "deleted" else "failed" if end in FAILED_ENDS else "done"
        self.status.update(state=state, end=end, lost=dict(lost), lag_rows=left)
        snapshot = self.status.snapshot()
        return FollowResult(
            end,
            combined,
            source,
            resumed,
            self.ledger.skipped_before,
            bookmark_error=self.ledger.bookmark_error,
            read_error=self.read_error,
            outages=snapshot["outages"] + ([snapshot["outage"]] if snapshot["outage"] else []),
            exporter_failures=snapshot["exporter_failures"],
            resent_records=snapshot["resent_records"],
            permanent=lasting,
            lost=lost,
            left_rows=left,
            exported=dict(snapshot["exported"]),
            folder=self.folder,
            context=self.worker.context,
            **extra,
        )

    def _combined(self, last: ExportReport) -> ExportReport:
        """The last exporter's report, with what the failed ones before it delivered."""
        earlier = self._reports[:-1]
        before = sum(r.delivered_records for r in earlier)
        by_stream = self.ledger.acknowledged_by_failed()
        for stream, count in last.admitted_by_stream.items():
            by_stream[stream] = by_stream.get(stream, 0) + count
        return ExportReport(
            exporter=last.exporter,
            admitted_records=before + last.admitted_records,
            delivered_records=before + last.delivered_records,
            dropped_batches=last.dropped_batches,
            skipped_units=sum(r.skipped_units for r in self._reports),
            admitted_by_stream={s: n for s, n in by_stream.items() if n},
            failure=last.failure,
            timed_out=last.timed_out,
            warning_path=last.warning_path,
            warning_error=last.warning_error,
        )

    def _loop(self, source: SqliteSource) -> End:
        last_rows = self._clock()
        next_alive_check = 0.0
        while True:
            if self.stop.is_set():
                return "interrupted"
            got = self._read_all(source)
            if not got and self._deleted():
                return "deleted"  # before the lag: what was counted waiting is what is lost
            if self.worker.failure is not None:
                return "exporter-failed"
            if self._stalled:
                return "stalled"
            self.ledger.acknowledge(self.worker.delivered_records)
            if self.status.outage is not None and self._recovered():
                self.status.recovered()
            now = self._clock()
            self.ledger.lag(source, source.last_id, now, caught_up=not got)
            if got:
                last_rows = now
                if self._writers.holders is None:
                    self._writers.find()  # while it writes, so its launcher is known
                    self.ledger.writers = self._writers.known()
                continue  # a backlog: read on before sleeping
            if run_complete(self.folder.manifest()):
                return self._last_read(source, "complete")
            idle = now - last_rows
            unattended = idle >= self.idle_timeout and not self._writers.attended()
            if unattended or (idle >= ALIVE_CHECK_S and now >= next_alive_check):
                next_alive_check = now + ALIVE_CHECK_S
                if not self._writers.alive():  # gone, not orphaned: its launcher marks the run
                    self._await_manifest_end()
                    marked = run_complete(self.folder.manifest())
                    return self._last_read(source, "complete" if marked else "aggregator-gone")
            if unattended:
                return self._last_read(source, "idle")
            if self.stop.wait(self.poll_interval):
                return "interrupted"

    def _recovered(self) -> bool:
        """The new exporter opened and holds nothing unacknowledged: the sink is back."""
        return self.worker.opened and self.worker.delivered_records >= self.ledger.submitted

    def _last_read(self, source: SqliteSource, end: End) -> End:
        """Read what is left, then count the rows deleted after the last one read; ``end``,
        unless a stop or a stall cut it short (then nothing more is marked: a page read
        and not handed over must not be acknowledged by a later mark)."""
        while self._read_all(source, force=True) and not self._cut_short():
            pass
        if self.stop.is_set():
            return "interrupted"
        if self._stalled:
            return "stalled"
        if self.worker.failure is None:
            source.count_tail_pruned()
            self.ledger.mark(source, self._clock())
        return end  # after a failure, ``run`` sees it

    def _cut_short(self) -> bool:
        return self._stalled or self.worker.failure is not None or self.stop.is_set()

    def _read_all(self, source: SqliteSource, *, force: bool = False) -> int:
        """One pass over every table on a connection of its own, closed at the end (so
        TraceML's last close is the last one and removes its WAL): submit each page of
        new rows. Returns rows read.

        After a pass that found nothing new, the next is skipped (0) while the database
        and its ``-wal`` are unchanged (size, modification time, inode: every commit
        writes the ``-wal``), for at most ``REREAD_S``; ``force`` reads regardless.
        """
        signature = files_signature(self.folder.database)
        now = self._clock()
        unchanged = signature is not None and signature == self._unchanged
        if unchanged and not force and now < self._reread_at:
            return 0
        try:
            source.connection = connect(self.folder)
        except BackfillError:
            return 0  # the file went away: the manifest or the idle timeout ends the follow
        try:
            got = self._read_tables(source)
        finally:
            source.close()
        self._unchanged = None if got else signature
        self._reread_at = now + REREAD_S
        return got

    def _read_tables(self, source: SqliteSource) -> int:
        """Hand over a page of each table in turn, until every table is read to its end
        or ``PASS_S`` has passed: a backlog's pass ends every second, so the bookmark,
        the status and a stop are seen to while it drains, and no table waits for
        another's backlog."""
        if source.missing:
            plan_tables(source, self._streams)
        got = 0
        deadline = self._clock() + PASS_S
        plans = list(source.tables)
        while plans:
            unfinished = []
            for plan in plans:
                rows, records = source.read_page(plan)
                got += rows
                if records:
                    if not self._room(source):
                        return got  # rows of this page stay after the bookmark
                    if self.worker.failure is not None:
                        return got  # this page stays after the bookmark, for the next exporter
                    self.worker.submit_records(records)
                    self.ledger.handed(plan.stream, len(records))
                if rows:
                    # rows come in id order, which is the order TraceML received them
                    oldest = records[0].observed_timestamp_unix_ns if records else None
                    self.ledger.mark(source, self._clock(), oldest)
                if rows >= PAGE_ROWS or source.page_cut:
                    unfinished.append(plan)
            plans = unfinished
            if plans and (self._clock() >= deadline or self.stop.is_set()):
                break
        return got

    def _room(self, source: SqliteSource) -> bool:
        """Wait for room in the worker's queue, a poll at a time: the lag (and rows pruned)
        are counted meanwhile and a stop is seen at once, so a hung exporter shows and holds
        nothing up. False on a stop, or (``_stalled``) when the worker took no batch for
        ``shutdown_timeout``."""
        last = self.worker.queued_batches
        since = self._clock()
        while not wait_for_room(self.worker, QUEUE_LIMIT, self.poll_interval):
            if self.stop.is_set():
                return False
            now = self._clock()
            queued = self.worker.queued_batches
            if queued < last:
                last, since = queued, now
            elif now - since >= self.shutdown_timeout:
                self._stalled = True
                return False
            self.ledger.acknowledge(self.worker.delivered_records)
            with contextlib.suppress(BackfillError):
                self._count_on(source)
        return True

    def _await_manifest_end(self) -> None:
        """The aggregator is gone: give its launcher up to ``MANIFEST_GRACE_S`` to mark the
        manifest, unless the launcher is known and gone too (the whole run was killed)."""
        deadline = self._clock() + MANIFEST_GRACE_S
        while not run_complete(self.folder.manifest()) and self._clock() < deadline:
            if self._writers.launchers_gone():
                return
            if self.stop.wait(self.poll_interval):
                return
