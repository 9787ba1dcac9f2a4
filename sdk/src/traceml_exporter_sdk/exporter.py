"""The ``Exporter`` protocol: the four methods TraceML's export worker calls, and how a
failure says waiting cannot fix it (``permanent``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from .context import ExporterContext
from .records import ExportRecord

__all__ = ["Exporter", "ExporterFactory", "PermanentExportError", "is_permanent"]


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


class PermanentExportError(Exception):
    """A failure no retry can fix: bad credentials, a schema the sink refuses, a bad setting.

    ``traceml-exporter follow`` retries any other failure with a new exporter once the
    sink is back; this one ends it at once. Any exception class (or instance) with a
    truthy ``permanent`` attribute means the same, so an exporter package needs nothing
    from the SDK to say it (OpenTelemetry's ``consumererror.NewPermanent`` in one attribute).
    """

    permanent = True


def is_permanent(exc: BaseException) -> bool:
    """Whether ``exc``, or an exception it was raised from or while handling, is marked
    ``permanent``; an exception that says nothing is transient. Never raises."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        try:
            if getattr(current, "permanent", False):
                return True
            current = current.__cause__ or current.__context__
        except BaseException:  # an attribute that raises says nothing
            return False
    return False
