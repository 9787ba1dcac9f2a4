"""Write, test and run custom exporters for TraceML's export records."""

from __future__ import annotations

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

__version__ = "0.1.0"

__all__ = [
    "ALL_STREAMS",
    "DEFAULT_EXPORT_STREAMS",
    "EXPORT_STREAM_NAMES",
    "RECORD_TYPES",
    "RECORD_TYPE_BY_STREAM",
    "SCHEMA_VERSION",
    "EventStats",
    "ExportRecord",
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
    "parse_export_streams",
    "records_from_payload",
    "stream_key",
]
