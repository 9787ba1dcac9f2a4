"""Follow one run, or every run of a logs folder, from the first second to the last
bookmark: ``/metrics`` served and the wait shown before the run is there, the end
written down (``finalization_warning.json``, ``status.json``), the result returned.

The library behind ``traceml_exporter_sdk.follow`` and ``traceml-exporter follow``;
nothing here prints or exits: what happens is given to ``on_status`` and ``on_event``,
what prevents it is raised as a typed error (``errors``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import (
    ExporterNotFoundError,
    FollowError,
    MetricsAddressError,
    MetricsUnavailableError,
    RunNotFoundError,
    StoppedWaitingError,
)
from .run import RunFolder, ended_without_telemetry, runs_under
from .settings import Exporter, FollowSettings
from .status import RunStatus
from .watch import OnEvent, OnStatus, Watcher

if TYPE_CHECKING:
    from .result import FollowResult
    from .service import FollowJob

__all__ = ["RunEnd", "ServiceResult", "StopEvent", "follow_logs_dir", "follow_run"]

WAIT_POLL_S = 0.1
"""How often the run awaited is looked for."""
DRAIN_MARGIN_S = 5.0
"""How much longer than ``shutdown_timeout`` a follow cut short by its caller's error is
waited for (its last read and bookmark), before the error goes on."""


class StopEvent(threading.Event):
    """A ``threading.Event`` that can say why it was set (a signal's name), for the end's
    message; any ``threading.Event`` stops a follow just as well."""

    reason: str | None = None

    def stop(self, reason: str | None = None) -> None:
        self.reason = reason
        self.set()


def _reason(stop: threading.Event) -> str | None:
    return stop.reason if isinstance(stop, StopEvent) else None


def check_exporter(exporter: Exporter) -> None:
    """Import the factory now (not call it), so a typo is said at once, not after ``wait``.

    Raises:
        ExporterNotFoundError: it cannot be imported, or names no callable.
    """
    if callable(exporter):
        return
    from ...factory import FactoryResolutionError, resolve_factory

    try:
        factory = resolve_factory(exporter)
    except FactoryResolutionError as exc:
        raise ExporterNotFoundError(f"exporter {exporter!r}: {exc}") from None
    if not callable(factory):
        raise ExporterNotFoundError(
            f"exporter {exporter!r} names {type(factory).__name__}, not a factory callable "
            "as factory(context)"
        )


@contextlib.contextmanager
def _metrics(
    settings: FollowSettings,
    statuses: Callable[[], Iterable[dict[str, Any]]],
    totals: Callable[[], dict[str, Any]] | None,
    watcher: Watcher,
) -> Iterator[None]:
    """``/metrics`` and ``/healthz`` for as long as the block runs (none without a port)."""
    if settings.metrics_port is None:
        yield
        return
    host, port = settings.metrics_host, settings.metrics_port
    try:
        from .metrics import serve_metrics

        server = serve_metrics(host, port, statuses, totals)
    except ImportError:
        raise MetricsUnavailableError(
            "serving /metrics needs prometheus_client: pip install 'traceml-exporter-sdk[follow]'"
        ) from None
    except OSError as exc:
        raise MetricsAddressError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None
    watcher.notice(
        "metrics", f"follow: metrics on http://{host}:{server.port}/metrics (and /healthz)",
        server.port,
    )  # fmt: skip
    try:
        yield
    finally:
        server.close()


def wait_for_run(
    root: Path,
    wait: float,
    stop: threading.Event,
    tick: Callable[[], None] = lambda: None,
    waiting: Callable[[], None] = lambda: None,
) -> RunFolder:
    """The run folder once its manifest and database exist; creates nothing. ``tick`` is
    called every look, ``waiting`` once, when the run is not there at the first.

    Raises:
        RunNotFoundError: still missing after ``wait`` seconds, or never coming (one line:
            which part, and what is accepted).
        StoppedWaitingError: ``stop`` was set meanwhile.
    """
    folder = RunFolder.at(root)
    deadline = time.monotonic() + wait
    first = True
    while True:
        if root.exists() and not root.is_dir():
            raise RunNotFoundError(f"{root} is not a folder")
        refused = folder.unsafe()
        if refused is not None:
            raise RunNotFoundError(f"{root}: {refused}")
        has_manifest = folder.manifest() is not None
        if has_manifest and folder.has_database():
            return folder
        ended = ended_without_telemetry(folder) or folder.manifest_refused()
        if ended is not None:
            raise RunNotFoundError(f"{root}: {ended}; nothing to follow")
        if not has_manifest and not folder.manifest_path.exists():
            runs = [run.name for run in runs_under(root)]
            if runs:
                raise RunNotFoundError(
                    f"{root} holds runs ({', '.join(runs[:3])}{', ...' if len(runs) > 3 else ''})"
                    f" rather than being one: give one of them, or follow them all as a logs "
                    f"folder (--logs-dir {root})"
                )
        if time.monotonic() >= deadline:
            break
        if first:
            first = False
            waiting()
        tick()
        if stop.wait(WAIT_POLL_S):
            raise StoppedWaitingError(
                f"stopped while waiting for the run {root}; nothing was exported"
            )
    if not root.is_dir():
        why = "no such folder"
    elif not has_manifest:
        why = "not a TraceML run (no readable manifest.json)"
    else:
        why = "the run has no database aggregator/telemetry (history off: --no-history?)"
    raise RunNotFoundError(
        f"{root}: {why} after waiting {wait:g} s; give the folder `traceml run` writes: "
        "<--logs-dir>/<--run-name>, holding manifest.json and aggregator/telemetry"
    )


def _write_down(job: FollowJob, stop: threading.Event, watcher: Watcher) -> None:
    """A run's follow ended: its message, ``finalization_warning.json`` and exit code; a
    stale warning file it could not remove is counted and told (``stale-warning``)."""
    from .ending import end_message, exit_code, leave_the_truth

    result = job.result
    if result is None:
        return
    result.message = end_message(result, _reason(stop))
    leave_the_truth(result, job.folder, result.message)
    result.exit_code = exit_code(result)
    job.status.update(message=result.message)
    if result.stale_warning is not None:
        job.status.update(stale_warnings=job.status.stale_warnings + 1)
        watcher.notice("stale-warning", f"follow {job.folder.root.name}: {result.stale_warning}")


def follow_run(
    exporter: Exporter,
    session_root: str | Path,
    *,
    settings: FollowSettings | None = None,
    stop: threading.Event | None = None,
    on_status: OnStatus | None = None,
    on_event: OnEvent | None = None,
) -> FollowResult:
    """Follow the run at ``session_root`` until it ends or ``stop`` is set; how it ended.

    Waits up to ``settings.wait`` for the run (``/metrics`` served meanwhile, its state
    ``waiting``), locks it, feeds its rows to the exporter, and at the end writes the
    follower's ``finalization_warning.json`` and ``status.json``.

    Raises:
        ExporterNotFoundError: the exporter setting names no importable factory.
        MetricsUnavailableError, MetricsAddressError: ``/metrics`` cannot be served.
        RunNotFoundError, StoppedWaitingError: no run was followed.
        RunLockedError: another process follows the run.
        NoReadableTableError, FollowError: the run cannot be followed (its database, bookmark).
    """
    settings = settings or FollowSettings()
    stop = stop if stop is not None else threading.Event()
    root = Path(session_root)
    folder = RunFolder.at(root)
    status = RunStatus(folder.root, settings.stuck_after)  # waiting, served from the start
    watcher = Watcher(on_status, on_event, settings.status_interval)
    with _metrics(settings, lambda: [status.snapshot()], None, watcher):
        check_exporter(exporter)
        from .service import FollowJob

        job = FollowJob(folder, exporter, settings, stop, status=status)
        wait_for_run(
            root,
            settings.wait,
            stop,
            tick=lambda: watcher.tick(job),
            waiting=lambda: watcher.notice(
                "waiting", f"follow: waiting up to {settings.wait:g} s for the run {root}"
            ),
        )
        job.prepare(need_tables=True)
        job.start()
        try:
            while job.thread.is_alive():
                watcher.tick(job)
                job.thread.join(0.2)
        except BaseException:  # a callback raised, or Ctrl-C here: drain, then say so
            stop.set()
            job.thread.join(settings.shutdown_timeout + DRAIN_MARGIN_S)
            raise
    if job.result is None:
        raise FollowError(f"following {folder.root} failed: {job.error}")
    _write_down(job, stop, watcher)
    watcher.tick(job, final=True)
    return job.result


@dataclass(frozen=True)
class RunEnd:
    """How one run of a logs folder ended: its state and message, its part in the exit
    status (``service_exit_code``), and its result (None: it could not start)."""

    name: str
    state: str
    message: str | None
    exit_code: int
    result: FollowResult | None


@dataclass(frozen=True)
class ServiceResult:
    """What following a logs folder did, once stopped."""

    logs_dir: Path
    runs: list[RunEnd] = field(default_factory=list)
    passed: dict[Path, str] = field(default_factory=dict)
    """Runs not followed, and why (exported already, ended without a database)."""
    elsewhere: dict[Path, str] = field(default_factory=dict)
    """Runs another process followed."""

    @property
    def states(self) -> Counter[str]:
        return Counter(run.state for run in self.runs)

    @property
    def exit_code(self) -> int:
        """The runs' most pressing code (0: none lost or failed; the stop says nothing)."""
        from .ending import worst

        return worst([run.exit_code for run in self.runs])


def follow_logs_dir(
    exporter: Exporter,
    logs_dir: str | Path,
    *,
    settings: FollowSettings | None = None,
    stop: threading.Event,
    on_status: OnStatus | None = None,
    on_event: OnEvent | None = None,
) -> ServiceResult:
    """Follow every run under ``logs_dir``, those there and those to come, each on a
    thread of its own, until ``stop`` is set; then wait for each to drain.

    Raises:
        ExporterNotFoundError: the exporter setting names no importable factory.
        MetricsUnavailableError, MetricsAddressError: ``/metrics`` cannot be served.
        RunNotFoundError: ``logs_dir`` is no folder, or is a run folder itself.
    """
    from ..._export.exit_codes import EXIT_INCOMPLETE, EXIT_OK
    from .ending import service_exit_code, worst
    from .service import LogsDirectory

    settings = settings or FollowSettings()
    check_exporter(exporter)
    logs = Path(logs_dir)
    if not logs.is_dir():
        raise RunNotFoundError(f"{logs}: no such folder")
    if (logs / "manifest.json").is_file():
        raise RunNotFoundError(
            f"{logs} is a run folder itself: follow it as one run (--session-root)"
        )
    watcher = Watcher(on_status, on_event, settings.status_interval)

    def finish(job: FollowJob) -> None:
        _write_down(job, stop, watcher)

    directory = LogsDirectory(logs.resolve(), exporter, settings, stop, watcher, finish)
    with _metrics(settings, directory.statuses, directory.totals, watcher):
        watcher.notice(
            "waiting", f"follow: waiting for runs under {logs} (and following those there)"
        )
        try:
            directory.serve()
        except BaseException:  # a callback raised: stop every run, drain, then say so
            stop.set()
            for job in list(directory.jobs.values()):
                job.thread.join(settings.shutdown_timeout + DRAIN_MARGIN_S)
            raise
    ends = []
    for job in [*directory.jobs.values(), *directory.deleted]:
        code = EXIT_OK if job.result is None else service_exit_code(job.result)
        if job in directory.deleted and job.status.lost.get("run_deleted"):
            code = worst([code, EXIT_INCOMPLETE])  # a run exported whole, then deleted, lost none
        snapshot = job.status.snapshot()
        message = job.status.message or job.status.end
        ends.append(RunEnd(job.folder.name, snapshot["state"], message, code, job.result))
    return ServiceResult(logs, ends, dict(directory.passed), dict(directory.elsewhere))
