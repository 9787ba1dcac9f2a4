"""The call order every sink keeps, whatever it writes to: TraceML's export worker calls
``open()`` once, then ``write``/``flush``, then ``close()`` once; a call out of that order
is a bug in the caller and raises rather than doing something half right."""

from __future__ import annotations

import pytest
from traceml_exporter_sdk import ExporterContext, ExportRecord

from {{ cookiecutter.package_name }}.exporter import make_exporter


def test_calls_out_of_order_raise(context: ExporterContext, records: list[ExportRecord]) -> None:
    exporter = make_exporter(context)
    with pytest.raises(RuntimeError, match="open"):
        exporter.write(records)
    exporter.open()
    exporter.close()
    with pytest.raises(RuntimeError, match=r"not open|closed"):
        exporter.flush()
    with pytest.raises(RuntimeError, match=r"not open|closed"):
        exporter.write(records)
