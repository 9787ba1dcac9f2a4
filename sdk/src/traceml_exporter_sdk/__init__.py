"""Write, test and run custom exporters for TraceML's export records.

Every public name below is imported from its module on first use (PEP 562), so
``import traceml_exporter_sdk`` (which the pytest plugin and the CLI entry point
do) loads nothing else: the worker, the mapper and orjson come when used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .context import ExporterContext
    from .exporter import Exporter, ExporterFactory, PermanentExportError, is_permanent
    from .factory import (
        ExporterSettingError,
        FactoryFailure,
        load_exporter,
        validate_exporter_setting,
    )
    from .jsonl import JsonlExporter
    from .mapping import records_from_payload
    from .records import (
        RECORD_TYPE_BY_STREAM,
        RECORD_TYPES,
        SCHEMA_VERSION,
        EventStats,
        ExportRecord,
        ProcessRecord,
        Record,
        RecordBatch,
        RuntimeEnvironmentRecord,
        StdoutStderrRecord,
        StepMemoryRecord,
        StepTimeRecord,
        SystemGpuRecord,
        SystemRecord,
        stream_key,
    )
    from .streams import (
        ALL_STREAMS,
        DEFAULT_EXPORT_STREAMS,
        EXPORT_STREAM_NAMES,
        parse_export_streams,
    )
    from .worker import ExportFailure, ExportReport, ExportWorker

__version__ = "0.1.0"

__all__ = [
    "ALL_STREAMS",
    "DEFAULT_EXPORT_STREAMS",
    "EXPORT_STREAM_NAMES",
    "RECORD_TYPES",
    "RECORD_TYPE_BY_STREAM",
    "SCHEMA_VERSION",
    "EventStats",
    "ExportFailure",
    "ExportRecord",
    "ExportReport",
    "ExportWorker",
    "Exporter",
    "ExporterContext",
    "ExporterFactory",
    "ExporterSettingError",
    "FactoryFailure",
    "JsonlExporter",
    "PermanentExportError",
    "ProcessRecord",
    "Record",
    "RecordBatch",
    "RuntimeEnvironmentRecord",
    "StdoutStderrRecord",
    "StepMemoryRecord",
    "StepTimeRecord",
    "SystemGpuRecord",
    "SystemRecord",
    "__version__",
    "is_permanent",
    "load_exporter",
    "parse_export_streams",
    "records_from_payload",
    "stream_key",
    "validate_exporter_setting",
]

_WHERE = {
    "ExporterContext": "context",
    "Exporter": "exporter",
    "ExporterFactory": "exporter",
    "PermanentExportError": "exporter",
    "is_permanent": "exporter",
    "ExporterSettingError": "factory",
    "FactoryFailure": "factory",
    "load_exporter": "factory",
    "JsonlExporter": "jsonl",
    "records_from_payload": "mapping",
    "RECORD_TYPE_BY_STREAM": "records",
    "RECORD_TYPES": "records",
    "SCHEMA_VERSION": "records",
    "EventStats": "records",
    "ExportRecord": "records",
    "ProcessRecord": "records",
    "Record": "records",
    "RecordBatch": "records",
    "RuntimeEnvironmentRecord": "records",
    "StdoutStderrRecord": "records",
    "StepMemoryRecord": "records",
    "StepTimeRecord": "records",
    "SystemGpuRecord": "records",
    "SystemRecord": "records",
    "stream_key": "records",
    "ALL_STREAMS": "streams",
    "DEFAULT_EXPORT_STREAMS": "streams",
    "EXPORT_STREAM_NAMES": "streams",
    "parse_export_streams": "streams",
    "ExportFailure": "worker",
    "ExportReport": "worker",
    "ExportWorker": "worker",
    "validate_exporter_setting": "factory",
}
"""Where each public name is defined; it is imported from there on first use."""


_SUBMODULES = frozenset(
    {
        "cli",
        "context",
        "exporter",
        "factory",
        "follow",
        "jsonl",
        "mapping",
        "monitoring",
        "records",
        "streams",
        "testing",
        "worker",
    }
)
"""The public submodules, reachable as attributes; internal ones carry a leading underscore."""


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use (PEP 562)."""
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
