"""``traceml-exporter check --mutants``: how much of an exporter's code the suite guards.

Every mutant of the exporter's modules (a comparison, an operator, a constant, a deleted
statement, a return value, an ``except`` clause changed: ``testing._mutation``) is
written into a copy of its package put first on ``PYTHONPATH``, and the same suite
``check`` runs is run on it, stopping at the first failing check (the throughput check
left out: its floor depends on the machine's load). A mutant the suite fails is killed.
One it passes survived: it changes nothing observable, or it is a mistake the suite
cannot see (the exporter's own tests' job, or a gap in the read-back or hooks). Per
module the share killed is printed, then each survivor. Code the package never uses at
run time is left out (it cannot change what the exporter does).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from queue import Queue
from typing import TextIO

from .._export.exit_codes import EXIT_FAILED, EXIT_INPUT
from ..testing._mutation import Mutant, PackageCopy, package_mutants
from .errors import CliError

__all__ = ["exporter_source", "run_mutants"]

_FIND = (
    "import importlib.util, sys; spec = importlib.util.find_spec(sys.argv[1]); "
    "print((spec.submodule_search_locations or [spec.origin])[0] if spec else '')"
)


def exporter_source(module: str) -> tuple[Path, tuple[str, ...]]:
    """The folder to copy and the modules in it to mutate, for the exporter's ``module``:
    its top-level package and every module of it but ``__init__`` files, or the module's
    own file when it is not in a package. Found in a fresh interpreter (nothing of it
    runs here); the SDK's own ``jsonl`` is its ``jsonl.py`` alone."""
    if module in ("jsonl", "traceml_exporter_sdk.jsonl"):
        return Path(__file__).resolve().parents[1], ("jsonl.py",)
    top = module.partition(".")[0]
    found = subprocess.run(
        [sys.executable, "-c", _FIND, top],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    ).stdout.strip()
    path = Path(found)
    if not found or not (path.is_dir() or (path.is_file() and path.suffix == ".py")):
        raise CliError(f"--mutants: {top!r} is not a package or a module file", EXIT_INPUT)
    if path.is_file():
        return path, (path.name,)
    modules = tuple(
        p.relative_to(path).as_posix()
        for p in sorted(path.rglob("*.py"))
        if p.name != "__init__.py"
    )
    return path, modules


def run_mutants(
    source: Path,
    modules: Sequence[str],
    command: Sequence[str],
    cwd: Path,
    jobs: int,
    out: TextIO,
    extra_path: Sequence[str] = (),
    entry_points: Sequence[str] = ("make_exporter",),
) -> int:
    """Run ``command`` (the suite's pytest command line) from ``cwd`` on every mutant of
    ``modules`` in ``source``, ``extra_path`` after the copy on ``PYTHONPATH``; print the
    scores. ``entry_points`` (the factory) count as used."""
    package_dir = source if source.is_dir() else source.parent
    selected, unused = package_mutants(package_dir, modules, entry_points)
    if not selected:
        raise CliError(f"--mutants: no mutant in {source} (nothing to mutate)", EXIT_INPUT)
    with tempfile.TemporaryDirectory(prefix="traceml-mutants-") as tmp:
        copies: Queue[PackageCopy] = Queue()
        for index in range(max(1, jobs)):
            copies.put(PackageCopy.make(source, Path(tmp) / f"copy-{index}", *extra_path))
        first = copies.queue[0]
        start = time.monotonic()
        if first.pytest(command, cwd, timeout=1800) != "survived":
            raise CliError(
                "--mutants: the suite fails on the exporter as it is; make `check` pass first",
                EXIT_FAILED,
            )
        timeout = 3 * (time.monotonic() - start) + 30
        out.write(
            f"mutants of {source.name}: {len(selected)} "
            f"(the suite took {time.monotonic() - start:.0f} s unmutated)\n"
        )
        out.flush()

        def one(item: tuple[str, Mutant]) -> str:
            module, mutant = item
            copy = copies.get()
            try:
                return copy.with_mutant(module, mutant, command, cwd, timeout)
            finally:
                copies.put(copy)

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            verdicts = list(pool.map(one, selected))
    return _summary(selected, verdicts, unused, out)


def _summary(
    selected: Sequence[tuple[str, Mutant]],
    verdicts: Sequence[str],
    unused: Sequence[str],
    out: TextIO,
) -> int:
    by_module: dict[str, list[int]] = {}
    for (module, _), said in zip(selected, verdicts, strict=True):
        counts = by_module.setdefault(module, [0, 0])
        counts[0] += 1
        counts[1] += said in ("killed", "timeout")
    lines = []
    total = [0, 0]
    for module, (count, killed) in sorted(by_module.items()):
        lines.append(
            f"  {module:<32} {count:>4} mutants, the suite kills {killed:>4} ({killed / count:.1%})"
        )
        total[0] += count
        total[1] += killed
    lines.append(
        f"  {'all modules':<32} {total[0]:>4} mutants, the suite kills {total[1]:>4} "
        f"({total[1] / total[0]:.1%})"
    )
    if unused:
        lines.append(f"  left out: {len(unused)} mutants in code the package never uses")
    errors = []
    for (_, mutant), said in zip(selected, verdicts, strict=True):
        if said == "survived":
            lines.append(f"  survivor {mutant.id} line {mutant.line}: {mutant.description}")
        elif said == "error":
            errors.append(mutant.id)
    survivors = sum(said == "survived" for said in verdicts)
    lines.append(
        f"{total[0]} mutants, {total[1]} killed, {survivors} survived: a survivor changes "
        "nothing observable, or is a mistake the suite cannot see (your own tests' job, or "
        "a read-back or hook that would show it)"
    )
    out.write("\n".join(lines) + "\n")
    out.flush()
    if errors:
        raise CliError(
            f"--mutants: pytest tested nothing on {len(errors)} mutant(s) (exit 3, 4, 5 or a "
            f"signal): {', '.join(errors)}",
            EXIT_INPUT,
        )
    return 0
