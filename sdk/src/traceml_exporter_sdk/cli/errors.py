"""The CLI's user errors: ``CliError`` carries the line and the exit code; one line on stderr."""

from __future__ import annotations

import sys

from .._export.shown import shown

__all__ = ["PROG", "CliError", "error_line", "one_line"]

PROG = "traceml-exporter"


class CliError(Exception):
    """A user error: one line for stderr, and the exit code."""

    def __init__(self, message: str, code: int, prog: str = PROG) -> None:
        super().__init__(message)
        self.code = code
        self.prog = prog


def one_line(exc: BaseException) -> str:
    """An exception as one line: its text with whitespace collapsed, or its type name."""
    return " ".join(str(exc).split()) or type(exc).__name__


def error_line(message: str, prog: str = PROG) -> None:
    """Write ``PROG: error: MESSAGE`` to stderr, as one line: what it quotes of a run
    folder (a name, a manifest value, an exporter's error) is escaped."""
    sys.stderr.write(f"{prog}: error: {shown(message)}\n")
    sys.stderr.flush()
