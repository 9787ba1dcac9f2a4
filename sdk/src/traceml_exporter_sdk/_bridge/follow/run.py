"""A TraceML 0.5.0 run folder: its manifest, its database, and the follower's own files.

``traceml run --logs-dir LOGS --run-name NAME`` writes ``LOGS/NAME/manifest.json``
and ``LOGS/NAME/aggregator/telemetry``; the follower keeps its bookmark, lock, status
and warning file in ``LOGS/NAME/aggregator/follow/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

__all__ = [
    "DATABASE",
    "MANIFEST_MAX_BYTES",
    "STATE_DIR",
    "FollowError",
    "RunFolder",
    "ended_without_telemetry",
    "run_complete",
    "runs_under",
]

DATABASE = Path("aggregator") / "telemetry"
STATE_DIR = Path("aggregator") / "follow"
MANIFEST = "manifest.json"
MANIFEST_MAX_BYTES = 1 << 20
"""The largest ``manifest.json`` read: TraceML's is under 2 KiB; a bigger one is refused
for its run, never read whole (one user's folder must not cost the node's follower)."""


class FollowError(Exception):
    """The run folder cannot be followed; the message says why and what is accepted."""


@dataclass(frozen=True, slots=True)
class RunFolder:
    """A TraceML run folder: ``manifest.json`` and ``aggregator/telemetry``."""

    root: Path

    @classmethod
    def at(cls, root: Path) -> RunFolder:
        """The folder by its absolute, resolved path: the one identity a sink keys a run by."""
        return cls(Path(root).resolve())

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def database(self) -> Path:
        return self.root / DATABASE

    @property
    def manifest_path(self) -> Path:
        return self.root / MANIFEST

    @property
    def state_dir(self) -> Path:
        return self.root / STATE_DIR

    @property
    def bookmark_path(self) -> Path:
        return self.state_dir / "bookmark.json"

    @property
    def warning_path(self) -> Path:
        return self.state_dir / "finalization_warning.json"

    @property
    def status_path(self) -> Path:
        return self.state_dir / "status.json"

    @property
    def lock_path(self) -> Path:
        return self.state_dir / "lock"

    def manifest(self) -> dict[str, Any] | None:
        """The manifest as TraceML last wrote it; None while it is missing or mid-write,
        or over ``MANIFEST_MAX_BYTES`` (``manifest_refused`` says so)."""
        try:
            with open(self.manifest_path, "rb") as fh:
                text = fh.read(MANIFEST_MAX_BYTES + 1)
            if len(text) > MANIFEST_MAX_BYTES:
                return None
            data = orjson.loads(text)
        except (OSError, orjson.JSONDecodeError):
            return None
        return data if type(data) is dict else None

    def manifest_refused(self) -> str | None:
        """Why the manifest is not read (over ``MANIFEST_MAX_BYTES``), or None."""
        try:
            size = self.manifest_path.stat().st_size
        except OSError:
            return None
        if size <= MANIFEST_MAX_BYTES:
            return None
        return (
            f"not followed: its manifest.json is {size:,} bytes, over the bound of "
            f"{MANIFEST_MAX_BYTES:,} (TraceML writes under 2 KiB)"
        )

    def identity(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """What tells this run from another in the same folder."""
        try:
            inode = self.database.stat().st_ino
        except OSError:
            inode = None
        return {
            "session_id": manifest.get("session_id"),
            "created_at": manifest.get("created_at"),
            "database_inode": inode,
        }


def run_complete(manifest: dict[str, Any] | None) -> bool:
    """TraceML marked the telemetry finished (``telemetry_status`` other than running)."""
    if manifest is None:
        return False
    status = manifest.get("telemetry_status")
    return status not in (None, "starting", "running") or (
        manifest.get("aggregator_exit_code") is not None
    )


def ended_without_telemetry(folder: RunFolder) -> str | None:
    """Why a run that has no database will never have one (its manifest says it ended:
    a failed start such as a port in use), or None while it may still come."""
    manifest = folder.manifest()
    if manifest is None or folder.database.exists() or not run_complete(manifest):
        return None
    said = ", ".join(
        f"{key} {manifest[key]}"
        for key in ("status", "telemetry_status", "telemetry_reason", "aggregator_exit_code")
        if manifest.get(key) is not None
    )
    return f"the run ended without a telemetry database (its manifest says {said})"


def runs_under(logs_dir: Path) -> Iterator[RunFolder]:
    """The run folders directly under ``logs_dir`` (those holding a manifest), by name."""
    try:
        entries = sorted(logs_dir.iterdir())
    except OSError:
        return
    for entry in entries:
        if (entry / MANIFEST).is_file():
            yield RunFolder.at(entry)
