"""Ship the exporter template inside the SDK, so ``traceml-exporter new`` needs no clone.

The template lives at the repository root (``../template`` and the nested-template
``../cookiecutter.json``, beside ``sdk/``). A wheel carries them as
``traceml_exporter_sdk/_template/``; an sdist carries them as ``_template/`` so a
wheel built from the sdist finds them there. An editable install gets no copy:
the CLI reads the repository's template in place.

A plain ``force-include`` table cannot do this: it fails when the path is absent
(a wheel built from the sdist) and copies stale files into editable installs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

ITEMS = ("template", "cookiecutter.json")
CACHES = frozenset({"__pycache__", ".ruff_cache", ".mypy_cache", ".pytest_cache"})
"""What tools leave beside the template's files (ruff reads its parts in place): not shipped."""


class TemplateBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name == "wheel" and version == "editable":
            return
        root = Path(self.root)
        sources = [root.parent / item for item in ITEMS]
        if not all(path.exists() for path in sources):
            sources = [root / "_template" / item for item in ITEMS]
        missing = [str(path) for path in sources if not path.exists()]
        if missing:
            raise FileNotFoundError(
                f"the exporter template is missing ({', '.join(missing)}); build the SDK from "
                "a checkout of the traceml-exporter-sdk repository or from its sdist"
            )
        prefix = "traceml_exporter_sdk/_template" if self.target_name == "wheel" else "_template"
        for item, path in zip(ITEMS, sources, strict=True):
            files = sorted(path.rglob("*")) if path.is_dir() else [path]
            for file in files:
                if file.is_dir() or CACHES.intersection(file.parts) or file.suffix == ".pyc":
                    continue
                relative = file.relative_to(path).as_posix() if path.is_dir() else ""
                target = f"{prefix}/{item}/{relative}" if relative else f"{prefix}/{item}"
                build_data["force_include"][str(file)] = target
