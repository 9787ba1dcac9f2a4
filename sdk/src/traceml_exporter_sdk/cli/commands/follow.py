"""``traceml-exporter follow``: export a live TraceML 0.5.0 run as it happens (``_follow.py``)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import signal
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from ...streams import DEFAULT_EXPORT_STREAMS, EXPORT_STREAM_NAMES
from ..errors import CliError, error_line
from ..exit_codes import (
    EXIT_EXPORT,
    EXIT_INCOMPLETE,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
)
from ..inputs import check_spec, check_streams
from ..parser import add_command
from ..replay_summary import (
    bad_row_lines,
    location_lines,
    no_table_message,
    per_stream_lines,
    source_lines,
    summarize,
)

if TYPE_CHECKING:
    from ..._follow import FollowResult, RunFolder
    from ...worker import ExportWorker

__all__ = ["add_parser", "cmd_follow"]

ENDS = {
    "complete": "complete (TraceML marked the telemetry finished)",
    "aggregator-gone": "NOT FINISHED: the aggregator is gone and TraceML never marked the run "
    "complete (killed?)",
    "idle": "NOT FINISHED: no new row for --idle-timeout and the run is not marked complete",
    "exporter-failed": "stopped: the exporter failed",
    "stalled": "stopped: the exporter took no batch for --shutdown-timeout",
    "read-error": "stopped: the database could not be read",
    "interrupted": "interrupted (Ctrl-C or SIGTERM); drained, flushed, bookmark saved",
}


def add_parser(commands: Any) -> None:
    """Add the follow command to the subparsers ``commands``."""
    follow = add_command(
        commands,
        "follow",
        "Export a live TraceML run as it happens (TraceML 0.5.0 has no exporter setting).",
        "Tails RUN_DIR/aggregator/telemetry, the SQLite database a running `traceml run`\n"
        "writes, and feeds each new row, as an export record, through ExportWorker to the\n"
        "exporter, which gets ExporterContext(session_root=RUN_DIR) as TraceML would give\n"
        "it (jsonl writes RUN_DIR/aggregator/export/). Start it just before or after\n"
        "`traceml run`: it waits --wait seconds for the run folder, without creating it.\n"
        "It ends by itself when TraceML marks the run complete (manifest.json) or the\n"
        "aggregator is gone, after one last read. Read-only, short reads: the run is not\n"
        "disturbed. Progress is bookmarked in RUN_DIR/aggregator/follow/ after each flush\n"
        "that returned: started again with the same command after a crash, it goes on\n"
        "from there (at-least-once: dedupe on the stream key). Rows pruned by retention\n"
        "before they were read, and a run that never finished, are counted (exit 6).",
        "  traceml run --logs-dir logs --run-name run1 train.py &\n"
        "  traceml-exporter follow my_exporter.exporter:make_exporter --session-root logs/run1 \\\n"
        "      --streams all",
    )
    follow.add_argument("spec", metavar="SPEC", help="jsonl or module:factory")
    follow.add_argument(
        "--session-root",
        metavar="RUN_DIR",
        required=True,
        help="the run folder: <--logs-dir>/<--run-name> of `traceml run`",
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
    follow.add_argument(
        "--flush-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how often the worker flushes the exporter (default: 1, as TraceML's)",
    )
    follow.add_argument(
        "--wait",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long to wait for the run folder and its database to appear (default: 120)",
    )
    follow.add_argument(
        "--idle-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="end when no row came for this long and the run is not marked complete "
        "(default: 300, TraceML's own finalize timeout)",
    )
    follow.add_argument(
        "--poll-interval",
        type=float,
        default=0.25,
        metavar="SECONDS",
        help="how often to look for new rows (default: 0.25; TraceML flushes every 0.5)",
    )
    follow.add_argument(
        "--shutdown-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for the exporter to finish at the end (default: 60)",
    )
    follow.set_defaults(handler=cmd_follow)


def _positive(name: str, value: float, *, infinite: bool = False) -> None:
    if not value > 0 or (math.isinf(value) and not infinite):
        accepted = "a positive number of seconds" + (" (inf: no limit)" if infinite else "")
        raise CliError(f"{name} must be {accepted}, got {value}", EXIT_USAGE)


def wait_for_run(root: Path, wait: float) -> RunFolder:
    """The run folder once its manifest and database exist; creates nothing.

    Raises:
        CliError: still missing after ``wait`` seconds (one line: which part, and what is accepted).
    """
    from ..._follow import RunFolder

    folder = RunFolder(root)
    deadline = time.monotonic() + wait
    while True:
        if root.exists() and not root.is_dir():
            raise CliError(f"--session-root {root} is not a folder", EXIT_INPUT)
        has_manifest = folder.manifest() is not None
        if has_manifest and folder.database.is_file():
            return folder
        if time.monotonic() >= deadline:
            break
        time.sleep(0.1)
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


def _interrupt_on_sigterm() -> None:
    """SIGTERM ends a follow as Ctrl-C does: drained, flushed, bookmark saved."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    with contextlib.suppress(ValueError):  # not the main thread (main() called from one)
        signal.signal(signal.SIGTERM, handler)


