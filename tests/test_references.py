"""Every file, module and name the SDK's docstrings and the docs point at exists.

Paths (``tests/...``, ``docs/...``, ``sdk/...``, ``template/...``) are looked up in
the repository, and, for a generated project's own files, among the template's
files by the name they are generated with; a backticked file name (``_causes.py``)
must be a file of the repository. A backticked ``module.name`` whose first part is
the name of a private SDK module or package (``_bridge.sqlite_source.SqliteSource``),
or of a public one of the package's root, is imported and looked up (an instance
attribute counts when a class of the module declares it); one whose first part is
such a name with its leading underscore missing or added (``causes.X`` for
``_causes``), or a private name that is no module of the SDK and no file of the
repository (``_backfill.X``, which moved), is a module that moved or never was. A
backticked private name alone (``_backfill``) must be an SDK module or a name the
SDK's or the template's sources hold. Other dotted names (``context.include_hostname``
of an object, ``service.name`` of OpenTelemetry) are not the SDK's modules and are
left alone.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import traceml_exporter_sdk

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(traceml_exporter_sdk.__file__).parent
PROJECT = ROOT / "template" / "{{cookiecutter.project_slug}}"
PATH = re.compile(
    r"(?<![\w./-])((?:tests|docs|sdk|template|\.ci)/[\w./{}-]*\.(?:py|md|json|toml|txt|yml))"
)
DOTTED = re.compile(r"`{1,2}(_?[a-z]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?`{1,2}")
BARE = re.compile(r"`{1,2}(_[a-z]\w*)`{1,2}")
JINJA = re.compile(r"\{%.*?%\}")
FILE_ENDINGS = {"py", "md", "json", "jsonl", "toml", "txt", "yml", "yaml", "db", "log"}


def _texts() -> Iterator[tuple[str, str]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")


def _generated_paths() -> set[str]:
    """The template project's files by the names a bake gives them: a sink's or a
    layer's part (``_parts/<kind>/<name>/{src,tests}/...``) lands in the project's
    ``src/<package>/`` or ``tests/`` (template/hooks/post_gen_project.py)."""
    paths = set()
    for path in PROJECT.rglob("*"):
        if not path.is_file():
            continue
        parts = path.relative_to(PROJECT).parts
        if parts[0] == "_parts" and len(parts) > 4 and parts[3] in ("src", "tests"):
            inside = "/".join(parts[4:])
            parts = (
                ("src", "{{cookiecutter.package_name}}", inside)
                if parts[3] == "src"
                else ("tests", inside)
            )
        paths.add(JINJA.sub("", "/".join(parts)))
    return paths


def _modules() -> dict[str, list[str]]:
    """Last part of each private SDK module's name, and of each public one of the
    package's root -> the modules' full names."""
    out: dict[str, list[str]] = {}
    names = ["traceml_exporter_sdk"] + [
        info.name for info in pkgutil.walk_packages([str(PACKAGE)], prefix="traceml_exporter_sdk.")
    ]
    for name in names:
        last = name.rsplit(".", 1)[-1]
        if last.startswith("_") or name.count(".") <= 1:
            out.setdefault(last, []).append(name)
    return out


def _declares(module: ModuleType, attribute: str) -> bool:
    """A class of ``module`` declares ``attribute`` for its instances."""
    return any(
        isinstance(value, type)
        and value.__module__ == module.__name__
        and attribute in getattr(value, "__annotations__", {})
        for value in vars(module).values()
    )


def _resolves(module: ModuleType, attributes: list[str]) -> bool:
    value: object = module
    for index, attribute in enumerate(attributes):
        if hasattr(value, attribute):
            value = getattr(value, attribute)
            continue
        if isinstance(value, ModuleType):
            try:
                value = importlib.import_module(f"{value.__name__}.{attribute}")
                continue
            except ImportError:
                return index == len(attributes) - 1 and _declares(value, attribute)
        # an instance attribute, which a class does not hold until __init__ runs
        return isinstance(value, type) and index == len(attributes) - 1 and attribute.islower()
    return True


def missing_paths(texts: list[tuple[str, str]]) -> list[str]:
    generated = _generated_paths()
    out = []
    for where, text in texts:
        for ref in sorted(set(PATH.findall(text))):
            ref = ref.rstrip(".")
            if (ROOT / ref).exists() or ref in generated or "{" in ref or "*" in ref:
                continue
            out.append(f"{where}: {ref}")
    return out


def missing_names(texts: list[tuple[str, str]]) -> list[str]:
    modules = _modules()
    files = {path.name for path in ROOT.rglob("*") if ".nox" not in path.parts}
    files |= {Path(path).name for path in _generated_paths()}
    out = []
    for where, text in texts:
        for ref in sorted(set(DOTTED.findall(text))):
            first, *rest = ref.split(".")
            if rest[-1] in FILE_ENDINGS:
                if len(rest) == 1 and first.startswith("_") and ref not in files:
                    out.append(f"{where}: {ref} (no such file)")
                continue
            if first in modules:
                if not any(
                    _resolves(importlib.import_module(full), rest) for full in modules[first]
                ):
                    out.append(f"{where}: {ref} (no such name in {', '.join(modules[first])})")
                continue
            twin = first[1:] if first.startswith("_") else f"_{first}"
            if twin in modules and (rest[0][0].isupper() or rest[0][0] == "_"):
                out.append(f"{where}: {ref} (no module {first!r}; there is {twin!r})")
            elif first.startswith("_") and f"{first}.py" not in files:
                out.append(f"{where}: {ref} (no module or file {first!r})")
    return out


def _source_text() -> str:
    """Every file of the SDK's source and of the template, and the noxfile, as one text."""
    paths = [p for base in (PACKAGE, ROOT / "template") for p in base.rglob("*") if p.is_file()]
    paths.append(ROOT / "noxfile.py")
    return "\n".join(
        p.read_text(encoding="utf-8", errors="replace")
        for p in paths
        if "__pycache__" not in p.parts and p.suffix not in {".db", ".png", ".gz"}
    )


