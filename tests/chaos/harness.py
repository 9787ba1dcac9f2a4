"""Run schedules and report: ``python -m chaos --seeds N`` (seeds 0..N-1, or from
``--first``), ``--seed S`` to replay one, ``--real N`` for N schedules of real
``traceml run`` jobs (torch and traceml-ai installed; ``--first S --real 1`` replays
one); each schedule is printed with what it broke. Exit 0 when every invariant held
in every schedule, 1 otherwise, 2 when real runs cannot be made here."""

from __future__ import annotations

import argparse
import collections
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .driver import Observation, execute
from .invariants import Violation, check
from .real import available
from .schedule import FAULTS, Schedule, generate

__all__ = ["Outcome", "main", "run_seed"]


@dataclass
class Outcome:
    schedule: Schedule
    violations: list[Violation]
    seconds: float
    work: Path
    slip: float = 0.0

    def report(self) -> str:
        slip = f" (runs started {self.slip:.1f} s late in all)" if self.slip >= 1 else ""
        head = (
            f"{self.schedule}\n  -> {len(self.violations)} violation(s) in "
            f"{self.seconds:.1f} s{slip}"
        )
        return "\n".join([head, *(f"     {v}" for v in self.violations)])


def run_seed(seed: int, work: Path, *, real: bool = False) -> Outcome:
    """Generate, execute and check the schedule of ``seed`` in the folder ``work``
    (``real``: beside real ``traceml run`` jobs)."""
    schedule = generate(seed, real=real)
    started = time.monotonic()
    observation = execute(schedule, work)
    seconds = time.monotonic() - started
    return Outcome(schedule, check(observation), seconds, work, observation.slip)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("--seeds", type=int, default=20, help="how many schedules (default 20)")
    parser.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--seed", type=int, action="append", help="replay this seed (repeatable)")
    parser.add_argument(
        "--real",
        type=int,
        metavar="N",
        help="N schedules of real `traceml run` jobs (from --first) instead of synthetic runs",
    )
    parser.add_argument(
        "--jobs", type=int, help="schedules at once (default 2; 1 with --real: torch is heavy)"
    )
    parser.add_argument("--keep", type=Path, help="keep each schedule's folder under this one")
    parser.add_argument("--dry-run", action="store_true", help="print the schedules, run none")
    parser.add_argument(
        "--recheck", type=Path, help="judge the kept folders under this one again, run nothing"
    )
    args = parser.parse_args(argv)
    if args.recheck is not None:
        return _recheck(args.recheck)
    real = args.real is not None
    count = args.real if real else args.seeds
    seeds = list(dict.fromkeys(args.seed or range(args.first, args.first + count)))
    kind = "real schedules" if real else "schedules"
    if args.dry_run:
        for seed in seeds:
            print(generate(seed, real=real))
        print(f"\n{len(seeds)} {kind}, seeds {_ranges(seeds)} (not run: --dry-run)")
        return 0
    if real and (unavailable := available()) is not None:
        print(f"python -m chaos --real: {unavailable}", file=sys.stderr)
        return 2
    root = args.keep or Path(tempfile.mkdtemp(prefix="chaos-"))

    def one(seed: int) -> Outcome:
        work = root / f"seed{seed}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        outcome = run_seed(seed, work, real=real)
        print(outcome.report(), flush=True)
        if args.keep is None and not outcome.violations:
            shutil.rmtree(work, ignore_errors=True)
        return outcome

    jobs = args.jobs if args.jobs is not None else 1 if real else 2
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        outcomes = list(pool.map(one, seeds))
    broken: dict[str, list[int]] = collections.defaultdict(list)
    for outcome in outcomes:
        for name in sorted({v.name for v in outcome.violations}):
            broken[name].append(outcome.schedule.seed)
    covered = collections.Counter(f for o in outcomes for f in o.schedule.faults)
    modes = collections.Counter(o.schedule.where for o in outcomes)
    print(f"\n{len(outcomes)} {kind}, seeds {_ranges(seeds)}; modes {dict(modes)}")
    print("faults covered: " + ", ".join(f"{f} {covered[f]}" for f in FAULTS))
    missing = [f for f in FAULTS if not covered[f]]
    if missing:
        print(f"faults never drawn: {', '.join(missing)}")
    if not broken:
        print("every invariant held in every schedule")
        return 0
    for name, which in sorted(broken.items()):
        print(f"{name}: {len(which)} schedule(s), seeds {which}")
    print(f"failed schedules' folders are under {root}")
    return 1


def _recheck(root: Path) -> int:
    """The invariants judged again on every ``observation.json`` under ``root``."""
    broken: dict[str, list[str]] = collections.defaultdict(list)
    paths = sorted(root.glob("*/observation.json"))
    for path in paths:
        for violation in check(Observation.load(path)):
            print(f"{path.parent.name}: {violation}")
            broken[violation.name].append(path.parent.name)
    print(f"\n{len(paths)} observations rechecked")
    for name, which in sorted(broken.items()):
        print(f"{name}: {len(set(which))} schedule(s): {sorted(set(which))}")
    return 1 if broken else 0


def _ranges(seeds: list[int]) -> str:
    if seeds == list(range(seeds[0], seeds[0] + len(seeds))) and len(seeds) > 2:
        return f"{seeds[0]}..{seeds[-1]}"
    return ", ".join(map(str, seeds))


if __name__ == "__main__":
    sys.exit(main())
