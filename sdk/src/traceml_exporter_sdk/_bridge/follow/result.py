"""How a follow ended (``FollowResult``: what was exported, what was lost and why), and the follower's ``finalization_warning.json``
that records it when something was lost or is unfinished."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..._export.report import ExportReport, write_warning_file
from ...context import ExporterContext
from .loss import LossReason
from .run import RunFolder

if TYPE_CHECKING:
    from ..sqlite_source import SqliteSource

__all__ = ["FAILED_ENDS", "End", "FollowResult", "record_follow"]

End = Literal[
    "complete",
    "timed-out",
    "aggregator-gone",
    "idle",
    "exporter-failed",
    "stalled",
    "read-error",
    "interrupted",
    "deleted",
]
"""How a follow ended. ``complete`` only when TraceML marked the run complete and every
row was acknowledged; ``timed-out`` when it marked it but the drain passed
``shutdown_timeout``; ``deleted`` when the run folder went away."""
FAILED_ENDS = frozenset(("exporter-failed", "stalled", "read-error"))
"""Ends in state ``failed``."""


@dataclass
class FollowResult:
    """How following ended, and its figures."""

    end: End
    report: ExportReport
    source: SqliteSource
    resumed: bool
    skipped_before: int = 0
    pruned_before: int = 0
    bookmark_error: str | None = None
    warning_path: Path | None = None
    warning_error: str | None = None
    stale_warning: str | None = None
    """Why an earlier ``finalization_warning.json`` is still there after a complete end
    (it could not be removed, and what it says no longer holds); None otherwise."""
    read_error: str | None = None
    """Why reading the database failed (``end`` is ``read-error``)."""
    outages: list[dict[str, Any]] = field(default_factory=list)
    exporter_failures: int = 0
    resent_records: int = 0
    permanent: bool = False
    """The exporter's last failure was permanent (it said so, or its factory failed)."""
    gave_up: bool = False
    """The outage lasted past ``max_outage``."""
    lost: dict[LossReason, int] = field(default_factory=dict)
    """Rows not exported, per reason (the same figures as ``status.json``'s ``lost``)."""
    left_rows: int = 0
    """Rows in the database not acknowledged when the follow ended."""
    exported: dict[str, int] = field(default_factory=dict)
    """Records the sink acknowledged, per stream, over every follow of the run (resumed
    from the bookmark): ``status.json``'s ``exported``."""
    folder: RunFolder | None = None
    """The run folder followed (its bookmark, its database)."""
    context: ExporterContext | None = None
    """What the exporters were given: the run folder, the export folder, the streams."""
    message: str = ""
    """How the follow ended, in words (the summary's ``run`` line; ``status.json``'s
    ``message``); set when its end is written down."""
    exit_code: int = 0
    """The documented exit code of this end (docs/follow.md, "Exit codes")."""

    @property
    def pruned_rows(self) -> int:
        return self.source.pruned_rows

    @property
    def finished(self) -> bool:
        return self.end == "complete"


def record_follow(result: FollowResult, folder: RunFolder, block: dict[str, Any]) -> None:
    """Write the follower's ``finalization_warning.json`` (its ``export`` and ``follow``
    blocks) beside its bookmark, never into TraceML's own."""
    content: dict[str, Any] = {"follow": block}
    if result.report.warning_path is not None or result.report.exporter_failed:
        content["export"] = result.report.warning_block()
    path, error = write_warning_file(folder.root, content, folder.warning_path)
    result.warning_path, result.warning_error = path, error
