"""``traceml-exporter follow``: export live TraceML 0.5.0 runs as they happen: one run
(``--session-root``) or every run of a logs folder (``--logs-dir``). Arguments, a call to
the library (``traceml_exporter_sdk.follow``), the summary; the follow is the library's."""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import signal
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from ..._export.exit_codes import (
    EXIT_DEPENDENCY,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_LOCKED,
    EXIT_PERMANENT,
    EXIT_USAGE,
)
from ...streams import DEFAULT_EXPORT_STREAMS, EXPORT_STREAM_NAMES
from ..errors import CliError, error_line
from ..inputs import check_spec, check_streams
from ..parser import add_command

if TYPE_CHECKING:
    from ...follow import FollowSettings, Notice, StopEvent

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


GC_YOUNG_THRESHOLD = 50_000
"""Allocations between collections of the cyclic GC's youngest generation in a follow
process (instead of 700): each row makes a record and, for step_time, a dozen dicts, and
up to 16 pages of them wait in a worker's queue; at the default threshold the collector
scans them again and again, about a third of the follower's CPU time. Rows and records
hold no reference cycles, so nothing waits longer to be freed. Set once, by the command
(the process is the follower's); the library never changes it."""
RENAMED = {"status_interval": "progress_interval"}
"""Settings whose option has another name."""


class _Signals:
    """SIGTERM and SIGINT stop the follow, naming the signal; nothing else is done in the
    handler (it runs between two bytecodes of the main thread)."""

    def __init__(self, stop: StopEvent) -> None:
        self.stop = stop
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(ValueError):  # not the main thread (main() called from one)
                signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.stop.stop(signal.Signals(signum).name)


def _settings(args: argparse.Namespace, streams: str) -> FollowSettings:
    from ...follow import FollowSettingError, FollowSettings

    try:
        return FollowSettings(
            streams=streams,
            hostname=bool(args.hostname),
            flush_interval=args.flush_interval,
            wait=args.wait,
            idle_timeout=args.idle_timeout,
            poll_interval=args.poll_interval,
            shutdown_timeout=args.shutdown_timeout,
            max_outage=args.max_outage,
            retry_max_interval=args.retry_max_interval,
            runs_poll_interval=args.runs_poll_interval,
            stuck_after=args.stuck_after,
            status_interval=args.progress_interval,
            metrics_port=args.metrics_port,
            metrics_host=args.metrics_host,
        )
    except FollowSettingError as exc:
        option = "--" + RENAMED.get(exc.name, exc.name).replace("_", "-")
        raise CliError(f"{option} must be {exc.accepted}, got {exc.value}", EXIT_USAGE) from None


def _stderr_line(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _on_event(progress: bool) -> Any:
    """Where ``/metrics`` listens, the wait, refused runs and a stale warning file go to
    stderr always; the runs passed over or followed elsewhere with the progress lines."""

    def on_event(notice: Notice) -> None:
        if progress or notice.kind in ("metrics", "waiting", "refused", "stale-warning"):
            _stderr_line(notice.line)

    return on_event


def cmd_follow(args: argparse.Namespace, out: TextIO) -> int:
    from ...follow import (
        ExporterNotFoundError,
        FollowError,
        MetricsAddressError,
        MetricsUnavailableError,
        RunLockedError,
        RunNotFoundError,
        StopEvent,
        StoppedWaitingError,
        follow_logs_dir,
        follow_run,
        progress_line,
    )
    from ..follow_summary import follow_summary, service_summary

    spec = check_spec(args.spec)
    settings = _settings(args, check_streams(args.streams))
    stop = StopEvent()
    _Signals(stop)
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    progress = args.progress_interval > 0
    watch: dict[str, Any] = {
        "settings": settings,
        "stop": stop,
        "on_status": (lambda s: _stderr_line(progress_line(s))) if progress else None,
        "on_event": _on_event(progress),
    }
    where = "--logs-dir" if args.logs_dir is not None else "--session-root"
    try:
        if args.logs_dir is not None:
            service = follow_logs_dir(spec, args.logs_dir, **watch)
            return service_summary(service, out, stop.reason)
        result = follow_run(spec, args.session_root, **watch)
    except StoppedWaitingError:
        error_line(
            f"interrupted ({stop.reason or 'Ctrl-C'}) while waiting for the run; "
            "nothing was exported"
        )
        return EXIT_INTERRUPTED
    except ExporterNotFoundError as exc:
        raise CliError(str(exc), EXIT_PERMANENT) from None
    except MetricsUnavailableError:
        raise CliError(
            "--metrics-port needs prometheus_client: pip install 'traceml-exporter-sdk[follow]'",
            EXIT_DEPENDENCY,
        ) from None
    except MetricsAddressError as exc:
        raise CliError(f"--metrics-port: {exc}", EXIT_INPUT) from None
    except RunNotFoundError as exc:
        raise CliError(f"{where} {exc}", EXIT_INPUT) from None
    except RunLockedError as exc:
        raise CliError(str(exc), EXIT_LOCKED) from None
    except FollowError as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
    return follow_summary(result, spec, out, stop.reason)
