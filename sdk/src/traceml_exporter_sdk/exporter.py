"""The ``Exporter`` protocol: the four methods TraceML's export worker calls."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from .context import ExporterContext
from .records import ExportRecord

__all__ = ["Exporter", "ExporterFactory"]


@runtime_checkable
class Exporter(Protocol):
    """A sink for export records.

    The worker calls every method from its own thread, never overlapping:
    ``open`` once, then ``write`` and ``flush`` zero or more times, then
    ``close`` once (not when ``open`` raised). After any method raises, the
    worker calls nothing more on the exporter, not even ``close``.
    """

    def open(self) -> None:
        """Create connections, clients and files here, not in the factory."""

    def write(self, records: Sequence[ExportRecord]) -> None:
        """Take one batch; it may interleave several selected streams in payload order."""

    def flush(self) -> None:
        """Make everything written so far durable or delivered."""

    def close(self, *, dropped_batches: int = 0) -> None:
        """Flush and release everything; ``dropped_batches`` is the worker-wide loss."""


ExporterFactory = Callable[[ExporterContext], Exporter]
"""What ``module:factory`` names: called once as ``factory(context)``."""
