"""Runs followed side by side in one process: each on its own thread, with its own lock,
bookmark and exporter; the caller's thread shows their progress and writes their status.

``FollowJob`` follows one run to its end; ``LogsDirectory`` finds the runs of a logs
folder as they appear (by polling: no inotify) and starts a job for each.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from ..._export import run_files
from ...context import ExporterContext
from ...worker import ExportWorker
from ..sqlite_source import SqliteSource, no_table_message
from .errors import NoReadableTableError
from .follower import Follower
from .lock import RunLock, RunLockedError
from .loss import LEFT_IN_DATABASE
from .result import FollowResult
from .run import FollowError, RunFolder, ended_without_telemetry, run_complete, runs_under
from .settings import Exporter, FollowSettings
from .status import RunStatus
from .watch import Watcher

__all__ = ["FollowJob", "LogsDirectory"]


class FollowJob:
    """One run followed on a thread of its own, from its lock to its last bookmark."""

    def __init__(
        self,
        folder: RunFolder,
        exporter: Exporter,
        settings: FollowSettings,
        stop: threading.Event,
        finish: Callable[[FollowJob], None] | None = None,
        status: RunStatus | None = None,
    ) -> None:
        self.folder = folder
        self.exporter = exporter
        self.settings = settings
        self.stop = stop
        self.status = status or RunStatus(folder.root, settings.stuck_after)
        """``waiting`` until ``start``: shown (``/metrics``) while the run is awaited."""
        self.result: FollowResult | None = None
        self.follower: Follower | None = None
        self.opened: tuple[SqliteSource, bool] | None = None
        """The database's source and whether a bookmark was resumed (after ``prepare``)."""
        self.error: Exception | None = None
        """Why following could not start (a lock held elsewhere, a bookmark of another run)."""
        self._finish = finish
        self.lock = RunLock(folder.lock_path)
        self.thread = threading.Thread(target=self._main, name=f"follow:{folder.name}", daemon=True)

    def prepare(self, *, need_tables: bool = False) -> None:
        """Lock the run, open its database and make the first exporter (on this thread).

        Raises:
            RunLockedError: another process follows the run.
            NoReadableTableError: ``need_tables`` and the database has no readable table of
                the selected streams (one that may get one later is followed).
            FollowError: its bookmark or database cannot be used, or the run folder is
                refused (a link, or another user's, on the way: ``RunFolder.unsafe``).
        """
        self.folder.check()
        self.lock.acquire()
        try:
            settings = self.settings
            context = ExporterContext.create(self.folder.root, settings.streams, settings.hostname)

            def make_worker() -> ExportWorker:
                return ExportWorker(
                    self.exporter,
                    context,
                    queue_size=1_000_000,
                    flush_interval_s=settings.flush_interval,
                    warning_path=self.folder.warning_path,
                )

            self.follower = Follower(
                self.folder,
                make_worker,
                poll_interval=settings.poll_interval,
                idle_timeout=settings.idle_timeout,
                shutdown_timeout=settings.shutdown_timeout,
                backoff=settings.backoff,
                stop=self.stop,
                status=self.status,
            )
            self.opened = self.follower.open_source()
            source = self.opened[0]
            if need_tables and source.unreadable and not source.tables:
                raise NoReadableTableError(no_table_message(source, context.streams))
        except BaseException:
            self.lock.release()
            raise

    @property
    def source(self) -> SqliteSource:
        assert self.opened is not None, "prepare() first"
        return self.opened[0]

    def start(self) -> FollowJob:
        """Follow on the job's thread (prepared: the run is found and locked)."""
        self.status.update(state="following")
        self.thread.start()
        return self

    def _main(self) -> None:
        try:
            if self.follower is None:
                self.prepare()
            assert self.follower is not None
            assert self.opened is not None
            source, resumed = self.opened
            self.follower.start()
            self.result = self.follower.run(source, resumed)
            if self._finish is not None:
                self._finish(self)
        except (RunLockedError, FollowError, OSError) as exc:
            self.error = exc
            self.status.update(state="done", end="not-started", message=str(exc))
        finally:
            self.lock.release()

    @property
    def done(self) -> bool:
        return not self.thread.is_alive() and (self.result is not None or self.error is not None)


def _exported_already(folder: RunFolder) -> bool:
    """A complete run whose follow ended complete, every row acknowledged: its bookmark
    is at the end, nothing to read. Any other end (rows left by a timeout, a failure, a
    stop) is resumed from the bookmark."""
    try:
        status = orjson.loads(run_files.read_file(folder.status_path, root=folder.root))
    except (OSError, orjson.JSONDecodeError):
        return False
    return (
        type(status) is dict
        and status.get("end") == "complete"
        and not status.get("lag_rows")
        and run_complete(folder.manifest())
    )


