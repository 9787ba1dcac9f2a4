"""What every sink does alike, whatever it writes to: TraceML's export worker calls
``open()`` once, then ``write``/``flush``, then ``close()`` once, and a call out of that
order raises rather than doing something half right; an export folder that cannot be
made fails ``open()`` with the path in the message, as a transient error."""

from __future__ import annotations

import pytest
from exporter_calls import is_permanent
from traceml_exporter_sdk import ExporterContext, ExportRecord

from traceml_exporter_example.exporter import make_exporter


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


def test_open_fails_cleanly_when_export_dir_is_a_file(context: ExporterContext) -> None:
    context.export_dir.parent.mkdir(parents=True)
    context.export_dir.write_text("in the way")
    exporter = make_exporter(context)
    with pytest.raises(OSError, match="export") as raised:
        exporter.open()
    assert not is_permanent(raised.value)  # moved aside, the next exporter opens
    with pytest.raises(RuntimeError, match="failed"):
        exporter.open()  # a failed instance is done with: follow makes a new one
