"""The checks a baked project must pass, each failing when its tool saw none of the files.

A gate returns nothing when the project passes and raises ``GateError`` with the
tool's output when it does not, or when the tool looked at fewer files than the
project has (a baked project under this repository's ``.nox/`` is inside a folder
git ignores, so ``ruff check .`` there prints "No Python files found" and exits 0).
test_generated.py runs them on every sink's bake; test_gates.py feeds each a
broken bake to show it fails.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from template_helpers import project_env, read_toml, run, tool
from traceml_exporter_sdk.testing import CHECKS
from traceml_exporter_sdk.testing.keys import CHECK_MARKER

LINT_PATHS = ("src", "tests", "noxfile.py")
"""What the generated noxfile's lint session names, explicitly: ruff skips ``.nox/``."""

REPO_REVIEW_READ = {
    "PY001": "pyproject.toml",
    "PY002": "README.md",
    "PY003": "LICENSE",
    "PP301": "pytest settings in pyproject.toml",
    "GH100": ".github/workflows",
    "MY100": "mypy settings",
    "NOX101": "noxfile.py",
    "RF001": "ruff settings",
}
"""repo-review checks that pass only when it read the file named (so it looked)."""


class GateError(AssertionError):
    """A gate's tool reported a problem, or saw fewer files than the project has."""


def python_files(project: Path) -> set[str]:
    """The project's Python files under ``LINT_PATHS``, relative to it."""
    found = set()
    for name in LINT_PATHS:
        path = project / name
        candidates = path.rglob("*.py") if path.is_dir() else [path]
        found.update(
            str(p.relative_to(project)) for p in candidates if "__pycache__" not in p.parts
        )
    return found


def _require(ok: bool, what: str, output: str) -> None:
    if not ok:
        raise GateError(f"{what}\n{output[-6000:]}")


def ruff(project: Path) -> None:
    """``ruff check`` and ``ruff format --check`` on ``LINT_PATHS``, having seen every file.

    ``--no-respect-gitignore``: the bake may sit in a folder an outer repository
    ignores; the listing below proves which files ruff read either way.
    """
    exe, options = tool("ruff"), ["--no-cache", "--no-respect-gitignore"]
    listed = run([exe, "check", *options, "--show-files", *LINT_PATHS], cwd=project)
    root = project.resolve()
    seen = {str(Path(line).resolve().relative_to(root)) for line in listed.stdout.split()}
    expected = python_files(project)
    _require(
        seen == expected,
        f"ruff saw {len(seen & expected)} of {len(expected)} files; missed "
        f"{sorted(expected - seen)}",
        listed.stdout + listed.stderr,
    )
    check = run([exe, "check", *options, *LINT_PATHS], cwd=project)
    _require(check.returncode == 0, "ruff check failed", check.stdout + check.stderr)
    form = run([exe, "format", "--check", *options, *LINT_PATHS], cwd=project)
    _require(form.returncode == 0, "ruff format --check failed", form.stdout + form.stderr)
    formatted = re.search(r"(\d+) files? already formatted", form.stdout)
    _require(
        formatted is not None and int(formatted[1]) == len(expected),
        f"ruff format checked {formatted[1] if formatted else 0} of {len(expected)} files",
        form.stdout + form.stderr,
    )


def mypy(project: Path, cache: Path) -> None:
    """``mypy --strict`` with the project's settings, having checked every Python file."""
    result = run(
        [tool("mypy"), "--strict", "--cache-dir", cache], cwd=project, env=project_env(project)
    )
    output = result.stdout + result.stderr
    _require(result.returncode == 0, "mypy --strict failed", output)
    checked = re.search(r"no issues found in (\d+) source files?", result.stdout)
    expected = len(python_files(project))
    _require(
        checked is not None and int(checked[1]) == expected,
        f"mypy checked {checked[1] if checked else 0} of {expected} files",
        output,
    )


def repo_review(project: Path) -> None:
    """sp-repo-review: no check fails, and the checks that need each file passed."""
    result = run([tool("repo-review"), ".", "--format", "json"], cwd=project)
    try:
        checks = json.loads(result.stdout)["checks"]
    except (ValueError, KeyError):
        raise GateError(f"repo-review gave no report\n{result.stdout}{result.stderr}") from None
    failed = {name: c["description"] for name, c in checks.items() if c["result"] is False}
    _require(not failed, f"repo-review checks failed: {failed}", "")
    unread = {
        k: v for k, v in REPO_REVIEW_READ.items() if checks.get(k, {}).get("result") is not True
    }
    _require(not unread, f"repo-review did not find (check: file): {unread}", "")
    ignored = read_toml(project / "pyproject.toml")["tool"]["repo-review"]["ignore"]
    _require(all(reason.strip() for reason in ignored.values()), "say why a check is ignored", "")


