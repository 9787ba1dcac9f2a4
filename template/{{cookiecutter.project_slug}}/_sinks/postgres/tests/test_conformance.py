"""The SDK's conformance suite against a real PostgreSQL: every rule of TraceML's contract."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sink_support
from traceml_exporter_sdk import ExporterContext
from traceml_exporter_sdk.testing import ExporterConformance


class Test{{ cookiecutter.exporter_class }}(ExporterConformance):
    factory = "{{ cookiecutter.package_name }}.exporter:make_exporter"

    def read_back(self, context: ExporterContext) -> Mapping[str, list[dict[str, Any]]]:
        """What the exporter committed, per stream, read from the tables: data fidelity on."""
        return sink_support.read_export(context)

    def break_sink(self, context: ExporterContext) -> None:
        """Kill the exporter's backend and refuse new connections."""
        sink_support.break_sink(context)

    def broken_context(self, context: ExporterContext) -> ExporterContext:
        """Point the exporter at a port where nothing listens."""
        return sink_support.broken_context(context)
