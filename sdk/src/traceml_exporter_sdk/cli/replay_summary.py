"""The end of a replay: drain the worker, print the summary, and choose the exit code.

Nothing is lost silently: dropped batches, an exporter failure, a timeout or an
early stop each give exit 4 (130 for Ctrl-C) and a line saying where the loss is
recorded.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from .._export.exit_codes import EXIT_EXPORT, EXIT_INTERRUPTED, EXIT_OK
from .._export.shown import shown
from ..factory import BUILTIN_ALIASES, factory_target
from .errors import error_line

if TYPE_CHECKING:
    from .._bridge.sqlite_source import SqliteSource
    from .._export.feeding import Stop
    from ..context import ExporterContext
    from ..worker import ExportReport, ExportWorker

__all__ = [
    "bad_row_lines",
    "end_replay",
    "location_lines",
    "per_stream_lines",
    "source_lines",
    "summarize",
]

LAYOUT_NAMES = {"traceml-0.5.0": "TraceML 0.5.0's", "contract": "the export contract's"}


def source_lines(source: SqliteSource) -> list[str]:
    """What a SQLite source held: tables read, their layout, missing, unreadable, pruned."""
    read = ", ".join(
        f"{plan.table} ({source.read.get(plan.table, 0):,} rows)" for plan in source.tables
    )
    lines = [f"{'tables read':<26} {read}"]
    layouts = " and ".join(LAYOUT_NAMES[layout] for layout in source.layouts)
    if layouts:
        lines.append(f"{'table layout':<26} {layouts}")
    if source.missing:
        lines.append(f"{'missing tables':<26} {', '.join(source.missing)}")
    for table, cols in source.unreadable.items():
        lines.append(f"{'unreadable table':<26} {table} (lacks columns {', '.join(cols)})")
    if source.pruned_rows:
        per_table = ", ".join(f"{t} {n:,}" for t, n in source.pruned.items() if n)
        lines.append(
            f"{'pruned before read':<26} {source.pruned_rows:,} rows (id gaps: deleted by "
            f"TraceML's history retention before they were read; {per_table})"
        )
    return lines


def bad_row_lines(source: SqliteSource) -> list[str]:
    """The rows that did not fit their record, as kept, and how many more."""
    lines = [f"  {bad.table} id {bad.row_id}: {bad.reason}" for bad in source.bad_rows]
    if source.skipped > len(source.bad_rows):
        lines.append(f"  ... and {source.skipped - len(source.bad_rows):,} more")
    return lines


def end_replay(
    worker: ExportWorker, stop: Stop | None, timeout: float, where: str
) -> tuple[ExportReport, Stop | None]:
    """Drain and close the worker; after an early stop, record it in the warning file.

    After a stall the exporter has already had ``timeout`` seconds: shut down at once.
    """
    from .._export.feeding import Stop, record_stop, shut_down

    report, pressed = shut_down(worker, 0.0 if stop and stop.kind == "stalled" else timeout)
    if pressed and stop is None:
        stop = Stop("interrupted", None)
    if stop is not None:
        report = record_stop(worker, report, stop, where)
    return report, stop


def location_lines(context: ExporterContext) -> list[str]:
    """Where the exporter wrote: the session root and the export folder."""
    return [
        f"{'session root':<26} {context.session_root}",
        f"{'export dir':<26} {context.export_dir}",
    ]


def per_stream_lines(report: ExportReport, streams: Iterable[str]) -> list[str]:
    """Records admitted per selected stream."""
    lines = ["records per stream"]
    for stream in streams:
        lines.append(f"  {stream:<24} {report.admitted_by_stream.get(stream, 0):,}")
    return lines


def summarize(
    report: ExportReport,
    lines: list[str],
    out: TextIO,
    spec: str,
    stop: Stop | None = None,
    where: str = "",
) -> int:
    """Print the summary; the exit code is 0 only when nothing was lost or stopped early."""
    lines.append(f"{'dropped batches':<26} {report.dropped_batches:,}")
    if report.failure is not None:
        status = f"FAILED in {report.failure.method}: {report.failure.error}"
    elif report.timed_out:
        status = "TIMED OUT at shutdown"
    else:
        status = "ok"
    lines.append(
        f"{'exporter':<26} {status} (delivered {report.delivered_records:,} of "
        f"{report.admitted_records:,} records)"
    )
    if stop is not None:
        lines.append(f"{'stopped early':<26} {stop.describe(where)}")
    if report.warning_path is not None:
        lines.append(f"{'finalization_warning.json':<26} {report.warning_path}")
    elif report.warning_error is not None:
        lines.append(f"{'finalization_warning.json':<26} NOT WRITTEN: {report.warning_error}")
    out.write("\n".join(map(shown, lines)) + "\n")  # names from a run folder, escaped
    out.flush()
    lost = report.failure is not None or report.timed_out or report.dropped_batches
    if not lost and stop is None and report.warning_error is None:
        return EXIT_OK
    if report.warning_path is not None:
        recorded = f"; the loss is recorded in {report.warning_path}"
    elif report.warning_error is not None:
        recorded = f"; and the loss could not be recorded: {report.warning_error}"
    else:
        recorded = ""
    if stop is not None and stop.kind == "interrupted":
        error_line(f"{stop.describe(where)}{recorded.replace('the loss', 'this')}")
        return EXIT_INTERRUPTED
    if stop is not None:
        message = f"exporter {spec!r} stalled: {stop.describe(where)}"
    elif report.failure is not None:
        message = f"exporter {spec!r} failed in {report.failure.method}: {report.failure.error}"
        message += _import_hint(report, spec)
    elif report.timed_out:
        message = f"exporter {spec!r} did not finish within --shutdown-timeout"
    else:
        message = f"{report.dropped_batches} batches were dropped"
    error_line(message + recorded)
    return EXIT_EXPORT


def _import_hint(report: ExportReport, spec: str) -> str:
    """When the module was not importable but sits in the working directory, say so."""
    if report.failure is None or report.failure.method != "factory" or spec in BUILTIN_ALIASES:
        return ""
    top = factory_target(spec).split(":")[0].split(".")[0]
    if "No module named" not in report.failure.error:
        return ""
    here = Path.cwd()
    if (here / f"{top}.py").is_file() or (here / top).is_dir():
        return (
            f" (it is in the working directory, which is not on the import path, as in "
            f"TraceML's aggregator: install it or set PYTHONPATH={here})"
        )
    return " (install the package or put its folder on PYTHONPATH)"
