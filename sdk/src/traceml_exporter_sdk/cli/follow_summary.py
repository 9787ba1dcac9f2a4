"""What ``traceml-exporter follow`` prints when it ends: one run's summary (with its
error line) or a logs folder's, from the library's result; the exit code is the result's."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from .._bridge.follow.ending import ENDS
from .._export.exit_codes import EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_OK
from .._export.shown import shown
from .errors import error_line
from .replay_summary import bad_row_lines, location_lines, per_stream_lines, source_lines, summarize

if TYPE_CHECKING:
    from ..follow import FollowResult, ServiceResult

__all__ = ["follow_summary", "service_summary"]


def follow_summary(result: FollowResult, spec: str, out: TextIO, signal_name: str | None) -> int:
    """Print the summary of one run's follow and return its exit code."""
    source, report = result.source, result.report
    folder, context = result.folder, result.context
    assert folder is not None, "a result of follow_run"
    assert context is not None, "a result of follow_run"
    skipped = result.skipped_before + source.skipped
    lines = [
        f"follow of {folder.root} ({source.rows_read:,} rows read"
        f"{', resumed from the bookmark' if result.resumed else ''}) into {spec}"
    ]
    lines += location_lines(context)
    lines += source_lines(source)
    lines += per_stream_lines(report, context.streams)
    lines.append(f"{'skipped units':<26} {report.skipped_units + skipped:,}")
    lines += bad_row_lines(source)
    if result.exporter_failures:
        seconds = sum(float(o.get("seconds") or 0) for o in result.outages)
        lines.append(
            f"{'sink outages':<26} {len(result.outages):,} ({seconds:,.1f} s in all, "
            f"{result.exporter_failures:,} exporter failures, {result.resent_records:,} "
            "records sent again)"
        )
    lines.append(f"{'run':<26} {result.message}")
    if result.lost:
        lost = ", ".join(f"{rows:,} {reason}" for reason, rows in result.lost.items())
        lines.append(f"{'not exported':<26} {lost}")
    bookmark = folder.bookmark_path
    held = bookmark if bookmark.exists() else "none (nothing was acknowledged)"
    lines.append(f"{'bookmark':<26} {result.bookmark_error or held}")
    if result.stale_warning is not None:
        lines.append(f"{'finalization_warning.json':<26} STALE: {shown(result.stale_warning)}")
    summarize(report, lines, out, spec, None, "")
    code = result.exit_code
    if result.end == "interrupted":
        where = (
            f"the bookmark {bookmark}" if bookmark.exists() else "no bookmark (none acknowledged)"
        )
        error_line(f"interrupted by {signal_name or 'Ctrl-C'}; {where} holds what was delivered")
    elif result.end == "read-error":
        error_line(f"reading {folder.database} failed: {result.read_error}")
    elif result.end == "stalled":
        error_line(f"exporter {spec!r} stalled: it took no batch for --shutdown-timeout")
    elif code == EXIT_INCOMPLETE:
        why = ENDS[result.end] if result.end != "complete" else "the run completed"
        pruned = max(result.pruned_rows, result.lost.get("pruned", 0))
        if pruned:
            why += f"; {pruned:,} rows were pruned by retention before they were read"
        if result.skipped_before + source.skipped:
            why += f"; {result.skipped_before + source.skipped:,} rows fit no record"
        error_line(f"the export is incomplete: {why}")
    return code


def service_summary(service: ServiceResult, out: TextIO, signal_name: str | None) -> int:
    """Print what following a logs folder did and return its exit code: the runs' worst,
    else 0 for SIGTERM (how a service is stopped) and 130 for Ctrl-C."""
    states = ", ".join(f"{n} {state}" for state, n in sorted(service.states.items()))
    lines = [
        f"follow of {service.logs_dir}: {len(service.runs)} run(s) followed "
        f"({states or 'none'}), {len(service.passed)} passed over, "
        f"{len(service.elsewhere)} followed elsewhere; stopped by {signal_name or 'a signal'}"
    ]
    lines += [
        f"  {run.name}: exit {run.exit_code}: {run.message}"
        for run in service.runs
        if run.exit_code != EXIT_OK
    ]
    out.write("\n".join(map(shown, lines)) + "\n")
    code = service.exit_code
    if code != EXIT_OK:
        return code
    return EXIT_INTERRUPTED if signal_name == "SIGINT" else EXIT_OK
