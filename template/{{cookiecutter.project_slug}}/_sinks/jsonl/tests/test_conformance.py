"""The SDK's conformance suite: every rule of TraceML's exporter contract, checked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceml_exporter_sdk import ExporterContext
from traceml_exporter_sdk.testing import ExporterConformance

from {{ cookiecutter.package_name }}.exporter import read_export


class Test{{ cookiecutter.exporter_class }}(ExporterConformance):
    factory = "{{ cookiecutter.package_name }}.exporter:make_exporter"

    def read_back(self, context: ExporterContext) -> Mapping[str, list[dict[str, Any]]]:
        """What the exporter wrote, per stream, as dicts: turns the data-fidelity checks on."""
        return read_export(context.export_dir, context.streams)