def workflows(project: Path) -> None:
    """actionlint (with shellcheck) and zizmor --offline on ``.github``, every file audited."""
    github = project / ".github"
    files = sorted(github.rglob("*.yml"))
    workflow_files = [p for p in files if p.parent.name == "workflows"]
    _require(bool(workflow_files), "no workflow to lint under .github/workflows", "")
    # actionlint runs shellcheck on the run: scripts when it finds one on PATH.
    path = os.pathsep.join([str(Path(tool("shellcheck")).parent), os.environ.get("PATH", "")])
    lint = run(
        [tool("actionlint"), "-no-color", "-verbose", *workflow_files],
        cwd=project,
        env={**os.environ, "PATH": path},
    )
    output = lint.stdout + lint.stderr
    _require(lint.returncode == 0, "actionlint failed", output)
    linted = set(re.findall(r"^verbose: Linting (\S+)", lint.stderr, re.MULTILINE))
    _require(
        {(project / p).resolve() for p in linted} == {p.resolve() for p in workflow_files},
        f"actionlint linted {sorted(linted)}",
        output,
    )
    _require('Rule "shellcheck" was disabled' not in lint.stderr, "shellcheck not found", output)
    zizmor = run([tool("zizmor"), "--offline", "--no-progress", github], cwd=project)
    output = zizmor.stdout + zizmor.stderr
    _require(zizmor.returncode == 0, "zizmor failed", output)
    audited = set(re.findall(r"completed (\S+)", zizmor.stderr))
    missed = [
        str(p.relative_to(project)) for p in files if p.name not in {Path(a).name for a in audited}
    ]
    _require(not missed, f"zizmor did not audit {missed}", output)


def pytest_run(
    project: Path,
    *args: str,
    skip_reason: str | None = None,
    skips: int = 0,
    conformance: bool = True,
) -> dict[str, list[str]]:
    """The project's tests: every test passed, none skipped, every conformance check ran.

    A sink that declares skips (an aggregating sink keeps no rows to read back) may
    skip exactly ``skips`` conformance checks, each by name with ``skip_reason``; any
    other skip fails. ``conformance=False`` runs every test but the suite's checks
    (``check_command`` runs those). Returns the outcomes (``PASSED`` -> test ids).
    """
    if not conformance:
        args = ("-m", f"not {CHECK_MARKER}", *args)
    result = run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
        cwd=project,
        env=project_env(project),
    )
    output = result.stdout[-8000:] + result.stderr[-3000:]
    _require(result.returncode == 0, f"pytest exited {result.returncode}", output)
    outcomes: dict[str, list[str]] = {}
    for line in result.stdout.rpartition("short test summary info")[2].splitlines():
        word, _, test = line.partition(" ")
        if word in {"PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS"}:
            outcomes.setdefault(word, []).append(test)
    declared = [
        t for t in outcomes.get("SKIPPED", []) if skip_reason is not None and skip_reason in t
    ]
    _require(len(declared) == skips, f"{skips} checks must skip by name, got {declared}", output)
    rest = [t for t in outcomes.pop("SKIPPED", []) if t not in declared]
    if rest:
        outcomes["SKIPPED"] = rest
    _require(set(outcomes) == {"PASSED"}, f"nothing may fail or be skipped: {outcomes}", output)
    ran = [t for t in outcomes["PASSED"] if t.startswith("tests/test_conformance.py")]
    skipped_checks = {
        c.name for c in CHECKS if any(f"SKIP_CHECKS[{c.name!r}]" in t for t in declared)
    }
    missing = [
        c.test_id
        for c in CHECKS
        if not any(t.endswith(f"::{c.test_id}") for t in ran) and c.name not in skipped_checks
    ]
    _require(
        not conformance or not missing, f"conformance checks that did not pass: {missing}", output
    )
    _require(
        any(t.startswith("tests/test_exporter.py") for t in outcomes["PASSED"]),
        "the sink's own tests did not run",
        output,
    )
    return outcomes


_SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", re.MULTILINE)


def check_command(
    project: Path, *, cwd: Path, skip_reason: str | None = None, skips: int = 0
) -> None:
    """``traceml-exporter check --project`` started from ``cwd`` (another folder): every
    check of the suite passed but exactly ``skips``, skipped with ``skip_reason``.

    This is how the project's README says to run the suite alone; it runs the project's
    own conformance class, so its read-back and ``break_sink`` apply.
    """
    result = run(
        [sys.executable, "-m", "traceml_exporter_sdk.cli", "check", "--project", str(project)],
        cwd=cwd,
        env=project_env(project),
    )
    output = result.stdout[-8000:] + result.stderr[-3000:]
    _require(result.returncode == 0, f"traceml-exporter check exited {result.returncode}", output)
    found = _SUMMARY.findall(result.stdout)
    _require(len(found) == 1, "traceml-exporter check printed no summary", output)
    passed, failed, skipped = map(int, found[0])
    _require(failed == 0, f"{failed} conformance checks failed", output)
    _require(skipped == skips, f"{skips} checks must skip, got {skipped}", output)
    _require(
        passed + skipped == len(CHECKS),
        f"{passed + skipped} of the suite's {len(CHECKS)} checks ran",
        output,
    )
    reasons = [line for line in result.stdout.splitlines() if line.startswith("  skipped ")]
    _require(
        all(skip_reason is not None and skip_reason in line for line in reasons),
        f"every skip must say {skip_reason}",
        output,
    )
