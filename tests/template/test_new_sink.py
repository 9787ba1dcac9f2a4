"""Adding a sink is a folder and a table row (docs/template.md, "Adding a sink kind").

In a copy of the template this follows the documented steps for a new kind, ``ndjson``
(the jsonl sink's files under another name, with the ``files`` layer), then bakes it and
runs the baked project's own tests: the full conformance suite among them.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from template_helpers import (
    DEFAULT_PACKAGE,
    DEFAULT_SLUG,
    TEMPLATE,
    cookiecutter,
    files_of,
    project_env,
    run,
)

pytestmark = pytest.mark.sink_independent

KIND = "ndjson"
SUMMARY = "one newline-delimited JSON file per stream"


def _add_sink(template: Path) -> None:
    """The documented steps: the kind's folder, and its row in cookiecutter.json."""
    sinks = template / "{{cookiecutter.project_slug}}" / "_parts" / "sinks"
    shutil.copytree(sinks / "jsonl", sinks / KIND, ignore=shutil.ignore_patterns("__pycache__"))
    meta = sinks / KIND / "sink.jinja"
    text = meta.read_text("utf-8")
    start = text.index('summary = "') + len('summary = "')
    meta.write_text(text[:start] + SUMMARY + text[text.index('"', start) :], "utf-8")
    config_file = template / "cookiecutter.json"
    config = json.loads(config_file.read_text("utf-8"))
    config["sink"].append(KIND)
    config["_sink_layers"][KIND] = ["core", "lifecycle", "files"]
    config_file.write_text(json.dumps(config, indent=2) + "\n", "utf-8")


def _tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_a_new_sink_is_a_folder_and_a_row_and_its_bake_passes_its_tests(tmp_path: Path) -> None:
    template = tmp_path / "template"
    shutil.copytree(TEMPLATE, template, ignore=shutil.ignore_patterns("__pycache__"))
    before = _tree(template)
    _add_sink(template)
    after = _tree(template)
    changed = sorted(name for name in after if before.get(name) != after[name])
    folder = f"{{{{cookiecutter.project_slug}}}}/_parts/sinks/{KIND}/"
    assert [n for n in changed if not n.startswith(folder)] == ["cookiecutter.json"]
    assert set(before) <= set(after)

    output = tmp_path / "out"
    baked = cookiecutter(output, f"sink={KIND}", template=template)
    assert baked.returncode == 0, baked.stdout + baked.stderr
    project = output / DEFAULT_SLUG
    package = f"src/{DEFAULT_PACKAGE}"
    files = files_of(project)
    assert {f"{package}/exporter.py", f"{package}/_files.py", "tests/test_files.py"} <= set(files)
    assert "tests/test_delivery.py" not in files
    assert not (project / "_parts").exists()
    assert SUMMARY in (project / "README.md").read_text("utf-8")
    assert f'"{KIND}"' in (project / "pyproject.toml").read_text("utf-8")

    tests = run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests"],
        cwd=project,
        env=project_env(project),
        timeout=900,
    )
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    assert " passed" in tests.stdout
    # the only skips are the jsonl sink's declared ones, each saying SKIP_CHECKS['<check>']
    skips = [line for line in tests.stdout.splitlines() if line.startswith("SKIPPED")]
    assert all("SKIP_CHECKS[" in line for line in skips), tests.stdout[-2000:]
