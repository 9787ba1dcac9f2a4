"""Issue 39's invariants, judged on what a schedule's execution left (``Observation``),
against the sink's own store: each broken one is a named ``Violation``.

What TraceML wrote comes from the synthetic aggregator's ledger (every commit and
prune, outside the run folder) and what its database still holds; what was delivered
from the sink's store, deduplicated on the stream key (``follow`` is at-least-once). A
step_time row's id is its step + 1 (one table, AUTOINCREMENT from 1, no rollback).
Beside a real ``traceml run`` (``obs.real``) the ledger is the harness's sampler's (when
each id was first seen committed) and a row is known by its identity in
``obs.row_keys``, read from the database at the end: there is no prune to judge
(TraceML's retention at its default), the rest is judged the same.

The names:

- ``row-lost-silently``: a row TraceML still holds is not in the sink after recovery;
- ``sink-holds-unwritten-rows``: the sink holds a row nobody wrote;
- ``loss-count-disagrees``: rows lost (pruned before read) in the sink's terms, and
  ``status.json``, ``finalization_warning.json``, ``/metrics`` do not all say the same
  (where a follower was killed or a call hung, at least what the sink lacks and at most
  what TraceML pruned: a row can reach the sink unacknowledged);
- ``exit-code-hides-loss``: the exit code says all is well while rows were lost or a run
  failed permanently (``--logs-dir`` too: the service's exit status at its end);
- ``complete-with-rows-unsent``: a run said ``complete`` (status, exit 0, or passed over
  on restart as exported already) while the sink lacked rows it still had;
- ``sigterm-too-slow`` / ``sigterm-not-named``: SIGTERM ends ``follow`` within
  ``--shutdown-timeout`` + 5 s, and the signal is named;
- ``fault-not-in-metrics`` / ``fault-not-in-healthz``: a sink down or hung shows in
  both within two poll intervals of the first call that met it (``/healthz``, for a hung
  call, once it has run ``--stuck-after``) while the run's follow is live; one failing
  permanently shows its own state and a failure count in ``/metrics``;
- ``pruned-not-counted-when-pruned``: rows TraceML pruned during an outage, never read,
  raise ``rows_pruned_total`` within two poll intervals, while the run's follow is live
  (one that ended counted the rows it left as lost, once, with its reason: a later
  prune is not counted again; rows written after it are the next start's to count);
- ``failure-not-counted``: a run whose exporter failed shows no failure in its status;
- ``loss-not-counted``: a run's follow that ended (its state done, failed, deleted)
  left rows unsent that its ``status.json`` does not count as lost, with a reason;
- ``deleted-run-not-named`` / ``deleted-run-still-in-metrics`` /
  ``deleted-run-recreated``: a run folder deleted under the follower is named, its
  series leave ``/metrics`` (or say it), and the follower does not write it again;
- ``follow-never-ended`` / ``run-never-settled``: after recovery every run ends
  (an orphaned or killed run too) within ``--idle-timeout`` and a margin;
- ``rss-over-ceiling``: the follower's RSS stays under ``RSS_CEILING_KB``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .driver import PASSED, SCRAPE_S, Observation, Segment

__all__ = ["RSS_CEILING_KB", "TOLERANCE_S", "Violation", "check"]

RSS_CEILING_KB = 200 * 1024
"""The follower's memory target (docs/follow.md: under 200 MB through a long outage)."""
TOLERANCE_S = SCRAPE_S + 0.4
"""What the harness's own measurement may add to a deadline: one scrape period and the
scheduling of four processes on a shared two-core machine."""
SIGTERM_MARGIN_S = 5.0
FAULT_STATES = ("sink-down", "stuck", "hung", "failed", "stalled")
"""State labels that say the sink is in trouble (any containing one of these words)."""
PRUNED_TOTAL = "traceml_exporter_follow_rows_pruned_total"
LOST_TOTAL = "traceml_exporter_follow_rows_lost_total"
WAITING = "waiting for the run"
"""How a ``--session-root`` follower's progress line names the run it still awaits."""
ENDED = ("done", "failed", "deleted")
RUN_ENDS = ("complete", "aggregator-gone", "idle", "deleted")
"""Ends of a follow the run itself brings (not the sink, not a signal)."""
UNCOUNTED_MARGIN_S = 0.1
"""Rows committed this close before a follow's end may come after its last count."""


