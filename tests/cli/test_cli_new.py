"""``new``: scaffold from the template shipped in the wheel, in a fresh venv with no clone."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from cli_helpers import error_lines, run_cli

REPO = Path(__file__).resolve().parents[2]
SDK = REPO / "sdk"
SINKS = json.loads((REPO / "template" / "cookiecutter.json").read_text("utf-8"))["sink"]


def _uv() -> list[str] | None:
    found = shutil.which("uv")
    if found:
        return [found]
    if importlib.util.find_spec("uv") is not None:
        return [sys.executable, "-m", "uv"]
    return None


def _run(command: list[str], cwd: Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run(
        command,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        **kwargs,
    )
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result


def _has_pip() -> bool:
    return importlib.util.find_spec("pip") is not None


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SDK's wheel, built from the working tree."""
    if _uv() is None and not _has_pip():
        pytest.skip("neither uv nor pip is available to build and install the wheel")
    out = tmp_path_factory.mktemp("wheel")
    uv = _uv()
    if uv is not None:
        _run([*uv, "build", "--wheel", "--out-dir", str(out), str(SDK)], cwd=out)
    else:
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(SDK)], cwd=out)
    [built] = out.glob("traceml_exporter_sdk-*.whl")
    return built


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A new venv with only the wheel installed (no extras), far from the repository."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    uv = _uv()
    if uv is not None:
        _run([*uv, "venv", "--python", sys.executable, str(venv)], cwd=venv.parent)
        _run(
            [*uv, "pip", "install", "--python", str(venv / "bin" / "python"), str(wheel)],
            cwd=venv.parent,
        )
    else:
        _run([sys.executable, "-m", "venv", str(venv)], cwd=venv.parent)
        _run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
            cwd=venv.parent,
        )
    return venv


def test_an_editable_install_names_its_sdk_folder() -> None:
    """From a checkout, install hints and next steps name ./sdk, not the index."""
    from traceml_exporter_sdk.cli.origin import install_hint, local_source

    if local_source() != SDK:
        pytest.skip(f"the SDK here was not installed from {SDK}")
    assert install_hint("new,testing") == f"pip install '{SDK}[new,testing]'"


