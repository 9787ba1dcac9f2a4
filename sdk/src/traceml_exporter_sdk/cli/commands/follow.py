"""``traceml-exporter follow``: export live TraceML 0.5.0 runs as they happen (``_bridge.follow``):
one run (``--session-root``) or every run of a logs folder (``--logs-dir``)."""

from __future__ import annotations

import argparse
import contextlib
import math
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from ..._export.shown import shown
from ...streams import DEFAULT_EXPORT_STREAMS, EXPORT_STREAM_NAMES
from ..errors import CliError, error_line
from ..exit_codes import (
    EXIT_DEPENDENCY,
    EXIT_INCOMPLETE,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_LOCKED,
    EXIT_OK,
    EXIT_PERMANENT,
    EXIT_USAGE,
)
from ..inputs import check_spec, check_streams
from ..parser import add_command
from ..replay_summary import no_table_message

if TYPE_CHECKING:
    from ..._bridge.follow import RunFolder
    from ..._bridge.follow.service import FollowJob, FollowSettings, Reporter

__all__ = ["add_parser", "cmd_follow"]


def add_parser(commands: Any) -> None:
    """Add the follow command to the subparsers ``commands``."""
    follow = add_command(
        commands,
        "follow",
        "Export live TraceML runs as they happen (TraceML 0.5.0 has no exporter setting).",
        "Tails RUN_DIR/aggregator/telemetry, the SQLite database a running `traceml run`\n"
        "writes, and feeds each new row, as an export record, through ExportWorker to the\n"
        "exporter, which gets ExporterContext(session_root=RUN_DIR, absolute) as TraceML\n"
        "would give it (jsonl writes RUN_DIR/aggregator/export/). It waits --wait seconds\n"
        "for the run folder, without creating it, and ends by itself when TraceML marks\n"
        "the run complete or the aggregator is gone, after one last read. Read-only, short\n"
        "reads: the run is not disturbed. Progress is bookmarked in RUN_DIR/aggregator/\n"
        "follow/ after each flush that returned (at-least-once: dedupe on the stream key).\n"
        "When the exporter fails, follow waits (backoff) and makes a new one, resuming\n"
        "from the bookmark, for as long as the sink stays down (--max-outage bounds it);\n"
        "an error the exporter marks permanent ends it (exit 7). One follower per run\n"
        "(exit 8 for a second). --logs-dir follows every run of a logs folder, those there\n"
        "and those to come, until SIGTERM. A progress line goes to stderr every\n"
        "--progress-interval seconds and at each change; RUN_DIR/aggregator/follow/\n"
        "status.json holds the same facts; --metrics-port serves them to Prometheus.",
        "  traceml run --logs-dir logs --run-name run1 train.py &\n"
        "  traceml-exporter follow my_exporter.exporter:make_exporter --session-root logs/run1 \\\n"
        "      --streams all\n"
        "  traceml-exporter follow my_exporter.exporter:make_exporter --logs-dir logs \\\n"
        "      --metrics-port 9464",
    )
    follow.add_argument("spec", metavar="SPEC", help="jsonl or module:factory")
    where = follow.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--session-root",
        metavar="RUN_DIR",
        help="one run folder: <--logs-dir>/<--run-name> of `traceml run`",
    )
    where.add_argument(
        "--logs-dir",
        metavar="LOGS",
        help="follow every run under LOGS (the --logs-dir of `traceml run`), until SIGTERM",
    )
    follow.add_argument(
        "--streams",
        metavar="VALUE",
        default=None,
        help=f"export_streams (default {DEFAULT_EXPORT_STREAMS}): comma-separated "
        f"{', '.join(EXPORT_STREAM_NAMES)}",
    )
    follow.add_argument(
        "--hostname", action="store_true", help="exporter_hostname: keep the hostname field"
    )
    number = [
        ("--flush-interval", 1.0, "how often the worker flushes the exporter (default: 1, as "
         "TraceML's)"),
        ("--wait", 120.0, "how long to wait for the run folder and its database to appear "
         "(default: 120)"),
        ("--idle-timeout", 300.0, "end when no row came for this long, the run is not marked "
         "complete and its aggregator is gone or orphaned (default: 300); a run whose "
         "aggregator is alive is followed however long it pauses"),
        ("--poll-interval", 0.25, "how often to look for new rows (default: 0.25; TraceML "
         "flushes every 0.5)"),
        ("--shutdown-timeout", 60.0, "how long to wait for the exporter to finish at the end "
         "(default: 60)"),
        ("--max-outage", math.inf, "give up when the exporter has failed for this long "
         "(default: inf, wait while the rows are in the database)"),
        ("--retry-max-interval", 15.0, "the longest wait between two tries of a failing "
         "exporter (default: 15; from 0.5, doubling, with jitter)"),
        ("--progress-interval", 5.0, "a progress line on stderr this often and at each change "
         "of state (default: 5; 0: none)"),
        ("--runs-poll-interval", 2.0, "with --logs-dir, how often to look for new runs "
         "(default: 2)"),
        ("--stuck-after", 30.0, "an exporter call running this long shows the run as stuck "
         "(progress line, status, /metrics; /healthz answers 503) (default: 30)"),
    ]  # fmt: skip
    for option, default, text in number:
        follow.add_argument(option, type=float, default=default, metavar="SECONDS", help=text)
    follow.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve /metrics (Prometheus text) and /healthz on this port (0: any free one, "
        "printed); needs prometheus_client",
    )
    follow.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="the address /metrics listens on (default: 127.0.0.1)",
    )
    follow.set_defaults(handler=cmd_follow)