@dataclass(frozen=True)
class Violation:
    name: str
    detail: str

    def __str__(self) -> str:
        return f"{self.name}: {self.detail}"


# -- what was written, and what the sink holds -----------------------------------


@dataclass
class _Rows:
    written: dict[int, float]
    """id -> when committed."""
    prunes: list[tuple[float, int]]
    """(when, every id up to this one deleted)."""
    in_sink: set[int]
    key_ids: dict[str, int] | None = None
    """A real run's row numbers by identity (None: a synthetic run's stream keys)."""

    def ids(self, keys: Iterable[str]) -> set[int]:
        """The rows of these sink keys; a key of no row written gets a number of its own
        below 0 (the sink holds a row nobody wrote)."""
        if self.key_ids is None:
            return _ids_of(keys)
        known = self.key_ids
        return {known.get(key, -1 - i) for i, key in enumerate(sorted(keys))}

    def pruned_by(self, at: float) -> int:
        return max((upto for t, upto in self.prunes if t <= at), default=0)

    @property
    def pruned(self) -> set[int]:
        upto = self.pruned_by(float("inf"))
        return {i for i in self.written if i <= upto}

    def still_there(self, at: float) -> set[int]:
        """Ids committed by ``at`` and not pruned by then."""
        upto = self.pruned_by(at)
        return {i for i, t in self.written.items() if t <= at and i > upto}


def _ids_of(keys: Iterable[str]) -> set[int]:
    return {int(json.loads(key)[1]) + 1 for key in keys}


def _rows(obs: Observation, run: str) -> _Rows:
    written: dict[int, float] = {}
    prunes = []
    for entry in obs.ledgers.get(run, []):
        if "first_id" in entry:
            for i in range(entry["first_id"], entry["last_id"] + 1):
                written[i] = entry["t"]
        elif "prune_upto" in entry:
            prunes.append((entry["t"], entry["prune_upto"]))
    end = max((s.end or 0.0 for s in obs.segments), default=0.0)
    for i in (obs.final.get(run) or {}).get("present_ids") or []:
        written.setdefault(i, end)  # committed, its ledger line cut off by a kill
    rows = _Rows(written, prunes, set(), obs.row_keys.get(run, {}) if obs.real else None)
    rows.in_sink = rows.ids(obs.sink.get(run, {}))
    return rows


def _first(ids: Iterable[int], n: int = 5) -> str:
    got = sorted(ids)
    return f"{len(got)} rows (ids {got[:n]}{' ...' if len(got) > n else ''})"


# -- /metrics ----------------------------------------------------------------------


def _value(scrape: dict[str, Any], name: str, run: str, **labels: str) -> float | None:
    for sample, have, value in scrape["metrics"]:
        if (
            sample == name
            and have.get("run") == run
            and all(have.get(k) == v for k, v in labels.items())
        ):
            return float(value)
    return None


def _has_series(scrape: dict[str, Any], run: str) -> bool:
    return any(labels.get("run") == run for _, labels, _ in scrape["metrics"])


def _troubled(scrape: dict[str, Any], *, run: str, kind: str) -> bool:
    """The run's series say its sink is down or hung (``sink_down``, a fault state, the
    age of the call in progress), or, failed permanently, its own state and a failure
    count (issue 39: both)."""
    states = [
        labels.get("state", "")
        for name, labels, value in scrape["metrics"]
        if name.endswith("_state") and labels.get("run") == run and value == 1
    ]
    if kind == "permanent":
        failures = _value(scrape, "traceml_exporter_follow_exporter_failures_total", run)
        return bool(failures) and any(s not in ("following", "done", "waiting") for s in states)
    if any(word in state for state in states for word in FAULT_STATES):
        return True
    for name, labels, value in scrape["metrics"]:
        if labels.get("run") != run or not value:
            continue
        if name.endswith("_sink_down") and value == 1:
            return True
        if kind == "hang" and ("hung" in name or "call_age" in name or "call_seconds" in name):
            return True
    return False


