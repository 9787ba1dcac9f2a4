"""Mutation testing of an exporter: every mutant of its modules against the conformance suite.

``python tests/mutation/run.py jsonl`` (the SDK's jsonl exporter) or
``python tests/mutation/run.py sqlite --baked DIR`` (a sink baked by cookiecutter,
installed, ``DIR`` its project folder). Each mutant (``testing/_mutation.py``) is written into a
worker's own copy of the package, which ``PYTHONPATH`` puts before the installed one
(so the suite's fresh-interpreter checks see it too). The suite runs on it with ``-x``;
a mutant it does not kill then meets the exporter's own tests. ``--jobs`` mutants run
side by side.

Every mutant the suite leaves alive must be in the reviewed list
(``survivors.toml``) with its class: ``equivalent`` (changes nothing observable),
``format`` (breaks only what the exporter's own docs promise: its own tests' job) or
``contract`` (breaks the export contract: the suite's job). A mutant the suite kills
breaks the contract by definition. Per module, the run prints the suite's score on the
contract mutants and the score of the suite with the own tests on every non-equivalent
mutant, and exits 1 when a survivor is not reviewed or a score is under its target
(``SUITE_TARGET``, ``COMBINED_TARGET``). The throughput check is left out: two mutants
running side by side on shared cores would make its floor a coin toss.
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import tomllib
from traceml_exporter_sdk.testing._mutation import Mutant, PackageCopy, package_mutants

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

SUITE_TARGET = 0.95
"""The suite alone must kill this share of the contract mutants."""
COMBINED_TARGET = 0.90
"""The suite with the exporter's own tests must kill this share of the non-equivalent ones."""
CLASSES = ("equivalent", "format", "contract")
SURVIVORS = HERE / "survivors.toml"

SUITE_ONLY = ["-k", "not test_throughput"]
PYTEST = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]

JSONL_SUITE = """
from traceml_exporter_sdk.testing import ExporterConformance


class TestJsonl(ExporterConformance):
    factory = "traceml_exporter_sdk.jsonl:make_exporter"
"""


@dataclass(frozen=True)
class Target:
    """What to mutate and how to test it: files under ``package_root``, two pytest runs."""

    name: str
    package_root: Path
    """The folder that holds the package (what PYTHONPATH names)."""
    package: str
    modules: tuple[str, ...]
    """Files to mutate, relative to the package folder."""
    suite: tuple[str, ...]
    """pytest arguments of the suite alone (``{work}`` is the worker's folder)."""
    own: tuple[str, ...]
    """pytest arguments of the exporter's own tests."""
    cwd: Path
    extra_path: tuple[str, ...] = ()


def jsonl_target() -> Target:
    own = (
        "tests/runtime/test_runtime_jsonl.py",
        "tests/runtime/test_runtime_jsonl_parts.py",
        "tests/mapping/test_long_values.py",
    )
    return Target(
        name="jsonl",
        package_root=ROOT / "sdk" / "src",
        package="traceml_exporter_sdk",
        modules=("jsonl.py",),
        suite=("{work}/test_suite_jsonl.py", "--rootdir={work}", "-c", "{work}/pytest.ini"),
        own=own,
        cwd=ROOT,
    )


def baked_target(name: str, project: Path) -> Target:
    """A baked sink: every module of its package but ``__init__``, against its tests."""
    (package_dir,) = [p for p in (project / "src").iterdir() if p.is_dir()]
    modules = tuple(sorted(p.name for p in package_dir.glob("*.py") if p.name != "__init__.py"))
    conformance = project / "tests" / "test_conformance.py"
    (suite_class,) = [
        line.split("(")[0].removeprefix("class ")
        for line in conformance.read_text(encoding="utf-8").splitlines()
        if line.startswith("class Test") and "(ExporterConformance)" in line
    ]
    return Target(
        name=name,
        package_root=project / "src",
        package=package_dir.name,
        modules=modules,
        suite=(f"{conformance}::{suite_class}",),
        own=("tests", f"--deselect=tests/test_conformance.py::{suite_class}"),
        cwd=project,
    )


@dataclass
class Outcome:
    """One mutant's fate in each run: ``survived`` (pytest passed), ``killed`` (a test
    failed, or the mutant broke collection), ``timeout`` (counted as killed) or
    ``error`` (pytest could not test it: internal or usage error, nothing collected, a
    signal); an ``error`` fails the session, since nothing was learnt about the mutant."""

    mutant: Mutant
    module: str
    suite: str
    own: str = "not run"
    seconds: float = 0.0

    @property
    def killed_by_suite(self) -> bool:
        return self.suite in ("killed", "timeout")

    @property
    def killed(self) -> bool:
        return self.killed_by_suite or self.own in ("killed", "timeout")

    @property
    def error(self) -> bool:
        return "error" in (self.suite, self.own)


