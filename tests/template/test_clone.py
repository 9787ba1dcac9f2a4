"""The template bakes from a clean clone of the repository's HEAD: a file the template
needs but git does not track makes this fail."""

from __future__ import annotations

import sys
from pathlib import Path

from bake import bake
from template_helpers import ROOT, files_of, project_env, run


def test_bake_from_a_clean_clone(tmp_path: Path, sink: str) -> None:
    clone = tmp_path / "clone"
    cloned = run(["git", "clone", "--quiet", ROOT, clone])
    assert cloned.returncode == 0, cloned.stderr
    from_clone = bake(tmp_path / "from-clone", template=clone, sink=sink)
    from_tree = bake(tmp_path / "from-tree", sink=sink)
    assert files_of(from_clone) == files_of(from_tree), (
        "the working tree's template bakes files that a clone of HEAD does not: "
        "commit (git add) every file the template needs"
    )
    end_to_end = "tests/test_conformance.py::test_driven_by_the_export_worker"
    tests = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", end_to_end],
        cwd=from_clone,
        env=project_env(from_clone),
    )
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
