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
    from .checks import CHECKS, check_names
    from .conformance import ExporterConformance
    from .corpus import (
        as_foreign,
        corpus_batches,
        corpus_records,
        foreign_class,
        load_corpus,
    )
    from .environment import Env
    from .errors import ConformanceConfigError, ReadBackNotImplementedError
    from .expected import expected_by_stream
    from .keys import THROUGHPUT_PROPERTY
    from .readback import (
        JsonlLines,
        TornLineWarning,
        group_by_stream,
        read_jsonl,
        read_jsonl_export,
        read_jsonl_file,
        read_jsonl_lines,
    )
    from .registry import GROUPS, Check

__all__ = [
    "CHECKS",
    "GROUPS",
    "THROUGHPUT_PROPERTY",
    "Check",
    "ConformanceConfigError",
    "Env",
    "ExporterConformance",
    "JsonlLines",
    "ReadBackNotImplementedError",
    "TornLineWarning",
    "as_foreign",
    "check_names",
    "corpus_batches",
    "corpus_records",
    "expected_by_stream",
    "foreign_class",
    "group_by_stream",
    "load_corpus",
    "read_jsonl",
    "read_jsonl_export",
    "read_jsonl_file",
    "read_jsonl_lines",
]

_WHERE = {
    "CHECKS": "checks",
    "check_names": "checks",
    "ExporterConformance": "conformance",
    "as_foreign": "corpus",
    "corpus_batches": "corpus",
    "corpus_records": "corpus",
    "expected_by_stream": "expected",
    "foreign_class": "corpus",
    "load_corpus": "corpus",
    "Env": "environment",
    "ConformanceConfigError": "errors",
    "ReadBackNotImplementedError": "errors",
    "THROUGHPUT_PROPERTY": "keys",
    "group_by_stream": "readback",
    "JsonlLines": "readback",
    "TornLineWarning": "readback",
    "read_jsonl": "readback",
    "read_jsonl_export": "readback",
    "read_jsonl_file": "readback",
    "read_jsonl_lines": "readback",
    "GROUPS": "registry",
    "Check": "registry",
}
"""Where each public name is defined; it is imported from there on first use."""


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use (PEP 562)."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
