"""TraceML's export contract, checked: the SDK's conformance suite run on this exporter.

Every check is its own test (``pytest -k <check>`` runs one); the rules are listed in
``_contract.py``. What only the sink knows comes from ``sink_support.py``:
``read_export(context)``, which turns the data-fidelity checks on, and, for a sink the
suite's defaults cannot break (one that does not live under ``export_dir``),
``break_sink(context)`` and ``broken_context(context)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import sink_support
from traceml_exporter_sdk import ExporterContext, ExportRecord, ExportWorker
from traceml_exporter_sdk.testing import ExporterConformance, expected_by_stream

from {{ cookiecutter.package_name }}.exporter import make_exporter


class Test{{ cookiecutter.exporter_class }}(ExporterConformance):
    factory = "{{ cookiecutter.package_name }}.exporter:make_exporter"

    def read_back(self, context: ExporterContext) -> Mapping[str, list[dict[str, Any]]]:
        return sink_support.read_export(context)

    def broken_context(self, context: ExporterContext) -> ExporterContext:
        own: Callable[[ExporterContext], ExporterContext] | None
        own = getattr(sink_support, "broken_context", None)
        return (own or super().broken_context)(context)

    def break_sink(self, context: ExporterContext) -> None:
        own: Callable[[ExporterContext], None] | None
        own = getattr(sink_support, "break_sink", None)
        (own or super().break_sink)(context)


def test_any_text_is_kept_exactly(
    hostname_context: ExporterContext, hostile_records: list[ExportRecord]
) -> None:
    """A lone surrogate, NUL, U+2028, a 1 MiB line: delivered without raising, read back equal."""
    worker = ExportWorker(make_exporter, hostname_context).start()
    worker.submit_records(hostile_records)
    report = worker.shutdown()
    assert report.failure is None
    assert report.delivered_records == len(hostile_records)
    written = {s: rows for s, rows in sink_support.read_export(hostname_context).items() if rows}
    assert written == expected_by_stream(hostile_records, include_hostname=True)