@dataclass
class Worker:
    """A copy of the package (the mutant goes there) and the folder of the jsonl suite."""

    copy: PackageCopy
    target: Target

    @classmethod
    def make(cls, target: Target, folder: Path) -> Worker:
        copy = PackageCopy.make(target.package_root / target.package, folder, *target.extra_path)
        (folder / "test_suite_jsonl.py").write_text(JSONL_SUITE, encoding="utf-8")
        (folder / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n", encoding="utf-8")
        return cls(copy, target)

    def run(
        self, args: Sequence[str], timeout: float, *, module: str = "", mutant: Mutant | None = None
    ) -> str:
        command = [*PYTEST, *(a.replace("{work}", str(self.copy.folder)) for a in args)]
        if mutant is None:
            return self.copy.pytest(command, self.target.cwd, timeout)
        return self.copy.with_mutant(module, mutant, command, self.target.cwd, timeout)


def baseline(worker: Worker) -> tuple[float, float]:
    """Both runs on the unmutated code must pass; their durations set the timeouts."""
    times = []
    for args in (worker.target.suite + tuple(SUITE_ONLY), worker.target.own):
        start = time.monotonic()
        said = worker.run(args, timeout=1800)
        if said != "survived":
            raise SystemExit(f"the unmutated {worker.target.name} fails {' '.join(args)}")
        times.append(time.monotonic() - start)
    return times[0], times[1]


def run_all(
    target: Target,
    selected: Sequence[tuple[str, Mutant]],
    jobs: int,
    workdir: Path,
    timeouts: tuple[float, float] | None = None,
    *,
    own_only: bool = False,
) -> list[Outcome]:
    workers: queue.Queue[Worker] = queue.Queue()
    for index in range(jobs):
        workers.put(Worker.make(target, workdir / f"worker-{index}"))
    if timeouts is None:
        suite_s, own_s = baseline(workers.queue[0])
        timeouts = (3 * suite_s + 30, 3 * own_s + 30)
        print(f"{target.name}: baseline suite {suite_s:.1f} s, own tests {own_s:.1f} s", flush=True)
    lock = threading.Lock()
    done: list[Outcome] = []

    def one(item: tuple[str, Mutant]) -> Outcome:
        module, mutant = item
        worker = workers.get()
        start = time.monotonic()
        try:
            if own_only:  # a reviewed survivor of the suite, checked against the own tests
                outcome = Outcome(mutant, module, "survived")
            else:
                suite = (*target.suite, *SUITE_ONLY)
                said = worker.run(suite, timeouts[0], module=module, mutant=mutant)
                outcome = Outcome(mutant, module, said)
            if outcome.suite == "survived":
                outcome.own = worker.run(target.own, timeouts[1], module=module, mutant=mutant)
        finally:
            workers.put(worker)
        outcome.seconds = time.monotonic() - start
        with lock:
            done.append(outcome)
            said = (
                "ERROR: pytest tested nothing"
                if outcome.error
                else "killed by the suite"
                if outcome.killed_by_suite
                else ("killed by its own tests" if outcome.killed else "SURVIVED")
            )
            print(
                f"[{len(done)}/{len(selected)}] {mutant.id} ({outcome.seconds:.0f} s): {said}",
                flush=True,
            )
        return outcome

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, selected))


@dataclass(frozen=True)
class Review:
    """One reviewed survivor: its class, the change it was reviewed for, and why."""

    kind: str
    change: str
    """The mutant's one-line description when it was reviewed (``--list`` prints it)."""
    reason: str


def load_reviewed(target: str, path: Path = SURVIVORS) -> dict[str, Review]:
    """The reviewed survivors of ``target``: mutant id -> its review."""
    data = tomllib.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    out = {}
    for mutant_id, entry in data.get(target, {}).items():
        kind, change, reason = entry.get("class"), entry.get("change", ""), entry.get("reason", "")
        if kind not in CLASSES or not reason.strip() or not change.strip():
            raise SystemExit(
                f"{path}: [{target}] {mutant_id!r} needs a class of {CLASSES}, the change "
                "it was reviewed for and a reason"
            )
        out[mutant_id] = Review(kind, change, reason)
    return out


