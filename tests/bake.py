"""Bake the template: the one way the tests and the benchmarks make a project from it.

The noxfile bakes with the ``cookiecutter`` command inside its session's virtualenv
(the noxfile's own interpreter has no cookiecutter), as a user would; the template
tests that are about that command run it through ``template_helpers.cookiecutter``.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
"""The repository: its cookiecutter.json points cookiecutter at template/."""


def bake(output: Path, template: Path = ROOT, **variables: str) -> Path:
    """Bake one project into ``output`` with no prompts, the user's cookiecutter config
    unread and the template's hooks run; the project's folder.

    In this process, through cookiecutter's API (no interpreter start-up per bake).
    Raises ``cookiecutter.exceptions.FailedHookException`` when a hook refuses; the
    hook's own message goes to this process's stderr (use ``capfd``).
    """
    from cookiecutter.main import cookiecutter

    output.mkdir(parents=True, exist_ok=True)
    return Path(
        cookiecutter(
            str(template),
            no_input=True,
            extra_context=variables or None,
            output_dir=str(output),
            default_config=True,
            accept_hooks=True,
        )
    )


def exporter_of(project: Path) -> ModuleType:
    """The baked project's ``exporter`` module, imported from its ``src`` folder."""
    sys.path.insert(0, str(project / "src"))
    return importlib.import_module(f"{project.name.replace('-', '_')}.exporter")


def baked_exporter(output: Path, sink: str, name: str | None = None) -> ModuleType:
    """``sink`` baked as project ``name`` (default ``bench <sink>``), its exporter imported."""
    return exporter_of(bake(output, sink=sink, project_name=name or f"bench {sink}"))
