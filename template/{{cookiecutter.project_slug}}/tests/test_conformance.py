{%- import "_parts/sinks/" ~ cookiecutter.sink ~ "/sink.jinja" as sink -%}
"""TraceML's export contract, checked: the SDK's conformance suite run on this exporter.

Every check is its own test (``pytest -k <check>`` runs one); the rules are listed in
``_contract.py``. What only the sink knows comes from ``sink_support.py``:
``read_export(context)``, which turns the data-fidelity checks on.
{%- if "break_sink" in sink.suite_hooks %}
The suite's defaults cannot break this sink, which does not live under ``export_dir``:
its ``break_sink(context)`` and ``broken_context(context)`` do.
{%- endif %}
{%- if "repair_sink" in sink.suite_hooks %}
Its ``repair_sink(context)`` ends the fault ``break_sink`` made (the outage cycle).
{%- endif %}
{%- if "break_sink_permanently" in sink.suite_hooks %}
Its ``break_sink_permanently(context)`` makes a fault waiting cannot fix (credentials
refused, a schema the sink refuses), which the exporter must mark permanent.
{%- endif %}
{%- if "expected_export" in sink.suite_hooks %}
This sink does not keep records as records: ``SKIP_CHECKS`` names the suite's checks it
cannot pass, with the reason (each skip says ``SKIP_CHECKS['<check>']``, the only skips
the template's own tests accept), and ``expected_export`` says what ``read_export`` must
find for given records, which the suite's delivery checks compare it with, exactly.
{%- endif %}
The round trips below run on every sink through the same ``read_export``;
``test_exporter.py`` tests the sink's own. (The template renders this module for its
sink from ``suite_hooks``, the hooks its ``sink_support.py`` defines.)
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping{% if "expected_export" in sink.suite_hooks %}, Sequence{% endif %}
from pathlib import Path
from typing import Any{% if "SKIP_CHECKS" in sink.suite_hooks %}, ClassVar{% endif %}

import sink_support
from exporter_calls import expected, run, written
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from traceml_exporter_sdk import ExporterContext, ExportRecord, ExportWorker
from traceml_exporter_sdk.testing import ExporterConformance, as_foreign
from traceml_exporter_sdk.testing.strategies import record_batches

from {{ cookiecutter.package_name }}.exporter import make_exporter


class Test{{ cookiecutter.exporter_class }}(ExporterConformance):
    factory = "{{ cookiecutter.package_name }}.exporter:make_exporter"
{%- if "SKIP_CHECKS" in sink.suite_hooks %}
    skip_checks: ClassVar[Mapping[str, str]] = {
        name: f"SKIP_CHECKS[{name!r}]: {why}" for name, why in sink_support.SKIP_CHECKS.items()
    }
{%- endif %}

    def read_back(self, context: ExporterContext) -> Mapping[str, list[dict[str, Any]]]:
        return sink_support.read_export(context)
{%- if "expected_export" in sink.suite_hooks %}

    def expected_export(
        self, records: Sequence[Any], *, include_hostname: bool = False
    ) -> Mapping[str, list[dict[str, Any]]]:
        """The suite's delivery checks (flush, close, restart, volume) compare
        ``read_export`` with this, exactly; its record-level checks are in SKIP_CHECKS."""
        return expected(records, include_hostname=include_hostname)
{%- endif %}
{%- if "broken_context" in sink.suite_hooks %}

    def broken_context(self, context: ExporterContext) -> ExporterContext:
        return sink_support.broken_context(context)
{%- endif %}
{%- if "break_sink" in sink.suite_hooks %}

    def break_sink(self, context: ExporterContext) -> None:
        sink_support.break_sink(context)
{%- endif %}

{%- if "repair_sink" in sink.suite_hooks %}

    def repair_sink(self, context: ExporterContext) -> None:
        sink_support.repair_sink(context)
{%- endif %}
{%- if "break_sink_permanently" in sink.suite_hooks %}

    def break_sink_permanently(self, context: ExporterContext) -> None:
        sink_support.break_sink_permanently(context)
{%- endif %}


def test_records_of_other_classes_are_written_the_same(
    tmp_path: Path, records: list[ExportRecord]
) -> None:
    """Look-alike classes (as TraceML's own are) give exactly what the SDK's records give."""
    ours = ExporterContext.create(tmp_path / "sdk", export_streams="all")
    theirs = ExporterContext.create(tmp_path / "foreign", export_streams="all")
    run(ours, records)
    run(theirs, as_foreign(records))
    assert written(theirs) == written(ours) == expected(records)


def test_driven_by_the_export_worker(context: ExporterContext, records: list[ExportRecord]) -> None:
    """open/write/flush/close on the worker's own thread, exactly as TraceML calls them."""
    worker = ExportWorker(make_exporter, context).start()
    worker.submit_records(records)
    report = worker.shutdown()
    assert report.failure is None
    assert report.delivered_records == len(records)
    assert written(context) == expected(records)


@settings(
    max_examples={{ "sink_support.MAX_EXAMPLES" if "MAX_EXAMPLES" in sink.suite_hooks else 20 }},
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(batch=record_batches(max_size=6), include_hostname=st.booleans())
def test_any_batch_reads_back_as_written(batch: list[ExportRecord], include_hostname: bool) -> None:
    """The SDK's record strategies, in two flushes: what goes in comes back out."""
    with tempfile.TemporaryDirectory() as folder:
        context = ExporterContext.create(folder, "all", exporter_hostname=include_hostname)
        run(context, batch[: len(batch) // 2], batch[len(batch) // 2 :])
        assert written(context) == expected(batch, include_hostname=include_hostname)


def test_any_text_is_kept_exactly(
    hostname_context: ExporterContext, hostile_records: list[ExportRecord]
) -> None:
    """A lone surrogate, NUL, U+2028, a 1 MiB line: delivered without raising, read back equal."""
    worker = ExportWorker(make_exporter, hostname_context).start()
    worker.submit_records(hostile_records)
    report = worker.shutdown()
    assert report.failure is None
    assert report.delivered_records == len(hostile_records)
    assert written(hostname_context) == expected(hostile_records, include_hostname=True)