def missing_bare_names(texts: list[tuple[str, str]], source: str) -> list[str]:
    """Backticked private names alone that are no SDK module and no name in ``source``."""
    modules = _modules()
    out = []
    for where, text in texts:
        for name in sorted(set(BARE.findall(text))):
            if name in modules or re.search(rf"(?<!\w){re.escape(name)}\b", source):
                continue
            out.append(f"{where}: {name} (no such module or name)")
    return out


@pytest.fixture(scope="module")
def texts() -> list[tuple[str, str]]:
    return list(_texts())


def test_every_path_the_docs_and_docstrings_name_exists(texts: list[tuple[str, str]]) -> None:
    assert missing_paths(texts) == []


def test_every_module_and_name_the_docs_and_docstrings_name_exists(
    texts: list[tuple[str, str]],
) -> None:
    assert missing_names(texts) == []


def test_every_private_name_the_docs_and_docstrings_name_exists(
    texts: list[tuple[str, str]],
) -> None:
    assert missing_bare_names(texts, _source_text()) == []


def test_the_checker_sees_a_moved_file_a_moved_module_and_a_missing_name() -> None:
    broken = [
        ("a.py", "see ``tests/test_fast_decode.py`` and docs/wire-format.md"),
        ("b.py", "read by ``_backfill.SqliteSource.read_page``, ``causes.RootCause``"),
        ("c.md", "`records.no_such_thing` and `_build.coerce.nothing_here`, ``_gone.py``"),
        ("d.md", "fine: `records.StepTimeRecord`, tests/test_layout.py, tests/sink_support.py"),
        ("e.md", "fine: `context.include_hostname`, `_causes.py`, `service.name`"),
        ("f.md", "fine: `_bridge.sqlite_source.SqliteSource.read_page`, `_http.deadline`"),
    ]
    assert missing_paths(broken) == [
        "a.py: docs/wire-format.md",
        "a.py: tests/test_fast_decode.py",
    ]
    problems = missing_names(broken)
    assert [p.split(" (")[0] for p in problems] == [
        "b.py: _backfill.SqliteSource.read_page",
        "b.py: causes.RootCause",
        "c.md: _build.coerce.nothing_here",
        "c.md: _gone.py",
        "c.md: records.no_such_thing",
    ]
    bare = [("g.md", "`_backfill` moved; `_build`, `_causes` and `_finish` are there")]
    assert missing_bare_names(bare, "def _finish(): ...") == [
        "g.md: _backfill (no such module or name)"
    ]
