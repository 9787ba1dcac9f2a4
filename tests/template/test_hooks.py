"""The pre-generation hook refuses unusable names with one message and generates nothing."""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from bake import bake
from cookiecutter.exceptions import FailedHookException
from template_helpers import (
    DEFAULT_CLASS,
    DEFAULT_PACKAGE,
    DEFAULT_SLUG,
    PARTS,
    PROJECT_TEMPLATE,
    ROOT,
    SINK_LAYERS,
    SINKS,
    TEMPLATE,
    TEMPLATE_CONFIG,
    cookiecutter,
    files_of,
    read_toml,
    template_sources,
)

pytestmark = pytest.mark.sink_independent

MESSAGE = "ERROR: cannot generate the exporter project"


def assert_nothing_generated(tmp_path: Path, output: Path) -> None:
    assert not output.exists() or not any(output.iterdir()), "nothing may be generated"
    assert {p.name for p in tmp_path.iterdir()} <= {"out", "out-home"}, "nor anywhere else"


def refused(tmp_path: Path, capfd: pytest.CaptureFixture[str], **variables: str) -> str:
    """Bake with ``variables``, expect the hook to refuse, return what it printed."""
    output = tmp_path / "out"
    with pytest.raises(FailedHookException):
        bake(output, **variables)
    stderr = capfd.readouterr().err
    assert stderr.count(MESSAGE) == 1, stderr
    assert_nothing_generated(tmp_path, output)
    return stderr


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("json", "shadows the standard-library module 'json'"),
        ("asyncio", "shadows the standard-library module 'asyncio'"),
        ("class", "is a Python keyword"),
        ("my-exporter", "is not a Python identifier"),
        ("my.exporter", "is not a Python identifier"),
        ("2fast", "is not a Python identifier"),
        ("traceml", "shadows 'traceml'"),
        ("traceml_ai", "shadows 'traceml_ai'"),
        ("traceml_exporter_sdk", "shadows 'traceml_exporter_sdk'"),
        ("../evil", "contains a path separator"),
        ("a/b", "contains a path separator"),
        ("a\\b", "contains a path separator"),
        ("..", "contains '..'"),
        ("", "is empty"),
        ("it's\"q", "is not a Python identifier"),
    ],
)
def test_bad_package_name_is_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], value: str, reason: str
) -> None:
    stderr = refused(tmp_path, capfd, package_name=value)
    assert f"{MESSAGE}: package_name {value!r}: it {reason}" in stderr


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("project_slug", "../escape", "contains a path separator"),
        ("project_slug", "has space", "is not a valid distribution name"),
        ("exporter_class", "My-Exporter", "is not a Python identifier"),
        ("exporter_class", "None", "is not a Python identifier (or is a keyword)"),
    ],
)
def test_bad_slug_or_class_is_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], variable: str, value: str, reason: str
) -> None:
    stderr = refused(tmp_path, capfd, **{variable: value})
    assert f"{variable} {value!r}: it {reason}" in stderr


