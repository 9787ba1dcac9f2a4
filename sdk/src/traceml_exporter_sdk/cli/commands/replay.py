"""``traceml-exporter replay``: drive an exporter through ``ExportWorker`` with recorded input.

The input is recorded payloads (``--payloads``, JSON Lines or msgpack) or a
finished run's SQLite database (``--sqlite``). The worker, the readers and
msgspec are imported only when a replay runs.
"""

from __future__ import annotations

import argparse
import gc
import importlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..._export.exit_codes import EXIT_DEPENDENCY, EXIT_INPUT, EXIT_LOCKED, EXIT_USAGE
from ...streams import DEFAULT_EXPORT_STREAMS, EXPORT_STREAM_NAMES, parse_export_streams
from ..errors import CliError
from ..inputs import check_input_file, check_spec, check_streams, reason, session_root
from ..parser import add_command
from ..progress import Progress
from ..replay_summary import (
    bad_row_lines,
    end_replay,
    location_lines,
    per_stream_lines,
    source_lines,
    summarize,
)

if TYPE_CHECKING:
    from ..._bridge.follow import RunLock
    from ...worker import ExportWorker

__all__ = ["REPLAY_QUEUE_LIMIT", "REPLAY_QUEUE_SIZE", "add_parser", "cmd_replay"]

REPLAY_QUEUE_SIZE = 16
"""Batches the replay keeps queued in the worker; it waits for room, so nothing is dropped."""

REPLAY_QUEUE_LIMIT = 1_000_000
"""The worker's own queue bound during a replay: never reached while the wait works."""


def add_parser(commands: Any) -> None:
    """Add the replay command to the subparsers ``commands``."""
    replay = add_command(
        commands,
        "replay",
        "Drive an exporter through ExportWorker with recorded payloads or a finished run.",
        "--payloads reads telemetry payloads: JSON Lines (one payload per line) or\n"
        "TraceML's transport stream of length-prefixed msgpack messages (the 'msgpack'\n"
        "extra); the format is detected unless --format says it. Malformed lines are\n"
        "counted and listed with their numbers, and never stop the replay.\n"
        "--sqlite reads a TraceML SQLite database (<run>/aggregator/telemetry), in TraceML\n"
        "0.5.0's table layout or the contract's (told apart by the columns), finished or\n"
        "live: each projection table of the selected streams in id order, in short reads;\n"
        "a missing table is reported, not fatal; rows pruned by retention are counted.\n"
        "Prints records per stream, skipped units, dropped batches, the exporter's\n"
        "failure and the finalization_warning.json path if one was written.",
        "  traceml-exporter replay my_exporter.exporter:make_exporter \\\n"
        "      --payloads payloads.jsonl --streams all --session-root /tmp/run1\n"
        "  traceml-exporter replay jsonl --sqlite logs/run1/aggregator/telemetry \\\n"
        "      --streams step_time,system",
    )
    replay.add_argument("spec", metavar="SPEC", help="jsonl or module:factory")
    source = replay.add_mutually_exclusive_group(required=True)
    source.add_argument("--payloads", metavar="FILE", help="recorded payloads (jsonl or msgpack)")
    source.add_argument(
        "--sqlite", metavar="DB", help="a TraceML SQLite database (<run>/aggregator/telemetry)"
    )
    replay.add_argument(
        "--streams",
        metavar="VALUE",
        default=None,
        help=f"export_streams (default {DEFAULT_EXPORT_STREAMS}): comma-separated "
        f"{', '.join(EXPORT_STREAM_NAMES)}",
    )
    replay.add_argument(
        "--session-root",
        metavar="DIR",
        help="the run folder the exporter gets, absolute (default: a new ./traceml-replay-* "
        "folder); a new or empty one, or, with --sqlite RUN_DIR/aggregator/telemetry, RUN_DIR "
        "itself: the exporter then keys the run as follow does (the run is locked meanwhile)",
    )
    replay.add_argument(
        "--hostname", action="store_true", help="exporter_hostname: keep the hostname field"
    )
    replay.add_argument(
        "--format",
        choices=("auto", "jsonl", "msgpack"),
        default="auto",
        help="format of --payloads (default: auto)",
    )
    replay.add_argument(
        "--shutdown-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for the exporter to finish at the end (default: 60)",
    )
    replay.set_defaults(handler=cmd_replay)


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    spec = check_spec(args.spec)
    streams_value = check_streams(args.streams)
    if args.sqlite is not None and args.format != "auto":
        raise CliError("--format applies to --payloads, not --sqlite", EXIT_USAGE)
    if not args.shutdown_timeout > 0:  # NaN too
        raise CliError(
            "--shutdown-timeout must be a positive number of seconds "
            "(inf: wait as long as the exporter takes)",
            EXIT_USAGE,
        )
    if args.payloads is not None:
        return _replay_payloads(args, spec, streams_value, out)
    return _replay_sqlite(args, spec, streams_value, out)


