"""cruft can create a project from the template, check it, and update it later."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from template_helpers import DEFAULT_SLUG, ROOT, TEMPLATE, run, tool

pytestmark = pytest.mark.sink_independent

IMPROVEMENT = "A later template improvement, brought in by cruft update."


def git(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    result = run(["git", *args], cwd=cwd, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip()


def test_cruft_create_check_and_update(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "HOME": str(home),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    # The working tree's template, committed or not, as a template repository of its own.
    repo = tmp_path / "template-repo"
    shutil.copytree(TEMPLATE, repo / "template", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "cookiecutter.json", repo / "cookiecutter.json")
    git(["init", "--quiet"], repo, env)
    git(["add", "--all"], repo, env)
    git(["commit", "--quiet", "-m", "template"], repo, env)
    first = git(["rev-parse", "HEAD"], repo, env)

    projects = tmp_path / "projects"
    created = run(
        [
            *(tool("cruft"), "create", "--no-input", "--directory", "template"),
            *("--output-dir", projects, repo),
        ],
        env=env,
    )
    assert created.returncode == 0, created.stdout + created.stderr
    project = projects / DEFAULT_SLUG
    state = json.loads((project / ".cruft.json").read_text("utf-8"))
    assert state["directory"] == "template"
    assert state["commit"] == first
    assert "__year" in state["context"]["cookiecutter"], "the license year must stay fixed"
    assert (project / "tests" / "sink_support.py").is_file()
    assert run([tool("cruft"), "check"], cwd=project, env=env).returncode == 0

    # A change to a sink's README section (a partial README.md includes) and to its module
    # (which the post-generation hook places) reaches the project too.
    sink = state["context"]["cookiecutter"]["sink"]
    folder = repo / "template" / "{{cookiecutter.project_slug}}" / "_parts" / "sinks" / sink
    readme = folder / "README.md"
    readme.write_text(readme.read_text("utf-8") + f"\n{IMPROVEMENT}\n", "utf-8")
    module = folder / "src" / "exporter.py"
    module.write_text(module.read_text("utf-8") + f"\n# {IMPROVEMENT}\n", "utf-8")
    git(["commit", "--quiet", "-am", "improve the sink's README section"], repo, env)
    assert run([tool("cruft"), "check"], cwd=project, env=env).returncode != 0

    git(["init", "--quiet"], project, env)
    git(["add", "--all"], project, env)
    git(["commit", "--quiet", "-m", "generated"], project, env)
    updated = run([tool("cruft"), "update", "--skip-apply-ask"], cwd=project, env=env)
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert IMPROVEMENT in (project / "README.md").read_text("utf-8")
    package = project / "src" / DEFAULT_SLUG.replace("-", "_")
    assert f"# {IMPROVEMENT}" in (package / "exporter.py").read_text("utf-8")
    assert not (project / "_parts").exists()
    assert run([tool("cruft"), "check"], cwd=project, env=env).returncode == 0
