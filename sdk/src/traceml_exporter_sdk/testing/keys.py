"""Names the pytest plugin and the conformance suite share (one place, imported by both).

The plugin must stay cheap to import, so this module imports nothing.
"""

from __future__ import annotations

__all__ = [
    "CHECK_MARKER",
    "ENTRY_POINT_NAME",
    "EXPORTER_OPTION",
    "READ_BACK_OPTION",
    "THROUGHPUT_FLOOR_PROPERTY",
    "THROUGHPUT_PROPERTY",
]

CHECK_MARKER = "traceml_conformance"
"""The marker every check of the suite carries: ``pytest -m traceml_conformance`` runs a
project's conformance class alone (``traceml-exporter check --project``)."""

ENTRY_POINT_NAME = "traceml_exporter"
"""The plugin's ``pytest11`` entry point name."""

EXPORTER_OPTION = "traceml_exporter"
"""``config.getoption`` name of ``--traceml-exporter SPEC``."""

READ_BACK_OPTION = "traceml_read_back"
"""``config.getoption`` name of ``--traceml-read-back MODULE:FUNCTION``."""

THROUGHPUT_PROPERTY = "traceml_exporter_records_per_second"
"""The ``user_properties`` key under which the throughput check reports its figure."""

THROUGHPUT_FLOOR_PROPERTY = "traceml_exporter_throughput_floor"
"""The ``user_properties`` key of the floor the throughput figure was held to."""
