"""What a follower is doing, for people and machines: the progress line, ``status.json``
and the figures ``/metrics`` serves.

The follower's thread changes a :class:`RunStatus`; others read ``snapshot()``, a
plain dict taken under the status' lock, so a reader never sees half a change.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import orjson

__all__ = ["RunStatus", "State", "progress_line", "write_json", "write_status"]

State = Literal["waiting", "following", "sink-down", "done"]
MAX_OUTAGES_KEPT = 50
"""The newest outages listed in the status; older ones are only counted."""


class RunStatus:
    """One run's follow: its state, what was exported, its lag and its outages."""

    def __init__(self, run: Path) -> None:
        self._lock = threading.Lock()
        self.run = run
        self.state: State = "waiting"
        self.since = time.time()
        self.exported: dict[str, int] = {}
        self.lag_rows = 0
        self.lag_seconds = 0.0
        self.rows_pruned = 0
        self.exporter_failures = 0
        self.resent_records = 0
        self.outages: list[dict[str, Any]] = []
        self.outages_total = 0
        self.outage: dict[str, Any] | None = None
        """The outage going on: started (Unix time), tries, last_error."""
        self.end: str | None = None
        self.message: str | None = None

    def update(self, **changes: Any) -> bool:
        """Set fields; True when the state changed (a progress line is due)."""
        with self._lock:
            changed = "state" in changes and changes["state"] != self.state
            for name, value in changes.items():
                setattr(self, name, value)
            if changed:
                self.since = time.time()
            return changed

    def failed(self, error: str, resent: int) -> bool:
        """The exporter failed (a transient failure): the sink is down from now on."""
        with self._lock:
            self.exporter_failures += 1
            self.resent_records += resent
            if self.outage is None:
                self.outage = {"started": time.time(), "tries": 0, "last_error": error}
            self.outage["tries"] += 1
            self.outage["last_error"] = error
        return self.update(state="sink-down")

    def recovered(self) -> bool:
        """A flush returned after an outage: it ends, and is kept as history."""
        with self._lock:
            outage, self.outage = self.outage, None
            if outage is not None:
                ended = time.time()
                outage.update(ended=ended, seconds=round(ended - outage["started"], 3))
                self.outages = [*self.outages, outage][-MAX_OUTAGES_KEPT:]
                self.outages_total += 1
        return self.update(state="following")

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            outage = dict(self.outage) if self.outage else None
            if outage is not None:
                outage["seconds"] = round(time.time() - outage["started"], 3)
            return {
                "run": str(self.run),
                "state": self.state,
                "since": self.since,
                "exported": dict(self.exported),
                "exported_total": sum(self.exported.values()),
                "lag_rows": self.lag_rows,
                "lag_seconds": round(self.lag_seconds, 3),
                "rows_pruned": self.rows_pruned,
                "exporter_failures": self.exporter_failures,
                "resent_records": self.resent_records,
                "sink_down_since": outage["started"] if outage else None,
                "outage": outage,
                "outages": [dict(o) for o in self.outages],
                "outages_total": self.outages_total,
                "end": self.end,
                "message": self.message,
                "updated": time.time(),
            }


def _clock(unix: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(unix))


def progress_line(status: Mapping[str, Any]) -> str:
    """One line for people: the run, its state, what was exported, the lag."""
    name = Path(status["run"]).name
    exported = status["exported"]
    streams = ", ".join(f"{s} {n:,}" for s, n in sorted(exported.items()) if n)
    figures = (
        f"exported {status['exported_total']:,}{f' ({streams})' if streams else ''}; "
        f"lag {status['lag_rows']:,} rows, {status['lag_seconds']:.1f} s"
    )
    state = status["state"]
    if state == "sink-down" and status["outage"]:
        outage = status["outage"]
        what = (
            f"SINK DOWN since {_clock(outage['started'])} ({outage['seconds']:.0f} s, "
            f"{outage['tries']} tries): {outage['last_error']}"
        )
    elif state == "done":
        what = f"done: {status['message'] or status['end']}"
    elif state == "waiting":
        what = "waiting for the run"
    else:
        what = "following"
    if status["outages_total"] and state != "sink-down":
        what += f" (rode out {status['outages_total']} outage(s))"
    return f"follow {name}: {what}; {figures}"


def write_status(path: Path, status: Mapping[str, Any]) -> str | None:
    """Write ``status.json`` atomically; the error text, or None."""
    return write_json(path, status)


def write_json(path: Path, data: Mapping[str, Any]) -> str | None:
    """Write ``data`` as indented JSON atomically (a temp file, fsync, rename), so a reader
    or a crash sees the old file or the new one whole; the error text, or None."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            fh.write(orjson.dumps(data, option=orjson.OPT_INDENT_2))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return f"could not write {path}: {exc.strerror or exc}"
    return None
