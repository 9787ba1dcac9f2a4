"""Mutation testing of an exporter: every mutant of its modules against the conformance suite.

``python tests/mutation/run.py jsonl`` (the SDK's jsonl exporter) or
``python tests/mutation/run.py sqlite --baked DIR`` (a sink baked by cookiecutter,
installed, ``DIR`` its project folder). Each mutant (``mutants.py``) is written into a
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
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from mutants import Mutant, mutants  # noqa: E402

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
    """One mutant's fate: ``killed``, ``survived`` or ``timeout`` (counted as killed)."""

    mutant: Mutant
    module: str
    suite: str
    own: str = "not run"
    seconds: float = 0.0

    @property
    def killed_by_suite(self) -> bool:
        return self.suite != "survived"

    @property
    def killed(self) -> bool:
        return self.killed_by_suite or self.own != "survived"


@dataclass
class Worker:
    """A folder with its own copy of the package; the mutant goes there."""

    folder: Path
    target: Target
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def make(cls, target: Target, folder: Path) -> Worker:
        src = folder / "src"
        shutil.copytree(
            target.package_root / target.package,
            src / target.package,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        (folder / "test_suite_jsonl.py").write_text(JSONL_SUITE, encoding="utf-8")
        (folder / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n", encoding="utf-8")
        env = dict(os.environ)
        paths = [str(src), *target.extra_path, env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # a mutant's .pyc must never outlive it
        env.pop("PYTEST_ADDOPTS", None)
        return cls(folder, target, env)

    def module_path(self, module: str) -> Path:
        return self.folder / "src" / self.target.package / module

    def run(self, args: Sequence[str], timeout: float) -> str:
        command = [*PYTEST, *(a.replace("{work}", str(self.folder)) for a in args)]
        try:
            done = subprocess.run(
                command,
                cwd=self.target.cwd,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return "timeout"
        return "survived" if done.returncode == 0 else "killed"


def baseline(worker: Worker) -> tuple[float, float]:
    """Both runs on the unmutated code must pass; their durations set the timeouts."""
    times = []
    for args in (worker.target.suite + tuple(SUITE_ONLY), worker.target.own):
        start = time.monotonic()
        verdict = worker.run(args, timeout=1800)
        if verdict != "survived":
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
        path = worker.module_path(module)
        original = path.read_text(encoding="utf-8")
        start = time.monotonic()
        try:
            path.write_text(mutant.source, encoding="utf-8")
            if own_only:  # a reviewed survivor of the suite, checked against the own tests
                outcome = Outcome(mutant, module, "survived")
            else:
                suite = worker.run((*target.suite, *SUITE_ONLY), timeouts[0])
                outcome = Outcome(mutant, module, suite)
            if not outcome.killed_by_suite:
                outcome.own = worker.run(target.own, timeouts[1])
        finally:
            path.write_text(original, encoding="utf-8")
            workers.put(worker)
        outcome.seconds = time.monotonic() - start
        with lock:
            done.append(outcome)
            verdict = (
                "killed by the suite"
                if outcome.killed_by_suite
                else ("killed by its own tests" if outcome.killed else "SURVIVED")
            )
            print(
                f"[{len(done)}/{len(selected)}] {mutant.id} ({outcome.seconds:.0f} s): {verdict}",
                flush=True,
            )
        return outcome

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, selected))


def load_reviewed(target: str, path: Path = SURVIVORS) -> dict[str, tuple[str, str]]:
    """The reviewed survivors of ``target``: mutant id -> (class, reason)."""
    data = tomllib.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    out = {}
    for mutant_id, entry in data.get(target, {}).items():
        kind, reason = entry.get("class"), entry.get("reason", "")
        if kind not in CLASSES or not reason.strip():
            raise SystemExit(
                f"{path}: [{target}] {mutant_id!r} needs a class of {CLASSES} and a reason"
            )
        out[mutant_id] = (kind, reason)
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

    def add(self, outcome: Outcome, reviewed: dict[str, tuple[str, str]]) -> None:
        self.mutants += 1
        self.suite_killed += outcome.killed_by_suite
        self.killed += outcome.killed
        if outcome.killed_by_suite:
            return
        kind = reviewed.get(outcome.mutant.id, (None, ""))[0]
        if kind is None:
            self.unreviewed.append(outcome.mutant.id)
        self.equivalent += kind == "equivalent"
        self.contract_survivors += kind == "contract"

    def line(self, label: str) -> str:
        return (
            f"{label:<28} {self.mutants:>4} mutants | suite kills {self.suite_killed:>3} of "
            f"{self.contract:>3} contract ({self.suite_score:6.1%}) | suite + own tests kill "
            f"{self.killed:>3} of {self.non_equivalent:>3} non-equivalent "
            f"({self.combined_score:6.1%}) | equivalent {self.equivalent}"
        )


def report(target: str, outcomes: Sequence[Outcome], *, full: bool) -> int:
    """Print the scores and the survivors; 1 when a survivor is unreviewed or a target missed."""
    reviewed = load_reviewed(target)
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
        if not outcome.killed_by_suite:
            kind, reason = reviewed.get(outcome.mutant.id, ("UNREVIEWED", ""))
            own = "killed by own tests" if outcome.killed else "survives both"
            print(
                f"  survivor {outcome.mutant.id} [{kind}, {own}] line {outcome.mutant.line}: "
                f"{outcome.mutant.description}" + (f" -- {reason}" if reason else "")
            )
    status = 0
    if total.unreviewed:
        print(
            f"FAIL: {len(total.unreviewed)} survivor(s) not in {SURVIVORS.name}: "
            + ", ".join(total.unreviewed)
        )
        status = 1
    if full:
        seen = {o.mutant.id for o in outcomes if not o.killed_by_suite}
        stale = sorted(set(reviewed) - seen)
        if stale:
            print(f"note: {len(stale)} reviewed survivor(s) no longer survive: {', '.join(stale)}")
        if total.suite_score < SUITE_TARGET:
            print(
                f"FAIL: the suite kills {total.suite_score:.1%} of the contract mutants, "
                f"target {SUITE_TARGET:.0%}"
            )
            status = 1
        if total.combined_score < COMBINED_TARGET:
            print(
                f"FAIL: suite + own tests kill {total.combined_score:.1%} of the non-equivalent "
                f"mutants, target {COMBINED_TARGET:.0%}"
            )
            status = 1
    return status


def select(target: Target, only: Sequence[str]) -> list[tuple[str, Mutant]]:
    out = []
    for module in target.modules:
        path = target.package_root / target.package / module
        out += [(module, m) for m in mutants(path, label=module)]
    if only:
        missing = set(only) - {m.id for _, m in out}
        if missing:
            raise SystemExit(f"no such mutant: {', '.join(sorted(missing))}")
        out = [item for item in out if item[1].id in only]
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
    args = parser.parse_args(argv)
    target = (
        jsonl_target() if args.baked is None else baked_target(args.target, args.baked.resolve())
    )
    selected = select(target, args.only)
    if args.list:
        for _, mutant in selected:
            print(f"{mutant.id}\tline {mutant.line}\t{mutant.description}")
        return 0
    start = time.monotonic()
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
    status = report(target.name, outcomes, full=not args.only and not args.own_only)
    print(f"{target.name}: {len(outcomes)} mutants in {time.monotonic() - start:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