def test_wheel_ships_the_template(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "template", "cookiecutter.json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split("\0")[:-1]  # NUL-separated: template file names may hold spaces
    if not tracked:
        pytest.skip("not a git checkout; cannot list the template's files")
    for path in tracked:
        assert f"traceml_exporter_sdk/_template/{path}" in names, path
    assert "traceml_exporter_sdk/cli/__init__.py" in names
    assert "traceml_exporter_sdk/cli/commands/new.py" in names
    entry_points = (
        zipfile.ZipFile(wheel)
        .read(next(n for n in names if n.endswith(".dist-info/entry_points.txt")))
        .decode()
    )
    assert "traceml-exporter = traceml_exporter_sdk.cli:main" in entry_points


def test_new_from_the_wheel_in_a_fresh_venv(fresh_venv: Path, wheel: Path, tmp_path: Path) -> None:
    script = fresh_venv / "bin" / "traceml-exporter"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    without = subprocess.run(
        [str(script), "new", "--no-input"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert without.returncode == 5
    assert error_lines(without) == [  # the install that works where the SDK came from
        "traceml-exporter: error: new needs cookiecutter; install it with "
        f"pip install '{wheel}[new,testing]'"
    ]

    uv = _uv()
    python = fresh_venv / "bin" / "python"
    if uv is not None:
        _run([*uv, "pip", "install", "--python", str(python), f"{wheel}[new]"], cwd=tmp_path)
    else:
        _run([str(python), "-m", "pip", "install", "-q", f"{wheel}[new]"], cwd=tmp_path)

    result = subprocess.run(
        [str(script), "new", "--no-input", "-o", "out", "project_name=demo", "sink=sqlite"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    project = tmp_path / "out" / "traceml-exporter-demo"
    assert result.stdout == (
        f"created {project}\n"
        "next steps:\n"
        f"  cd {project}\n"
        f"  pip install -e . '{wheel}[testing]'   # the package and the SDK's conformance suite\n"
        "  traceml-exporter check   # the conformance suite, with the project's own read-back\n"
        f"  TRACEML_EXPORTER_SDK={wheel} nox   # its tests on every Python, lint and type checks\n"
    )
    assert (project / "pyproject.toml").is_file()
    exporter = project / "src" / "traceml_exporter_demo" / "exporter.py"
    assert "sqlite3" in exporter.read_text()
    assert not (project / "_parts").exists()
    # The template came from the installed wheel, not from this repository.
    where = subprocess.run(
        [
            str(python),
            "-c",
            "from traceml_exporter_sdk.cli import template_dir; print(template_dir())",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    ).stdout.strip()
    assert where.startswith(str(fresh_venv))


# -- errors (the dev install reads the repository's template in place) -----------------


def test_template_refusal_is_one_line_exit_1(tmp_path: Path) -> None:
    result = run_cli("new", "--no-input", "package_name=class", cwd=tmp_path)
    assert result.returncode == 1
    [line] = error_lines(result)
    assert line.startswith("traceml-exporter: error: the template refused: ")
    assert "package_name 'class'" in line
    assert list(tmp_path.iterdir()) == []


def test_existing_folder_exit_3(tmp_path: Path) -> None:
    (tmp_path / "traceml-exporter-demo").mkdir()
    result = run_cli("new", "--no-input", "project_name=demo", cwd=tmp_path)
    assert result.returncode == 3
    assert error_lines(result) == [
        'traceml-exporter: error: "traceml-exporter-demo" directory already exists '
        "(pass -f to write into it)"
    ]


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("sink", "traceml-exporter: error: template variable 'sink' is not KEY=VALUE"),
        (
            "sink=bogus",
            "traceml-exporter: error: template variable: bogus provided for choice variable "
            f"sink, but the choices are {SINKS}.",
        ),
    ],
)
def test_bad_template_variables_exit_2(arg: str, message: str, tmp_path: Path) -> None:
    result = run_cli("new", "--no-input", arg, cwd=tmp_path)
    assert result.returncode == 2
    assert error_lines(result) == [message]


def test_prompts_without_answers_exit_2(tmp_path: Path) -> None:
    result = run_cli("new", cwd=tmp_path)
    assert result.returncode == 2
    assert error_lines(result) == [
        "traceml-exporter: error: new needs answers on stdin; pass --no-input to take the defaults"
    ]


def test_a_jinja_syntax_error_in_an_answer_is_exit_2_and_leaves_nothing(tmp_path: Path) -> None:
    result = run_cli("new", "--no-input", "project_name={{", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    [line] = error_lines(result)
    assert line.startswith(
        "traceml-exporter: error: template variable: an answer is not valid Jinja "
    )
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_300_character_package_name_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    result = run_cli("new", "--no-input", f"package_name={'a' * 300}", cwd=tmp_path)
    assert result.returncode == 1
    [line] = error_lines(result)
    assert "it is 300 characters long; at most 64" in line
    assert list(tmp_path.iterdir()) == []


# Fails the bake after cookiecutter made the project folder and wrote part of it.
FAIL_MIDWAY = """
import cookiecutter.generate as generate
_real = generate.generate_file
_count = [0]
def _failing(project_dir, infile, *args, **kwargs):
    _count[0] += 1
    if _count[0] == 3:
        raise OSError(28, "No space left on device")
    return _real(project_dir, infile, *args, **kwargs)
generate.generate_file = _failing
"""


@pytest.mark.parametrize("output", [".", "new/deeper"])
def test_a_bake_that_fails_midway_leaves_nothing_behind(tmp_path: Path, output: str) -> None:
    (tmp_path / "mine.txt").write_text("the user's own file")
    result = run_cli("new", "--no-input", "-o", output, cwd=tmp_path, prelude=FAIL_MIDWAY)
    assert result.returncode == 3, result.stderr
    assert error_lines(result) == [
        "traceml-exporter: error: cannot create the project: [Errno 28] No space left on device"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


def test_keep_project_on_failure_keeps_the_half_made_project(tmp_path: Path) -> None:
    result = run_cli(
        "new", "--no-input", "--keep-project-on-failure", cwd=tmp_path, prelude=FAIL_MIDWAY
    )
    assert result.returncode == 3
    assert (tmp_path / "traceml-exporter-example").is_dir()