def _segment_at(obs: Observation, start: float, end: float) -> Segment | None:
    """The follower that lived from ``start`` to ``end`` (None: none did, or it changed)."""
    for segment in obs.segments:
        if segment.start <= start and (segment.end or float("inf")) >= end:
            return segment
    return None


def _scrapes(obs: Observation, segment: int, start: float, end: float) -> list[dict[str, Any]]:
    return [s for s in obs.scrapes if s["segment"] == segment and start <= s["t"] <= end]


# -- the checks --------------------------------------------------------------------


def _status_pruned(status: dict[str, Any] | None) -> int | None:
    return None if status is None else int(status.get("rows_pruned") or 0)


def _warning_pruned(warning: dict[str, Any] | None) -> int:
    block = (warning or {}).get("follow") or {}
    pruned = block.get("pruned_rows") or 0
    return int(sum(pruned.values()) if isinstance(pruned, dict) else pruned)


def _delivery(obs: Observation) -> Iterator[Violation]:
    last = obs.segments[-1] if obs.segments else None
    for run in obs.ledgers:
        rows = _rows(obs, run)
        phantom = rows.in_sink - set(rows.written)
        if phantom:
            yield Violation("sink-holds-unwritten-rows", f"{run}: {_first(phantom)}")
        if run in obs.deleted:
            continue
        missing = set(rows.written) - rows.in_sink
        final = obs.final.get(run) or {}
        status, warning = final.get("status"), final.get("warning")
        if not rows.written and status is None:
            continue  # killed before it wrote a row: nothing to deliver, nothing to follow
        lost = missing & rows.pruned
        silent = missing - rows.pruned
        if silent:
            said = (status or {}).get("end")
            yield Violation(
                "row-lost-silently",
                f"{run}: {_first(silent)} TraceML still holds are "
                f"not in the sink after recovery (status end {said!r})",
            )
        said = {
            "sink": len(lost),
            "status.json": _status_pruned(status),
            "finalization_warning.json": _warning_pruned(warning),
        }
        if status is not None and "lost" in status:  # the reasons' vocabulary, where it is
            said["status.json lost"] = int((status["lost"] or {}).get("pruned", 0))
            block = (warning or {}).get("follow") or {}
            if "lost" in block:
                said["finalization_warning.json lost"] = int((block["lost"] or {}).get("pruned", 0))
        if obs.where == "logs-dir" and last is not None:
            scraped = [s for s in obs.scrapes if s["segment"] == last.index and _has_series(s, run)]
            if scraped:
                said["/metrics"] = _value(scraped[-1], PRUNED_TOTAL, run)
                if any(name == LOST_TOTAL for name, _, _ in scraped[-1]["metrics"]):
                    pruned = _value(scraped[-1], LOST_TOTAL, run, reason="pruned")
                    said["/metrics rows_lost_total"] = pruned or 0.0
        sink = said.pop("sink")
        figures = set(said.values())
        if len(figures) > 1:
            yield Violation("loss-count-disagrees", f"{run}: rows pruned before read: {said}")
        elif figures and not _agrees(obs, sink, figures.pop(), len(rows.pruned)):
            yield Violation(
                "loss-count-disagrees",
                f"{run}: rows pruned before read: {said}; the sink lacks {sink} of the "
                f"{len(rows.pruned)} rows TraceML pruned",
            )