def test_every_problem_is_in_the_one_message(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    stderr = refused(tmp_path, capfd, package_name="json", exporter_class="class")
    (line,) = [line for line in stderr.splitlines() if MESSAGE in line]
    assert "package_name 'json'" in line
    assert "exporter_class 'class'" in line


def test_the_cli_shows_the_message_and_exits_1(tmp_path: Path) -> None:
    output = tmp_path / "out"
    result = cookiecutter(output, "package_name=json")
    assert result.returncode == 1
    assert (
        f"{MESSAGE}: package_name 'json': it shadows the standard-library module 'json'"
        in result.stderr
    )
    assert_nothing_generated(tmp_path, output)


@pytest.mark.parametrize("value", ["my_exporter", "Exporter2", "_private_sink"])
def test_good_package_names_are_accepted(tmp_path: Path, value: str) -> None:
    project = bake(tmp_path / "out", package_name=value)
    assert (project / "src" / value / "exporter.py").is_file()
    assert project.name == DEFAULT_SLUG


def test_defaults_from_the_repository_root(tmp_path: Path) -> None:
    """``cookiecutter --no-input <repo>`` goes through the nested-templates config."""
    result = cookiecutter(tmp_path / "out")
    assert result.returncode == 0, result.stdout + result.stderr
    project = tmp_path / "out" / DEFAULT_SLUG
    assert f"src/{DEFAULT_PACKAGE}/exporter.py" in files_of(project)


def test_interactive_from_the_repository_root(tmp_path: Path) -> None:
    """Without --no-input: pick the template, then answer (here: accept every default)."""
    output = tmp_path / "out"
    result = cookiecutter(output, input="\n" * 40)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Select a template" in result.stdout
    assert (output / DEFAULT_SLUG / "src" / DEFAULT_PACKAGE / "exporter.py").is_file()


PARTIAL = re.compile(r'"_parts/sinks/" ~ cookiecutter\.sink ~ "/([\w.]+)"')
"""How a common file names the chosen sink's partial in its folder, ``_parts/sinks/<sink>/``."""
SINK_FILES = {"src/exporter.py", "tests/sink_support.py", "tests/test_exporter.py"}
"""What every sink's folder holds beside its partials (``sink.jinja``, ``README.md``)."""


def test_the_table_lists_every_sink_folder_and_layer_folder_once() -> None:
    """``_sink_layers`` has a row per choice of ``sink`` (in its order), every sink and every
    layer it names has a folder, and every folder is used: a part no row names would be
    dropped silently."""
    assert list(SINK_LAYERS) == SINKS
    assert sorted(p.name for p in (PARTS / "sinks").iterdir()) == sorted(SINKS)
    named = {layer for layers in SINK_LAYERS.values() for layer in layers}
    assert sorted(p.name for p in (PARTS / "layers").iterdir()) == sorted(named)
    for sink, layers in SINK_LAYERS.items():
        assert len(set(layers)) == len(layers), sink
    for folder in (PARTS / "layers").iterdir():
        assert {p.name for p in folder.iterdir()} <= {"src", "tests"}, folder


def test_every_sink_has_its_own_files_and_partials_and_each_is_used() -> None:
    """Each sink's folder has the files every sink has and both partials, which the common
    files include; nothing else sits beside ``src/`` and ``tests/``."""
    used = {
        name
        for path in PROJECT_TEMPLATE.rglob("*")
        if path.is_file() and PARTS not in path.parents
        for name in PARTIAL.findall(path.read_text("utf-8"))
    }
    assert used == {"sink.jinja", "README.md"}
    for sink in SINKS:
        folder = PARTS / "sinks" / sink
        assert {p.name for p in folder.iterdir()} == used | {"src", "tests"}, sink
        files = {p.relative_to(folder).as_posix() for p in folder.rglob("*.py")}
        assert files >= SINK_FILES, sink


@pytest.mark.parametrize("license", TEMPLATE_CONFIG["license"])
def test_every_answer_bakes_each_path_from_one_file(license: str) -> None:
    """Of the files that give one name (a license's LICENSE, a part's module) exactly one is
    kept for any answers; ``template_sources`` fails on two."""
    for sink in SINKS:
        sources = template_sources(sink=sink, license=license)
        assert f"'{license}'" in sources["LICENSE"].name
        assert (PARTS / "sinks" / sink) in sources["tests/test_exporter.py"].parents


def test_the_parts_are_plain_python_written_with_the_default_names() -> None:
    """No template syntax in a part (cookiecutter copies ``_parts`` unrendered); the package,
    class and distribution names are the default answers', which the hook replaces."""
    assert TEMPLATE_CONFIG["_copy_without_render"] == ["_parts"]
    files = [p for p in PARTS.rglob("*.py") if "__pycache__" not in p.parts]
    assert len(files) > 50
    for path in files:
        text = path.read_text("utf-8")
        assert "cookiecutter" not in text, path
        ast.parse(text, str(path))
    assert "traceml_exporter_" + TEMPLATE_CONFIG["project_name"] == DEFAULT_PACKAGE
    assert TEMPLATE_CONFIG["project_name"].title() + "Exporter" == DEFAULT_CLASS
    hook = (TEMPLATE / "hooks" / "post_gen_project.py").read_text("utf-8")
    assert all(f'"{name}"' in hook for name in (DEFAULT_SLUG, DEFAULT_PACKAGE, DEFAULT_CLASS))


def test_the_hooks_are_a_pre_and_a_post_generation_hook() -> None:
    """Names are refused before anything is written; the project is assembled after."""
    names = sorted(p.name for p in (TEMPLATE / "hooks").iterdir() if p.is_file())
    assert names == ["post_gen_project.py", "pre_gen_project.py"]


def test_a_table_row_without_its_folder_fails_with_one_message(tmp_path: Path) -> None:
    """The hook names what is missing, exits 1, and cookiecutter leaves nothing behind."""
    template = tmp_path / "template"
    shutil.copytree(TEMPLATE, template, ignore=shutil.ignore_patterns("__pycache__"))
    config = json.loads((template / "cookiecutter.json").read_text("utf-8"))
    config["_sink_layers"]["jsonl"].append("nosuchlayer")
    (template / "cookiecutter.json").write_text(json.dumps(config), "utf-8")
    output = tmp_path / "out"
    result = cookiecutter(output, template=template)
    assert result.returncode == 1
    assert (
        "ERROR: cannot assemble the exporter project: the template has no layers/nosuchlayer "
        "under _parts/." in result.stderr
    )
    assert not output.exists() or not any(output.iterdir())


def test_rebaking_over_an_existing_project_with_overwrite(tmp_path: Path) -> None:
    """``cookiecutter -f`` (and ``traceml-exporter new -f``) over a baked project works."""
    from cookiecutter.main import cookiecutter as run_cookiecutter

    first = bake(tmp_path / "out", author_name="First", sink=SINKS[0], license="MIT")
    files = files_of(first)
    second = run_cookiecutter(
        str(ROOT),
        no_input=True,
        extra_context={"author_name": "Second", "sink": SINKS[-1], "license": "BSD-3-Clause"},
        output_dir=str(tmp_path / "out"),
        default_config=True,
        overwrite_if_exists=True,
    )
    assert Path(second) == first
    assert "Second" in (first / "pyproject.toml").read_text(encoding="utf-8")
    assert (first / "LICENSE").read_text(encoding="utf-8").startswith("BSD 3-Clause")
    fresh = bake(tmp_path / "fresh", author_name="Second", sink=SINKS[-1], license="BSD-3-Clause")
    # every sink bakes the common names; a sink's own extra modules (mlflow's) are added
    assert files_of(first) == sorted(set(files) | set(files_of(fresh)))
    for name in files_of(fresh):
        assert (first / name).read_bytes() == (fresh / name).read_bytes(), name
    assert (first / "src" / DEFAULT_PACKAGE / "exporter.py").is_file()
    assert not (first / "_parts").exists()


# -- answers rendered unescaped, and names that bake a broken project (issue 9) -----


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("C:\\New", "it holds ':\\\\'"),
        ('a"""b', "it holds '\"'"),
        ("two\nlines", "it holds the unprintable character '\\n'"),
        ("*bold*", "it holds '*'"),
        ("<b>x</b>", "it holds '/<>'"),
        ("[link](http://x)", "it holds '/:[]'"),
        ("x" * 101, "it is 101 characters long; at most 100"),
        (" padded", "it starts or ends with a space"),
        ("   ", "it is empty"),
    ],
)
def test_a_project_name_unsafe_in_a_docstring_or_markdown_is_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], value: str, reason: str
) -> None:
    stderr = refused(tmp_path, capfd, project_name=value)
    assert f"project_name {_shown(value)}: {reason}" in stderr