@dataclass
class Score:
    """The figures of one module (or of all of a target's)."""

    mutants: int = 0
    suite_killed: int = 0
    killed: int = 0
    equivalent: int = 0
    contract_survivors: int = 0
    unreviewed: list[str] = field(default_factory=list)
    """Survivors the list does not name."""
    stale: list[str] = field(default_factory=list)
    """Survivors the list names for another change (the code moved under the id)."""
    errors: list[str] = field(default_factory=list)
    """Mutants pytest could not test: left out of the figures, and a failure."""

    @property
    def contract(self) -> int:
        return self.suite_killed + self.contract_survivors

    @property
    def non_equivalent(self) -> int:
        return self.mutants - self.equivalent

    @property
    def suite_score(self) -> float:
        return self.suite_killed / self.contract if self.contract else 1.0

    @property
    def combined_score(self) -> float:
        return self.killed / self.non_equivalent if self.non_equivalent else 1.0

    def add(self, outcome: Outcome, reviewed: dict[str, Review]) -> None:
        if outcome.error:
            self.errors.append(outcome.mutant.id)
            return
        self.mutants += 1
        self.suite_killed += outcome.killed_by_suite
        self.killed += outcome.killed
        if outcome.killed_by_suite:
            return
        review = reviewed.get(outcome.mutant.id)
        if review is None:
            self.unreviewed.append(outcome.mutant.id)
            return
        if review.change != outcome.mutant.description:
            self.stale.append(
                f"{outcome.mutant.id} (reviewed for {review.change}, now "
                f"{outcome.mutant.description})"
            )
            return
        self.equivalent += review.kind == "equivalent"
        self.contract_survivors += review.kind == "contract"

    def line(self, label: str) -> str:
        return (
            f"{label:<28} {self.mutants:>4} mutants | suite kills {self.suite_killed:>3} of "
            f"{self.contract:>3} contract ({self.suite_score:6.1%}) | suite + own tests kill "
            f"{self.killed:>3} of {self.non_equivalent:>3} non-equivalent "
            f"({self.combined_score:6.1%}) | equivalent {self.equivalent}"
        )


def report(
    target: str, outcomes: Sequence[Outcome], *, full: bool, survivors: Path = SURVIVORS
) -> int:
    """Print the scores and the survivors; 1 when a survivor is not reviewed (or reviewed
    for another change), a mutant was not tested, none ran, or a target is missed."""
    reviewed = load_reviewed(target, survivors)
    modules: dict[str, Score] = {}
    total = Score()
    for outcome in outcomes:
        modules.setdefault(outcome.module, Score()).add(outcome, reviewed)
        total.add(outcome, reviewed)
    print(f"\n== mutation: {target} ==")
    for module, score in sorted(modules.items()):
        print(score.line(module))
    print(total.line("all modules"))
    for outcome in outcomes:
        if outcome.suite == "survived":
            review = reviewed.get(outcome.mutant.id)
            kind = review.kind if review else "UNREVIEWED"
            own = "killed by own tests" if outcome.killed else "survives both"
            print(
                f"  survivor {outcome.mutant.id} [{kind}, {own}] line {outcome.mutant.line}: "
                f"{outcome.mutant.description}" + (f" -- {review.reason}" if review else "")
            )
    failures = []
    if not outcomes:
        failures.append("no mutant ran: the gate saw nothing")
    if total.unreviewed:
        failures.append(
            f"{len(total.unreviewed)} survivor(s) not in {survivors.name}: "
            + ", ".join(total.unreviewed)
        )
    if total.stale:
        failures.append(
            f"{len(total.stale)} survivor(s) reviewed for another change (review them again): "
            + "; ".join(total.stale)
        )
    if total.errors:
        failures.append(
            f"{len(total.errors)} mutant(s) pytest could not test (exit 3, 4, 5 or a signal; "
            "run one with --only to see why): " + ", ".join(total.errors)
        )
    if full:
        seen = {o.mutant.id for o in outcomes if o.suite == "survived"}
        stale = sorted(set(reviewed) - seen)
        if stale:
            print(f"note: {len(stale)} reviewed survivor(s) no longer survive: {', '.join(stale)}")
        if total.suite_score < SUITE_TARGET:
            failures.append(
                f"the suite kills {total.suite_score:.1%} of the contract mutants, "
                f"target {SUITE_TARGET:.0%}"
            )
        if total.combined_score < COMBINED_TARGET:
            failures.append(
                f"suite + own tests kill {total.combined_score:.1%} of the non-equivalent "
                f"mutants, target {COMBINED_TARGET:.0%}"
            )
    for failure in failures:
        print(f"FAIL: {failure}")
    return 1 if failures else 0


