"""Write, test and run custom exporters for TraceML's export records."""

from __future__ import annotations

from .context import ExporterContext
from .exporter import Exporter, ExporterFactory
from .factory import (
    ExporterSettingError,
    FactoryFailure,
    check_exporter_setting,
    load_exporter,
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
    "check_exporter_setting",
    "load_exporter",
    "parse_export_streams",
    "records_from_payload",
    "stream_key",
]
