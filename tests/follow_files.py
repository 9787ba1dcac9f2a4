"""What a follower leaves in a run folder, read as a test sees it (None or {} while absent)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FOLLOW_DIR = Path("aggregator") / "follow"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # not there yet, or caught mid-replace
        return None
    return data


def bookmark(root: Path) -> dict[str, Any] | None:
    """The follower's ``bookmark.json`` of the run ``root`` (None while there is none)."""
    return _read(root / FOLLOW_DIR / "bookmark.json")


def status(root: Path) -> dict[str, Any]:
    """The follower's ``status.json`` of the run ``root`` ({} while there is none)."""
    return _read(root / FOLLOW_DIR / "status.json") or {}