def _agrees(obs: Observation, lost: int, said: float | None, pruned: int) -> bool:
    """The follower's count of pruned rows against the sink's: equal, but where a follower
    was killed or a call hung a row can be in the sink unacknowledged (a flush returned,
    the bookmark not yet saved), then pruned and counted: at least what the sink lacks,
    at most what TraceML pruned."""
    said = said or 0
    if any(s.ended_by == "SIGKILL" for s in obs.segments) or any(
        m == "hang" for _, m, _ in obs.switches
    ):
        return lost <= said <= pruned
    return said == lost


def _exit_codes(obs: Observation) -> Iterator[Violation]:
    """A follower that ended by itself or by SIGTERM exits non-zero when a run it wrote
    the status of lost rows or failed, and when a run it followed was deleted unsent."""
    for segment in obs.segments:
        if segment.exit_code != 0:
            continue
        bad = []
        for run, snap in segment.snapshot.items():
            status = snap.get("status") or {}
            if run in obs.deleted or float(status.get("updated") or 0) < segment.start:
                continue
            if status.get("rows_pruned"):
                bad.append(f"{run} lost {status['rows_pruned']} rows to retention")
            if status.get("end") == "exporter-failed":
                bad.append(f"{run}'s exporter failed")
            lost = {r: n for r, n in (status.get("lost") or {}).items() if n and r != "interrupted"}
            if lost and not status.get("rows_pruned"):
                bad.append(f"{run} lost rows {lost}")
        for run, at in obs.deleted.items():
            rows = _rows(obs, run)
            if segment.start <= at <= (segment.end or at) and _had(obs, segment, run, at):
                unsent = set(rows.written) - rows.in_sink
                if unsent:
                    bad.append(f"{run} was deleted with {len(unsent)} rows unsent")
        if bad:
            yield Violation(
                "exit-code-hides-loss",
                f"follow #{segment.index} exited 0 ({segment.ended_by}) while {'; '.join(bad)}",
            )


def _had(obs: Observation, segment: Segment, run: str, before: float) -> bool:
    """``segment``'s follower followed ``run`` before ``before``: its progress lines name
    it (not to pass it over, nor as the run it still waits for), or its /metrics showed
    it in a state other than ``waiting`` (a ``--session-root`` follower shows the run it
    awaits from its first second; one that never saw the run has nothing to name)."""
    said = re.search(rf"follow {re.escape(run)}: (?!{PASSED}|{WAITING})", segment.err)
    return said is not None or any(
        s["segment"] == segment.index
        and s["t"] < before
        and _has_series(s, run)
        and not _awaited(s, run)
        for s in obs.scrapes
    )


def _awaited(scrape: dict[str, Any], run: str) -> bool:
    """The scrape shows ``run`` as the run its follower still waits for."""
    return any(
        labels.get("run") == run and labels.get("state") == "waiting" and value == 1
        for name, labels, value in scrape["metrics"]
        if name.endswith("_state")
    )


def _unsent(rows: _Rows, sink: Iterable[str], at: float) -> set[int]:
    return rows.still_there(at) - rows.ids(sink)


def _left_and_counted(rows: _Rows, snap: dict[str, Any]) -> tuple[set[int], int]:
    """The rows a run's ended follow left unsent at its end, and how many its
    ``status.json`` counts as lost (any reason)."""
    status = snap.get("status") or {}
    since = float(status.get("since") or snap["at"]) - UNCOUNTED_MARGIN_S
    counted = sum(int(n) for n in (status.get("lost") or {}).values())
    return _unsent(rows, snap["sink"], since), counted


def _follow_end(segment: Segment, run: str) -> float | None:
    """When ``segment``'s follower ended its follow of ``run`` (its status, at the
    follower's end, says an ended state since then); None: it went on to the follower's
    end."""
    status = (segment.snapshot.get(run) or {}).get("status") or {}
    if status.get("state") not in ENDED or float(status.get("updated") or 0) < segment.start:
        return None
    since = float(status.get("since") or 0)
    return since if since >= segment.start else None