def _shown(value: str) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


@pytest.mark.parametrize("value", ["My Sink (v2)", "Ünïcode Süd-Sink", "O'Brien & Co. +1"])
def test_a_project_name_with_safe_punctuation_bakes_a_valid_package(
    tmp_path: Path, value: str
) -> None:
    project = bake(tmp_path / "out", project_name=value, package_name="my_sink")
    init = project / "src" / "my_sink" / "__init__.py"
    tree = ast.parse(init.read_text(encoding="utf-8"))
    assert (ast.get_docstring(tree) or "").startswith(f"The {value} exporter")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("orjson", "it shadows 'orjson', which the generated project or its tests import"),
        ("pytest", "it shadows 'pytest', which the generated project or its tests import"),
        ("hypothesis", "it shadows 'hypothesis', which the generated project or its tests"),
        ("tests", "it shadows 'tests'"),
        ("__main__", "it is a dunder name, which Python reserves"),
        ("__sink__", "it is a dunder name"),
        ("\ufb01le_sink", "Python reads it as 'file_sink' (NFKC normalisation)"),
        ("a" * 300, "it is 300 characters long; at most 64"),
    ],
)
def test_a_package_name_that_bakes_a_broken_project_is_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], value: str, reason: str
) -> None:
    stderr = refused(tmp_path, capfd, package_name=value)
    assert f"package_name {_shown(value)}: {reason}" in stderr


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("orjson", "a class name starts with an upper-case letter"),
        ("os", "a class name starts with an upper-case letter"),
        ("Path", "the exporter module or its tests already use the name 'Path'"),
        (
            "ExporterContext",
            "the exporter module or its tests already use the name 'ExporterContext'",
        ),
        ("Exception", "the exporter module or its tests already use the name 'Exception'"),
        ("TestSink", "pytest would collect a class named Test*"),
        ("\ufb01leExporter", "Python reads it as"),
        ("E" * 65, "it is 65 characters long; at most 64"),
    ],
)
def test_an_exporter_class_that_bakes_a_broken_project_is_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], value: str, reason: str
) -> None:
    stderr = refused(tmp_path, capfd, exporter_class=value)
    assert f"exporter_class {_shown(value)}: {reason}" in stderr


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("author_name", "Ann\nEvil = 1", "it holds the unprintable character '\\n'"),
        ("author_name", "Ann\x00", "it holds the unprintable character '\\x00'"),
        ("author_email", "not an email", "it is not an address of the form name@example.com"),
        ("author_email", "a@b.c>, x", "it is not an address"),
        ("project_slug", "s" * 101, "it is 101 characters long; at most 100"),
    ],
)
def test_other_answers_unsafe_where_they_are_rendered_are_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], variable: str, value: str, reason: str
) -> None:
    stderr = refused(tmp_path, capfd, **{variable: value})
    assert f"{variable} {_shown(value)}: {reason}" in stderr


