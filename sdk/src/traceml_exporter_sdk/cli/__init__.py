"""``traceml-exporter``: scaffold, check, validate, replay, follow and describe TraceML exporters.

Every user error is one line on stderr, ``traceml-exporter: error: ...`` (or
``traceml-exporter COMMAND: error: ...`` for a bad command line), with one of
the exit codes in ``EXIT_CODES``; never a traceback. Set
``TRACEML_EXPORTER_DEBUG=1`` to see the traceback of an internal error.

This module is the entry point (``traceml_exporter_sdk.cli:main``): it builds
the parser from the command modules in ``commands/`` and turns what a command
raises into an error line and an exit code. The codes are in ``_export.exit_codes``
(below the CLI: the follow library reports them too).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from .. import __version__
from .._export.exit_codes import (
    EXIT_CODES,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
)
from .commands import COMMANDS
from .commands.new import template_dir
from .errors import PROG, CliError, error_line, one_line
from .parser import EXIT_EPILOG, CliParser, Formatter

__all__ = ["EXIT_CODES", "CliError", "build_parser", "main", "template_dir"]


def build_parser() -> argparse.ArgumentParser:
    """The ``traceml-exporter`` parser with every command of ``commands.COMMANDS``."""
    parser = CliParser(
        prog=PROG,
        description="Scaffold, check, validate, replay and describe TraceML exporters.",
        epilog=(
            "examples:\n"
            "  traceml-exporter new --no-input package_name=my_exporter\n"
            "  traceml-exporter check my_exporter.exporter:make_exporter\n"
            "  traceml-exporter validate --exporter my_exporter.exporter:make_exporter\n"
            "  traceml-exporter replay jsonl --payloads payloads.jsonl --streams all\n"
            "  traceml-exporter follow jsonl --session-root logs/run1 --streams all\n"
            "  traceml-exporter schema --stream step_time --format markdown\n\n"
            f"{EXIT_EPILOG}\n\ndocs: docs/cli.md in the traceml-exporter-sdk repository"
        ),
        formatter_class=Formatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CliParser)

    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (never raises, except SystemExit from --help)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    passthrough: list[str] = []
    if "--" in args_list:
        cut = args_list.index("--")
        args_list, passthrough = args_list[:cut], args_list[cut + 1 :]
    library_log = logging.getLogger("traceml_exporter_sdk")
    library_log.addHandler(logging.NullHandler())
    library_log.propagate = False
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(args_list)
        if unknown:
            prog = f"{PROG} {args.command}" if args.command else PROG
            raise CliError(
                f"unrecognized arguments: {' '.join(unknown)} (see {prog} --help)", EXIT_USAGE, prog
            )
        if args.command is None:
            raise CliError("a command is required (see traceml-exporter --help)", EXIT_USAGE)
        if passthrough and args.command != "check":
            raise CliError(
                f"arguments after '--' are only for check, not {args.command}", EXIT_USAGE
            )
        args.pytest_args = passthrough
        handler: Callable[[argparse.Namespace, TextIO], int] = args.handler
        return handler(args, sys.stdout)
    except CliError as exc:
        error_line(str(exc), exc.prog)
        return exc.code
    except KeyboardInterrupt:
        error_line("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_OK
    except Exception as exc:
        if os.environ.get("TRACEML_EXPORTER_DEBUG"):
            raise
        error_line(
            f"internal error: {type(exc).__name__}: {one_line(exc)} "
            "(set TRACEML_EXPORTER_DEBUG=1 for the traceback, and please report it)"
        )
        return EXIT_INTERNAL


def _silence_stdout() -> None:
    """After a closed pipe (``| head``), point stdout at devnull so exit does not complain."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
