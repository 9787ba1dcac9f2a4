"""The pre-generation hook refuses unusable names with one message and generates nothing."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
from bake import bake
from cookiecutter.exceptions import FailedHookException
from template_helpers import (
    DEFAULT_PACKAGE,
    DEFAULT_SLUG,
    PARTIALS_DIR,
    PROJECT_TEMPLATE,
    ROOT,
    SINKS,
    TEMPLATE,
    TEMPLATE_CONFIG,
    cookiecutter,
    files_of,
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


PARTIAL = re.compile(r'"sinks/" ~ cookiecutter\.sink ~ "(\.[a-z]+)"')
"""How a common file names the chosen sink's partial in template/templates/sinks/."""
SINK_CONDITION = re.compile(r"\{% if cookiecutter\.sink (?:== '(\w+)'|in \[([^\]]*)\]) %\}")
"""A conditional name's test of the sink: ``== 'postgres'`` or ``in ['otlp', 'mlflow']``."""


def test_every_sink_has_its_own_files_and_partials_and_each_is_used() -> None:
    """Each sink of ``cookiecutter.json`` bakes the common sink file names from files of its
    own and has both partials; a file of a sink not listed, or a partial no common file
    includes, would be dropped silently."""
    used = {
        suffix
        for path in PROJECT_TEMPLATE.rglob("*")
        if path.is_file()
        for suffix in PARTIAL.findall(path.read_text("utf-8"))
    }
    assert used == {".jinja", ".md"}
    partials = sorted(p.name for p in PARTIALS_DIR.iterdir())
    assert partials == sorted(sink + suffix for sink in SINKS for suffix in used)
    conditional = [p.name for p in PROJECT_TEMPLATE.rglob("*") if "cookiecutter.sink" in p.name]
    assert [name for name in conditional if not SINK_CONDITION.search(name)] == []
    named = set()
    for name in conditional:
        for one, several in SINK_CONDITION.findall(name):
            named |= {one} if one else set(re.findall(r"'(\w+)'", several))
    assert named == set(SINKS)
    common = {
        f"src/{DEFAULT_PACKAGE}/exporter.py",
        "tests/sink_support.py",
        "tests/test_exporter.py",
    }
    for sink in SINKS:
        own = {
            name
            for name, source in template_sources(sink=sink).items()
            if "cookiecutter.sink" in source.name
        }
        assert common <= own, sink


@pytest.mark.parametrize("license", TEMPLATE_CONFIG["license"])
def test_every_answer_bakes_each_path_from_one_file(license: str) -> None:
    """Of the files that render to one name (a sink's exporter.py, a license's LICENSE)
    exactly one is kept for any answers; ``template_sources`` fails on two."""
    for sink in SINKS:
        sources = template_sources(sink=sink, license=license)
        assert f"'{license}'" in sources["LICENSE"].name
        assert f"'{sink}'" in sources["tests/test_exporter.py"].name


def test_there_is_no_post_generation_hook() -> None:
    """Files are chosen by their rendered names and by includes, never moved afterwards."""
    assert sorted(p.name for p in (TEMPLATE / "hooks").iterdir()) == ["pre_gen_project.py"]


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
    # every sink bakes the common names; a sink's own extra modules (otlp's) are added
    assert files_of(first) == sorted(set(files) | set(files_of(fresh)))
    for name in files_of(fresh):
        assert (first / name).read_bytes() == (fresh / name).read_bytes(), name
    assert (first / "src" / DEFAULT_PACKAGE / "exporter.py").is_file()
    assert not (first / "_sinks").exists()


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
    """Every Python file of the template, parsed with its Jinja placeholders filled in."""
    trees = []
    # a sink's own files have conditional names: "{% if ... %}exporter.py{% endif %}"
    names = {p: re.sub(r"\{%.*?%\}", "", p.name) for p in PROJECT_TEMPLATE.rglob("*")}
    paths = [path for path, name in names.items() if name.endswith(".py")]
    assert sum(name == "exporter.py" for name in names.values()) == len(SINKS), "one per sink"
    for path in paths:
        text = re.sub(r"\{([%#]).*?\1\}", "", path.read_text(encoding="utf-8"), flags=re.S)
        text = text.replace("{{ cookiecutter.exporter_class }}", "ZzExporter")
        text = text.replace("{{ cookiecutter.package_name }}", "zz_package")
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
    imported.discard("zz_package")
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
    bound -= {"ZzExporter", "TestZzExporter"}
    assert "make_exporter" in bound
    allowed = sorted(name for name in bound if hook["class_problem"](name) is None)
    assert allowed == [], "add these to TEMPLATE_NAMES in the pre-generation hook"