def cmd_follow(args: argparse.Namespace, out: TextIO) -> int:
    from ..._follow import Follower, FollowError
    from ...context import ExporterContext
    from ...worker import ExportWorker as Worker

    spec = check_spec(args.spec)
    streams_value = check_streams(args.streams)
    _positive("--flush-interval", args.flush_interval, infinite=True)
    _positive("--poll-interval", args.poll_interval)
    _positive("--shutdown-timeout", args.shutdown_timeout, infinite=True)
    _positive("--idle-timeout", args.idle_timeout, infinite=True)
    if not args.wait >= 0:
        raise CliError(f"--wait must be 0 or more seconds, got {args.wait}", EXIT_USAGE)
    _interrupt_on_sigterm()
    try:
        folder = wait_for_run(Path(args.session_root), args.wait)
    except KeyboardInterrupt:
        error_line("interrupted (Ctrl-C) while waiting for the run; nothing was exported")
        return EXIT_INTERRUPTED
    context = ExporterContext.create(folder.root, streams_value, bool(args.hostname))
    worker = Worker(
        spec,
        context,
        queue_size=1_000_000,
        flush_interval_s=args.flush_interval,
        warning_path=folder.warning_path,
    )
    follower = Follower(
        folder,
        worker,
        poll_interval=args.poll_interval,
        idle_timeout=args.idle_timeout,
        shutdown_timeout=args.shutdown_timeout,
    )
    try:
        source, resumed = follower.open_source()
    except FollowError as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
    if source.unreadable and not source.tables:
        raise CliError(no_table_message(source, context.streams), EXIT_INPUT)
    worker.start()
    result = follower.run(source, resumed)
    return _summary(result, folder, worker, spec, out)


def _summary(
    result: FollowResult, folder: RunFolder, worker: ExportWorker, spec: str, out: TextIO
) -> int:
    from ..._follow import record_follow

    source, report = result.source, result.report
    incomplete = result.end in ("aggregator-gone", "idle") or result.pruned_rows > 0
    skipped = result.skipped_before + source.skipped
    if incomplete or skipped or result.bookmark_error or result.end != "complete":
        record_follow(
            result,
            folder,
            {
                "run_end": result.end,
                "message": ENDS[result.end],
                "rows_read": source.rows_read,
                "pruned_rows": source.pruned,
                "skipped_rows": skipped,
                "bookmark": str(folder.bookmark_path),
                "bookmark_error": result.bookmark_error,
            },
        )
        report = dataclasses.replace(
            report, warning_path=result.warning_path, warning_error=result.warning_error
        )
    worker_lines = [
        f"follow of {folder.root} ({source.rows_read:,} rows read"
        f"{', resumed from the bookmark' if result.resumed else ''}) into {spec}"
    ]
    worker_lines += location_lines(worker)
    worker_lines += source_lines(source)
    worker_lines += per_stream_lines(report, worker.context.streams)
    worker_lines.append(f"{'skipped units':<26} {report.skipped_units + skipped:,}")
    worker_lines += bad_row_lines(source)
    worker_lines.append(f"{'run':<26} {ENDS[result.end]}")
    worker_lines.append(f"{'bookmark':<26} {result.bookmark_error or folder.bookmark_path}")
    code = summarize(report, worker_lines, out, spec, None, "")
    if result.end == "interrupted":
        error_line(f"interrupted; the bookmark {folder.bookmark_path} holds what was delivered")
        return EXIT_INTERRUPTED
    if code != EXIT_OK:
        return code
    if result.end == "read-error":
        error_line(f"reading {folder.database} failed: {result.read_error}")
        return EXIT_INPUT
    if result.end == "stalled":
        error_line(f"exporter {spec!r} stalled: it took no batch for --shutdown-timeout")
        return EXIT_EXPORT
    if incomplete:
        why = ENDS[result.end] if result.end != "complete" else "the run completed"
        if result.pruned_rows:
            why += f"; {result.pruned_rows:,} rows were pruned by retention before they were read"
        error_line(f"the export is incomplete: {why}")
        return EXIT_INCOMPLETE
    return EXIT_OK