def _tune_gc() -> None:
    """Make the cyclic GC cheaper for a replay, which allocates millions of short-lived
    containers (decoded payloads, records) while a few hundred are queued at a time.

    With the default thresholds those queued payloads are promoted into the oldest
    generation over and over, and each full collection walks every object the
    process holds; freezing what is alive now (modules, the exporter's code) and
    collecting the young generation less often takes about a fifth off a replay's
    CPU time. Cycles are still collected.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 50)


def _make_worker(
    args: argparse.Namespace, spec: str, streams_value: str, root: Path | None = None
) -> ExportWorker:
    """The worker for this replay, writing under a new or empty session root (or ``root``),
    given to the exporter absolute and resolved: the identity a sink keys a run by."""
    from ...context import ExporterContext
    from ...worker import ExportWorker

    if root is None:
        root = session_root(args.session_root)
    context = ExporterContext.create(root.resolve(), streams_value, bool(args.hostname))
    return ExportWorker(spec, context, queue_size=REPLAY_QUEUE_LIMIT)


def _replay_payloads(args: argparse.Namespace, spec: str, streams_value: str, out: TextIO) -> int:
    from ..._export.feeding import feed
    from ..._export.payload_files import MISSING_MSGSPEC, PayloadReader, open_payloads

    path = Path(args.payloads)
    check_input_file(path, "payload file")
    try:
        # Opened once: detection must not eat the first bytes of a pipe or FIFO.
        fmt, stream = open_payloads(path, None if args.format == "auto" else args.format)
    except OSError as exc:
        raise CliError(f"cannot read payload file {path}: {reason(exc)}", EXIT_INPUT) from None
    try:
        if fmt == "msgpack":
            try:
                importlib.import_module("msgspec")
            except ImportError:
                raise CliError(MISSING_MSGSPEC, EXIT_DEPENDENCY) from None
        size = path.stat().st_size if path.is_file() else 0
        worker = _make_worker(args, spec, streams_value)
    except BaseException:
        stream.close()
        raise
    reader = PayloadReader(path, fmt, source=stream)
    progress = Progress(f"replay {path.name}", size, "payloads")
    worker.start()
    _tune_gc()
    # JSON Lines are decoded on the worker thread (submit_deferred): decoding here,
    # beside the worker's mapping, cost more CPU than the decoding itself.
    if fmt == "jsonl":
        items: Iterator[Any] = reader.deferred_records(worker.context.streams)
        submit: Callable[[Any], bool] = worker.submit_deferred
    else:
        items, submit = iter(reader), worker.submit

    submitted = 0  # items handed to the worker: the progress figure while decoding is deferred

    def show(count: int) -> None:
        nonlocal submitted
        submitted = count
        if progress.enabled and not count % 256:
            progress.update(reader.position, count)

    stop = None
    try:
        stop = feed(
            worker,
            items,
            submit,
            limit=REPLAY_QUEUE_SIZE,
            timeout=args.shutdown_timeout,
            progress=show if progress.enabled else None,
        )
    except OSError as exc:
        worker.shutdown(args.shutdown_timeout)
        raise CliError(f"cannot read payload file {path}: {reason(exc)}", EXIT_INPUT) from None
    finally:
        progress.update(reader.position, submitted, force=True)
        progress.finish()
        stream.close()
    report, stop = end_replay(worker, stop, args.shutdown_timeout, f"at byte {reader.position:,}")
    unit = "frame" if fmt == "msgpack" else "line"
    lines = [f"replay of {path} ({fmt}, {reader.payloads:,} payloads) into {spec}"]
    lines += location_lines(worker.context)
    lines += per_stream_lines(report, worker.context.streams)
    lines.append(f"{'skipped units':<26} {report.skipped_units:,}")
    lines.append(f"{f'malformed {unit}s':<26} {reader.malformed_count:,}")
    for bad in reader.malformed:
        where = f" (byte {bad.offset})" if fmt == "msgpack" else ""
        lines.append(f"  {unit} {bad.number}{where}: {bad.reason}")
    if reader.malformed_count > len(reader.malformed):
        lines.append(f"  ... and {reader.malformed_count - len(reader.malformed):,} more")
    return summarize(report, lines, out, spec, stop, f"at byte {reader.position:,}")


def _lock_own_run(database: Path, value: str | None) -> tuple[Path, RunLock] | None:
    """For ``--session-root`` the run folder that holds ``database`` (a backfill keyed as
    ``follow`` keys the run): that folder, locked as a follower locks it. None otherwise.

    Raises:
        CliError: a follower has the run (exit 8).
    """
    from ..._bridge.follow import FollowError, RunFolder, RunLock, RunLockedError

    if value is None:
        return None
    folder = RunFolder.at(Path(value))
    try:
        if not folder.database.samefile(database):
            return None
    except OSError:
        return None
    try:
        return folder.root, RunLock(folder.lock_path).acquire()
    except RunLockedError as exc:
        raise CliError(str(exc), EXIT_LOCKED) from None
    except FollowError as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
    except OSError as exc:
        raise CliError(f"cannot lock {folder.lock_path}: {reason(exc)}", EXIT_INPUT) from None


def _replay_sqlite(args: argparse.Namespace, spec: str, streams_value: str, out: TextIO) -> int:
    from ..._bridge.sqlite_connect import BackfillError
    from ..._bridge.sqlite_source import mark_partial, no_table_message, open_database
    from ..._export.feeding import feed

    path = Path(args.sqlite)
    streams = parse_export_streams(streams_value)
    try:
        source = open_database(path, streams)
    except BackfillError as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
    run_lock = None
    try:
        if not source.tables:
            raise CliError(no_table_message(source, streams), EXIT_INPUT)
        run_lock = _lock_own_run(path, args.session_root)
        worker = _make_worker(args, spec, streams_value, run_lock and run_lock[0])
        progress = Progress(f"backfill {path.name}", source.total_rows, "rows")
        worker.start()
        _tune_gc()
        try:
            stop = feed(
                worker,
                (batch for batch in source.batches() if batch),
                worker.submit_records,
                limit=REPLAY_QUEUE_SIZE,
                timeout=args.shutdown_timeout,
                progress=lambda _n: progress.update(source.rows_read, source.rows_read),
            )
        except BackfillError as exc:
            worker.shutdown(args.shutdown_timeout)
            root = worker.context.session_root
            marked = mark_partial(root, str(exc), source.rows_read, source.total_rows)
            where = f"recorded in {marked}" if marked else f"could not be recorded in {root}"
            raise CliError(f"{exc}; the export is partial ({where})", EXIT_INPUT) from None
        finally:
            progress.update(source.rows_read, source.rows_read, force=True)
            progress.finish()
        where = f"at row {source.rows_read:,} of {source.total_rows:,}"
        report, stop = end_replay(worker, stop, args.shutdown_timeout, where)
    finally:
        source.close()
        if run_lock is not None:
            run_lock[1].release()
    lines = [f"backfill of {path} ({source.rows_read:,} rows) into {spec}"]
    lines += location_lines(worker.context)
    lines += source_lines(source)
    lines += per_stream_lines(report, worker.context.streams)
    lines.append(f"{'skipped units':<26} {report.skipped_units + source.skipped:,}")
    lines += bad_row_lines(source)
    return summarize(report, lines, out, spec, stop, where)
