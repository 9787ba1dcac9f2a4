"""What a follower is doing, for people and machines: the progress line, ``status.json``
and the figures ``/metrics`` serves.

The follower's thread changes a :class:`RunStatus`; others read ``snapshot()``, a
plain dict taken under the status' lock, so a reader never sees half a change.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from ..._export import run_files
from ..._export.shown import shown

__all__ = [
    "ENDED",
    "TROUBLED",
    "RunStatus",
    "State",
    "progress_line",
    "write_json",
    "write_status",
]

State = Literal["waiting", "following", "sink-down", "stuck", "done", "failed", "deleted"]
"""``stuck``: an exporter call has run longer than ``stuck_after`` (shown, never stored);
``failed``: the follow ended on a failure (the exporter, a stall, the database);
``deleted``: the run folder went away while it was followed."""
ENDED: frozenset[str] = frozenset(("done", "failed", "deleted"))
"""The states of a follow that is over."""
TROUBLED: frozenset[str] = frozenset(("sink-down", "stuck"))
"""The states ``/healthz`` answers 503 for: a sink down, failing or hung now."""
MAX_OUTAGES_KEPT = 50
"""The newest outages listed in the status; older ones are only counted."""

CallProbe = Callable[[], "tuple[str, float] | None"]
"""The exporter call in progress (method, Unix start), read when a snapshot is taken."""


class RunStatus:
    """One run's follow: its state, what was exported, its lag and its outages."""

    def __init__(self, run: Path, stuck_after: float = 30.0) -> None:
        self._lock = threading.Lock()
        self.run = run
        self.stuck_after = stuck_after
        self.call: CallProbe | None = None
        """Set by the follower: which exporter call runs now, so a hung one shows."""
        self.state: State = "waiting"
        self.since = time.time()
        self.exported: dict[str, int] = {}
        self.lag_rows = 0
        self.lag_seconds = 0.0
        self._lag_at = time.time()
        self.rows_pruned = 0
        self.lost: dict[str, int] = {}
        """Rows not exported by the end, per reason (``loss.REASONS``)."""
        self.exporter_failures = 0
        self.resent_records = 0
        self.outages: list[dict[str, Any]] = []
        self.outages_total = 0
        self.outage: dict[str, Any] | None = None
        """The outage going on: started (Unix time), tries, last_error."""
        self.end: str | None = None
        self.message: str | None = None
        self.stale_warnings = 0
        """Earlier ``finalization_warning.json`` files a complete end could not remove."""

    def update(self, **changes: Any) -> bool:
        """Set fields; True when the state changed (a progress line is due)."""
        with self._lock:
            changed = "state" in changes and changes["state"] != self.state
            for name, value in changes.items():
                setattr(self, name, value)
            if "lag_seconds" in changes:
                self._lag_at = time.time()
            if changed:
                self.since = time.time()
            return changed

    def failed(self, error: str, resent: int, *, permanent: bool = False) -> bool:
        """The exporter failed: counted; a transient failure means the sink is down from
        now on (a permanent one ends the follow, in state ``failed``)."""
        with self._lock:
            self.exporter_failures += 1
            self.resent_records += resent
            if permanent:
                return False
            error = shown(error)
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
        """The status now, its run folder and texts escaped (``shown``). While rows wait,
        the lag is aged to this moment (a follower blocked by a hung sink cannot update
        it, and its lag must still grow); a call running longer than ``stuck_after``
        makes the state ``stuck``."""
        probe = self.call
        running = probe() if probe is not None else None
        now = time.time()
        with self._lock:
            outage = dict(self.outage) if self.outage else None
            if outage is not None:
                outage["seconds"] = round(now - outage["started"], 3)
            state = self.state
            lag = self.lag_seconds
            if state not in ENDED and (self.lag_rows or lag):
                lag += max(0.0, now - self._lag_at)
            call = None
            if running is not None and state not in ENDED:
                seconds = round(max(0.0, now - running[1]), 3)
                call = {"method": running[0], "started": running[1], "seconds": seconds}
                if seconds >= self.stuck_after:
                    state = "stuck"
            return {
                "run": shown(str(self.run)),
                "state": state,
                "since": self.since,
                "exported": dict(self.exported),
                "exported_total": sum(self.exported.values()),
                "lag_rows": self.lag_rows,
                "lag_seconds": round(lag, 3),
                "call": call,
                "rows_pruned": self.rows_pruned,
                "lost": dict(self.lost),
                "exporter_failures": self.exporter_failures,
                "resent_records": self.resent_records,
                "sink_down_since": outage["started"] if outage else None,
                "outage": outage,
                "outages": [dict(o) for o in self.outages],
                "outages_total": self.outages_total,
                "stale_warnings": self.stale_warnings,
                "end": self.end,
                "message": None if self.message is None else shown(self.message),
                "updated": now,
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
    call = status.get("call")
    if state == "stuck" and call:
        what = (
            f"STUCK: the exporter's {call['method']} has not returned for {call['seconds']:.0f} s"
        )
    elif state == "sink-down" and status["outage"]:
        outage = status["outage"]
        what = (
            f"SINK DOWN since {_clock(outage['started'])} ({outage['seconds']:.0f} s, "
            f"{outage['tries']} tries): {outage['last_error']}"
        )
    elif state in ENDED:
        what = f"{state}: {status['message'] or status['end']}"
    elif state == "waiting":
        what = "waiting for the run"
    else:
        what = "following"
    if status["outages_total"] and state != "sink-down":
        what += f" (rode out {status['outages_total']} outage(s))"
    lost = status.get("lost") or {}
    if any(lost.values()):
        figures += "; not exported: " + ", ".join(f"{n:,} {r}" for r, n in lost.items() if n)
    return f"follow {name}: {what}; {figures}"


def write_status(path: Path, status: Mapping[str, Any], *, root: Path | None = None) -> str | None:
    """Write ``status.json`` atomically, readable by its owner only; the error text, or None."""
    return write_json(path, status, root=root)


def write_json(path: Path, data: Mapping[str, Any], *, root: Path | None = None) -> str | None:
    """Write ``data`` as indented JSON atomically, mode 0600, through no link under the run
    folder ``root`` (``run_files.write_json``); the error text, or None. A file of
    ``aggregator/follow/`` has its run folder found from its path when ``root`` is not
    given. The run folder itself is never made: one deleted under the follower stays so."""
    if root is None and path.parent.name == "follow" and path.parent.parent.name == "aggregator":
        root = path.parents[2]
    try:
        run_files.write_json(path, data, root=root)
    except OSError as exc:
        return f"could not write {path}: {exc.strerror or exc}"
    return None
