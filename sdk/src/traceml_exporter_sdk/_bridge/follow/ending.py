"""How a run's follow ends, in words and in numbers: the end's message, the follower's
``finalization_warning.json`` (what is true at the end) and the exit code docs/follow.md
documents (also written in that file, so a supervisor reading it needs no process)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..._export import run_files
from ..._export.exit_codes import (
    EXIT_EXPORT,
    EXIT_INCOMPLETE,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PERMANENT,
)
from ..._export.shown import shown
from .result import FollowResult, record_follow
from .run import RunFolder

__all__ = [
    "ENDS",
    "INCOMPLETE_ENDS",
    "end_message",
    "exit_code",
    "gone_for_good",
    "leave_the_truth",
    "service_exit_code",
    "worst",
]

ENDS = {
    "complete": "complete (TraceML marked the telemetry finished; every row acknowledged)",
    "timed-out": "NOT complete: TraceML marked the run finished, but the drain passed "
    "--shutdown-timeout before every row was acknowledged; started again, follow resumes "
    "from the bookmark",
    "aggregator-gone": "NOT FINISHED: the aggregator is gone and TraceML never marked the run "
    "complete (killed?)",
    "idle": "NOT FINISHED: no new row for --idle-timeout, the run is not marked complete and "
    "its aggregator is gone or orphaned",
    "exporter-failed": "stopped: the exporter failed",
    "stalled": "stopped: the exporter took no batch for --shutdown-timeout",
    "read-error": "stopped: the database could not be read",
    "interrupted": "interrupted; drained, flushed, bookmark saved",
    "deleted": "the run folder was deleted; what it held and was not exported is lost",
}
INCOMPLETE_ENDS = ("aggregator-gone", "idle", "deleted")
SEVERITY = (EXIT_OK, EXIT_INTERRUPTED, EXIT_INCOMPLETE, EXIT_INPUT, EXIT_EXPORT, EXIT_PERMANENT)
"""Exit codes from the least to the most pressing: ``--logs-dir`` ends with its runs' worst."""


def end_message(result: FollowResult, signal_name: str | None = None) -> str:
    """How the follow ended, in the words of the summary's ``run`` line."""
    if result.end == "interrupted" and result.report.timed_out:
        return (
            f"interrupted ({signal_name or 'Ctrl-C'}); the exporter did not finish within "
            f"--shutdown-timeout and was abandoned: {result.left_rows:,} rows not "
            "acknowledged, the bookmark saved at the last acknowledgement"
        )
    if result.end == "interrupted":
        return f"interrupted ({signal_name or 'Ctrl-C'}); drained, flushed, bookmark saved"
    if result.end == "timed-out":
        return (
            "NOT complete: TraceML marked the run finished, but the drain passed "
            f"--shutdown-timeout with {result.left_rows:,} rows not acknowledged; started "
            "again, follow resumes from the bookmark"
        )
    if result.end == "exporter-failed" and result.permanent:
        return "stopped: the exporter failed permanently (retrying cannot fix it)"
    if result.end == "exporter-failed" and result.gave_up:
        return "stopped: the sink was still down after --max-outage"
    return ENDS[result.end]


def leave_the_truth(result: FollowResult, folder: RunFolder, message: str) -> None:
    """Write the follower's ``finalization_warning.json`` when something is lost or
    unfinished; remove an earlier one when this follow ended complete with nothing lost
    (earlier failures it recovered from are history in ``status.json``). One that
    cannot be removed is said in ``result.stale_warning``."""
    if result.end == "deleted":
        return  # nowhere to write it: the folder stays deleted (the loss is in /metrics)
    source = result.source
    incomplete = result.end in INCOMPLETE_ENDS or result.pruned_rows > 0
    skipped = result.skipped_before + source.skipped
    report = result.report
    lost = report.exporter_failed or report.dropped_batches or report.timed_out or result.lost
    if not (incomplete or skipped or result.bookmark_error or result.end != "complete" or lost):
        try:
            run_files.remove_file(folder.warning_path, root=folder.root)
        except OSError as exc:  # a file that will not go, or an unsafe follow/ folder
            result.stale_warning = (
                f"could not remove the earlier {folder.warning_path} (what it says no longer "
                f"holds: this follow ended complete, nothing lost): {exc.strerror or exc}"
            )
        result.report = dataclasses.replace(report, warning_path=None)
        return
    block: dict[str, Any] = {
        "run_end": result.end,
        "message": message,
        "rows_read": source.rows_read,
        "pruned_rows": source.pruned,
        "skipped_rows": skipped,
        "bookmark": shown(str(folder.bookmark_path)) if folder.bookmark_path.exists() else None,
        "bookmark_error": result.bookmark_error,
        "exporter_failures": result.exporter_failures,
        "resent_records": result.resent_records,
        "permanent_failure": result.permanent,
        "lost": dict(result.lost),
        "exit_code": exit_code(result),
    }
    record_follow(result, folder, block)
    result.report = dataclasses.replace(
        report, warning_path=result.warning_path, warning_error=result.warning_error
    )


def exit_code(result: FollowResult) -> int:
    """The exit code of one run's follow (docs/follow.md, "Exit codes")."""
    report = result.report
    if result.end == "interrupted" and not report.timed_out:
        return EXIT_INTERRUPTED
    if result.end == "deleted":
        return EXIT_INCOMPLETE  # nothing to retry: the rows are gone with the folder
    if result.permanent:
        return EXIT_PERMANENT
    if (
        report.failure is not None
        or report.timed_out
        or report.dropped_batches
        or report.warning_error is not None
        or result.end in ("stalled", "timed-out")
    ):
        return EXIT_EXPORT
    if result.end == "read-error":
        return EXIT_INPUT
    if result.end in INCOMPLETE_ENDS or gone_for_good(result):
        return EXIT_INCOMPLETE
    return EXIT_OK


def service_exit_code(result: FollowResult) -> int:
    """A run's part in the exit status of ``--logs-dir``, which SIGTERM is how one stops:
    its interruption says nothing, but rows it lost for good still do (exit 6)."""
    code = exit_code(result)
    if code != EXIT_INTERRUPTED:
        return code
    return EXIT_INCOMPLETE if gone_for_good(result) else EXIT_OK


def gone_for_good(result: FollowResult) -> int:
    """Rows no restart brings back: pruned before they were read (as ``lost`` counts them,
    unread rows past the reading position too) and rows that fit no record."""
    pruned = max(result.pruned_rows, result.lost.get("pruned", 0))
    return pruned + result.skipped_before + result.source.skipped


def worst(codes: list[int]) -> int:
    """The most pressing of several runs' exit codes (``SEVERITY``); 0 for none."""
    return max(codes, key=SEVERITY.index, default=EXIT_OK)
