"""The session run's cross-rank summary: one set of points per step, whatever the ranks.

A step_time or step_memory record is placed in its step (its ``step``; its rank is
``rank``, else ``global_rank``). A rank counts once per step: its last record (per
device, for step_memory) replaces an earlier one. A step is **written** once, when it
is complete (as many ranks as the largest ``world_size`` its records name) or when it
must stop waiting: more than ``wait_steps`` steps of the stream are waiting (the lowest
is written as it is), or ``close()`` (every waiting step is written as it is). A record
of a step already written is *late*: counted, never placed (the step's points are not
written twice). A record with no rank or no step is *unplaced*: counted.

Per written step (``step`` = the step, ``timestamp`` = the latest of its records'):

* ``step_time/ranks``, ``step_memory/ranks``: the ranks in the step;
* ``step_time/<event>/<device>/duration_ms/median``, ``/max``, ``/slowest_rank`` over
  the ranks' ``duration_ms`` (None and NaN left out; the median of an even count is the
  mean of the two middle values; the slowest rank is the lowest rank with the max);
* ``step_memory/<device>/peak_alloc_bytes/max``, ``peak_reserved_bytes/max``.

With ``slowest``, each written step_time step also gives the points of its *slowest
rank* (``slowest_points()``, for the "slowest rank" run): the rank whose ``duration_ms``
values add up to the most (a sum that is NaN, +inf and -inf together, counts as -inf;
ties: the lowest rank), as ``step_time/rank`` (that rank) and that rank's
``step_time/<event>/<device>/duration_ms``, at that rank's time. Only ``duration_ms``:
it is what a waiting step keeps of each rank.

The end-of-run summary (``close()``) covers every step written for the export folder:
``summary/<stream>/steps`` and ``/steps_incomplete``, ``summary/<stream>/late_records``
and ``/unplaced_records``, ``summary/step_time/<event>/<device>/duration_ms/max`` (the
largest per-step max) and ``/median_mean`` (the mean of the finite per-step medians,
exact then rounded once), ``summary/step_memory/<device>/<field>/max``.

What is waiting is kept in ``STATE_FILE`` on every flush (fsynced, replaced atomically),
with the steps already written, and read back by the next exporter on the same export
folder: a process that dies after a flush loses no record of an incomplete step.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from ._mlflow_metrics import metric_key, rank_of, timestamp_ms, wire_value

__all__ = [
    "DEFAULT_WAIT_STEPS",
    "STATE_FILE",
    "SUMMARIZED",
    "Summary",
]

STATE_FILE: Final = "mlflow_summary_state.json"
"""In ``export_dir``: the steps still waiting for ranks, and the steps already written."""
STATE_VERSION: Final = 1
SUMMARIZED: Final = ("step_time", "step_memory")
"""The streams summarized across ranks (the others keep their per-record mapping)."""
DEFAULT_WAIT_STEPS: Final = 64
"""How many steps of a stream may wait for their late ranks before the lowest is written."""
MEMORY_FIELDS: Final = ("peak_alloc_bytes", "peak_reserved_bytes")
_INT64 = (-(1 << 63), (1 << 63) - 1)

Group = tuple[str, str]
"""A series of a step: (event, device) of step_time, (device, field) of step_memory."""
Values = dict[Group, float]
"""One contribution: a value per series (finite or ±inf; None and NaN are left out)."""


def _int64(value: int) -> int:
    return max(_INT64[0], min(value, _INT64[1]))


def _number(value: Any) -> float | None:
    """A measure as a float, or None when it is None, a flag or NaN."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond any float
        number = math.copysign(math.inf, value)
    return None if math.isnan(number) else number


def median(values: list[float]) -> float:
    """The middle value, or for an even count ``(a + b) / 2`` of the two middle ones."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def contribution(stream: str, data: Mapping[str, Any]) -> tuple[str, Values]:
    """The part of a step a record fills (``""``, or its device for step_memory) and its
    values."""
    values: Values = {}
    if stream == "step_time":
        for event, devices in (data.get("events") or {}).items():
            for device, stats in devices.items():
                number = _number(stats.get("duration_ms"))
                if number is not None:
                    values[(str(event), str(device))] = number
        return "", values
    device = str(data.get("device"))
    for name in MEMORY_FIELDS:
        number = _number(data.get(name))
        if number is not None:
            values[(device, name)] = number
    return device, values


def _encode(value: float) -> float | str:
    return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")


def _decode(value: float | str) -> float:
    return float(value)


def _name(text: str) -> str:
    """A name as the state file keeps it: its UTF-8 bytes (lone surrogates passed
    through) read as Latin-1, so any text, a lone surrogate included, is valid JSON."""
    return text.encode("utf-8", "surrogatepass").decode("latin-1")


def _unname(text: str) -> str:
    return text.encode("latin-1").decode("utf-8", "surrogatepass")


@dataclass
class _Step:
    """A step still waiting for ranks: what each rank gave (by part), and the world size."""

    world: int | None = None
    ranks: dict[int, dict[str, tuple[int, Values]]] = field(default_factory=dict)


@dataclass
class _Totals:
    """The end-of-run figures of one series: the largest max, the finite medians' sum."""

    most: float = -math.inf
    medians: int = 0
    median_sum: Fraction = Fraction(0)


