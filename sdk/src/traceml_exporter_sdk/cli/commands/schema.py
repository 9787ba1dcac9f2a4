"""``traceml-exporter schema``: the JSON Schema or markdown table of the records' ``to_dict()``."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from ..._export.exit_codes import EXIT_OK
from ...streams import ALL_STREAMS
from ..parser import add_command

__all__ = ["add_parser", "cmd_schema"]


def add_parser(commands: Any) -> None:
    """Add the schema command to the subparsers ``commands``."""
    schema = add_command(
        commands,
        "schema",
        "Print the JSON Schema (draft 2020-12) or markdown table of the records' to_dict().",
        "Without --stream, the JSON Schema accepts any record (a oneOf over the seven,\n"
        "told apart by their 'stream' field) and the markdown has every record's table.\n"
        "hostname is the one field not required, since exporters drop it unless\n"
        "exporter_hostname is on.",
        "  traceml-exporter schema --stream step_time > step_time.schema.json\n"
        "  traceml-exporter schema --format markdown",
    )
    schema.add_argument("--stream", choices=ALL_STREAMS, help="one record STREAM")
    schema.add_argument(
        "--format",
        choices=("json-schema", "markdown"),
        default="json-schema",
        help="output format (default: json-schema)",
    )
    schema.set_defaults(handler=cmd_schema)


def cmd_schema(args: argparse.Namespace, out: TextIO) -> int:
    import orjson

    from ..record_schema import json_schema, markdown

    if args.format == "markdown":
        out.write(markdown(args.stream))
    else:
        out.write(orjson.dumps(json_schema(args.stream), option=orjson.OPT_INDENT_2).decode())
        out.write("\n")
    return EXIT_OK
