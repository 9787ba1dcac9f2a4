"""What a follower handed its exporters and what they acknowledged: the bookmark, the
records exported per stream, and the lag.

Each page handed to the exporter leaves a *mark* (the reading position after it, and
when it was read); a mark is *acknowledged* once the worker's delivered count passes
it (a flush returned), and only then saved as the bookmark (temp file, fsync,
rename). After an exporter failed, what it was handed past its last acknowledgement
is *forgotten*: reading goes back there for the next exporter.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Any

import orjson

from ..._export import run_files
from ..sqlite_source import SqliteSource
from .run import FollowError, RunFolder
from .status import RunStatus, write_json

__all__ = ["BOOKMARK_VERSION", "Ledger"]

BOOKMARK_VERSION = 1


@dataclass(frozen=True, slots=True)
class _Position:
    """Where reading stands in the database: what a bookmark holds."""

    last_id: dict[str, int]
    pruned: dict[str, int]
    skipped: int
    rows_read: int
    read: dict[str, int]
    """Rows read per table (distinct: a read again after a failure is not counted twice)."""


@dataclass(frozen=True, slots=True)
class _Mark:
    """A position after a page was handed to the current exporter, with when it was read."""

    submitted: int
    position: _Position
    exported: dict[str, int]
    read_at: float
    observed_ns: int | None
    """When TraceML received the page's first (oldest) row, wall-clock ns; None: unknown."""


