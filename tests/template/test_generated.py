"""A baked project, per sink kind: its own tests and the full conformance suite pass,
it is ruff and ``mypy --strict`` clean, sp-repo-review finds nothing, and it holds
exactly the chosen sink's files."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from importlib.metadata import packages_distributions
from pathlib import Path

import gates
import pytest
from bake import bake
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from template_helpers import (
    DEFAULT_PACKAGE,
    DEFAULT_SINK,
    PARTS,
    ROOT,
    TEMPLATE,
    files_of,
    project_env,
    read_toml,
    run,
    template_sources,
    tool,
)

COMMON_FILES = [
    ".github/dependabot.yml",
    ".github/workflows/ci.yml",
    ".gitignore",
    "LICENSE",
    "README.md",
    "noxfile.py",
    "pyproject.toml",
    f"src/{DEFAULT_PACKAGE}/__init__.py",
    f"src/{DEFAULT_PACKAGE}/_contract.py",
    f"src/{DEFAULT_PACKAGE}/_lifecycle.py",
    f"src/{DEFAULT_PACKAGE}/exporter.py",
    f"src/{DEFAULT_PACKAGE}/py.typed",
    "tests/conftest.py",
    "tests/exporter_calls.py",
    "tests/sink_support.py",
    "tests/suite_helpers.py",
    "tests/test_conformance.py",
    "tests/test_exporter.py",
    "tests/test_lifecycle.py",
]
SINK_FILES = [
    f"src/{DEFAULT_PACKAGE}/exporter.py",
    "tests/sink_support.py",
    "tests/test_exporter.py",
]
"""Common names every sink bakes from a file of its own folder."""

EXTRA_FILES = {
    "jsonl": [
        f"src/{DEFAULT_PACKAGE}/_files.py",
        "tests/test_files.py",
    ],
    "sqlite": [
        f"src/{DEFAULT_PACKAGE}/_files.py",
        "tests/test_files.py",
    ],
    "postgres": [
        f"src/{DEFAULT_PACKAGE}/_delivery.py",
        f"src/{DEFAULT_PACKAGE}/_files.py",
        f"src/{DEFAULT_PACKAGE}/_postgres_connection.py",
        f"src/{DEFAULT_PACKAGE}/_postgres_schema.py",
        "tests/test_delivery.py",
        "tests/test_files.py",
    ],
    "otlp": [
        f"src/{DEFAULT_PACKAGE}/_delivery.py",
        f"src/{DEFAULT_PACKAGE}/_files.py",
        f"src/{DEFAULT_PACKAGE}/_http.py",
        f"src/{DEFAULT_PACKAGE}/_http_exporter.py",
        f"src/{DEFAULT_PACKAGE}/_otlp_settings.py",
        f"src/{DEFAULT_PACKAGE}/_otlp_wire.py",
        f"src/{DEFAULT_PACKAGE}/_protobuf.py",
        "tests/test_delivery.py",
        "tests/test_files.py",
        "tests/test_otlp_wire.py",
    ],
    "prometheus": [
        f"src/{DEFAULT_PACKAGE}/_delivery.py",
        f"src/{DEFAULT_PACKAGE}/_files.py",
        f"src/{DEFAULT_PACKAGE}/_http.py",
        f"src/{DEFAULT_PACKAGE}/_http_exporter.py",
        f"src/{DEFAULT_PACKAGE}/_prometheus_series.py",
        f"src/{DEFAULT_PACKAGE}/_prometheus_settings.py",
        f"src/{DEFAULT_PACKAGE}/_protobuf.py",
        f"src/{DEFAULT_PACKAGE}/_prometheus_wire.py",
        f"src/{DEFAULT_PACKAGE}/monitoring/__init__.py",
        f"src/{DEFAULT_PACKAGE}/monitoring/__main__.py",
        f"src/{DEFAULT_PACKAGE}/monitoring/dashboard.json",
        f"src/{DEFAULT_PACKAGE}/monitoring/rules.yml",
        "tests/test_delivery.py",
        "tests/test_files.py",
        "tests/test_monitoring.py",
    ],
    "parquet": [
        f"src/{DEFAULT_PACKAGE}/_files.py",
        f"src/{DEFAULT_PACKAGE}/_parquet_arrow.py",
        f"src/{DEFAULT_PACKAGE}/_parquet_events.py",
        f"src/{DEFAULT_PACKAGE}/_parquet_layout.py",
        f"src/{DEFAULT_PACKAGE}/_parquet_read.py",
        f"src/{DEFAULT_PACKAGE}/_parquet_text.py",
        "tests/crash_driver.py",
        "tests/test_parquet_compaction.py",
        "tests/test_parquet_crash.py",
        "tests/test_files.py",
        "tests/test_parquet_readers.py",
    ],
    "tensorboard": [
        f"src/{DEFAULT_PACKAGE}/_files.py",
        f"src/{DEFAULT_PACKAGE}/_measures.py",
        f"src/{DEFAULT_PACKAGE}/_protobuf.py",
        f"src/{DEFAULT_PACKAGE}/_tensorboard_events.py",
        f"src/{DEFAULT_PACKAGE}/_tensorboard_scalars.py",
        "tests/crash_driver.py",
        "tests/test_files.py",
        "tests/test_tensorboard_crash.py",
        "tests/test_tensorboard_server.py",
    ],
    "mlflow": [
        f"src/{DEFAULT_PACKAGE}/_delivery.py",
        f"src/{DEFAULT_PACKAGE}/_files.py",
        f"src/{DEFAULT_PACKAGE}/_http.py",
        f"src/{DEFAULT_PACKAGE}/_measures.py",
        f"src/{DEFAULT_PACKAGE}/_mlflow_api.py",
        f"src/{DEFAULT_PACKAGE}/_mlflow_metrics.py",
        f"src/{DEFAULT_PACKAGE}/_mlflow_summary.py",
        "tests/mlflow_server.py",
        "tests/test_delivery.py",
        "tests/test_files.py",
        "tests/test_mlflow_faults.py",
    ],
}
"""Sink -> the files it has beyond the common ones (its own and its layers')."""


def test_only_the_chosen_sink_is_kept(baked: Path, sink: str) -> None:
    assert files_of(baked) == sorted(COMMON_FILES + EXTRA_FILES.get(sink, []))
    sources = template_sources(sink=sink)
    assert sorted(sources) == files_of(baked), "template_sources places unlike the hook"
    own = {
        project_file: source
        for project_file, source in sources.items()
        if (PARTS / "sinks" / sink) in source.parents
    }
    assert set(SINK_FILES) <= set(own)
    # the parts are written with the default answers, so a default bake holds them verbatim
    for project_file, source in sources.items():
        if PARTS in source.parents:
            assert (baked / project_file).read_bytes() == source.read_bytes(), project_file


@pytest.mark.sink_independent
def test_docs_name_the_files_a_bake_has() -> None:
    """docs/template.md's tree has every common file; docs/otlp.md lists the otlp sink's."""
    tree = (
        (ROOT / "docs" / "template.md").read_text("utf-8").partition("## The generated project")[2]
    )
    tree = tree.split("```")[1]
    assert [f for f in COMMON_FILES if Path(f).name not in tree] == []
    otlp = (ROOT / "docs" / "otlp.md").read_text("utf-8")
    otlp_files = [*SINK_FILES, *EXTRA_FILES["otlp"]]
    named = [f.replace(DEFAULT_PACKAGE, "<package>") for f in otlp_files]
    assert [f for f in named if f"`{f}`" not in otlp] == []


def imported_modules(folder: Path) -> set[str]:
    """Top-level names of the absolute imports in the ``.py`` files under ``folder``."""
    names = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.partition(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.partition(".")[0])
    return names


def test_runtime_dependencies_cover_what_src_imports(baked: Path) -> None:
    """Every third-party import of the package comes from a declared dependency, and
    neither TraceML nor the SDK is imported or declared (the SDK is a test dependency)."""
    pyproject = read_toml(baked / "pyproject.toml")
    requirements = pyproject["project"]["dependencies"]
    declared = {canonicalize_name(Requirement(r).name) for r in requirements}
    assert not {name for name in declared if name.startswith("traceml")}
    imported = imported_modules(baked / "src") - set(sys.stdlib_module_names) - {DEFAULT_PACKAGE}
    assert not {name for name in imported if name.startswith(("traceml", "pytest"))}
    providers = packages_distributions()  # top-level module -> distributions (namespaces: several)
    undeclared = {
        name: providers.get(name, [])
        for name in sorted(imported)
        if not declared & {canonicalize_name(d) for d in providers.get(name, [])}
    }
    assert not undeclared, (
        f"src imports modules no declared dependency provides ({undeclared}, module: the "
        "distributions that provide it); add one to dependencies in template/templates/sinks/<sink>.jinja"
    )
    assert "traceml-exporter-sdk[testing]" in pyproject["dependency-groups"]["test"]


DECLARED_SKIPS = {
    "jsonl": 2,
    "sqlite": 2,
    "parquet": 1,
    "tensorboard": 2,
    "prometheus": 7,
    "mlflow": 9,
}
"""Sink -> how many of the suite's checks it skips by name (its sink_support.SKIP_CHECKS):
a file sink has no fault waiting cannot fix (permanent_fault_marked); the jsonl, sqlite
and tensorboard sinks declare ``special_floats`` (JSON has no NaN, SQLite stores NaN as
NULL); a metrics store keeps series and MLflow metric points, not the records the
row-level checks read back (the shared round trips prove what they keep instead)."""


def test_tests_and_conformance_suite_pass(baked: Path, sink: str, tmp_path: Path) -> None:
    """The project's own tests with pytest, then the suite's checks the way its README says
    to run them alone, ``traceml-exporter check --project``, started from another folder."""
    gates.pytest_run(baked, conformance=False)
    skips = DECLARED_SKIPS.get(sink, 0)
    gates.check_command(baked, cwd=tmp_path, skip_reason="SKIP_CHECKS[", skips=skips)


def test_ruff_clean(baked: Path) -> None:
    gates.ruff(baked)


def test_mypy_strict_clean(baked: Path, tmp_path: Path) -> None:
    gates.mypy(baked, tmp_path / "mypy")


def test_sp_repo_review_finds_nothing(baked: Path) -> None:
    gates.repo_review(baked)


@pytest.mark.sink_independent
def test_generated_noxfile_runs_lint_and_typecheck(baked: Path, tmp_path: Path) -> None:
    """The project's own noxfile installs the SDK from TRACEML_EXPORTER_SDK and its groups.

    (``mypy --version`` only: test_mypy_strict_clean does the checking.)
    """
    result = run(
        [tool("nox"), "--envdir", tmp_path / "nox", "-s", "lint", "typecheck", "--", "--version"],
        cwd=baked,
        env={**os.environ, "TRACEML_EXPORTER_SDK": str(ROOT / "sdk")},
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "-e" in result.stderr
    assert f"{ROOT / 'sdk'}[testing]" in result.stderr
    assert f"ruff: {len(gates.python_files(baked))} files" in result.stderr


_TOOL_CACHES = shutil.ignore_patterns(
    ".mypy_cache", ".pytest_cache", ".ruff_cache", "__pycache__", ".nox", ".hypothesis"
)


def _no_python_left(project: Path) -> None:
    """Folders without Python files: a bare ``ruff check`` warns and exits 0."""
    for name in ("src", "tests"):
        for path in (project / name).rglob("*.py"):
            path.unlink()
    noxfile = project / "noxfile.py"
    text = noxfile.read_text("utf-8")
    assert 'LINT_PATHS = ["src", "tests", "noxfile.py"]' in text
    noxfile.write_text(text.replace('"tests", "noxfile.py"]', '"tests"]', 1), "utf-8")


def _ruff_excludes_python(project: Path) -> None:
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text("utf-8")
    assert "[tool.ruff]\n" in text
    pyproject.write_text(
        text.replace("[tool.ruff]\n", '[tool.ruff]\nexclude = ["*.py"]\n'), "utf-8"
    )


@pytest.mark.sink_independent
@pytest.mark.parametrize(
    ("breaking", "outcome"),
    [
        (None, r"nox > ruff: (\d+) files\n"),
        (_no_python_left, r"ruff read 0 of the 0 Python files under src, tests;"),
        (_ruff_excludes_python, r"ruff read 1 of the (\d+) Python files .*'src/"),
    ],
    ids=["baked", "no-python-files", "ruff-skips-files"],
)
def test_generated_lint_session_fails_unless_ruff_read_every_file(
    baked: Path,
    tmp_path: Path,
    breaking: Callable[[Path], None] | None,
    outcome: str,
) -> None:
    """The project's lint session, run in this environment (no venv, no install), counts
    the files ruff read: it passes on the bake and fails when ruff read none or skipped some.
    """
    project = Path(shutil.copytree(baked, tmp_path / "project", ignore=_TOOL_CACHES))
    if breaking is not None:
        breaking(project)
    here = [str(Path(tool("ruff")).parent), os.environ.get("PATH", "")]
    result = run(
        [
            *(tool("nox"), "--script-mode", "none", "--force-venv-backend", "none"),
            *("--no-install", "--envdir", tmp_path / "nox", "-s", "lint"),
        ],
        cwd=project,
        env={**os.environ, "PATH": os.pathsep.join(here)},
    )
    output = result.stdout + result.stderr
    found = re.search(outcome, output)
    assert found is not None, output[-4000:]
    assert (result.returncode == 0) is (breaking is None), output[-4000:]
    if found.groups():
        assert int(found[1]) == len(gates.python_files(project))


@pytest.mark.sink_independent
def test_noxfile_lints_the_paths_the_gate_checks(baked: Path) -> None:
    """The lint session names what gates.ruff checks; ``uv run --script`` brings uv for nox."""
    source = (baked / "noxfile.py").read_text("utf-8")
    tree = ast.parse(source)
    (paths,) = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "LINT_PATHS"
    ]
    assert tuple(paths) == gates.LINT_PATHS
    script_block = source.partition("# /// script")[2].partition("# ///")[0]
    assert '"uv>=0.5"' in script_block


@pytest.mark.sink_independent
def test_noxfile_exposes_every_pyenv_python(baked: Path, tmp_path: Path) -> None:
    """Under pyenv, nox sees the installed 3.x versions, not only the active one."""
    for version in ("3.10.14", "3.12.1", "3.13.0", "2.7.18"):
        (tmp_path / "versions" / version).mkdir(parents=True)
    script = "import os, runpy; runpy.run_path('noxfile.py'); print(os.environ['PYENV_VERSION'])"
    result = run(
        [sys.executable, "-c", script],
        cwd=baked,
        env={**os.environ, "PYENV_ROOT": str(tmp_path), "PYENV_VERSION": "3.12.1"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["3.12.1:3.10.14:3.13.0"]


def test_noxfile_has_the_sessions(baked: Path) -> None:
    result = run([tool("nox"), "--list", "--json"], cwd=baked)
    assert result.returncode == 0, result.stdout + result.stderr
    sessions = {s["name"] for s in json.loads(result.stdout)}
    assert {"lint", "typecheck", "tests"} <= sessions


HOOKS = """

def _called(name: str) -> None:
    import os

    with open(os.environ["HOOK_LOG"], "a", encoding="utf-8") as log:
        log.write(name + "\\n")


def broken_context(context: ExporterContext) -> ExporterContext:
    _called("broken_context")
    context.export_dir.parent.mkdir(parents=True, exist_ok=True)
    context.export_dir.write_text("in the way")
    return context


def break_sink(context: ExporterContext) -> None:
    _called("break_sink")
"""


@pytest.mark.sink_independent
def test_the_sinks_own_hooks_replace_the_suites_defaults(tmp_path: Path) -> None:
    """``break_sink``/``broken_context`` in a sink's ``sink_support.py``, named in its
    ``suite_hooks``, reach the suite (the rendered ``tests/test_conformance.py``)."""
    template = tmp_path / "template"
    shutil.copytree(TEMPLATE, template, ignore=shutil.ignore_patterns("__pycache__"))
    folder = template / "{{cookiecutter.project_slug}}" / "_parts" / "sinks" / DEFAULT_SINK
    support = folder / "tests" / "sink_support.py"
    support.write_text(support.read_text("utf-8") + HOOKS, "utf-8")
    meta = folder / "sink.jinja"
    declared = '{%- set suite_hooks = ["broken_context", "break_sink"] -%}'
    meta.write_text(
        re.sub(r"\{%- set suite_hooks = .*", declared, meta.read_text("utf-8")), "utf-8"
    )
    project = bake(tmp_path / "out", template=template)
    log = tmp_path / "hooks.log"
    result = run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-k", "failure_behaviour"],
        cwd=project,
        env={**project_env(project), "HOOK_LOG": str(log)},
    )
    assert log.exists(), result.stdout[-3000:] + result.stderr[-3000:]
    called = log.read_text("utf-8").split()
    assert "broken_context" in called, result.stdout[-3000:]
    assert "break_sink" in called, result.stdout[-3000:]


@pytest.mark.sink_independent
@pytest.mark.parametrize(
    ("license_id", "first_line"),
    [("Apache-2.0", "Apache License"), ("MIT", "MIT License"), ("BSD-3-Clause", "BSD 3-Clause")],
)
def test_license_text_and_metadata(tmp_path: Path, license_id: str, first_line: str) -> None:
    project = bake(tmp_path, license=license_id, author_name="Ada Lovelace")
    text = (project / "LICENSE").read_text("utf-8")
    assert text.lstrip().startswith(first_line)
    if license_id != "Apache-2.0":
        assert re.search(r"Copyright \(c\) \d{4},? Ada Lovelace", text)
    pyproject = read_toml(project / "pyproject.toml")
    assert pyproject["project"]["license"] == license_id
    assert [f for f in files_of(project) if "LICENSE" in f] == ["LICENSE"]


@pytest.mark.sink_independent
def test_quotes_in_answers_keep_pyproject_valid(tmp_path: Path) -> None:
    author = 'Ann O\'Brien "AB" \\'
    project = bake(tmp_path, author_name=author, author_email="a@example.com")
    pyproject = read_toml(project / "pyproject.toml")
    assert pyproject["project"]["authors"] == [{"name": author, "email": "a@example.com"}]


@pytest.mark.sink_independent
def test_minimum_python_flows_everywhere(tmp_path: Path) -> None:
    project = bake(tmp_path, python_min="3.12")
    pyproject = read_toml(project / "pyproject.toml")
    assert pyproject["project"]["requires-python"] == ">=3.12"
    assert pyproject["tool"]["mypy"]["python_version"] == "3.12"
    classifiers = [c for c in pyproject["project"]["classifiers"] if re.search(r"3\.\d+$", c)]
    assert [c.rsplit(" ", 1)[1] for c in classifiers] == ["3.12", "3.13"]
    assert 'PYTHONS = ["3.12", "3.13"]' in (project / "noxfile.py").read_text("utf-8")
    workflow = (project / ".github" / "workflows" / "ci.yml").read_text("utf-8")
    assert 'python-version: ["3.12", "3.13"]' in workflow


@pytest.mark.sink_independent
def test_names_flow_from_the_project_name(tmp_path: Path) -> None:
    project = bake(tmp_path, project_name="Kafka Sink")
    assert project.name == "traceml-exporter-kafka-sink"
    package = project / "src" / "traceml_exporter_kafka_sink"
    assert "class KafkaSinkExporter" in (package / "exporter.py").read_text("utf-8")
    readme = (project / "README.md").read_text("utf-8")
    assert "traceml_exporter_kafka_sink.exporter:make_exporter" in readme


def test_readme_covers_install_and_every_way_to_select(baked: Path) -> None:
    readme = (baked / "README.md").read_text("utf-8")
    spec = f"{DEFAULT_PACKAGE}.exporter:make_exporter"
    for needle in (
        "pip install",
        "PYTHONPATH=",
        f'exporter: "{spec}"',
        f"traceml run --exporter {spec}",
        f"traceml serve --exporter {spec}",
        f"TRACEML_EXPORTER={spec}",
        f'TraceMLRayConfig(exporter="{spec}")',
        "TRACEML_EXPORTER_SDK",
        "cruft update",
        "traceml-ai==0.5.0",
        f"traceml-exporter follow {spec} --session-root logs/run1",
        f"traceml-exporter replay {spec} --sqlite logs/run1/aggregator/telemetry",
    ):
        assert needle in readme, needle
    assert "{{" not in readme
    assert "{%" not in readme


def test_nothing_is_left_unrendered(baked: Path) -> None:
    for relative in files_of(baked):
        text = (baked / relative).read_text("utf-8")
        assert "cookiecutter." not in text, relative


def test_ci_runs_the_noxfile(baked: Path) -> None:
    workflow = (baked / ".github" / "workflows" / "ci.yml").read_text("utf-8")
    assert "nox -s lint typecheck" in workflow
    assert 'nox -s "tests-$PYTHON_VERSION"' in workflow
    assert "${{ matrix.python-version }}" in workflow


@pytest.mark.sink_independent
def test_root_noxfile_tests_every_supported_python() -> None:
    """The tests run on each Python the SDK's classifiers name; the template on one."""
    result = run([tool("nox"), "--list", "--json"], cwd=ROOT, env={**os.environ, "CI": ""})
    assert result.returncode == 0, result.stdout + result.stderr
    sessions = json.loads(result.stdout)
    classifiers = read_toml(ROOT / "sdk" / "pyproject.toml")["project"]["classifiers"]
    supported = [c.rsplit(" ", 1)[1] for c in classifiers if re.search(r":: 3\.\d+$", c)]
    assert [s["python"] for s in sessions if s["name"] == "tests"] == supported
    assert {s["python"] for s in sessions if s["name"] == "template"} == {supported[-1]}


def test_root_noxfile_reads_the_sink_list_from_the_template() -> None:
    noxfile = (ROOT / "noxfile.py").read_text("utf-8")
    assert 'TEMPLATE / "cookiecutter.json"' in noxfile


@pytest.mark.sink_independent
def test_root_ruff_leaves_the_jinja_project_alone() -> None:
    """The root lint session must not read template/{{...}}/ (its files are Jinja)."""
    result = run([tool("ruff"), "check", "--show-files", "."], cwd=ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "{{cookiecutter.project_slug}}" not in result.stdout
    assert "pre_gen_project.py" in result.stdout


def test_workflow_passes_actionlint_and_zizmor(baked: Path) -> None:
    """The generated CI workflow (and dependabot config), checked offline."""
    gates.workflows(baked)
