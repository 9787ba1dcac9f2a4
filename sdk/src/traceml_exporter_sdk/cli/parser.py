"""argparse made to fit the CLI: one-line usage errors (exit 2) and help with the exit codes."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from .errors import CliError
from .exit_codes import EXIT_EPILOG, EXIT_USAGE

__all__ = ["CliParser", "Formatter", "add_command"]


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