class Ledger:
    """One run's bookmark, and the marks between it and what was read."""

    def __init__(self, folder: RunFolder, status: RunStatus) -> None:
        self.folder = folder
        self.status = status
        self.submitted = 0
        """Records handed to the current exporter."""
        self._by_stream: collections.Counter[str] = collections.Counter()
        self._marks: collections.deque[_Mark] = collections.deque()
        self._acked = _Position({}, {}, 0, 0, {})
        self._acked_submitted = 0
        self._exported_before: dict[str, int] = {}
        """Records acknowledged by the exporters that failed before the current one (and,
        resumed, by earlier follows)."""
        self._from_bookmark: dict[str, int] = {}
        self._acked_by_stream: dict[str, int] = {}
        """Records the current exporter acknowledged, per stream."""
        self._waiting_since: float | None = None
        self._behind_floor: tuple[float, dict[str, int], int | None] | None = None
        """After a failure: when the oldest unacknowledged row was read, how far reading
        had got, and when TraceML received that row; rows up to there keep those times for
        the lag until they are acknowledged."""
        self._saved: tuple[dict[str, int], dict[str, int], int] | None = None
        self.identity: dict[str, Any] = {}
        self.writers: dict[str, Any] = {}
        """Who wrote the database (``DatabaseWriters.known``), kept in the bookmark so a
        follower started again knows the launcher it never saw."""
        self.skipped_before = 0
        self.bookmark_error: str | None = None

    # -- the bookmark read back -------------------------------------------------

    def resume(self, source: SqliteSource) -> bool:
        """Set ``source`` where the bookmark says, if there is one; whether there was.

        Raises:
            FollowError: the bookmark is of another run, unreadable, or ahead of the database.
        """
        bookmark = self._load()
        if bookmark is not None:
            self._resume(source, bookmark)
        self._acked = _Position(dict(source.last_id), dict(source.pruned), 0, 0, {})
        return bookmark is not None

    def _load(self) -> dict[str, Any] | None:
        path = self.folder.bookmark_path
        try:
            raw = run_files.read_file(path, root=self.folder.root)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise FollowError(f"cannot read the bookmark {path}: {exc.strerror or exc}") from None
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            data = None
        if type(data) is not dict or data.get("version") != BOOKMARK_VERSION:
            raise FollowError(
                f"{path} is not a follow bookmark of version {BOOKMARK_VERSION}; "
                "remove it to follow this run from its first row"
            )
        return data

    def _resume(self, source: SqliteSource, bookmark: dict[str, Any]) -> None:
        theirs = bookmark.get("run") or {}
        if theirs != self.identity:
            raise FollowError(
                f"the bookmark {self.folder.bookmark_path} is of another run "
                f"(session {theirs.get('session_id')!r} created {theirs.get('created_at')}); "
                f"this folder holds session {self.identity.get('session_id')!r} created "
                f"{self.identity.get('created_at')}: remove the bookmark (and the old "
                "export) to follow the new run"
            )
        last_id = {str(k): int(v) for k, v in (bookmark.get("last_id") or {}).items()}
        pruned = {str(k): int(v) for k, v in (bookmark.get("pruned") or {}).items()}
        highest = source.highest_ids()
        for table, last in last_id.items():
            if table in highest and highest[table] < last:
                raise FollowError(
                    f"the bookmark {self.folder.bookmark_path} is ahead of the database "
                    f"({table}: bookmark id {last}, highest id {highest[table]}): it is of "
                    "another database; remove it to follow this one from its first row"
                )
        source.last_id.update(last_id)
        source.pruned.update(pruned)
        self.skipped_before = int(bookmark.get("skipped") or 0)
        self._saved = (dict(last_id), dict(pruned), self.skipped_before)
        self._exported_before = {
            str(k): int(v) for k, v in (bookmark.get("exported") or {}).items()
        }
        self._from_bookmark = dict(self._exported_before)
        writers = bookmark.get("writers")
        self.writers = writers if type(writers) is dict else {}
        self.status.update(exported=dict(self._exported_before))

    # -- handing out and acknowledging -----------------------------------------

    def handed(self, stream: str, count: int) -> None:
        """``count`` records of ``stream`` went to the current exporter."""
        self.submitted += count
        self._by_stream[stream] += count

    def mark(self, source: SqliteSource, now: float, observed_ns: int | None = None) -> None:
        """Note the position after a page was handed over (or read with nothing to hand),
        and when TraceML received the page's oldest row."""
        position = _Position(
            dict(source.last_id),
            dict(source.pruned),
            source.skipped,
            source.rows_read,
            dict(source.read),
        )
        mark = _Mark(self.submitted, position, dict(self._by_stream), now, observed_ns)
        self._marks.append(mark)

    @property
    def pending(self) -> int:
        """Records handed to the current exporter and not yet acknowledged."""
        return self.submitted - self._acked_submitted

    def exported_now(self) -> dict[str, int]:
        """Records acknowledged so far, per stream, over every exporter of this follow."""
        out = dict(self._exported_before)
        for stream, count in self._acked_by_stream.items():
            out[stream] = out.get(stream, 0) + count
        return out

    def acknowledged_by_failed(self) -> dict[str, int]:
        """Records the exporters of this follow that failed had acknowledged, per stream."""
        return {
            stream: count - self._from_bookmark.get(stream, 0)
            for stream, count in self._exported_before.items()
        }

    def acknowledge(self, delivered: int) -> None:
        """Save the newest mark whose records have all been delivered."""
        best = None
        while self._marks and self._marks[0].submitted <= delivered:
            best = self._marks.popleft()
        if best is None:
            return
        self._acked = best.position
        self._acked_submitted = best.submitted
        self._acked_by_stream = best.exported
        exported = self.exported_now()
        floor = self._behind_floor
        if floor is not None and all(
            best.position.last_id.get(t, 0) >= last for t, last in floor[1].items()
        ):
            self._behind_floor = None
        if self.status.outage is not None and best.submitted:
            self.status.recovered()  # the new exporter's flush returned
        self.status.update(exported=exported)
        position = best.position
        state = (position.last_id, position.pruned, self.skipped_before + position.skipped)
        if state == self._saved:
            return
        self._write(*state, exported)
        self._saved = state

    def _write(
        self,
        last_id: dict[str, int],
        pruned: dict[str, int],
        skipped: int,
        exported: dict[str, int],
    ) -> None:
        path = self.folder.bookmark_path
        if not self.folder.manifest_path.exists():
            return  # the run folder was deleted: it stays so
        data = {
            "version": BOOKMARK_VERSION,
            "run": self.identity,
            "last_id": last_id,
            "pruned": pruned,
            "skipped": skipped,
            "exported": exported,
            "writers": self.writers,
        }
        error = write_json(path, data, root=self.folder.root)
        if error is not None:
            self.bookmark_error = f"the bookmark was not saved: {error}"

    def forget(self, source: SqliteSource, now: float) -> int:
        """The exporter failed: set ``source`` back to the last acknowledged position, so
        what it was handed after that is read again for the next exporter. Returns how
        many records it was handed past that (sent again)."""
        resent = self.pending
        read_to = dict(source.last_id)
        oldest = self._marks[0].read_at if self._marks else now
        if self._behind_floor is None and resent:
            self._behind_floor = (oldest, read_to, self._oldest_observed())
        acked = self._acked
        source.last_id = dict(acked.last_id)
        source.pruned = dict(acked.pruned)
        source.skipped = acked.skipped
        source.rows_read = acked.rows_read
        source.read = dict(acked.read)
        source.bad_rows = [
            bad for bad in source.bad_rows if bad.row_id <= acked.last_id.get(bad.table, 0)
        ]
        self._exported_before = self.exported_now()
        self._acked_by_stream = {}
        self._marks.clear()
        self.submitted = self._acked_submitted = 0
        self._by_stream.clear()
        return resent

    # -- lag --------------------------------------------------------------------

    def lag(
        self,
        source: SqliteSource,
        highest: dict[str, int],
        now: float,
        caught_up: bool = False,
        lowest: dict[str, int | None] | None = None,
    ) -> None:
        """Rows in the database not yet acknowledged (``highest`` id per table minus the
        bookmark's, or minus the ``lowest`` id still there where retention deleted the
        rows after the bookmark), and how long the oldest has waited (0 once every row is
        acknowledged): since TraceML received it, where its rows say (``recv_ts_ns``),
        else since the follower first saw it. A backlog read after an outage is as old
        as its rows, not as the pass that read it.

        With ``lowest``, rows deleted after the reading position and before the lowest id
        left are counted as pruned now, while nothing is read (a sink down or hung), not
        only when reading reaches the gap."""
        acked = self._acked.last_id
        pruned = source.pruned_rows
        rows = 0
        for table, last in highest.items():
            floor = acked.get(table, 0)
            if lowest is not None:
                low = lowest.get(table)
                first_left = last + 1 if low is None else low
                pruned += max(0, first_left - 1 - source.last_id.get(table, 0))
                floor = max(floor, first_left - 1)
            rows += max(0, last - floor)
        if rows == 0 and (caught_up or not self._marks):
            self._waiting_since = None
            lag = 0.0
        else:
            if self._waiting_since is None:
                self._waiting_since = self._marks[0].read_at if self._marks else now
            oldest = self._marks[0].read_at if self._marks else self._waiting_since
            if self._behind_floor is not None:
                oldest = min(oldest, self._behind_floor[0])
            lag = max(0.0, now - oldest)
            observed = self._oldest_observed()
            if observed is not None:
                lag = max(lag, time.time() - observed / 1e9)
        self.status.update(lag_rows=rows, lag_seconds=lag, rows_pruned=pruned)

    def _oldest_observed(self) -> int | None:
        """When TraceML received the oldest row handed out and not acknowledged (ns)."""
        stamps = [m.observed_ns for m in self._marks if m.observed_ns is not None]
        floor = self._behind_floor
        if floor is not None and floor[2] is not None:
            stamps.append(floor[2])
        return min(stamps, default=None)
