"""The exporter conformance suite, its sample corpus and its helpers (public API).

Subclass :class:`ExporterConformance` in a test file, or run
``pytest --traceml-exporter module:factory`` with no test file::

    from traceml_exporter_sdk.testing import ExporterConformance

    class TestMyExporter(ExporterConformance):
        factory = "my_pkg.exporter:make_exporter"

The names below are imported on first use, so the pytest plugin (loaded in
every pytest run where the SDK is installed) stays cheap. Hypothesis
strategies live in :mod:`traceml_exporter_sdk.testing.strategies`, which is the
only module that imports hypothesis.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .conformance import (
        CHECKS,
        Check,
        ConformanceConfigError,
        ExporterConformance,
        ReadBackNotImplementedError,
        check_names,
    )
    from .corpus import (
        as_foreign,
        corpus_batches,
        corpus_records,
        foreign_class,
        load_corpus,
    )
    from .expected import expected_by_stream
    from .readback import group_by_stream, read_jsonl, read_jsonl_lines

__all__ = [
    "CHECKS",
    "Check",
    "ConformanceConfigError",
    "ExporterConformance",
    "ReadBackNotImplementedError",
    "as_foreign",
    "check_names",
    "corpus_batches",
    "corpus_records",
    "expected_by_stream",
    "foreign_class",
    "group_by_stream",
    "load_corpus",
    "read_jsonl",
    "read_jsonl_lines",
]

_WHERE = {
    "CHECKS": "conformance",
    "Check": "conformance",
    "ConformanceConfigError": "conformance",
    "ExporterConformance": "conformance",
    "ReadBackNotImplementedError": "conformance",
    "check_names": "conformance",
    "as_foreign": "corpus",
    "corpus_batches": "corpus",
    "corpus_records": "corpus",
    "expected_by_stream": "expected",
    "foreign_class": "corpus",
    "load_corpus": "corpus",
    "group_by_stream": "readback",
    "read_jsonl": "readback",
    "read_jsonl_lines": "readback",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