def _ended_counted(obs: Observation, segment: Segment, run: str) -> float | None:
    """``_follow_end``, where that follow counted every row it left unsent as lost."""
    since = _follow_end(segment, run)
    if since is None:
        return None
    left, counted = _left_and_counted(_rows(obs, run), segment.snapshot[run])
    return since if len(left) <= counted else None


def _complete(obs: Observation) -> Iterator[Violation]:
    for segment in obs.segments:
        for run, snap in segment.snapshot.items():
            status = snap.get("status") or {}
            if run in obs.deleted and obs.deleted[run] <= snap["at"]:
                continue
            rows = _rows(obs, run)
            unsent = _unsent(rows, snap["sink"], snap["at"])
            fresh = float(status.get("updated") or 0) >= segment.start
            if fresh and status.get("end") == "complete" and unsent:
                yield Violation(
                    "complete-with-rows-unsent",
                    f"follow #{segment.index} (exit {segment.exit_code}): {run}'s status end "
                    f"'complete' with {_first(unsent)} not in the sink",
                )
            if fresh and status.get("state") in ENDED:
                left, counted = _left_and_counted(rows, snap)
                if len(left) > counted:
                    yield Violation(
                        "loss-not-counted",
                        f"follow #{segment.index} (exit {segment.exit_code}, {segment.ended_by}): "
                        f"{run} ended {status.get('end')!r} with {_first(left)} not in the sink, "
                        f"{counted} counted as lost in status.json ({status.get('lost')})",
                    )
            passed = re.search(rf"follow {re.escape(run)}: exported already", segment.err)
            if passed and unsent:
                yield Violation(
                    "complete-with-rows-unsent",
                    f"follow #{segment.index} passed "
                    f"{run} over as exported already with {_first(unsent)} unsent",
                )
            if obs.where == "session-root" and segment.exit_code == 0:
                lost = unsent | (set(rows.written) - rows.in_sink) & rows.pruned
                if lost or status.get("end") != "complete":
                    yield Violation(
                        "complete-with-rows-unsent",
                        f"follow #{segment.index} exited 0"
                        f" (end {status.get('end')!r}) with {_first(lost)} not delivered",
                    )
            if (
                fresh
                and status.get("end") == "exporter-failed"
                and not status.get("exporter_failures")
            ):
                yield Violation(
                    "failure-not-counted",
                    f"follow #{segment.index}: {run} ended "
                    "exporter-failed with exporter_failures 0",
                )


def _sigterm(obs: Observation) -> Iterator[Violation]:
    bound = obs.shutdown_timeout + SIGTERM_MARGIN_S
    for segment in obs.segments:
        if not segment.ended_by.startswith("SIGTERM") or segment.signal_at is None:
            continue
        took = (segment.end or segment.signal_at) - segment.signal_at
        if took > bound or "SIGKILL" in segment.ended_by:
            yield Violation(
                "sigterm-too-slow",
                f"follow #{segment.index} took {took:.1f} s to end "
                f"after SIGTERM (bound {bound:g} s; exit {segment.exit_code})",
            )
        # one that had ended by itself (a killed or deleted run) as it came has none to
        # name: it had printed its summary, or its one run's follow was over already
        over = obs.where == "session-root" and all(
            (snap.get("status") or {}).get("state") in ENDED
            and float((snap.get("status") or {}).get("since") or 0) >= segment.start
            and (snap.get("status") or {}).get("end") in RUN_ENDS
            for snap in segment.snapshot.values()
        )
        if "SIGTERM" not in segment.out + segment.err and not (segment.done_before_signal or over):
            yield Violation(
                "sigterm-not-named",
                f"follow #{segment.index} (exit {segment.exit_code}) never says SIGTERM",
            )


