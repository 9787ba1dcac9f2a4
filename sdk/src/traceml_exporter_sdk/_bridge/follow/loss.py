"""Why a row TraceML wrote is not in the sink: one fixed vocabulary, used alike in
``status.json`` (``lost``), the follower's ``finalization_warning.json`` (its follow
block's ``lost``), ``/metrics`` (``rows_lost_total{reason}``) and the summary.

Rows lost for good are gone from the database; rows *left* are still there, after the
bookmark, and a follow started again (or the next look of ``--logs-dir``'s next start)
exports them.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["LEFT_IN_DATABASE", "REASONS", "LossReason", "left_reason", "tally"]

LossReason = Literal[
    "pruned",
    "skipped",
    "run_deleted",
    "timed_out",
    "permanent_failure",
    "gave_up",
    "stalled",
    "read_error",
    "interrupted",
]

REASONS: dict[LossReason, str] = {
    "pruned": "TraceML's retention deleted them before they were read",
    "skipped": "they fit no record (bad events_json, an empty line) or were over the row "
    "byte bound (TRACEML_EXPORTER_MAX_ROW_BYTES)",
    "run_deleted": "the run folder was deleted before they were exported",
    "timed_out": "the drain at the end passed --shutdown-timeout (a slow or hung sink)",
    "permanent_failure": "the exporter failed in a way retrying cannot fix",
    "gave_up": "the sink stayed down past --max-outage",
    "stalled": "the exporter took no batch for --shutdown-timeout",
    "read_error": "the database could not be read",
    "interrupted": "the follow was stopped (a signal) before they were exported",
}
"""Every reason, with what it means (docs/follow.md has the same table)."""

LEFT_IN_DATABASE: frozenset[LossReason] = frozenset(
    ("timed_out", "permanent_failure", "gave_up", "stalled", "read_error", "interrupted")
)
"""Reasons whose rows are still in the database: a restart resumes them."""


def tally(
    end: str,
    left: int,
    *,
    pruned: int,
    skipped: int,
    timed_out: bool,
    permanent: bool,
    gave_up: bool,
) -> dict[LossReason, int]:
    """The rows a follow that ended so did not export, per reason: those pruned and
    skipped over the run's follows, and the ``left`` unacknowledged at its ``end``."""
    lost: dict[LossReason, int] = {}
    if pruned:
        lost["pruned"] = pruned
    if skipped:
        lost["skipped"] = skipped
    reason = left_reason(end, timed_out=timed_out, permanent=permanent, gave_up=gave_up)
    if left and reason is not None:
        lost[reason] = lost.get(reason, 0) + left
    return lost


def left_reason(end: str, *, timed_out: bool, permanent: bool, gave_up: bool) -> LossReason | None:
    """Why rows unacknowledged at a follow's ``end`` were not exported; None for an end
    that leaves none by itself (a drain that finished delivers every row it was given)."""
    if end == "deleted":
        return "run_deleted"
    if timed_out:
        return "timed_out"
    if end == "exporter-failed":
        return "gave_up" if gave_up and not permanent else "permanent_failure"
    return _BY_END.get(end, "timed_out")


_BY_END: dict[str, LossReason] = {
    "stalled": "stalled",
    "read-error": "read_error",
    "interrupted": "interrupted",
}
