"""A TraceML 0.5.0 run folder: its manifest, its database, and the follower's own files.

``traceml run --logs-dir LOGS --run-name NAME`` writes ``LOGS/NAME/manifest.json``
and ``LOGS/NAME/aggregator/telemetry``; the follower keeps its bookmark, lock, status
and warning file in ``LOGS/NAME/aggregator/follow/``.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..._export import run_files

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
        """The folder by its absolute path, its parent resolved: the one identity a sink
        keys a run by. The folder itself is not resolved: a run folder that is a link is
        refused (``unsafe``), never followed."""
        root = Path(os.path.abspath(root))
        return cls(root.parent.resolve() / root.name)

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
        """The manifest as TraceML last wrote it, read through no link; None while it is
        missing or mid-write, over ``MANIFEST_MAX_BYTES`` (``manifest_refused`` says so)
        or refused (``unsafe`` says why)."""
        try:
            text = run_files.read_file(
                self.manifest_path, root=self.root, limit=MANIFEST_MAX_BYTES + 1
            )
            if len(text) > MANIFEST_MAX_BYTES:
                return None
            data = orjson.loads(text)
        except (OSError, orjson.JSONDecodeError):
            return None
        return data if type(data) is dict else None

    def has_database(self) -> bool:
        """``aggregator/telemetry`` is there as a regular file (a link is not)."""
        try:
            return stat.S_ISREG(os.stat(self.database, follow_symlinks=False).st_mode)
        except OSError:
            return False

    def unsafe(self) -> str | None:
        """Why the run folder must not be followed, or None: it, ``aggregator/``,
        ``telemetry``, ``follow/`` or ``export/`` is a link, not of its kind, or belongs
        to a user other than the run folder's owner (this process and root are trusted).
        Parts not made yet are not judged; every later open is checked the same way."""
        try:
            with run_files.open_folder(self.root) as root:
                try:
                    aggregator = root.sub(DATABASE.parent.name)
                except FileNotFoundError:
                    return None
                with aggregator:
                    for name in (STATE_DIR.name, "export"):
                        with contextlib.suppress(FileNotFoundError):
                            aggregator.sub(name).close()
                    with contextlib.suppress(FileNotFoundError):
                        os.close(aggregator.open_file(DATABASE.name))
        except FileNotFoundError:
            return None
        except run_files.UnsafePathError as exc:
            return str(exc)
        except OSError as exc:
            return f"{self.root}: {exc.strerror or exc}"
        return None

    def check(self) -> None:
        """Raise when the run folder must not be followed (``unsafe``).

        Raises:
            FollowError: it must not; the message says why and what is accepted.
        """
        why = self.unsafe()
        if why is not None:
            raise FollowError(why)

    def manifest_refused(self) -> str | None:
        """Why the manifest is not read (over ``MANIFEST_MAX_BYTES``), or None."""
        try:
            size = os.stat(self.manifest_path, follow_symlinks=False).st_size
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
            inode = os.stat(self.database, follow_symlinks=False).st_ino
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
    if manifest is None or os.path.lexists(folder.database) or not run_complete(manifest):
        return None
    said = ", ".join(
        f"{key} {manifest[key]}"
        for key in ("status", "telemetry_status", "telemetry_reason", "aggregator_exit_code")
        if manifest.get(key) is not None
    )
    return f"the run ended without a telemetry database (its manifest says {said})"


def runs_under(logs_dir: Path) -> Iterator[RunFolder]:
    """The run folders directly under ``logs_dir`` (those holding a manifest), by name;
    a link to one is given too, to be refused by name (``RunFolder.unsafe``)."""
    try:
        entries = sorted(logs_dir.resolve().iterdir())
    except OSError:
        return
    for entry in entries:
        if (entry / MANIFEST).is_file():
            yield RunFolder(entry)
