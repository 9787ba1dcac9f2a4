"""The parts of TraceML's export contract this exporter relies on, as protocols.

In production TraceML passes its own ``ExporterContext`` and record classes
(from ``traceml_ai.aggregator.export``); in tests the SDK passes look-alikes.
The exporter therefore imports neither: it depends only on the attributes
below, so any object that has them works, whatever its class.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol

__all__ = ["ExportRecord", "ExporterContext"]


class ExporterContext(Protocol):
    """What the factory receives as ``factory(context)``."""

    @property
    def session_root(self) -> Path:
        """The run's folder, ``<logs-dir>/<run-name>``."""

    @property
    def export_dir(self) -> Path:
        """``session_root / "aggregator" / "export"``; TraceML does not create it for a factory."""

    @property
    def include_hostname(self) -> bool:
        """Keep a record's ``hostname`` field (the ``exporter_hostname`` setting)."""

    @property
    def streams(self) -> Sequence[str]:
        """The selected STREAM names, in the contract's record-table order."""


class ExportRecord(Protocol):
    """One export record: dispatch on ``STREAM``, read fields by ``COLUMNS`` or ``to_dict()``.

    Never dispatch with ``isinstance`` on a record class: TraceML's classes are
    not the SDK's, so such a check would drop every production record.
    """

    STREAM: ClassVar[str]
    COLUMNS: ClassVar[tuple[str, ...]]

    def to_dict(self) -> dict[str, Any]:
        """``stream``, ``schema_version``, then every field in ``COLUMNS`` order."""
