"""``traceml-exporter new``: scaffold an exporter project from the template shipped in the SDK.

cookiecutter (the ``new`` extra) is imported only when the command runs; a bake
that fails removes what it made, unless ``--keep-project-on-failure``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from ..._export.exit_codes import EXIT_DEPENDENCY, EXIT_FAILED, EXIT_INPUT, EXIT_OK, EXIT_USAGE
from ..errors import CliError, one_line
from ..origin import DISTRIBUTION, install_hint, local_source
from ..parser import add_command

__all__ = ["add_parser", "cmd_new", "template_dir"]

_PACKAGE = Path(__file__).resolve().parents[2]
"""The installed ``traceml_exporter_sdk`` folder."""


def add_parser(commands: Any) -> None:
    """Add the new command to the subparsers ``commands``."""
    new = add_command(
        commands,
        "new",
        "Scaffold a new exporter project from the template shipped in the SDK.",
        "Runs cookiecutter (the SDK's 'new' extra) on the template inside the installed\n"
        "package, so no clone of the SDK repository is needed. KEY=VALUE pairs set\n"
        "template variables; with --no-input every other variable keeps its default.",
        "  traceml-exporter new --no-input -o ~/src package_name=my_exporter sink=sqlite",
    )
    new.add_argument("extra_context", nargs="*", metavar="KEY=VALUE", help="template variable")
    new.add_argument("--no-input", action="store_true", help="do not prompt; use defaults")
    new.add_argument(
        "-o", "--output-dir", default=".", metavar="DIR", help="where to create it (default: .)"
    )
    new.add_argument(
        "-f", "--overwrite-if-exists", action="store_true", help="write into an existing folder"
    )
    new.add_argument(
        "-s",
        "--skip-if-file-exists",
        action="store_true",
        help="with -f, keep files that are already there",
    )
    new.add_argument("--config-file", metavar="FILE", help="cookiecutter user config file")
    new.add_argument(
        "--default-config", action="store_true", help="ignore the cookiecutter user config"
    )
    new.add_argument(
        "--keep-project-on-failure", action="store_true", help="keep a half-made project"
    )
    new.set_defaults(handler=cmd_new)


def template_dir() -> Path | None:
    """The cookiecutter template: shipped in the wheel, or the repository's (editable install)."""
    for candidate in (_PACKAGE / "_template" / "template", _PACKAGE.parents[2] / "template"):
        if (candidate / "cookiecutter.json").is_file():
            return candidate
    return None


