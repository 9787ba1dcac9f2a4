"""Helpers of the template tests: run the cookiecutter command, run tools, list files
(a bake is ``bake.py``'s, shared with the benchmarks)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from bake import ROOT

TEMPLATE = ROOT / "template"
TEMPLATE_CONFIG: dict[str, Any] = json.loads((TEMPLATE / "cookiecutter.json").read_text("utf-8"))
SINKS: list[str] = list(TEMPLATE_CONFIG["sink"])
DEFAULT_SINK = SINKS[0]
PROJECT_TEMPLATE = TEMPLATE / "{{cookiecutter.project_slug}}"
"""The project's common files (Jinja), and ``_parts/``, which the post-generation hook assembles."""
PARTS = PROJECT_TEMPLATE / "_parts"
"""``sinks/<sink>/`` and ``layers/<layer>/``: each a ``src/`` and a ``tests/`` of plain Python."""
SINK_LAYERS: dict[str, list[str]] = TEMPLATE_CONFIG["_sink_layers"]
"""The one table: sink -> the layers it uses (see docs/template.md)."""
DEFAULT_SLUG = "traceml-exporter-example"
DEFAULT_PACKAGE = "traceml_exporter_example"
DEFAULT_CLASS = "ExampleExporter"


def part_folders(sink: str) -> list[Path]:
    """The sink's own folder, then its layers' folders, in the table's order."""
    return [PARTS / "sinks" / sink, *(PARTS / "layers" / layer for layer in SINK_LAYERS[sink])]


def template_sources(**answers: str) -> dict[str, Path]:
    """Baked path -> the template file it comes from, for ``answers`` (defaults otherwise).

    Common files: each path is rendered as cookiecutter renders it, and a file whose name
    renders empty (another license's) is left out. Parts: the sink's and its layers' ``src/``
    and ``tests/``, placed as the post-generation hook places them. Two files that give one
    path fail the calling test: the later would silently overwrite the other.
    """
    import jinja2

    defaults = {k: v[0] if isinstance(v, list) else v for k, v in TEMPLATE_CONFIG.items()}
    context = {**defaults, "project_slug": DEFAULT_SLUG, "package_name": DEFAULT_PACKAGE}
    context.update(answers)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    sources: dict[str, Path] = {}

    def add(name: str, path: Path) -> None:
        if name in sources:
            pytest.fail(f"{path} and {sources[name]} both render to {name} for {answers}")
        sources[name] = path

    for path in sorted(PROJECT_TEMPLATE.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or PARTS in path.parents:
            continue
        rendered = env.from_string(path.relative_to(PROJECT_TEMPLATE).as_posix())
        name = rendered.render(cookiecutter=context)
        if not name.endswith("/") and name:
            add(name, path)
    places = {"src": f"src/{context['package_name']}", "tests": "tests"}
    for folder in part_folders(context["sink"]):
        for kind, place in places.items():
            for path in sorted((folder / kind).rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    add(f"{place}/{path.relative_to(folder / kind).as_posix()}", path)
    return sources


# -- baking --------------------------------------------------------------------


def run(
    args: Sequence[str | Path],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    input: str | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing text output; never raises on a non-zero exit."""
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def tool(name: str) -> str:
    """A console script of this interpreter's environment (the nox session's venv)."""
    candidate = Path(sys.executable).with_name(name)
    found = str(candidate) if candidate.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed next to {sys.executable}")
    return found


def cookiecutter(
    output: Path, *variables: str, template: Path = ROOT, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``cookiecutter [--no-input] -o OUTPUT TEMPLATE KEY=VALUE...`` in a fresh process."""
    no_input = [] if input is not None else ["--no-input"]
    home = output.parent / f"{output.name}-home"  # replay files land here, not in ~
    home.mkdir(exist_ok=True)
    return run(
        [
            *(sys.executable, "-m", "cookiecutter", "--default-config", *no_input),
            *("-o", output, template, *variables),
        ],
        input=input,
        env={**os.environ, "HOME": str(home)},
    )


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file (tomllib, or tomli before Python 3.11)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - the template session runs on 3.11
        import tomli as tomllib
    return tomllib.loads(path.read_text("utf-8"))


def files_of(project: Path) -> list[str]:
    """Every file of a baked project, relative, sorted; caches left by tools excluded."""
    skip = {".mypy_cache", ".pytest_cache", ".ruff_cache", "__pycache__", ".nox", ".hypothesis"}
    return sorted(
        str(p.relative_to(project))
        for p in project.rglob("*")
        if p.is_file() and not skip.intersection(p.relative_to(project).parts)
    )


def project_env(project: Path) -> dict[str, str]:
    """The environment for running a baked project's tools: its src on PYTHONPATH.

    Harmless when nox installed it (the same folder, editable); needed when the
    tests baked it themselves.
    """
    path = os.pathsep.join(filter(None, [str(project / "src"), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}