def select(
    target: Target, only: Sequence[str], *, unused: list[str] | None = None
) -> list[tuple[str, Mutant]]:
    """The mutants to run (``only``: these ids); those in code the package never uses are
    left out, their ids appended to ``unused``."""
    out, left_out = package_mutants(target.package_root / target.package, target.modules)
    if unused is not None:
        unused += left_out
    if only:
        missing = set(only) - {m.id for _, m in out}
        if missing:
            raise SystemExit(f"no such mutant (or in unused code): {', '.join(sorted(missing))}")
        out = [item for item in out if item[1].id in only]
    return out


def saved_outcomes(path: Path, selected: Sequence[tuple[str, Mutant]]) -> list[Outcome]:
    """The outcomes a ``--json`` run saved, of the mutants still selected: the same id and
    change. An id names the n-th point of an operator in a function, so an edit elsewhere
    (lines moved) keeps it, and an edit inside the function that moves it onto another
    change leaves that mutant out (to run again: ``--run-missing``)."""
    saved = {
        (item["id"], item["description"]): item
        for item in json.loads(path.read_text(encoding="utf-8"))
    }
    out = []
    for module, mutant in selected:
        item = saved.get((mutant.id, mutant.description))
        if item is not None:
            out.append(Outcome(mutant, module, item["suite"], item["own"], item["seconds"]))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", help="jsonl, or the sink name of a baked project (--baked)")
    parser.add_argument("--baked", type=Path, help="the baked project's folder")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run side by side")
    parser.add_argument("--only", nargs="*", default=[], help="run just these mutant ids")
    parser.add_argument("--json", type=Path, help="write every outcome here")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument(
        "--own-only", action="store_true", help="skip the suite: the own tests on --only mutants"
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        help="report the outcomes a --json run saved (with today's list and selection), run none",
    )
    parser.add_argument(
        "--run-missing",
        action="store_true",
        help="with --from-json: run the mutants it has no outcome for (new or changed since)",
    )
    parser.add_argument(
        "--sample", type=int, help="run this many mutants, drawn with --seed (a partial run)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the draw of --sample")
    parser.add_argument(
        "--survivors", type=Path, default=SURVIVORS, help="the reviewed survivors list"
    )
    args = parser.parse_args(argv)
    target = (
        jsonl_target() if args.baked is None else baked_target(args.target, args.baked.resolve())
    )
    unused: list[str] = []
    selected = select(target, args.only, unused=unused)
    if args.sample is not None and args.sample < len(selected):
        keep = set(random.Random(args.seed).sample(range(len(selected)), args.sample))
        selected = [item for index, item in enumerate(selected) if index in keep]
        print(f"{target.name}: a sample of {args.sample} mutants, seed {args.seed}", flush=True)
    if unused and not args.only:
        functions = sorted({i.rsplit(":", 2)[0] for i in unused})
        print(
            f"{target.name}: {len(unused)} mutants left out, in code the package never uses: "
            + ", ".join(functions),
            flush=True,
        )
    if args.list:
        for _, mutant in selected:
            print(f"{mutant.id}\tline {mutant.line}\t{mutant.description}")
        return 0
    start = time.monotonic()
    if args.from_json is not None:
        outcomes = saved_outcomes(args.from_json, selected)
        ran = {o.mutant.id for o in outcomes}
        missing = [item for item in selected if item[1].id not in ran]
        if missing and not args.run_missing:
            names = ", ".join(m.id for _, m in missing)
            print(f"FAIL: {len(missing)} mutant(s) not in {args.from_json}: {names}")
            return 1
        if missing:
            print(f"{target.name}: running {len(missing)} mutant(s) not in {args.from_json}")
            with tempfile.TemporaryDirectory(prefix=f"mutation-{target.name}-") as folder:
                outcomes += run_all(target, missing, args.jobs, Path(folder))
            order = {m.id: index for index, (_, m) in enumerate(selected)}
            outcomes.sort(key=lambda o: order[o.mutant.id])
    else:
        with tempfile.TemporaryDirectory(prefix=f"mutation-{target.name}-") as folder:
            outcomes = run_all(target, selected, args.jobs, Path(folder), own_only=args.own_only)
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {
                        "id": o.mutant.id,
                        "module": o.module,
                        "line": o.mutant.line,
                        "description": o.mutant.description,
                        "suite": o.suite,
                        "own": o.own,
                        "seconds": round(o.seconds, 1),
                    }
                    for o in outcomes
                ],
                indent=1,
            ),
            encoding="utf-8",
        )
    full = not args.only and not args.own_only and args.sample is None
    status = report(target.name, outcomes, full=full, survivors=args.survivors)
    print(f"{target.name}: {len(outcomes)} mutants in {time.monotonic() - start:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