def _switch_periods(obs: Observation, run: str) -> list[tuple[float, float, str]]:
    """(from, to, mode) of the switch as ``run`` sees it (its own switch wins)."""
    own: str | None = None
    common = "up"
    changes: list[tuple[float, str]] = []
    for t, mode, target in sorted(obs.switches, key=lambda s: s[0]):
        if target == "*":
            own, common = None, mode
        elif target is None:
            common = mode
        elif target == run:
            own = mode
        changes.append((t, own or common))
    periods = []
    for i, (t, mode) in enumerate(changes):
        end = changes[i + 1][0] if i + 1 < len(changes) else float("inf")
        periods.append((t, end, mode))
    return periods


def _visibility(obs: Observation) -> Iterator[Violation]:
    deadline = 2 * obs.poll_interval
    seen: set[tuple[str, float]] = set()
    for t, run, method, mode, phase in sorted(obs.calls):
        kind = mode.split(":")[0]
        if phase != "start" or kind not in ("down", "hang", "permanent"):
            continue
        period = next(
            (p for p in _switch_periods(obs, run) if p[0] <= t < p[1] and p[2] == mode), None
        )
        if period is None or (run, period[0]) in seen:
            continue
        seen.add((run, period[0]))
        what = f"{run}'s sink {mode} from {method} at +{t - obs.started:.2f} s"
        # a permanent failure ends the run's follow: its state ``failed`` is what shows it
        live = kind != "permanent"
        shown = _within(
            obs, run, t, deadline, period[1], functools.partial(_troubled, run=run, kind=kind), live
        )
        if shown is not None and not shown[1]:
            yield Violation(
                "fault-not-in-metrics",
                f"follow #{shown[0]}: {what}: /metrics showed nothing within {deadline:g} s "
                f"(+{TOLERANCE_S:g} s)",
            )
        if kind == "permanent":
            continue  # its own state and a failure count, not /healthz (issue 39)
        # a hung call is one running --stuck-after (where follow has it); then the deadline
        extra = (obs.stuck_after or 0.0) if kind == "hang" else 0.0
        health = _within(
            obs, run, t, extra + deadline, period[1], lambda s: s["health"] != 200, live
        )
        if health is not None and not health[1]:
            yield Violation(
                "fault-not-in-healthz",
                f"follow #{health[0]}: {what}: /healthz answered 200 for {extra + deadline:g} s "
                f"(+{TOLERANCE_S:g} s)",
            )
    yield from _pruned_in_time(obs, deadline)


def _within(
    obs: Observation,
    run: str,
    t: float,
    deadline: float,
    fault_end: float,
    shows: Callable[[dict[str, Any]], bool],
    live: bool = False,
) -> tuple[int, bool] | None:
    """Whether a scrape within ``deadline`` (+ the tolerance) of ``t`` ``shows`` it, with
    the follower's number; None when there is nothing to judge: the fault ended first, no
    one follower lived through the window, nothing was scraped in it, or (``live``) the
    run's follow ended in it (a drain at its end bounded by ``--shutdown-timeout``: the
    call abandoned, the run ``done``, its exit code and warning say so)."""
    end = t + deadline + TOLERANCE_S
    segment = _segment_at(obs, t, end + SCRAPE_S)
    if fault_end < end + SCRAPE_S or segment is None or run in obs.deleted:
        return None
    over = _follow_end(segment, run) if live else None
    if over is not None and over < end + SCRAPE_S:
        return None
    # a follower whose follow is over closes /metrics (a session's that failed) and goes:
    # a window it closed in judges nothing (its exit code says it)
    scrapes = _scrapes(obs, segment.index, t, end)
    if not scrapes or any(s["metrics_code"] != 200 for s in scrapes):
        return None
    return segment.index, any(shows(s) for s in scrapes)


