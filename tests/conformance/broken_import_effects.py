"""A deliberately broken exporter: importing its module creates a log file in the current
folder (a module-level log handler), before any exporter exists.

``Good`` otherwise; ``test_matrix.py`` asserts that it fails exactly the import check.
"""

from __future__ import annotations

import logging
from typing import Any

from broken_exporters import Good

LOG = logging.getLogger("broken_import_effects")
LOG.addHandler(logging.FileHandler("exporter.log"))


def make_exporter(context: Any) -> Good:
    return Good(context)