def _hook() -> dict[str, Any]:
    """The pre-generation hook's functions and lists, its Jinja lines left out."""
    source = (ROOT / "template" / "hooks" / "pre_gen_project.py").read_text(encoding="utf-8")
    kept = [line for line in source.splitlines() if "{{ cookiecutter." not in line]
    namespace: dict[str, Any] = {"__name__": "pre_gen_project"}
    exec(compile("\n".join(kept), "pre_gen_project.py", "exec"), namespace)
    return namespace


def _template_python() -> list[ast.Module]:
    """Every Python file of the template's project, the common ones with their Jinja filled in."""
    trees = []
    paths = [p for p in PROJECT_TEMPLATE.rglob("*.py") if "__pycache__" not in p.parts]
    assert sum(p.name == "exporter.py" for p in paths) == len(SINKS), "one per sink"
    for path in paths:
        text = re.sub(r"\{([%#]).*?\1\}", "", path.read_text(encoding="utf-8"), flags=re.S)
        text = text.replace("{{ cookiecutter.exporter_class }}", DEFAULT_CLASS)
        text = text.replace("{{ cookiecutter.package_name }}", DEFAULT_PACKAGE)
        text = re.sub(r"\{\{.*?\}\}", "x", text)
        trees.append(ast.parse(text, str(path)))
    return trees


def test_every_module_the_template_imports_is_refused_as_the_package_name() -> None:
    """Keeps the hook's list complete when a sink or a test imports something new."""
    hook = _hook()
    imported = set()
    for tree in _template_python():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    imported.discard(DEFAULT_PACKAGE)
    assert imported
    allowed = sorted(name for name in imported if hook["package_problem"](name) is None)
    assert allowed == [], "add these to DEPENDENCY_MODULES in the pre-generation hook"


