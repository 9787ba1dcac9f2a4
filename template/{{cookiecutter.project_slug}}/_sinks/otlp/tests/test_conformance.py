"""The SDK's conformance suite, against the real OTLP/HTTP peer of ``sink_support``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sink_support import break_sink, broken_context, otlp_peer, read_export
from traceml_exporter_sdk import ExporterContext
from traceml_exporter_sdk.testing import ExporterConformance

__all__ = ["Test{{ cookiecutter.exporter_class }}", "otlp_peer"]


class Test{{ cookiecutter.exporter_class }}(ExporterConformance):
    factory = "{{ cookiecutter.package_name }}.exporter:make_exporter"

    def read_back(self, context: ExporterContext) -> Mapping[str, list[dict[str, Any]]]:
        """What the peer accepted from this context's exporters: turns data fidelity on."""
        return read_export(context)

    def broken_context(self, context: ExporterContext) -> ExporterContext:
        """The endpoint points at a closed port: open() must fail."""
        return broken_context(context)

    def break_sink(self, context: ExporterContext) -> None:
        """The collector answers 503 for ever."""
        break_sink(context)
