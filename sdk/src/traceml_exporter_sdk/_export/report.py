"""What a finished export accounts for, and ``finalization_warning.json`` that records a loss."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from . import run_files
from .shown import shown

__all__ = [
    "LOG",
    "WARNING_FILE",
    "ExportFailure",
    "ExportReport",
    "Method",
    "describe_exception",
    "log_error",
    "write_warning_file",
]

LOG = logging.getLogger("traceml_exporter_sdk")
WARNING_FILE = "finalization_warning.json"


Method = Literal["factory", "open", "write", "flush", "close", "worker"]
"""Where export stopped; ``worker`` is the worker thread itself ending early."""


@dataclass(frozen=True, slots=True)
class ExportFailure:
    """The one failure that stopped export: which call, and what it raised.

    ``permanent``: the exporter marked it so (``exporter.is_permanent``), or its factory
    could not be loaded or called; a follower does not retry it.
    """

    method: Method
    error: str
    permanent: bool = False
    error_type: type[BaseException] | None = field(default=None, compare=False)
    """The class of what was raised (None: no exception, e.g. a factory not found); a
    caller that retries (``follow``) judges by it."""


@dataclass(frozen=True)
class ExportReport:
    """What a finished worker accounts for; the figures of ``finalization_warning.json``."""

    exporter: str
    admitted_records: int
    delivered_records: int
    dropped_batches: int
    skipped_units: int
    admitted_by_stream: dict[str, int] = field(default_factory=dict)
    failure: ExportFailure | None = None
    timed_out: bool = False
    warning_path: Path | None = None
    warning_error: str | None = None
    """Why ``finalization_warning.json`` could not be written, when it had to be and was not."""

    @property
    def failed_records(self) -> int:
        """Admitted records never delivered (0 for a healthy exporter that finished)."""
        return self.admitted_records - self.delivered_records

    @property
    def exporter_failed(self) -> bool:
        return self.failure is not None

    def warning_block(self) -> dict[str, Any]:
        """The ``export`` block written to ``finalization_warning.json``."""
        return {
            "exporter": self.exporter,
            "exporter_failed": self.exporter_failed,
            "failed_method": self.failure.method if self.failure else None,
            "error": shown(self.failure.error) if self.failure else None,
            "admitted_records": self.admitted_records,
            "failed_records": self.failed_records,
            "dropped_batches": self.dropped_batches,
            "timed_out": self.timed_out,
        }


def describe_exception(exc: BaseException) -> str:
    """``Type: message`` for any exception, also one whose ``str()`` raises (never raises)."""
    try:
        name = type(exc).__name__
    except BaseException:  # a metaclass whose __name__ raises
        name = "BaseException"
    try:
        message = str(exc)
    except BaseException:
        return f"{name}: <unprintable {name}>"
    return f"{name}: {message}"


def log_error(message: str, *args: object) -> None:
    """Log, but never let a raising handler or filter end the worker thread."""
    with contextlib.suppress(Exception):
        LOG.error(message, *args)


def write_warning_file(
    session_root: Path, content: dict[str, Any], path: Path | None = None
) -> tuple[Path | None, str | None]:
    """Write ``content`` as ``<session_root>/aggregator/finalization_warning.json``
    (or as ``path``, where a caller keeps its warnings elsewhere).

    Written by ``run_files.write_json``: atomically, mode 0600, through no link under
    ``session_root``, whose missing folders are made (``session_root`` itself only for
    TraceML's place: a run folder deleted under a follower, whose warnings are in
    ``aggregator/follow/``, is not made again). Returns ``(path, None)``,
    or ``(None, why)`` when it could not be written; that is logged at ERROR too,
    with the content, so the loss it records is never silent.
    """
    default = session_root / "aggregator" / WARNING_FILE
    if path is None:
        path = default
    try:
        if path == default:
            session_root.mkdir(parents=True, exist_ok=True)  # TraceML's place: made whole
        run_files.write_json(path, content, root=session_root)
    except OSError as exc:
        reason = f"could not write {path}: {exc.strerror or exc}"
        log_error("[TraceML] %s; what it records: %s", reason, content)
        return None, reason
    return path, None