def _positive(name: str, value: float, *, infinite: bool = False) -> None:
    if not value > 0 or (math.isinf(value) and not infinite):
        accepted = "a positive number of seconds" + (" (inf: no limit)" if infinite else "")
        raise CliError(f"{name} must be {accepted}, got {value}", EXIT_USAGE)


def wait_for_run(root: Path, wait: float, stop: threading.Event | None = None) -> RunFolder:
    """The run folder once its manifest and database exist; creates nothing.

    Raises:
        CliError: still missing after ``wait`` seconds (one line: which part, and what is accepted).
    """
    from ..._bridge.follow import RunFolder, ended_without_telemetry, runs_under

    folder = RunFolder.at(root)
    deadline = time.monotonic() + wait
    while True:
        if root.exists() and not root.is_dir():
            raise CliError(f"--session-root {root} is not a folder", EXIT_INPUT)
        has_manifest = folder.manifest() is not None
        if has_manifest and folder.database.is_file():
            return folder
        ended = ended_without_telemetry(folder) or folder.manifest_refused()
        if ended is not None:
            raise CliError(f"--session-root {root}: {ended}; nothing to follow", EXIT_INPUT)
        if not has_manifest and not folder.manifest_path.exists():
            runs = [run.name for run in runs_under(root)]
            if runs:
                raise CliError(
                    f"--session-root {root} holds runs ({', '.join(runs[:3])}"
                    f"{', ...' if len(runs) > 3 else ''}) rather than being one: give one of "
                    f"them, or follow them all with --logs-dir {root}",
                    EXIT_INPUT,
                )
        if time.monotonic() >= deadline:
            break
        if (stop or threading.Event()).wait(0.1):
            raise KeyboardInterrupt
    if not root.is_dir():
        why = "no such folder"
    elif not has_manifest:
        why = "not a TraceML run (no readable manifest.json)"
    else:
        why = "the run has no database aggregator/telemetry (history off: --no-history?)"
    raise CliError(
        f"--session-root {root}: {why} after waiting {wait:g} s; give the folder "
        "`traceml run` writes: <--logs-dir>/<--run-name>, holding manifest.json and "
        "aggregator/telemetry",
        EXIT_INPUT,
    )


