"""The tests' own layout: a test module imports helpers and fixtures, never another test module.

A test module that imports another runs the other's module-level code and shares
its names, so moving or renaming one breaks the other; shared code lives in a
helper module (``*_helpers.py``, ``gates.py``, the broken exporters) or a conftest.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
FOLDERS = ["cli", "conformance", "peers", "runtime", "template"]


def imported_names(path: Path) -> set[str]:
    """Every module name ``path`` imports (absolute imports, anywhere in the file)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def names_of_test_modules(folder: Path) -> set[str]:
    return {p.stem for p in folder.rglob("test_*.py")}


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_test_module_imports_another(folder: str) -> None:
    root = TESTS / folder
    tests = names_of_test_modules(root)
    assert tests, f"no test module under {root}"
    offenders = {
        str(path.relative_to(TESTS)): sorted(imported_names(path) & tests)
        for path in sorted(root.rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_reader_sees_an_import_of_a_test_module(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text("def helper():\n    pass\n", "utf-8")
    (tmp_path / "test_b.py").write_text("def f():\n    from test_a import helper\n", "utf-8")
    assert imported_names(tmp_path / "test_b.py") & names_of_test_modules(tmp_path) == {"test_a"}