class LogsDirectory:
    """Every run under a logs folder, those there now and those that come, each followed once."""

    def __init__(
        self,
        logs_dir: Path,
        exporter: Exporter,
        settings: FollowSettings,
        stop: threading.Event,
        watcher: Watcher,
        finish: Callable[[FollowJob], None],
    ) -> None:
        self.logs_dir = logs_dir
        self.exporter = exporter
        self.settings = settings
        self.stop = stop
        self.watcher = watcher
        self.finish = finish
        self.jobs: dict[Path, FollowJob] = {}
        self.passed: dict[Path, str] = {}
        """Runs not followed, and why (exported already, ended without a database)."""
        self.elsewhere: dict[Path, str] = {}
        """Runs another process follows: tried again each look, named once."""
        self.deleted: list[FollowJob] = []
        """Jobs whose run folder went away (while followed, or after): named once, their
        series gone from ``/metrics``, their loss kept in ``deleted_lost``."""
        self.deleted_lost: collections.Counter[str] = collections.Counter()
        """Rows of deleted runs not exported, per reason."""

    def look(self) -> None:
        """Start a job for each run found that is neither followed nor passed over; let go
        of the runs whose folder was deleted."""
        self._forget_deleted()
        for folder in runs_under(self.logs_dir):
            root = folder.root
            if root in self.jobs or root in self.passed:
                continue
            refused = folder.unsafe()
            if refused is not None:
                self._pass(folder, f"refused: {refused}", always=True)
                continue
            refused = folder.manifest_refused()
            if refused is not None:
                self._pass(folder, refused)
                continue
            if _exported_already(folder):
                self._pass(folder, "exported already (its follow ended complete); not read again")
                continue
            why = ended_without_telemetry(folder)
            if why is not None:
                self._pass(folder, why)
                continue
            if not folder.has_database():
                continue  # starting: its database comes soon
            job = FollowJob(folder, self.exporter, self.settings, self.stop, self.finish)
            try:
                job.prepare()
            except RunLockedError as exc:
                if root not in self.elsewhere:
                    self.elsewhere[root] = str(exc)
                    self.watcher.notice("elsewhere", f"follow {folder.name}: skipped: {exc}")
                continue
            except (FollowError, OSError) as exc:
                self._pass(folder, f"cannot be followed: {exc}", always=True)
                continue
            self.elsewhere.pop(root, None)
            self.jobs[root] = job.start()

    def _forget_deleted(self) -> None:
        for root, job in list(self.jobs.items()):
            if not job.done or (job.status.state != "deleted" and root.exists()):
                continue
            if job.status.state != "deleted":  # deleted after its follow ended
                lost: dict[str, int] = {}
                for reason, rows in job.status.lost.items():
                    kept = "run_deleted" if reason in LEFT_IN_DATABASE else reason
                    lost[kept] = lost.get(kept, 0) + rows
                job.status.update(
                    state="deleted",
                    lost=lost,
                    message=f"the run folder was deleted (its follow had ended {job.status.end})",
                )
            self.watcher.tick(job, final=True)
            del self.jobs[root]
            self.deleted.append(job)
            self.deleted_lost.update(job.status.lost)
        for root in [r for r in self.passed if not r.exists()]:
            del self.passed[root]

    def _pass(self, folder: RunFolder, why: str, *, always: bool = False) -> None:
        """Pass the run over, saying why once (``always``: even without progress lines)."""
        self.passed[folder.root] = why
        self.watcher.notice("refused" if always else "passed", f"follow {folder.name}: {why}")

    def serve(self) -> None:
        """Look for runs every ``runs_poll_interval`` seconds until ``stop``; then wait for
        every job. Their status is shown and written meanwhile (``Watcher.tick``)."""
        next_look = 0.0
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= next_look:
                self.look()
                next_look = now + self.settings.runs_poll_interval
            self._tick()
            self.stop.wait(0.2)
        for job in list(self.jobs.values()):
            with contextlib.suppress(RuntimeError):
                job.thread.join()
        self._tick()

    def _tick(self) -> None:
        for job in list(self.jobs.values()):
            self.watcher.tick(job)

    def statuses(self) -> list[dict[str, Any]]:
        """The runs followed and not deleted (a deleted run's series leave ``/metrics``)."""
        return [job.status.snapshot() for job in list(self.jobs.values())]

    def totals(self) -> dict[str, Any]:
        """What outlives a deleted run in ``/metrics``: how many, and their rows lost."""
        return {"runs_deleted": len(self.deleted), "deleted_lost": dict(self.deleted_lost)}