class _Signals:
    """SIGTERM and SIGINT set ``stop`` and are remembered by name; nothing else is done
    in the handler (it runs between two bytecodes of the main thread)."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.name: str | None = None
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(ValueError):  # not the main thread (main() called from one)
                signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.name = signal.Signals(signum).name
        self.stop.set()


def _settings(args: argparse.Namespace, spec: str, streams: str) -> FollowSettings:
    from ..._bridge.follow import Backoff
    from ..._bridge.follow.service import FollowSettings

    for name in ("flush_interval", "shutdown_timeout", "idle_timeout", "max_outage"):
        _positive(f"--{name.replace('_', '-')}", getattr(args, name), infinite=True)
    for name in ("poll_interval", "retry_max_interval", "runs_poll_interval", "stuck_after"):
        _positive(f"--{name.replace('_', '-')}", getattr(args, name))
    if not args.wait >= 0:
        raise CliError(f"--wait must be 0 or more seconds, got {args.wait}", EXIT_USAGE)
    if not (args.progress_interval >= 0 and not math.isinf(args.progress_interval)):
        raise CliError(
            f"--progress-interval must be 0 (none) or more seconds, got {args.progress_interval}",
            EXIT_USAGE,
        )
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise CliError(f"--metrics-port must be 0-65535, got {args.metrics_port}", EXIT_USAGE)
    backoff = Backoff(
        maximum=args.retry_max_interval,
        initial=min(0.5, args.retry_max_interval),
        max_outage=args.max_outage,
    )
    return FollowSettings(
        spec,
        streams,
        bool(args.hostname),
        args.flush_interval,
        args.poll_interval,
        args.idle_timeout,
        args.shutdown_timeout,
        backoff,
        args.stuck_after,
    )


def _check_factory(spec: str) -> None:
    """Import the factory now (not call it), so a typo is said at once, not after --wait."""
    from ...factory import FactoryResolutionError, resolve_factory

    try:
        factory = resolve_factory(spec)
    except FactoryResolutionError as exc:
        raise CliError(f"exporter {spec!r}: {exc}", EXIT_PERMANENT) from None
    if not callable(factory):
        raise CliError(f"exporter {spec!r} names {type(factory).__name__}, not a factory "
                       "callable as factory(context)", EXIT_PERMANENT)  # fmt: skip


def _metrics(args: argparse.Namespace, statuses: Any, totals: Any = None) -> Any:
    if args.metrics_port is None:
        return None
    try:
        from ..._bridge.follow.metrics import serve_metrics

        server = serve_metrics(args.metrics_host, args.metrics_port, statuses, totals)
    except ImportError:
        raise CliError(
            "--metrics-port needs prometheus_client: pip install 'traceml-exporter-sdk[follow]'",
            EXIT_DEPENDENCY,
        ) from None
    except OSError as exc:
        raise CliError(
            f"--metrics-port: cannot listen on {args.metrics_host}:{args.metrics_port}: "
            f"{exc.strerror or exc}",
            EXIT_INPUT,
        ) from None
    sys.stderr.write(
        f"follow: metrics on http://{args.metrics_host}:{server.port}/metrics (and /healthz)\n"
    )
    sys.stderr.flush()
    return server


def _stderr_line(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def cmd_follow(args: argparse.Namespace, out: TextIO) -> int:
    from ..._bridge.follow.service import Reporter

    spec = check_spec(args.spec)
    streams = check_streams(args.streams)
    settings = _settings(args, spec, streams)
    _check_factory(spec)
    stop = threading.Event()
    signals = _Signals(stop)
    reporter = Reporter(_stderr_line, args.progress_interval)
    if args.logs_dir is not None:
        return _follow_logs_dir(args, settings, stop, signals, reporter, out)
    return _follow_one(args, settings, stop, signals, reporter, out)


def _follow_one(
    args: argparse.Namespace,
    settings: FollowSettings,
    stop: threading.Event,
    signals: _Signals,
    reporter: Reporter,
    out: TextIO,
) -> int:
    from ..._bridge.follow import FollowError, RunLockedError
    from ..._bridge.follow.service import FollowJob
    from ..follow_summary import end_message, follow_summary, leave_the_truth

    folder = _wait(Path(args.session_root), args.wait, stop, signals)
    if folder is None:
        return EXIT_INTERRUPTED
    job = FollowJob(folder, settings, stop)
    try:
        job.prepare()
    except RunLockedError as exc:
        raise CliError(str(exc), EXIT_LOCKED) from None
    except FollowError as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
    assert job.follower is not None
    source = job.source
    if source.unreadable and not source.tables:
        job.lock.release()
        raise CliError(no_table_message(source, job.follower.worker.context.streams), EXIT_INPUT)
    metrics = _metrics(args, lambda: [job.status.snapshot()])
    try:
        job.start()
        while job.thread.is_alive():
            reporter.tick(job)
            job.thread.join(0.2)
    finally:
        if metrics is not None:
            metrics.close()
    if job.result is None:
        raise CliError(f"following {folder.root} failed: {job.error}", EXIT_INPUT)
    result = job.result
    message = end_message(result, signals.name)
    leave_the_truth(result, folder, message)
    job.status.update(message=message)
    reporter.tick(job, final=True)
    return follow_summary(result, folder, job.follower.worker, settings.spec, out, signals.name)


def _wait(root: Path, wait: float, stop: threading.Event, signals: _Signals) -> RunFolder | None:
    """The run folder, or None when a signal came while waiting for it."""
    try:
        return wait_for_run(root, wait, stop)
    except KeyboardInterrupt:
        pass
    error_line(
        f"interrupted ({signals.name or 'Ctrl-C'}) while waiting for the run; nothing was exported"
    )
    return None


def _follow_logs_dir(
    args: argparse.Namespace,
    settings: FollowSettings,
    stop: threading.Event,
    signals: _Signals,
    reporter: Reporter,
    out: TextIO,
) -> int:
    from ..._bridge.follow.service import LogsDirectory
    from ..follow_summary import end_message, leave_the_truth, service_exit_code, worst

    logs = Path(args.logs_dir)
    if not logs.is_dir():
        raise CliError(f"--logs-dir {logs}: no such folder", EXIT_INPUT)
    if (logs / "manifest.json").is_file():
        raise CliError(
            f"--logs-dir {logs} is a run folder itself: follow it with --session-root {logs}",
            EXIT_INPUT,
        )

    def finish(job: FollowJob) -> None:
        result = job.result
        if result is not None:
            message = end_message(result, signals.name)
            leave_the_truth(result, job.folder, message)
            job.status.update(message=message)

    directory = LogsDirectory(logs.resolve(), settings, stop, reporter, finish)
    metrics = _metrics(args, directory.statuses, directory.totals)

    def tick() -> None:
        for job in list(directory.jobs.values()):
            reporter.tick(job)

    try:
        directory.serve(args.runs_poll_interval, tick)
    finally:
        if metrics is not None:
            metrics.close()
    jobs = [*directory.jobs.values(), *directory.deleted]
    codes = {
        job.folder.name: service_exit_code(job.result) for job in jobs if job.result is not None
    }
    for job in directory.deleted:  # a run exported whole and then deleted lost nothing
        if job.status.lost.get("run_deleted"):
            codes[job.folder.name] = worst([codes.get(job.folder.name, EXIT_OK), EXIT_INCOMPLETE])
    ends = Counter(job.status.snapshot()["state"] for job in jobs)
    states = ", ".join(f"{n} {state}" for state, n in sorted(ends.items()))
    lines = [
        f"follow of {logs}: {len(jobs)} run(s) followed ({states or 'none'}), "
        f"{len(directory.passed)} passed over, {len(directory.elsewhere)} followed elsewhere; "
        f"stopped by {signals.name or 'a signal'}"
    ]
    lines += [
        f"  {name}: exit {code}: {job.status.message or job.status.end}"
        for job in jobs
        if (code := codes.get(name := job.folder.name, EXIT_OK)) != EXIT_OK
    ]
    out.write("\n".join(map(shown, lines)) + "\n")
    code = worst(list(codes.values()))
    if code != EXIT_OK:
        return code
    return EXIT_INTERRUPTED if signals.name == "SIGINT" else EXIT_OK
