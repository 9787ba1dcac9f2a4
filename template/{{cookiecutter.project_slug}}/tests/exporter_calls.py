"""What every test module here does to the exporter: TraceML's calls, then a read-back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sink_support
from traceml_exporter_sdk import ExporterContext, ExportRecord
from traceml_exporter_sdk.testing import expected_by_stream

from {{ cookiecutter.package_name }}.exporter import make_exporter


def run(context: ExporterContext, *batches: Sequence[ExportRecord], dropped: int = 0) -> None:
    """open, write and flush each batch, close: the calls TraceML's export worker makes."""
    exporter = make_exporter(context)
    exporter.open()
    for batch in batches:
        exporter.write(batch)
        exporter.flush()
    exporter.close(dropped_batches=dropped)


def written(context: ExporterContext) -> dict[str, list[dict[str, Any]]]:
    """What ``sink_support.read_export`` finds, streams with no row left out."""
    return {s: rows for s, rows in sink_support.read_export(context).items() if rows}


def expected(
    records: Sequence[ExportRecord], *, include_hostname: bool = False
) -> dict[str, list[dict[str, Any]]]:
    """What ``written`` should find: the records' ``to_dict()``s, or for a sink that keeps
    aggregates rather than rows, its ``sink_support.expected_export`` of them."""
    own = getattr(sink_support, "expected_export", None)
    if own is not None:
        result: dict[str, list[dict[str, Any]]] = own(records, include_hostname=include_hostname)
        return result
    return expected_by_stream(records, include_hostname=include_hostname)
