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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..._export.shown import shown
from ...context import ExporterContext
from ...worker import ExportWorker
from ..sqlite_source import SqliteSource
from .follower import Follower
from .lock import RunLock, RunLockedError
from .loss import LEFT_IN_DATABASE
from .result import FollowResult
from .retry import Backoff
from .run import FollowError, RunFolder, ended_without_telemetry, run_complete, runs_under
from .status import ENDED, RunStatus, progress_line, write_status

__all__ = ["FollowJob", "FollowSettings", "LogsDirectory", "Reporter"]

STATUS_INTERVAL_S = 5.0
"""How often ``status.json`` is rewritten while nothing changes."""


@dataclass(frozen=True)
class FollowSettings:
    """What every run's follower is given: the exporter and how to drive it."""

    spec: str
    streams: str | None
    hostname: bool = False
    flush_interval: float = 1.0
    poll_interval: float = 0.25
    idle_timeout: float = 300.0
    shutdown_timeout: float = 60.0
    backoff: Backoff = field(default_factory=Backoff)
    stuck_after: float = 30.0
    """An exporter call running longer than this shows as ``stuck`` (and ``/healthz`` 503)."""


class FollowJob:
    """One run followed on a thread of its own, from its lock to its last bookmark."""

    def __init__(
        self,
        folder: RunFolder,
        settings: FollowSettings,
        stop: threading.Event,
        finish: Callable[[FollowJob], None] | None = None,
    ) -> None:
        self.folder = folder
        self.settings = settings
        self.stop = stop
        self.status = RunStatus(folder.root, settings.stuck_after)
        self.result: FollowResult | None = None
        self.follower: Follower | None = None
        self.opened: tuple[SqliteSource, bool] | None = None
        """The database's source and whether a bookmark was resumed (after ``prepare``)."""
        self.error: Exception | None = None
        """Why following could not start (a lock held elsewhere, a bookmark of another run)."""
        self._finish = finish
        self.lock = RunLock(folder.lock_path)
        self.thread = threading.Thread(target=self._main, name=f"follow:{folder.name}", daemon=True)

    def prepare(self) -> None:
        """Lock the run, open its database and make the first exporter (on this thread).

        Raises:
            RunLockedError: another process follows the run.
            FollowError: its bookmark or database cannot be used.
        """
        self.lock.acquire()
        try:
            settings = self.settings
            context = ExporterContext.create(self.folder.root, settings.streams, settings.hostname)

            def make_worker() -> ExportWorker:
                return ExportWorker(
                    settings.spec,
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
        except BaseException:
            self.lock.release()
            raise

    @property
    def source(self) -> SqliteSource:
        assert self.opened is not None, "prepare() first"
        return self.opened[0]

    def start(self) -> FollowJob:
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


class Reporter:
    """Shows the jobs' progress on stderr and keeps each run's ``status.json`` current."""

    def __init__(self, write: Callable[[str], None], interval: float) -> None:
        self.write = write
        self.interval = interval
        self._shown: dict[Path, tuple[str, float]] = {}
        self._saved: dict[Path, float] = {}

    def note(self, line: str) -> None:
        """A line of the service's own; what it quotes of a run folder is escaped."""
        if self.interval > 0:
            self.write(shown(line))

    def tick(self, job: FollowJob, *, final: bool = False) -> None:
        """A progress line when the state changed or the interval passed; the status file
        when the state changed or ``STATUS_INTERVAL_S`` passed. A follow that is over is
        shown once, when its job has said how it ended (``final``, or its thread done),
        and a deleted run's status is not written (that would make its folder again)."""
        snapshot = job.status.snapshot()
        state = snapshot["state"]
        ended = state in ENDED
        if ended and not (final or job.done):
            return  # its end is being written down: shown once it is
        now = time.monotonic()
        root = job.folder.root
        shown, shown_at = self._shown.get(root, ("", -1e9))
        changed = state != shown
        due = self.interval > 0 and now - shown_at >= self.interval and not ended
        if changed or due:
            self._shown[root] = (state, now)
            if self.interval > 0:
                self.write(progress_line(snapshot))
        if state == "deleted" or not job.folder.manifest_path.exists():
            return  # a deleted run folder stays deleted
        if changed or final or now - self._saved.get(root, -1e9) >= STATUS_INTERVAL_S:
            self._saved[root] = now
            if job.error is None or not isinstance(job.error, RunLockedError):
                write_status(job.folder.status_path, snapshot)


def _exported_already(folder: RunFolder) -> bool:
    """A complete run whose follow ended complete, every row acknowledged: its bookmark
    is at the end, nothing to read. Any other end (rows left by a timeout, a failure, a
    stop) is resumed from the bookmark."""
    try:
        status = orjson.loads(folder.status_path.read_bytes())
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
        settings: FollowSettings,
        stop: threading.Event,
        reporter: Reporter,
        finish: Callable[[FollowJob], None],
    ) -> None:
        self.logs_dir = logs_dir
        self.settings = settings
        self.stop = stop
        self.reporter = reporter
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
            if not folder.database.is_file():
                continue  # starting: its database comes soon
            job = FollowJob(folder, self.settings, self.stop, self.finish)
            try:
                job.prepare()
            except RunLockedError as exc:
                if root not in self.elsewhere:
                    self.elsewhere[root] = str(exc)
                    self.reporter.note(f"follow {folder.name}: skipped: {exc}")
                continue
            except (FollowError, OSError) as exc:
                self._pass(folder, f"cannot be followed: {exc}")
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
            self.reporter.tick(job, final=True)
            del self.jobs[root]
            self.deleted.append(job)
            self.deleted_lost.update(job.status.lost)
        for root in [r for r in self.passed if not r.exists()]:
            del self.passed[root]

    def _pass(self, folder: RunFolder, why: str) -> None:
        self.passed[folder.root] = why
        self.reporter.note(f"follow {folder.name}: {why}")

    def serve(self, poll: float, tick: Callable[[], None]) -> None:
        """Look for runs every ``poll`` seconds until ``stop``; then wait for every job."""
        next_look = 0.0
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= next_look:
                self.look()
                next_look = now + poll
            tick()
            time.sleep(0.2)
        for job in list(self.jobs.values()):
            with contextlib.suppress(RuntimeError):
                job.thread.join()
        tick()

    def statuses(self) -> list[dict[str, Any]]:
        """The runs followed and not deleted (a deleted run's series leave ``/metrics``)."""
        return [job.status.snapshot() for job in list(self.jobs.values())]

    def totals(self) -> dict[str, Any]:
        """What outlives a deleted run in ``/metrics``: how many, and their rows lost."""
        return {"runs_deleted": len(self.deleted), "deleted_lost": dict(self.deleted_lost)}
