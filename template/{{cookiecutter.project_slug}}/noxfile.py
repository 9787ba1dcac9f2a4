#!/usr/bin/env -S uv run --script
# /// script
# dependencies = ["nox>=2025.2.9", "uv>=0.5"]
# ///
"""Tests, lint and type checks: ``nox`` runs them all, ``nox -l`` lists them.

The SDK (``traceml-exporter-sdk[testing]``, a test dependency only) is
installed from ``$TRACEML_EXPORTER_SDK``: a path to the SDK's ``sdk/`` folder
(installed editable), or any requirement such as
``traceml-exporter-sdk[testing] @ git+https://...#subdirectory=sdk``.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"

ROOT = Path(__file__).parent
LINT_PATHS = ["src", "tests", "noxfile.py"]
"""ruff's paths, named, and git's ignore files not consulted: in a folder git ignores
(another project's ``.nox/``, say) ``ruff check .`` reads nothing and exits 0. The lint
session also fails unless ruff read every Python file under them, and at least one."""
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
PYTHONS = [{% for minor in range(cookiecutter.python_min.split('.')[1] | int, 14) %}"3.{{ minor }}"{% if not loop.last %}, {% endif %}{% endfor %}]
SDK_NAME = "traceml-exporter-sdk"
SDK = os.environ.get("TRACEML_EXPORTER_SDK", "").strip() or f"{SDK_NAME}[testing]"


def _expose_pyenv_interpreters() -> None:
    """Let nox find every pyenv-installed CPython, not just the active one.

    ``pyenv exec`` (how a shimmed ``nox`` starts) pins PYENV_VERSION to one
    version, so the ``python3.X`` shims of the others say "not found" and their
    sessions skip; the other installed 3.x versions are appended after it.
    """
    root = os.environ.get("PYENV_ROOT")
    if not root:
        return
    active = [v for v in os.environ.get("PYENV_VERSION", "").split(":") if v]
    installed = sorted(p.name for p in Path(root, "versions").glob("3.1[0-9].*") if p.is_dir())
    versions = active + [v for v in installed if v not in active]
    if versions:
        os.environ["PYENV_VERSION"] = ":".join(versions)


_expose_pyenv_interpreters()


def sdk_install_args() -> list[str]:
    """The SDK as ``install`` arguments: a local folder editable, anything else as given."""
    if Path(SDK).is_dir():
        return ["-e", f"{Path(SDK).resolve()}[testing]"]
    return [SDK]


def group(*names: str) -> list[str]:
    """A dependency group without its SDK line, which ``sdk_install_args`` replaces."""
    return [
        requirement
        for requirement in nox.project.dependency_groups(PYPROJECT, *names)
        if canonicalize_name(Requirement(requirement).name) != SDK_NAME
    ]


def install_with_sdk(session: nox.Session, *groups: str) -> None:
    """This project (editable), the SDK and ``groups``; say how to point at the SDK on failure."""
    try:
        session.install(*sdk_install_args(), "-e", ".", *group(*groups))
    except nox.command.CommandFailed:
        session.error(
            f"could not install the SDK from {SDK!r}: traceml-exporter-sdk is not on PyPI yet, "
            "so set TRACEML_EXPORTER_SDK to the path of its sdk/ folder or to a requirement "
            "such as 'traceml-exporter-sdk[testing] @ git+https://...#subdirectory=sdk'"
        )


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """The unit tests and the SDK's conformance suite."""
    install_with_sdk(session, "test")
    session.run("pytest", *session.posargs)


def python_files() -> set[Path]:
    """The Python files under ``LINT_PATHS``: what ruff must read."""
    found: set[Path] = set()
    for name in LINT_PATHS:
        path = ROOT / name
        candidates = path.rglob("*.py") if path.is_dir() else [path]
        found.update(p.resolve() for p in candidates if p.is_file() and p.suffix == ".py")
    return found


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check, having read every Python file (and some)."""
    session.install(*group("lint"))
    options = ["--no-respect-gitignore"]
    listed = session.run("ruff", "check", *options, "--show-files", *LINT_PATHS, silent=True)
    lines = [line.strip() for line in str(listed).splitlines()]
    seen = {Path(line).resolve() for line in lines if line.endswith(".py")}
    expected = python_files()
    if not seen or seen != expected:
        missed = sorted(os.path.relpath(p, ROOT) for p in expected - seen)
        session.error(
            f"ruff read {len(seen)} of the {len(expected)} Python files under "
            f"{', '.join(LINT_PATHS)}; missed: {missed} (a lint that read nothing passes nothing)"
        )
    session.log(f"ruff: {len(seen)} files")
    session.run("ruff", "check", *options, *LINT_PATHS)
    session.run("ruff", "format", "--check", *options, *LINT_PATHS)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package, the tests and this file."""
    install_with_sdk(session, "typecheck")
    session.run("mypy", "--strict", *session.posargs)


if __name__ == "__main__":
    nox.main()