def _pruned_in_time(obs: Observation, deadline: float) -> Iterator[Violation]:
    for run in obs.ledgers:
        if run in obs.deleted:
            continue
        rows = _rows(obs, run)
        lost = (set(rows.written) - rows.in_sink) & rows.pruned
        down = [(a, b) for a, b, mode in _switch_periods(obs, run) if mode in ("down", "permanent")]
        before = 0
        for t, upto in sorted(rows.prunes):
            fresh = {i for i in lost if before < i <= upto}
            before = max(before, upto)
            outage = next(((a, b) for a, b in down if a <= t < b), None)
            if outage is None or not {
                i for i in fresh if rows.written[i] > outage[0] + obs.poll_interval
            }:
                continue
            end = t + deadline + TOLERANCE_S
            segment = _segment_at(obs, t, end + SCRAPE_S)
            if segment is None or outage[1] < end:
                continue
            # a follow over (its unsent rows counted lost, each once) does not count them again
            over = _ended_counted(obs, segment, run)
            if over is not None and over < end + SCRAPE_S:
                continue
            earlier = [s for s in obs.scrapes if s["segment"] == segment.index and s["t"] < t]
            base = _value(earlier[-1], PRUNED_TOTAL, run) if earlier else None
            window = [_value(s, PRUNED_TOTAL, run) for s in _scrapes(obs, segment.index, t, end)]
            if base is None or not window:
                continue
            if not any(v is not None and v > base for v in window):
                yield Violation(
                    "pruned-not-counted-when-pruned",
                    f"follow #{segment.index}: {run}: "
                    f"TraceML pruned {_first(fresh)} at +{t - obs.started:.2f} s during an "
                    f"outage; rows_pruned_total stayed {base:g} for {deadline:g} s "
                    f"(+{TOLERANCE_S:g} s)",
                )


def _deleted(obs: Observation) -> Iterator[Violation]:
    grace = 2 * 0.5 + 1.0  # two --runs-poll-interval and a second
    for run, at in obs.deleted.items():
        if (obs.final.get(run) or {}).get("exists"):
            yield Violation(
                "deleted-run-recreated",
                f"{run}'s folder, deleted, is there again at the end (the follower wrote into it)",
            )
        segment = _segment_at(obs, at, at + grace)
        if segment is None or not _had(obs, segment, run, at):
            continue  # no follower had the run when it went
        if not re.search(
            rf"{re.escape(run)}\b.*delet|delet.*\b{re.escape(run)}\b",
            segment.out + segment.err,
            re.I,
        ):
            yield Violation(
                "deleted-run-not-named", f"follow #{segment.index} never names {run} as deleted"
            )
        later = [s for s in obs.scrapes if s["segment"] == segment.index and s["t"] >= at + grace]
        stale = [
            s
            for s in later
            if _has_series(s, run)
            and not any(
                "delet" in labels.get("state", "") and value == 1
                for name, labels, value in s["metrics"]
                if labels.get("run") == run
            )
        ]
        if stale:
            yield Violation(
                "deleted-run-still-in-metrics",
                f"follow #{segment.index}: {run}'s series "
                f"still in /metrics {stale[-1]['t'] - at:.1f} s after its folder was "
                "deleted, not saying so",
            )


def _endings(obs: Observation) -> Iterator[Violation]:
    if not obs.recovery_settled:
        name = "follow-never-ended" if obs.where == "session-root" else "run-never-settled"
        states = obs.unsettled_states
        killed = {r: obs.killed.get(r, ("", 0))[0] or "not killed" for r in obs.unsettled}
        yield Violation(
            name,
            f"after recovery, not ended within --idle-timeout + "
            f"--shutdown-timeout + 20 s: {states} (killed: {killed})",
        )


def _memory(obs: Observation) -> Iterator[Violation]:
    worst = max((s["rss_kb"] or 0 for s in obs.scrapes), default=0)
    if worst > RSS_CEILING_KB:
        yield Violation(
            "rss-over-ceiling", f"follower RSS {worst // 1024} MB > {RSS_CEILING_KB // 1024} MB"
        )


def check(obs: Observation) -> list[Violation]:
    """Every invariant broken in ``obs``, by name (empty: all held)."""
    out: list[Violation] = []
    for part in (
        _delivery,
        _exit_codes,
        _complete,
        _sigterm,
        _visibility,
        _deleted,
        _endings,
        _memory,
    ):
        out.extend(part(obs))
    return out