@dataclass
class _Stream:
    """One summarized stream: the waiting steps, the written ones (as closed ranges)."""

    waiting: dict[int, _Step] = field(default_factory=dict)
    written: list[list[int]] = field(default_factory=list)
    steps: int = 0
    incomplete: int = 0
    late: int = 0
    unplaced: int = 0
    totals: dict[Group, _Totals] = field(default_factory=dict)

    def is_written(self, step: int) -> bool:
        index = bisect.bisect_right(self.written, [step, _INT64[1]]) - 1
        return index >= 0 and self.written[index][0] <= step <= self.written[index][1]

    def mark_written(self, step: int) -> None:
        index = bisect.bisect_left(self.written, [step, step])
        self.written.insert(index, [step, step])
        merged: list[list[int]] = []
        for low, high in self.written:
            if merged and low <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], high)
            else:
                merged.append([low, high])
        self.written = merged


class Summary:
    """The cross-rank summary of step_time and step_memory: ``place`` records, take the
    points of the steps written with ``points()``."""

    def __init__(self, wait_steps: int = DEFAULT_WAIT_STEPS, *, slowest: bool = False) -> None:
        self.wait_steps = wait_steps
        self.slowest = slowest
        self.streams = {name: _Stream() for name in SUMMARIZED}
        self._out: list[dict[str, Any]] = []
        self._slowest_out: list[dict[str, Any]] = []

    # -- placing records ---------------------------------------------------------------

    def place(self, stream: str, data: Mapping[str, Any]) -> None:
        """Put a record in its step; a step it completes (or pushes out) is written."""
        state = self.streams[stream]
        rank, step = rank_of(data), data.get("step")
        if rank is None or not isinstance(step, int) or isinstance(step, bool):
            state.unplaced += 1
            return
        step = _int64(step)
        if state.is_written(step):
            state.late += 1
            return
        waiting = state.waiting.get(step)
        if waiting is None:
            waiting = state.waiting[step] = _Step()
        world = data.get("world_size")
        if isinstance(world, int) and not isinstance(world, bool):
            world = _int64(world)
            waiting.world = world if waiting.world is None else max(waiting.world, world)
        part, values = contribution(stream, data)
        waiting.ranks.setdefault(_int64(rank), {})[part] = (timestamp_ms(data), values)
        if waiting.world is not None and len(waiting.ranks) >= waiting.world:
            self._write(stream, step, complete=True)
        while len(state.waiting) > self.wait_steps:
            self._write(stream, min(state.waiting), complete=False)

    def finish(self) -> None:
        """Write every waiting step as it is (``close()``)."""
        for stream, state in self.streams.items():
            for step in sorted(state.waiting):
                self._write(stream, step, complete=False)

    def points(self) -> list[dict[str, Any]]:
        """The points of the steps written since the last call."""
        out, self._out = self._out, []
        return out

    def slowest_points(self) -> list[dict[str, Any]]:
        """The slowest ranks' points of the step_time steps written since the last call
        (none unless ``slowest``)."""
        out, self._slowest_out = self._slowest_out, []
        return out

    @property
    def waiting(self) -> int:
        return sum(len(s.waiting) for s in self.streams.values())

    # -- writing a step ----------------------------------------------------------------

    def _write(self, stream: str, step: int, *, complete: bool) -> None:
        state = self.streams[stream]
        waiting = state.waiting.pop(step)
        state.mark_written(step)
        state.steps += 1
        state.incomplete += 0 if complete else 1
        by_group: dict[Group, list[tuple[int, float]]] = {}
        stamp = 0
        for rank, parts in waiting.ranks.items():
            for when, values in parts.values():
                stamp = max(stamp, when)
                for group, value in values.items():
                    by_group.setdefault(group, []).append((rank, value))

        def point(key: str, value: float) -> None:
            self._out.append(
                {
                    "key": metric_key(key),
                    "value": wire_value(value),
                    "timestamp": stamp,
                    "step": step,
                }
            )

        point(f"{stream}/ranks", float(len(waiting.ranks)))
        for group, found in by_group.items():
            totals = state.totals.setdefault(group, _Totals())
            most = max(value for _, value in found)
            totals.most = max(totals.most, most)
            if stream == "step_time":
                event, device = group
                base = f"step_time/{event}/{device}/duration_ms"
                middle = median([value for _, value in found])
                point(f"{base}/median", middle)
                point(f"{base}/max", most)
                point(f"{base}/slowest_rank", float(min(r for r, v in found if v == most)))
                if math.isfinite(middle):
                    totals.medians += 1
                    totals.median_sum += Fraction(middle)
            else:
                device, name = group
                point(f"step_memory/{device}/{name}/max", most)
        if self.slowest and stream == "step_time" and waiting.ranks:
            self._write_slowest(step, waiting)

    def _write_slowest(self, step: int, waiting: _Step) -> None:
        """The points of the step's slowest rank (the largest sum of its durations)."""

        def total(rank: int) -> float:
            found = sum(waiting.ranks[rank][""][1].values())
            return -math.inf if math.isnan(found) else found

        slowest = max(sorted(waiting.ranks), key=total)  # the first of equals: the lowest
        when, values = waiting.ranks[slowest][""]
        rows = [("step_time/rank", float(slowest))]
        rows += [(f"step_time/{e}/{d}/duration_ms", value) for (e, d), value in values.items()]
        self._slowest_out += [
            {"key": metric_key(key), "value": wire_value(value), "timestamp": when, "step": step}
            for key, value in rows
        ]

    # -- the end-of-run summary ----------------------------------------------------------

    def end_of_run(self) -> dict[str, float]:
        """The end-of-run figures, by metric key (see the module's text)."""
        out: dict[str, float] = {}
        for stream, state in self.streams.items():
            out[metric_key(f"summary/{stream}/steps")] = float(state.steps)
            out[metric_key(f"summary/{stream}/steps_incomplete")] = float(state.incomplete)
            out[metric_key(f"summary/{stream}/late_records")] = float(state.late)
            out[metric_key(f"summary/{stream}/unplaced_records")] = float(state.unplaced)
            for (first, second), totals in state.totals.items():
                if stream == "step_time":
                    base = f"summary/step_time/{first}/{second}/duration_ms"
                    out[metric_key(f"{base}/max")] = totals.most
                    if totals.medians:
                        mean = float(totals.median_sum / totals.medians)
                        out[metric_key(f"{base}/median_mean")] = mean
                else:
                    out[metric_key(f"summary/step_memory/{first}/{second}/max")] = totals.most
        return out

    # -- the state file -------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Everything a later exporter on the same folder needs, as JSON values."""
        streams: dict[str, Any] = {}
        for name, s in self.streams.items():
            streams[name] = {
                "waiting": [
                    [
                        step,
                        waiting.world,
                        [
                            [
                                rank,
                                _name(part),
                                when,
                                [[_name(g[0]), _name(g[1]), _encode(v)] for g, v in values.items()],
                            ]
                            for rank, parts in waiting.ranks.items()
                            for part, (when, values) in parts.items()
                        ],
                    ]
                    for step, waiting in s.waiting.items()
                ],
                "written": s.written,
                "counts": [s.steps, s.incomplete, s.late, s.unplaced],
                "totals": [
                    [_name(g[0]), _name(g[1]), _encode(t.most), t.medians, str(t.median_sum)]
                    for g, t in s.totals.items()
                ],
            }
        return {"version": STATE_VERSION, "streams": streams}

    def load(self, state: Mapping[str, Any]) -> None:
        """Take over what an earlier exporter kept (``state()``)."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"{STATE_FILE} has version {state.get('version')!r}, expected 1")
        for name, saved in state["streams"].items():
            s = self.streams[name]
            for step, world, parts in saved["waiting"]:
                waiting = s.waiting.setdefault(step, _Step(world=world))
                for rank, part, when, values in parts:
                    decoded = {(_unname(a), _unname(b)): _decode(v) for a, b, v in values}
                    waiting.ranks.setdefault(rank, {})[_unname(part)] = (when, decoded)
            s.written = [list(pair) for pair in saved["written"]]
            s.steps, s.incomplete, s.late, s.unplaced = saved["counts"]
            for a, b, most, medians, total in saved["totals"]:
                s.totals[(_unname(a), _unname(b))] = _Totals(
                    _decode(most), medians, Fraction(total)
                )
