"""Each gate of test_generated.py fails on a deliberately broken bake.

A gate that passes a broken project (or one whose tool read nothing) checks
nothing: each test here breaks one thing in a fresh bake of the default sink
and expects that gate, and only its promise, to fail.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import gates
import pytest
from bake import bake
from template_helpers import DEFAULT_PACKAGE

pytestmark = pytest.mark.sink_independent

WORKFLOW = Path(".github", "workflows", "ci.yml")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bake(tmp_path_factory.mktemp("pristine"))


@pytest.fixture
def project(pristine: Path, tmp_path: Path) -> Path:
    """A copy of the bake for one test to break."""
    return Path(shutil.copytree(pristine, tmp_path / pristine.name))


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text("utf-8")
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1), "utf-8")


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text("utf-8") + text, "utf-8")


def fails(gate: Callable[[], None], message: str) -> None:
    with pytest.raises(gates.GateError, match=message):
        gate()


def test_ruff_fails_on_an_unused_import(project: Path) -> None:
    append(project / "src" / DEFAULT_PACKAGE / "__init__.py", "\nimport os\n")
    fails(lambda: gates.ruff(project), "ruff check failed")


def test_ruff_fails_on_a_format_diff(project: Path) -> None:
    append(project / "tests" / "conftest.py", "\nvalue = {  'a':1 }\n")
    fails(lambda: gates.ruff(project), "ruff format --check failed")


def test_ruff_fails_when_it_skips_a_folder(project: Path) -> None:
    edit(
        project / "pyproject.toml", "[tool.ruff]\n", '[tool.ruff]\nextend-exclude = ["test_*.py"]\n'
    )
    fails(lambda: gates.ruff(project), r"ruff saw \d+ of \d+ files")


def test_mypy_fails_on_a_type_error(project: Path, tmp_path: Path) -> None:
    append(project / "src" / DEFAULT_PACKAGE / "__init__.py", '\nwrong: int = "text"\n')
    fails(lambda: gates.mypy(project, tmp_path / "mypy"), "mypy --strict failed")


def test_mypy_fails_when_it_skips_a_folder(project: Path, tmp_path: Path) -> None:
    edit(project / "pyproject.toml", "[tool.mypy]\n", '[tool.mypy]\nexclude = ["conftest"]\n')
    fails(lambda: gates.mypy(project, tmp_path / "mypy"), r"mypy checked \d+ of \d+ files")


def test_repo_review_fails_on_a_lax_pytest_setting(project: Path) -> None:
    edit(project / "pyproject.toml", "xfail_strict = true\n", "")
    fails(lambda: gates.repo_review(project), "PP305")


def test_repo_review_fails_when_a_file_is_missing(project: Path) -> None:
    (project / "LICENSE").unlink()
    fails(lambda: gates.repo_review(project), "PY003")


def test_zizmor_fails_on_an_unpinned_action(project: Path) -> None:
    workflow = project / WORKFLOW
    text = workflow.read_text("utf-8")
    pinned = "zizmorcore/zizmor-action@"
    start = text.index(pinned) + len(pinned)
    workflow.write_text(text[:start] + "main" + text[text.index("\n", start) :], "utf-8")
    fails(lambda: gates.workflows(project), "(?s)zizmor failed.*unpinned")


def test_actionlint_fails_on_an_unknown_expression(project: Path) -> None:
    edit(project / WORKFLOW, "${{ matrix.python-version }}", "${{ matrix.python_version_typo }}")
    fails(lambda: gates.workflows(project), "(?s)actionlint failed.*python_version_typo")


def test_actionlint_runs_shellcheck_on_run_scripts(project: Path) -> None:
    edit(project / WORKFLOW, "run: nox -s lint typecheck", "run: cd $HOME/a b && nox")
    fails(lambda: gates.workflows(project), "(?s)actionlint failed.*shellcheck")


def test_workflow_gate_fails_without_a_workflow(project: Path) -> None:
    (project / WORKFLOW).unlink()
    fails(lambda: gates.workflows(project), "no workflow")


def test_pytest_gate_fails_when_a_conformance_check_is_deselected(project: Path) -> None:
    """Only the lifecycle checks but one run (cheap); every check must have passed."""
    pyproject = project / "pyproject.toml"
    edit(pyproject, 'addopts = ["-ra"', 'addopts = ["-k", "lifecycle and not flush_twice", "-ra"')
    fails(lambda: gates.pytest_run(project), r"did not pass: .*'test_lifecycle\[flush_twice\]'")


def test_check_gate_fails_when_a_conformance_check_is_deselected(
    project: Path, tmp_path: Path
) -> None:
    pyproject = project / "pyproject.toml"
    edit(pyproject, 'addopts = ["-ra"', 'addopts = ["-k", "lifecycle and not flush_twice", "-ra"')
    fails(lambda: gates.check_command(project, cwd=tmp_path), r"of the suite's \d+ checks ran")


def test_check_gate_fails_without_the_conformance_class(project: Path, tmp_path: Path) -> None:
    (project / "tests" / "test_conformance.py").unlink()
    fails(lambda: gates.check_command(project, cwd=tmp_path), "check exited 3")


def test_pytest_gate_fails_when_nothing_is_collected(project: Path) -> None:
    for test_module in (project / "tests").glob("test_*.py"):
        test_module.unlink()
    fails(lambda: gates.pytest_run(project), "pytest exited 5")