def cmd_new(args: argparse.Namespace, out: TextIO) -> int:
    extra: dict[str, str] = {}
    for item in args.extra_context:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"template variable {item!r} is not KEY=VALUE", EXIT_USAGE)
        extra[key] = value
    template = template_dir()
    if template is None:
        raise CliError(
            "the exporter template is not in this installation of traceml-exporter-sdk",
            EXIT_INPUT,
        )
    try:
        main_module = importlib.import_module("cookiecutter.main")
        exceptions = importlib.import_module("cookiecutter.exceptions")
    except ImportError:
        raise CliError(
            f"new needs cookiecutter; install it with {install_hint('new,testing')}",
            EXIT_DEPENDENCY,
        ) from None
    logging.getLogger("cookiecutter").setLevel(logging.CRITICAL)
    jinja_error: type[Exception] = importlib.import_module("jinja2").TemplateError
    hook_output = _StderrCapture()
    output = Path(args.output_dir)
    made = _Made(output)
    try:
        with hook_output, made.undone_on_failure(keep=args.keep_project_on_failure):
            project = main_module.cookiecutter(
                str(template),
                no_input=args.no_input,
                extra_context=extra or None,
                output_dir=args.output_dir,
                overwrite_if_exists=args.overwrite_if_exists,
                skip_if_file_exists=args.skip_if_file_exists,
                config_file=args.config_file,
                default_config=args.default_config,
                keep_project_on_failure=args.keep_project_on_failure,
                accept_hooks=True,
            )
    except exceptions.OutputDirExistsException as exc:
        message = one_line(exc).removeprefix("Error: ")
        raise CliError(f"{message} (pass -f to write into it)", EXIT_INPUT) from None
    except exceptions.FailedHookException as exc:
        said = hook_output.text().removeprefix("ERROR: ") or one_line(exc)
        raise CliError(f"the template refused: {said}", EXIT_FAILED) from None
    except exceptions.CookiecutterException as exc:
        raise CliError(f"cookiecutter: {one_line(exc)}", EXIT_INPUT) from None
    except ValueError as exc:  # a KEY=VALUE that is not one of a variable's choices
        raise CliError(f"template variable: {one_line(exc)}", EXIT_USAGE) from None
    except jinja_error as exc:  # answers are rendered as Jinja: '{{' alone is a syntax error
        raise CliError(
            f"template variable: an answer is not valid Jinja ({one_line(exc)}); answers are "
            "rendered as templates, so leave out '{{', '{%' and '{#'",
            EXIT_USAGE,
        ) from None
    except (EOFError, OSError) as exc:
        if isinstance(exc, EOFError):
            raise CliError(
                "new needs answers on stdin; pass --no-input to take the defaults", EXIT_USAGE
            ) from None
        raise CliError(f"cannot create the project: {exc}", EXIT_INPUT) from None
    said = hook_output.raw()
    if said:
        sys.stderr.write(said)
    out.write(f"created {project}\n")
    out.write(next_steps(Path(project)))
    return EXIT_OK


def next_steps(project: Path) -> str:
    """What to run next: install it with the SDK's suite, check it, run its nox."""
    source = local_source()
    sdk = f"'{source}[testing]'" if source is not None else f"'{DISTRIBUTION}[testing]'"
    nox = f"TRACEML_EXPORTER_SDK={shlex.quote(str(source))} nox" if source is not None else "nox"
    return (
        "next steps:\n"
        f"  cd {shlex.quote(str(project))}\n"
        f"  pip install -e . {sdk}   # the package and the SDK's conformance suite\n"
        "  traceml-exporter check   # the conformance suite, with the project's own read-back\n"
        f"  {nox}   # its tests on every Python, lint and type checks\n"
    )


class _Made:
    """What a bake adds under ``output``, removed again when the bake fails.

    Only folders that were not there before go (cookiecutter makes the project
    folder, and ``output`` and its parents when missing); with ``-f`` into an
    existing project nothing is removed, since it was there before.
    """

    def __init__(self, output: Path) -> None:
        self.output = output.absolute()
        top = self.output
        while not top.parent.exists() and top.parent != top:
            top = top.parent
        self._top = None if top.exists() else top  # the first missing folder, if any
        self._before: set[str] | None = set()
        if self._top is None:
            try:
                self._before = {p.name for p in output.iterdir()}
            except OSError:  # cannot tell what is new: remove nothing
                self._before = None

    @contextlib.contextmanager
    def undone_on_failure(self, *, keep: bool) -> Iterator[None]:
        try:
            yield
        except BaseException:
            if not keep:
                self._undo()
            raise

    def _undo(self) -> None:
        if self._top is not None:
            shutil.rmtree(self._top, ignore_errors=True)
            return
        if self._before is None:
            return
        try:
            added = [p for p in self.output.iterdir() if p.name not in self._before]
        except OSError:
            return
        for path in added:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)


class _StderrCapture:
    """Collect what child processes (cookiecutter's hooks) write to fd 2, as one line."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 - closed in text()
        self._saved = -1

    def __enter__(self) -> _StderrCapture:
        sys.stderr.flush()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)

    def raw(self) -> str:
        if self._file.closed:
            return ""
        self._file.seek(0)
        data = self._file.read().decode(errors="replace")
        self._file.close()
        return data

    def text(self) -> str:
        return " ".join(self.raw().split())
