"""The CLI's commands, one module each, in the order ``--help`` lists them.

Each module has ``add_parser(commands)``, which adds its subcommand with a
``handler(args, out) -> exit code``; heavy imports wait until the handler runs.
"""

from __future__ import annotations

from . import check, follow, new, replay, schema, validate

__all__ = ["COMMANDS"]

COMMANDS = (new, check, validate, replay, follow, schema)
"""The command modules, in help order."""