def test_every_name_the_template_binds_is_refused_as_the_exporter_class() -> None:
    """Keeps the hook's list complete when an exporter or test module binds a new name."""
    hook = _hook()
    bound = set()
    for tree in _template_python():
        for node in tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
                bound.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                bound |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    bound -= {DEFAULT_CLASS, f"Test{DEFAULT_CLASS}"}
    assert "make_exporter" in bound
    allowed = sorted(name for name in bound if hook["class_problem"](name) is None)
    assert allowed == [], "add these to TEMPLATE_NAMES in the pre-generation hook"


def test_the_parts_are_linted_in_place_with_a_baked_projects_ruff_settings(
    tmp_path: Path,
) -> None:
    """``_parts/ruff.toml`` (what ruff reads in place) says what the bake's pyproject says."""
    project = bake(tmp_path / "out")
    baked = read_toml(project / "pyproject.toml")["tool"]["ruff"]
    parts = read_toml(PARTS / "ruff.toml")
    assert parts["line-length"] == baked["line-length"]
    assert parts["lint"]["extend-select"] == baked["lint"]["extend-select"]
    assert parts["lint"]["ignore"] == baked["lint"]["ignore"]
    ignores = {f"**/{k}": v for k, v in baked["lint"]["per-file-ignores"].items()}
    assert parts["lint"]["per-file-ignores"] == ignores
    assert parts["lint"]["isort"]["known-first-party"] == [DEFAULT_PACKAGE]
    requires = read_toml(project / "pyproject.toml")["project"]["requires-python"]
    assert requires == ">=3.10"
    assert parts["target-version"] == "py310"


SUITE_HOOKS = {
    "SKIP_CHECKS",
    "expected_export",
    "broken_context",
    "break_sink",
    "repair_sink",
    "break_sink_permanently",
    "MAX_EXAMPLES",
}
"""What a sink's ``sink_support.py`` may define for the rendered ``tests/test_conformance.py``."""


@pytest.mark.parametrize("kind", SINKS)
def test_each_sink_declares_the_suite_hooks_its_sink_support_defines(kind: str) -> None:
    """``tests/test_conformance.py`` is rendered from ``suite_hooks`` in ``sink.jinja``
    (no ``hasattr`` at run time), so that list must be what ``sink_support.py`` defines."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(PROJECT_TEMPLATE))
    declared = env.get_template(f"_parts/sinks/{kind}/sink.jinja").module.suite_hooks  # type: ignore[attr-defined]
    support = PARTS / "sinks" / kind / "tests" / "sink_support.py"
    tree = ast.parse(support.read_text("utf-8"))
    defined = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    assert "read_export" in defined
    assert set(declared) == defined & SUITE_HOOKS
    assert ("break_sink" in declared) == ("broken_context" in declared)
    # a sink that keeps aggregates skips the record-level checks; others may skip a check
    # for a declared limitation (NaN in JSON), with no expected_export
    assert "expected_export" not in declared or "SKIP_CHECKS" in declared


def test_every_exporter_is_a_lifecycle_and_only_it_keeps_the_state() -> None:
    """The call-order guard, its messages and rule 6 are written once, in the lifecycle
    layer: each sink's exporter class derives from ``Lifecycle`` (or ``HttpExporter``,
    which does), and no other part keeps a ``_state`` or says "not open"."""
    lifecycle = PARTS / "layers" / "lifecycle"
    for sink in SINKS:
        tree = ast.parse((PARTS / "sinks" / sink / "src" / "exporter.py").read_text("utf-8"))
        (exporter,) = [
            n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == DEFAULT_CLASS
        ]
        bases = {
            (b.value if isinstance(b, ast.Subscript) else b).id  # HttpExporter[Settings]
            for b in exporter.bases
            if isinstance(b.value if isinstance(b, ast.Subscript) else b, ast.Name)
        }
        assert bases & {"Lifecycle", "HttpExporter"}, sink
    for path in PARTS.rglob("*.py"):
        if lifecycle in path.parents or "tests" in path.relative_to(PARTS).parts:
            continue
        text = path.read_text("utf-8")
        assert not re.search(r"\b_state\b|not open|called on a", text), path
