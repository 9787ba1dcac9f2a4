"""Keep only the chosen sink's files and the chosen license text.

The template stages every sink kind under ``_sinks/<sink>/`` (paths mirror the
project) and every license under ``_licenses/<license>.txt``. This hook moves
the chosen ones into place and deletes the staging folders, so a generated
project holds exactly one exporter, one test set and one LICENSE. Adding a sink
kind is a new ``_sinks/<kind>/`` folder plus its name in ``cookiecutter.json``.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

SINK = json.loads(r'''{{ cookiecutter.sink | tojson }}''')  # fmt: skip
LICENSE = json.loads(r'''{{ cookiecutter.license | tojson }}''')  # fmt: skip


def move_tree(source: Path, destination: Path) -> None:
    """Move every file of ``source`` to the same relative path under ``destination``.

    A file already there is replaced: that is a re-bake with ``-f``
    (overwrite_if_exists). That the common files and a sink's never overlap is
    checked by the template's own tests.
    """
    for path in sorted(source.rglob("*")):
        if not path.is_file():
            continue
        target = destination / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        path.replace(target)


def main() -> int:
    project = Path.cwd()
    sinks = project / "_sinks"
    licenses = project / "_licenses"
    chosen_sink = sinks / SINK
    chosen_license = licenses / f"{LICENSE}.txt"
    missing = [str(p.relative_to(project)) for p in (chosen_sink, chosen_license) if not p.exists()]
    if missing:
        sys.stderr.write(
            f"ERROR: the template has no {', '.join(missing)}; nothing usable was generated.\n"
        )
        return 1
    move_tree(chosen_sink, project)
    chosen_license.replace(project / "LICENSE")
    shutil.rmtree(sinks)
    shutil.rmtree(licenses)
    return 0


if __name__ == "__main__":
    sys.exit(main())
