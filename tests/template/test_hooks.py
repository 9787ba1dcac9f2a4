"""The pre-generation hook refuses unusable names with one message and generates nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cookiecutter.exceptions import FailedHookException
from template_helpers import (
    DEFAULT_PACKAGE,
    DEFAULT_SLUG,
    ROOT,
    SINKS,
    SINKS_DIR,
    TEMPLATE,
    cookiecutter,
    files_of,
    generate,
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
        generate(output, **variables)
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
    project = generate(tmp_path / "out", package_name=value)
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


INCLUDE = re.compile(r'"sinks/" ~ cookiecutter\.sink ~ "/([^"]+)"')
"""How a project file names a file of the chosen sink's folder."""


def test_every_sink_has_a_complete_folder_and_every_file_is_used() -> None:
    """One folder per sink kind in ``cookiecutter.json``; a file no project file includes
    would be dropped silently, and a file one includes must exist for every sink."""
    project = TEMPLATE / "{{cookiecutter.project_slug}}"
    used = {
        name
        for path in project.rglob("*")
        if path.is_file()
        for name in INCLUDE.findall(path.read_text("utf-8"))
    }
    assert {"exporter.py", "sink_support.py", "test_exporter.py", "sink.jinja"} <= used
    assert sorted(p.name for p in SINKS_DIR.iterdir()) == sorted(SINKS)
    for sink in SINKS:
        files = {p.name for p in (SINKS_DIR / sink).iterdir() if p.name != "__pycache__"}
        assert files == used, f"template/templates/sinks/{sink}/"


def test_there_is_no_post_generation_hook() -> None:
    """Files are chosen by their rendered names and by includes, never moved afterwards."""
    assert sorted(p.name for p in (TEMPLATE / "hooks").iterdir()) == ["pre_gen_project.py"]


def test_rebaking_over_an_existing_project_with_overwrite(tmp_path: Path) -> None:
    """``cookiecutter -f`` (and ``traceml-exporter new -f``) over a baked project works."""
    from cookiecutter.main import cookiecutter as run_cookiecutter

    first = generate(tmp_path / "out", author_name="First", sink=SINKS[0], license="MIT")
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
    assert files_of(first) == files, "every sink kind bakes the same file names"
    assert "Second" in (first / "pyproject.toml").read_text(encoding="utf-8")
    assert (first / "LICENSE").read_text(encoding="utf-8").startswith("BSD 3-Clause")
    fresh = generate(
        tmp_path / "fresh", author_name="Second", sink=SINKS[-1], license="BSD-3-Clause"
    )
    for name in files:
        assert (first / name).read_bytes() == (fresh / name).read_bytes(), name
