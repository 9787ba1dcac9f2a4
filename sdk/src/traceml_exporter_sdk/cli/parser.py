"""argparse made to fit the CLI: one-line usage errors (exit 2) and help with the exit codes."""

from __future__ import annotations

import argparse
import textwrap
from typing import Any, NoReturn

from .._export.exit_codes import EXIT_CODES, EXIT_USAGE
from .errors import CliError

__all__ = ["EXIT_EPILOG", "CliParser", "Formatter", "add_command"]

EXIT_EPILOG = "exit codes:\n" + "\n".join(
    textwrap.fill(text, width=96, initial_indent=f"  {code:<4}", subsequent_indent=" " * 6)
    for code, text in EXIT_CODES.items()
)
"""The exit-code table as every ``--help`` ends."""


class CliParser(argparse.ArgumentParser):
    """argparse with one-line errors (``PROG CMD: error: ... (see --help)``), exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see {self.prog} --help)", EXIT_USAGE, self.prog)


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Keep the descriptions' line breaks; 100 columns."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=30, width=100)


def add_command(
    commands: Any, name: str, summary: str, description: str, example: str
) -> argparse.ArgumentParser:
    """Add one command: its summary, description, an example and the exit codes in its help."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=f"{summary}\n\n{description}".rstrip(),
        epilog=f"example:\n{example}\n\n{EXIT_EPILOG}",
        formatter_class=Formatter,
    )
    return parser
