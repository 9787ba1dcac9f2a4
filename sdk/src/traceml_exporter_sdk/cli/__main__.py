"""``python -m traceml_exporter_sdk.cli``: the same as the ``traceml-exporter`` script."""

from __future__ import annotations

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
