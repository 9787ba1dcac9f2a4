"""``traceml-exporter validate``: TraceML's launcher pre-flight for the three exporter settings."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, TextIO

from ..._export.exit_codes import EXIT_FAILED, EXIT_INPUT, EXIT_OK
from ...streams import EXPORT_STREAM_NAMES
from ..errors import CliError, error_line
from ..parser import add_command

__all__ = ["add_parser", "cmd_validate"]


def add_parser(commands: Any) -> None:
    """Add the validate command to the subparsers ``commands``."""
    validate = add_command(
        commands,
        "validate",
        "Check the exporter settings as TraceML's launcher would, before a run.",
        "Resolves exporter, export_streams and exporter_hostname from the flag, then the\n"
        "environment (TRACEML_EXPORTER, TRACEML_EXPORT_STREAMS, TRACEML_EXPORTER_HOSTNAME;\n"
        "the last two names are this tool's assumption), then traceml.yaml (--config, or\n"
        "the nearest one found walking up from here), then the default. Prints each value\n"
        "and where it came from. The exporter module is never imported: only the form of\n"
        "the value is checked. Exit 0 when every value is valid, 1 otherwise.",
        "  traceml-exporter validate --exporter my_exporter.exporter:make_exporter \\\n"
        "      --config traceml.yaml\n"
        "  TRACEML_EXPORT_STREAMS=step_time,system traceml-exporter validate --no-hostname",
    )
    validate.add_argument("--exporter", metavar="VALUE", help="jsonl or module:factory")
    validate.add_argument(
        "--streams",
        metavar="VALUE",
        help=f"export_streams: comma-separated {', '.join(EXPORT_STREAM_NAMES)}",
    )
    validate.add_argument(
        "--hostname",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="exporter_hostname: keep the records' hostname field",
    )
    config = validate.add_mutually_exclusive_group()
    config.add_argument("--config", metavar="FILE", help="traceml.yaml to read")
    config.add_argument("--no-config", action="store_true", help="read no traceml.yaml")
    validate.set_defaults(handler=cmd_validate)


def cmd_validate(args: argparse.Namespace, out: TextIO) -> int:
    from ..settings import ConfigError, clip, find_config, load_config, resolve_settings

    config_path: Path | None = None
    if args.config:
        config_path = Path(args.config)
    elif not args.no_config:
        config_path = find_config(Path.cwd())
    config: dict[str, Any] = {}
    if config_path is not None:
        try:
            config = load_config(config_path)
        except ConfigError as exc:
            raise CliError(str(exc), EXIT_INPUT) from None
    flags = {
        "exporter": args.exporter,
        "export_streams": args.streams,
        "exporter_hostname": args.hostname,
    }
    resolution = resolve_settings(flags, os.environ, config, config_path)

    if args.no_config:
        where = "not read (--no-config)"
    elif config_path is None:
        where = "none found (no traceml.yaml here or in a parent folder)"
    else:
        where = str(config_path)
    out.write(f"{'traceml.yaml':<18} {where}\n")
    for setting in resolution.settings:
        if not setting.ok:
            shown = f"{clip(repr(setting.raw), 100)}  INVALID"
        elif setting.name == "exporter":
            shown = str(setting.value) if setting.value is not None else "(none: export is off)"
        elif setting.name == "export_streams":
            streams = ", ".join(setting.value)  # type: ignore[arg-type]
            shown = f"{setting.raw}  -> streams {streams}"
        else:
            shown = "true" if setting.value else "false"
        out.write(f"{setting.name:<18} {shown}  [from {setting.source}]\n")
    if resolution.ok:
        out.write("valid (the exporter module was not imported; its form was checked)\n")
        return EXIT_OK
    out.flush()
    for setting in resolution.settings:
        if setting.error is not None:
            error_line(f"{setting.error} (from {setting.source})")
    return EXIT_FAILED
