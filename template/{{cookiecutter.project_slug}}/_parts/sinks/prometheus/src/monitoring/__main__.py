"""``python -m traceml_exporter_example.monitoring --out DIR [--set NAME=VALUE ...]``: write
``dashboard.json`` and ``rules.yml`` for the thresholds given (the defaults otherwise)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import with_settings, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m traceml_exporter_example.monitoring")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write into")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a threshold (straggler_factor=2, stuck_after=30m, ...)",
    )
    args = parser.parse_args(argv)
    settings = dict(item.partition("=")[::2] for item in args.set)
    try:
        thresholds = with_settings(settings)
    except ValueError as error:
        parser.error(str(error))
    for path in write(args.out, thresholds):
        sys.stdout.write(f"{path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
