"""The SDK's conformance suite: every rule of TraceML's exporter contract, checked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sink_support
from traceml_exporter_sdk import ExporterContext
from traceml_exporter_sdk.testing import ExporterConformance


class Test{{ cookiecutter.exporter_class }}(ExporterConformance):
    factory = "{{ cookiecutter.package_name }}.exporter:make_exporter"

    def read_back(self, context: ExporterContext) -> Mapping[str, list[dict[str, Any]]]:
        """What the exporter wrote, read by pyarrow, per stream: turns data fidelity on."""
        return sink_support.read_export(context)
