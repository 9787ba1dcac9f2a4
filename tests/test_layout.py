"""The SDK's layout: a root of public modules, every module named in docs/layout.md, no
import cycle, small modules, and a pytest plugin that costs nothing.

The import graph is read from the source with ``ast`` (every import, also the
ones inside functions and ``TYPE_CHECKING`` blocks), so a cycle is caught even
where Python would tolerate it at run time.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "sdk" / "src"
PACKAGE = "traceml_exporter_sdk"
MAX_LINES = 500
MAX_ROOT_MODULES = 12
LAYOUT_DOC = SRC.parents[1] / "docs" / "layout.md"
PEERS = ["fault_proxy", "otlp_receiver", "postgres_server", "prometheus_server"]
"""The test peers whose public path is ``testing.<name>``, their code in ``testing/peers/``."""
TOO_BIG_FOR_NOW: set[str] = set()
"""Modules allowed over MAX_LINES until they are split (the CLI becomes a package)."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def imported(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """The package's modules that ``name`` imports anywhere in its source."""
    is_package = path.name == "__init__.py"
    base = name.split(".") if is_package else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - node.level + 1]
                parent = ".".join(anchor + ([node.module] if node.module else []))
            else:
                parent = node.module or ""
            # ``from pkg import sub`` imports the submodule; ``from mod import name`` the module.
            targets = [
                f"{parent}.{alias.name}" if f"{parent}.{alias.name}" in known else parent
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            if target in known and target != name:
                yield target


def import_graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: set(imported(name, path, known)) for name, path in found.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that ends where it starts, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_package_root_holds_only_public_modules_and_at_most_twelve() -> None:
    """Internals live in subpackages named by concern (``_build``, ``_bridge``, ``_export``,
    ``cli``, ``testing``), so the root shows the public surface (issue 32: it held 23)."""
    root = sorted(p.name for p in (SRC / PACKAGE).glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, root
    assert [name for name in root if name.startswith("_") and name != "__init__.py"] == []


TREE_LINE = re.compile(r"^((?:│   |    )*)(?:├── |└── )(\S+)")


def layout_tree(text: str) -> set[str]:
    """The files and folders the ``text`` code block of docs/layout.md draws, as paths
    relative to the package (``_build/coerce.py``, ``cli/commands/``)."""
    block = text.split("```text\n", 1)[1].split("```", 1)[0]
    out: set[str] = set()
    folders: list[str] = []
    for line in block.splitlines():
        match = TREE_LINE.match(line)
        if match is None:
            continue
        depth = len(match.group(1)) // 4
        del folders[depth:]
        name = match.group(2)
        out.add("".join(folders) + name)
        if name.endswith("/"):
            folders.append(name)
    return out


def test_docs_layout_draws_every_module_and_only_those() -> None:
    """Every module outside ``testing/`` (conformance.md lays that out) and every test
    peer, in the tree of docs/layout.md; and nothing it draws is missing."""
    package = SRC / PACKAGE
    actual = {
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if path.relative_to(package).parts[0] != "testing"
        or path.relative_to(package).parts[:2] == ("testing", "peers")
    }
    actual = {p for p in actual if not p.endswith("/__init__.py")}  # a folder's is its folder
    drawn = layout_tree(LAYOUT_DOC.read_text(encoding="utf-8"))
    drawn_modules = {p for p in drawn if p.endswith(".py")}
    assert sorted(actual - drawn_modules) == [], "modules docs/layout.md does not draw"
    assert sorted(drawn_modules - actual) == [], "drawn, but not there"
    folders = {p for p in drawn if p.endswith("/")}
    assert sorted(f for f in folders if not (package / f).is_dir()) == []


def test_the_layout_tree_reader_sees_nesting() -> None:
    text = "```text\npkg/\n├── a.py\n├── sub/\n│   └── deep/\n│       └── b.py\n└── c.py\n```"
    assert layout_tree(text) == {"a.py", "sub/", "sub/deep/", "sub/deep/b.py", "c.py"}


@pytest.mark.parametrize("name", PEERS)
def test_a_test_peer_keeps_its_public_path(name: str) -> None:
    """``traceml_exporter_sdk.testing.<peer>`` (what generated projects and the docs
    import) re-exports exactly its peer's ``__all__``, the same objects."""
    public = importlib.import_module(f"{PACKAGE}.testing.{name}")
    peer = importlib.import_module(f"{PACKAGE}.testing.peers.{name}")
    assert sorted(public.__all__) == sorted(peer.__all__)
    assert all(getattr(public, n) is getattr(peer, n) for n in peer.__all__)


def test_the_graph_reader_sees_relative_and_absolute_imports() -> None:
    """Guard against a reader that finds no edges (and so no cycle, ever)."""
    graph = import_graph()
    assert f"{PACKAGE}.testing.keys" in graph[f"{PACKAGE}.testing.plugin"]
    assert f"{PACKAGE}.testing.conformance" in graph[f"{PACKAGE}.testing.plugin"]
    assert f"{PACKAGE}.testing.configuration" in graph[f"{PACKAGE}.testing.conformance"]
    assert f"{PACKAGE}.factory" in graph[f"{PACKAGE}.worker"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_cycle_in_the_package() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


LIBRARY = (f"{PACKAGE}._bridge", f"{PACKAGE}._export", f"{PACKAGE}._build", f"{PACKAGE}.follow")
"""The library below the command: follow embedded in a service needs no ``cli``."""


def reachable(graph: dict[str, set[str]], start: str) -> dict[str, str | None]:
    """Every module ``start`` imports, directly or through others -> who imports it."""
    via: dict[str, str | None] = {start: None}
    todo = [start]
    while todo:
        node = todo.pop()
        for nxt in sorted(graph[node] - set(via)):
            via[nxt] = node
            todo.append(nxt)
    return via


def test_the_follow_library_never_imports_the_cli() -> None:
    """No module of ``LIBRARY`` reaches ``cli`` by any import, however indirect, lazy
    ones inside functions and ``TYPE_CHECKING`` ones included; the chain is named."""
    graph = import_graph()
    roots = [m for m in graph if any(m == r or m.startswith(f"{r}.") for r in LIBRARY)]
    assert f"{PACKAGE}._bridge.follow.session" in roots
    chains = []
    for root in roots:
        via = reachable(graph, root)
        for module in sorted(m for m in via if m.startswith(f"{PACKAGE}.cli")):
            chain = [module]
            while (importer := via[chain[-1]]) is not None:
                chain.append(importer)
            chains.append(" <- ".join(chain))
    assert chains == []


def test_the_reachability_reader_follows_chains() -> None:
    via = reachable({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}, "a")
    assert via == {"a": None, "b": "a", "c": "b"}


def test_importing_the_follow_library_loads_no_cli_module() -> None:
    """Also at run time (an ``importlib`` call the source reader cannot see): a fresh
    interpreter importing the follow library and its ``_bridge`` has no ``cli`` module."""
    library = [m for m in modules() if m.startswith(f"{PACKAGE}._bridge")]
    script = (
        f"import sys, importlib\nfor m in {[f'{PACKAGE}.follow', *library]!r}:\n"
        "    importlib.import_module(m)\n"
        f"print(sorted(m for m in sys.modules if m.startswith({PACKAGE + '.cli'!r})))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_no_module_is_over_about_500_lines() -> None:
    big = {
        name: n
        for name, path in modules().items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert sorted(set(big) - TOO_BIG_FOR_NOW) == [], big


PROBE = """
import json, os, sys


def test_probe(pytestconfig):
    loaded = sorted(m for m in sys.modules if m == "{package}" or m.startswith("{package}."))
    plugin = pytestconfig.pluginmanager.has_plugin("traceml_exporter")
    with open(os.environ["PROBE_OUT"], "w") as out:
        json.dump({{"modules": loaded, "plugin": plugin, "orjson": "orjson" in sys.modules}}, out)
"""

PLUGIN_MODULES = [
    PACKAGE,
    f"{PACKAGE}.testing",
    f"{PACKAGE}.testing.keys",
    f"{PACKAGE}.testing.plugin",
]


def test_the_pytest_plugin_imports_only_itself(tmp_path: Path) -> None:
    """A pytest run with neither --traceml-exporter nor a suite class loads no SDK code."""
    (tmp_path / "test_probe.py").write_text(PROBE.format(package=PACKAGE), encoding="utf-8")
    out = tmp_path / "probe.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PROBE_OUT"] = str(out)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    probe = json.loads(out.read_text(encoding="utf-8"))
    if not probe["plugin"]:
        pytest.skip("the SDK's pytest11 entry point is not installed in this environment")
    assert probe["modules"] == PLUGIN_MODULES
    assert not probe["orjson"]


def test_the_public_names_are_still_importable_from_the_package() -> None:
    import traceml_exporter_sdk as sdk
    import traceml_exporter_sdk.testing as testing

    for module in (sdk, testing):
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert missing == [], f"{module.__name__}: {missing}"
        assert sorted(module.__all__) == sorted(set(module.__all__))
    assert sdk.jsonl.JsonlExporter is sdk.JsonlExporter  # submodules stay attributes


def test_every_submodule_is_reachable_as_an_attribute() -> None:
    import traceml_exporter_sdk as sdk

    names = {name.split(".")[1] for name in modules() if name.count(".") >= 1 and "._" not in name}
    assert names == set(sdk._SUBMODULES)


WINDOWS_REFUSES = set('<>:"\\|?*')
"""Characters a Windows checkout refuses in a file name (besides ``/``)."""


def test_every_template_path_is_one_a_windows_checkout_accepts() -> None:
    """Conditional names use single quotes, as scientific-python/cookie's do."""
    template = SRC.parents[1] / "template"
    names = [p.relative_to(template).as_posix() for p in template.rglob("*")]
    assert len(names) > 50, "the template was not found"
    bad = [name for name in names if WINDOWS_REFUSES & set(name.replace("/", ""))]
    assert not bad, bad


def test_the_template_partials_are_text_for_common_files_not_project_files() -> None:
    """A sink's files are in its folder, ``_parts/sinks/<sink>/``; beside its ``src/`` and
    ``tests/`` only the text common files include (its metadata and README section)."""
    sinks = SRC.parents[1] / "template" / "{{cookiecutter.project_slug}}" / "_parts" / "sinks"
    partials = [p for sink in sinks.iterdir() for p in sink.iterdir() if p.is_file()]
    assert len(partials) >= 2, "the partials were not found"
    assert {p.suffix for p in partials} == {".jinja", ".md"}
