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
FOLDERS = ["cli", "conformance", "docs", "peers", "runtime", "template"]


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


# -- one payload builder ----------------------------------------------------------

BUILDER = TESTS / "payloads.py"
META_NAMES = {"meta", "_meta"}
META_KEYS = {"world_size", "local_world_size", "node_rank", "timestamp"}
"""Keys only an envelope's meta holds together (records say ``timestamp_unix_ns``)."""


def meta_builders(path: Path) -> list[str]:
    """Where ``path`` builds an envelope's meta itself: ``def meta``/``def _meta``, or a
    ``{...}`` or ``dict(...)`` holding the meta keys."""
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        keys: set[object] = set()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in META_NAMES:
            found.append(f"line {node.lineno}: def {node.name}")
        elif isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "dict"
        ):
            keys = {k.arg for k in node.keywords}
        if keys >= META_KEYS:
            found.append(f"line {node.lineno}: a meta dict")
    return found


def test_only_the_payload_builder_builds_meta() -> None:
    """Every envelope meta in tests/ comes from tests/payloads.py, so its shape and
    keyword-only arguments are the only ones (issue 19: six copies, two argument orders)."""
    assert meta_builders(BUILDER), f"the reader sees no meta builder in {BUILDER}"
    modules = sorted(p for p in TESTS.rglob("*.py") if p != BUILDER)
    assert len(modules) > 50, f"only {len(modules)} modules under {TESTS}"
    offenders = {str(p.relative_to(TESTS)): meta_builders(p) for p in modules}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_reader_sees_a_copy_of_the_meta_builder(tmp_path: Path) -> None:
    copy = tmp_path / "copy.py"
    copy.write_text(
        "def _meta(rank, sampler):\n    return {}\n"
        "def shape(rank):\n"
        "    a = {'rank': rank, 'world_size': 4, 'local_world_size': 2, 'node_rank': 0,"
        " 'timestamp': 1}\n"
        "    return dict(world_size=4, local_world_size=2, node_rank=0, timestamp=1, **a)\n"
        "def record():\n"
        "    return {'world_size': 4, 'local_world_size': 2, 'node_rank': 0,"
        " 'timestamp_unix_ns': 1}\n",
        "utf-8",
    )
    assert meta_builders(copy) == [
        "line 1: def _meta",
        "line 4: a meta dict",
        "line 5: a meta dict",
    ]


# -- one helper each --------------------------------------------------------------

ONE_HOME = {
    "bake": "bake.py",
    "exporter_of": "bake.py",
    "wait_for": "waiting.py",
    "bookmark": "follow_files.py",
    "status": "follow_files.py",
    "child_env": "child_env.py",
    "_env": "child_env.py",
}
"""The tests' repeated helpers (issue 32: ``bake`` four times, ``wait_for`` three, ``_env``
and ``bookmark`` twice each) and the one module under tests/ that defines each."""


def defined_functions(path: Path) -> set[str]:
    return {
        node.name
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def test_each_shared_helper_is_defined_once_in_its_own_module() -> None:
    for name, home in ONE_HOME.items():
        if name in {"_env"}:
            continue
        assert name in defined_functions(TESTS / home), f"{home} does not define {name}"
    elsewhere = {
        str(path.relative_to(TESTS)): sorted(defined_functions(path) & set(ONE_HOME))
        for path in sorted(TESTS.rglob("*.py"))
        if path.name not in set(ONE_HOME.values())
    }
    assert {k: v for k, v in elsewhere.items() if v} == {}


def test_the_reader_sees_a_copy_of_a_shared_helper(tmp_path: Path) -> None:
    copy = tmp_path / "copy.py"
    copy.write_text(
        "class A:\n    def wait_for(self):\n        pass\ndef _env():\n    pass\n", "utf-8"
    )
    assert defined_functions(copy) & set(ONE_HOME) == {"wait_for", "_env"}
