"""What ``traceml-exporter follow`` says when a run's follow ends: the summary, the
follower's ``finalization_warning.json`` (what is true at the end), and the exit code."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING, Any, TextIO

from .errors import error_line
from .exit_codes import (
    EXIT_EXPORT,
    EXIT_INCOMPLETE,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PERMANENT,
)
from .replay_summary import bad_row_lines, location_lines, per_stream_lines, source_lines, summarize

if TYPE_CHECKING:
    from .._bridge.follow import FollowResult, RunFolder
    from ..worker import ExportWorker

__all__ = ["ENDS", "end_message", "follow_summary", "leave_the_truth"]

ENDS = {
    "complete": "complete (TraceML marked the telemetry finished)",
    "aggregator-gone": "NOT FINISHED: the aggregator is gone and TraceML never marked the run "
    "complete (killed?)",
    "idle": "NOT FINISHED: no new row for --idle-timeout, the run is not marked complete and "
    "its aggregator is gone or orphaned",
    "exporter-failed": "stopped: the exporter failed",
    "stalled": "stopped: the exporter took no batch for --shutdown-timeout",
    "read-error": "stopped: the database could not be read",
    "interrupted": "interrupted; drained, flushed, bookmark saved",
}


def end_message(result: FollowResult, signal_name: str | None = None) -> str:
    """How the follow ended, in the words of the summary's ``run`` line."""
    if result.end == "interrupted":
        return f"interrupted ({signal_name or 'Ctrl-C'}); drained, flushed, bookmark saved"
    if result.end == "exporter-failed" and result.permanent:
        return "stopped: the exporter failed permanently (retrying cannot fix it)"
    if result.end == "exporter-failed" and result.gave_up:
        return "stopped: the sink was still down after --max-outage"
    return ENDS[result.end]


def leave_the_truth(result: FollowResult, folder: RunFolder, message: str) -> None:
    """Write the follower's ``finalization_warning.json`` when something is lost or
    unfinished; remove an earlier one when this follow ended complete with nothing lost
    (earlier failures it recovered from are history in ``status.json``)."""
    from .._bridge.follow import record_follow

    source = result.source
    incomplete = result.end in ("aggregator-gone", "idle") or result.pruned_rows > 0
    skipped = result.skipped_before + source.skipped
    report = result.report
    lost = report.exporter_failed or report.dropped_batches or report.timed_out
    if not (incomplete or skipped or result.bookmark_error or result.end != "complete" or lost):
        with contextlib.suppress(FileNotFoundError):
            folder.warning_path.unlink()
        result.report = dataclasses.replace(report, warning_path=None)
        return
    block: dict[str, Any] = {
        "run_end": result.end,
        "message": message,
        "rows_read": source.rows_read,
        "pruned_rows": source.pruned,
        "skipped_rows": skipped,
        "bookmark": str(folder.bookmark_path),
        "bookmark_error": result.bookmark_error,
        "exporter_failures": result.exporter_failures,
        "resent_records": result.resent_records,
        "permanent_failure": result.permanent,
    }
    record_follow(result, folder, block)
    result.report = dataclasses.replace(
        report, warning_path=result.warning_path, warning_error=result.warning_error
    )


def follow_summary(
    result: FollowResult,
    folder: RunFolder,
    worker: ExportWorker,
    spec: str,
    out: TextIO,
    signal_name: str | None = None,
) -> int:
    """Print the summary of one run's follow and return its exit code."""
    source, report = result.source, result.report
    incomplete = result.end in ("aggregator-gone", "idle") or result.pruned_rows > 0
    skipped = result.skipped_before + source.skipped
    lines = [
        f"follow of {folder.root} ({source.rows_read:,} rows read"
        f"{', resumed from the bookmark' if result.resumed else ''}) into {spec}"
    ]
    lines += location_lines(worker)
    lines += source_lines(source)
    lines += per_stream_lines(report, worker.context.streams)
    lines.append(f"{'skipped units':<26} {report.skipped_units + skipped:,}")
    lines += bad_row_lines(source)
    if result.exporter_failures:
        seconds = sum(float(o.get("seconds") or 0) for o in result.outages)
        lines.append(
            f"{'sink outages':<26} {len(result.outages):,} ({seconds:,.1f} s in all, "
            f"{result.exporter_failures:,} exporter failures, {result.resent_records:,} "
            "records sent again)"
        )
    lines.append(f"{'run':<26} {end_message(result, signal_name)}")
    lines.append(f"{'bookmark':<26} {result.bookmark_error or folder.bookmark_path}")
    code = summarize(report, lines, out, spec, None, "")
    if result.end == "interrupted":
        error_line(
            f"interrupted by {signal_name or 'Ctrl-C'}; the bookmark {folder.bookmark_path} "
            "holds what was delivered"
        )
        return EXIT_INTERRUPTED
    if code != EXIT_OK:
        return EXIT_PERMANENT if result.permanent else code
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
