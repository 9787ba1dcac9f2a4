"""``python -m traceml_exporter_sdk.monitoring --out DIR [--set NAME=VALUE ...]``: write
follow's dashboard and rules for the thresholds given (the defaults otherwise)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import Thresholds, with_settings, write


def main(argv: list[str] | None = None) -> int:
    names = ", ".join(Thresholds.__dataclass_fields__)
    parser = argparse.ArgumentParser(
        prog="python -m traceml_exporter_sdk.monitoring",
        description=f"Write follow-dashboard.json and follow-rules.yml. Thresholds: {names}.",
    )
    parser.add_argument("--out", type=Path, required=True, help="the folder to write into")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    try:
        thresholds = with_settings(dict(item.partition("=")[::2] for item in args.set))
    except ValueError as error:
        parser.error(str(error))
    sys.stdout.writelines(f"{path}\n" for path in write(args.out, thresholds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
