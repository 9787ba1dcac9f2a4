"""The template's sinks, baked for a benchmark and imported from the baked folder."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

from cookiecutter.main import cookiecutter

ROOT = Path(__file__).resolve().parents[2]


def bake(folder: Path, sink: str, name: str | None = None) -> Path:
    """Bake ``sink`` as project ``name`` (default ``bench <sink>``) into ``folder``; the
    project's folder. The user's cookiecutter config is not read."""
    project = cookiecutter(
        str(ROOT),
        no_input=True,
        extra_context={"sink": sink, "project_name": name or f"bench {sink}"},
        output_dir=str(folder),
        default_config=True,
    )
    return Path(project)


def exporter_of(project: Path) -> ModuleType:
    """The baked project's ``exporter`` module, imported from its ``src`` folder."""
    sys.path.insert(0, str(project / "src"))
    return importlib.import_module(f"{project.name.replace('-', '_')}.exporter")


def baked_exporter(folder: Path, sink: str, name: str | None = None) -> ModuleType:
    """``bake`` then ``exporter_of``."""
    return exporter_of(bake(folder, sink, name))
