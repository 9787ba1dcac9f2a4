"""Assemble the project from the chosen sink's folder and the layers the table gives it.

cookiecutter copies ``_parts/`` into the project unrendered (``_copy_without_render``):
``_parts/sinks/<sink>/`` and ``_parts/layers/<layer>/`` each hold ``src/`` (modules of the
package) and ``tests/``. ``_sink_layers`` in cookiecutter.json is the one table of which
layers each sink uses. This hook copies the sink's and its layers' files into ``src/<package>/``
and ``tests/``, writing the answers over the names the parts are written with (those of the
default answers, so each part is the plain Python a default bake holds), then removes
``_parts/``. A file a bake already has is replaced (a re-bake with ``-f``). On a problem it
prints one ``ERROR:`` line and exits 1; cookiecutter then removes the project it made.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

# Rendered by cookiecutter (tojson keeps any quote inert; see pre_gen_project.py).
SINK = json.loads(r'''{{ cookiecutter.sink | tojson }}''')  # fmt: skip
LAYERS = json.loads(r'''{{ cookiecutter._sink_layers | tojson }}''')  # fmt: skip
ANSWERS = {
    "traceml-exporter-example": json.loads(r'''{{ cookiecutter.project_slug | tojson }}'''),
    "traceml_exporter_example": json.loads(r'''{{ cookiecutter.package_name | tojson }}'''),
    "ExampleExporter": json.loads(r'''{{ cookiecutter.exporter_class | tojson }}'''),
}  # fmt: skip
"""The names the parts are written with (the default answers) -> this bake's answers."""

PARTS = "_parts"
_NAMES = re.compile("|".join(re.escape(name) for name in ANSWERS))


def _folders(project: Path) -> list[Path]:
    """The sink's folder and its layers', in the table's order; exits 1 if one is missing."""
    parts = project / PARTS
    if SINK not in LAYERS:
        _refuse(f"the sink {SINK!r} has no row in _sink_layers of cookiecutter.json")
    folders = [parts / "sinks" / SINK] + [parts / "layers" / layer for layer in LAYERS[SINK]]
    missing = [str(f.relative_to(parts)) for f in folders if not f.is_dir()]
    if missing:
        _refuse(f"the template has no {', '.join(missing)} under {PARTS}/")
    return folders


def _targets(project: Path, folders: list[Path]) -> dict[Path, Path]:
    """Part file -> where it goes in the project; exits 1 if two parts give one file."""
    package = project / "src" / ANSWERS["traceml_exporter_example"]
    places = {"src": package, "tests": project / "tests"}
    targets: dict[Path, Path] = {}
    for folder in folders:
        for kind, place in places.items():
            for path in sorted((folder / kind).rglob("*")):
                if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
                    continue
                target = place / path.relative_to(folder / kind)
                if target in targets.values():
                    _refuse(f"two parts give {target.relative_to(project)}")
                targets[path] = target
    return targets


def _refuse(problem: str) -> None:
    sys.stderr.write(f"ERROR: cannot assemble the exporter project: {problem}.\n")
    sys.exit(1)


def main() -> int:
    project = Path.cwd()
    for source, target in _targets(project, _folders(project)).items():
        text = _NAMES.sub(lambda name: ANSWERS[name[0]], source.read_text(encoding="utf-8"))
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("w", encoding="utf-8", newline="") as file:
            file.write(text)
        shutil.copymode(source, target)
    shutil.rmtree(project / PARTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
