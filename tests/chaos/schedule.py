"""Random fault schedules, reproducible by seed: what runs, what breaks, and when.

``generate(seed)`` draws, with ``random.Random(seed)`` alone, how ``follow`` is run
(``--logs-dir`` or ``--session-root``, its timeouts), the runs (when each starts, how
long it writes, how fast, its retention) and a list of timed fault steps from
``FAULTS``. ``str(schedule)`` prints all of it, so a failure names its seed and what
was done; ``generate`` of the same seed gives the same schedule everywhere.
``generate(seed, real=True)`` draws one of real ``traceml run`` jobs (``chaos.real``):
one or two runs, each training for ``seconds`` with a step every ``every`` seconds,
TraceML's retention left at its default, the same faults over ``REAL_HORIZON_S``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FAULTS", "RunPlan", "Schedule", "Step", "generate"]

FAULTS = (
    "sink_down",
    "sink_slow",
    "sink_hang",
    "sink_permanent",
    "follow_sigterm",
    "follow_sigkill",
    "run_kill_launcher",
    "run_kill_whole",
    "run_delete",
    "run_appear",
)
"""The fault vocabulary; ``run_end`` (a run finishing on its own) comes with every run."""
STUCK_AFTER_S = 1.5
"""``--stuck-after`` where ``follow`` has it: a call this long is stuck (a slow call, at
most 1 s here, is not)."""
HORIZON_S = 9.0
"""Faults fall within the first this many seconds; then the harness recovers and checks."""
REAL_HORIZON_S = 12.0
"""The same for real runs (their rows come every 0.5 s, a step's every 20-50 ms)."""
REAL_WAIT_S = 150.0
"""``follow --wait`` beside real runs: TraceML's database comes 10-30 s after the start."""


@dataclass(frozen=True)
class RunPlan:
    """One synthetic run: it starts at ``start`` and writes ``rows`` step_time rows every
    ``every`` seconds for ``seconds`` (unless a fault ends it first). A real one
    (``rows`` 0) trains for ``seconds`` once its first rows are written, a step every
    ``every`` seconds."""

    name: str
    start: float
    seconds: float
    every: float
    rows: int
    retention: float | None

    def spec(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "every": self.every,
            "rows": self.rows,
            "retention": self.retention,
        }


@dataclass(frozen=True)
class Step:
    """At ``t`` seconds from the start, do ``action`` (to ``run``, for ``seconds``, ...)."""

    t: float
    action: str
    run: str | None = None
    seconds: float = 0.0
    value: float = 0.0

    def __str__(self) -> str:
        parts = [f"t={self.t:5.2f}", self.action]
        if self.run:
            parts.append(self.run)
        if self.seconds:
            parts.append(f"for {self.seconds:.2f} s")
        if self.value:
            parts.append(f"({self.value:g})")
        return " ".join(parts)


@dataclass(frozen=True)
class Schedule:
    seed: int
    where: str
    """``logs-dir`` or ``session-root``."""
    poll_interval: float
    shutdown_timeout: float
    idle_timeout: float
    runs: tuple[RunPlan, ...]
    steps: tuple[Step, ...] = field(default=())
    real: bool = False
    """Real ``traceml run`` jobs (``chaos.real``), not synthetic runs."""

    @property
    def horizon(self) -> float:
        """When the last fault is over and the last run would end by itself (seconds)."""
        ends = [s.t + s.seconds for s in self.steps] + [r.start + r.seconds for r in self.runs]
        return max(ends, default=0.0)

    @property
    def faults(self) -> set[str]:
        return {s.action for s in self.steps if s.action in FAULTS}

    def follow_args(self, stuck_after: bool = False) -> list[str]:
        """``follow``'s options (``--stuck-after`` only where it has the option)."""
        stuck = ["--stuck-after", str(STUCK_AFTER_S)] if stuck_after else []
        wait = REAL_WAIT_S if self.real else 5
        return [
            *stuck,
            "--poll-interval",
            str(self.poll_interval),
            "--flush-interval",
            "0.2",
            "--retry-max-interval",
            "0.5",
            "--shutdown-timeout",
            str(self.shutdown_timeout),
            "--idle-timeout",
            str(self.idle_timeout),
            "--runs-poll-interval",
            "0.5",
            "--progress-interval",
            "1",
            "--wait",
            f"{wait:g}",
            "--metrics-port",
            "0",
        ]

    def __str__(self) -> str:
        lines = [
            f"seed {self.seed}{' (real traceml run)' if self.real else ''}: "
            f"follow --{self.where}, poll {self.poll_interval} s, "
            f"--shutdown-timeout {self.shutdown_timeout} s, --idle-timeout {self.idle_timeout} s"
        ]
        for run in self.runs:
            if self.real:
                lines.append(
                    f"  run {run.name}: starts t={run.start:.2f}, trains for {run.seconds:.1f} s, "
                    f"a step every {run.every} s"
                )
                continue
            retention = f", retention {run.retention} s" if run.retention else ""
            lines.append(
                f"  run {run.name}: starts t={run.start:.2f}, writes {run.rows} rows every "
                f"{run.every} s for {run.seconds:.1f} s{retention}"
            )
        lines += [f"  {step}" for step in self.steps]
        return "\n".join(lines)


def _run(rng: random.Random, name: str, start: float) -> RunPlan:
    retention = rng.choice([None, None, round(rng.uniform(1.0, 2.5), 2)])
    return RunPlan(
        name=name,
        start=round(start, 2),
        seconds=round(rng.uniform(3.0, 7.0), 2),
        every=rng.choice([0.1, 0.15, 0.25]),
        rows=rng.choice([5, 10, 20]),
        retention=retention,
    )


def _real_run(rng: random.Random, name: str, start: float) -> RunPlan:
    return RunPlan(
        name=name,
        start=round(start, 2),
        seconds=round(rng.uniform(6.0, 12.0), 2),
        every=rng.choice([0.02, 0.05]),
        rows=0,
        retention=None,
    )


def generate(seed: int, *, real: bool = False) -> Schedule:
    """The schedule of ``seed``: 1-4 faults drawn from ``FAULTS`` over ``HORIZON_S``
    (``real``: 1-3 over ``REAL_HORIZON_S`` beside one or two real runs)."""
    rng = random.Random(seed)
    where = rng.choice(["logs-dir", "logs-dir", "session-root"])
    if real:
        count, horizon, make = 1, REAL_HORIZON_S, _real_run
    else:
        count = 1 if where == "session-root" else rng.randint(1, 3)
        horizon, make = HORIZON_S, _run
    runs = [make(rng, f"run{i + 1}", 0.0 if i == 0 else rng.uniform(0, 3)) for i in range(count)]
    vocabulary = [f for f in FAULTS if not (where == "session-root" and f == "run_appear")]
    steps: list[Step] = []
    for _ in range(rng.randint(1, 3 if real else 4)):
        fault = rng.choice(vocabulary)
        if real and fault == "run_appear" and len(runs) > 1:
            fault = "sink_down"  # two real runs at most on two cores
        t = round(rng.uniform(0.5, horizon - 2.0), 2)
        target = rng.choice([r for r in runs if r.start < t] or runs[:1]).name
        if fault == "sink_down":
            steps.append(Step(t, fault, seconds=round(rng.uniform(0.8, 3.0), 2)))
        elif fault == "sink_hang":
            steps.append(Step(t, fault, seconds=round(rng.uniform(1.5, 4.0), 2)))
        elif fault == "sink_slow":
            steps.append(
                Step(
                    t,
                    fault,
                    seconds=round(rng.uniform(1.0, 3.0), 2),
                    value=rng.choice([0.2, 0.5, 1.0]),
                )
            )
        elif fault == "sink_permanent":
            one = where == "logs-dir" and rng.random() < 0.5
            steps.append(Step(t, fault, run=target if one else None))
        elif fault in ("follow_sigterm", "follow_sigkill"):
            steps.append(Step(t, fault))
            steps.append(Step(round(t + rng.uniform(0.0, 1.5), 2), "follow_start"))
        elif fault == "run_appear":
            plan = make(rng, f"run{len(runs) + 1}", t)
            runs.append(plan)
            steps.append(Step(t, fault, run=plan.name))
        else:
            steps.append(Step(t, fault, run=target))
    return Schedule(
        seed=seed,
        where=where,
        poll_interval=0.2,
        shutdown_timeout=rng.choice([1.0, 2.0, 3.0]),
        idle_timeout=rng.choice([3.0, 5.0] if real else [2.0, 3.0]),
        runs=tuple(runs),
        steps=tuple(sorted(steps, key=lambda s: s.t)),
        real=real,
    )
