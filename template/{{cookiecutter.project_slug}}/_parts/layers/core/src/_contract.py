"""TraceML's export contract as this package keeps it: the rules, and the attributes it uses.

The rules (``tests/test_conformance.py`` checks every one with the SDK's suite):

1. ``make_exporter(context)`` runs on the aggregator's main thread and only stores
   settings. Files, connections and clients are made in ``open()``.
2. The export worker makes every call, on its own thread: ``open()`` once, then
   ``write(records)`` and ``flush()`` any number of times, then ``close()`` once, never
   overlapping. The exporter starts no thread of its own.
3. One ``write`` batch can mix streams, in arrival order. Records are told apart by
   ``record.STREAM`` and read only through ``COLUMNS``, their fields and ``to_dict()``:
   TraceML's record classes are not the SDK's, so never use ``isinstance`` on them.
4. ``hostname`` is kept only when ``context.include_hostname`` is true.
5. ``flush()`` makes everything written so far durable: that is what TraceML counts as
   delivered. ``close(*, dropped_batches=0)`` does the same, then releases every
   resource. ``dropped_batches`` counts the batches the worker never handed to ``write``.
6. Failures are raised, never swallowed. After a method raises, TraceML calls nothing
   more on the exporter, not even ``close()``, so that method first releases every
   resource itself. TraceML then records the loss in ``finalization_warning.json``.
7. Every network wait has a deadline. Only transient errors are retried, for a bounded
   time; anything permanent is raised.

Two conventions of ``traceml-exporter follow``, which retries a failed exporter itself
(it waits, makes a new one and resumes from its bookmark):

8. An error that waiting cannot fix (bad credentials, a setting with a bad value, a
   table or payload the sink refuses) is marked: it, or an exception in its
   ``__cause__``/``__context__`` chain, has a truthy ``permanent`` attribute
   (:class:`SettingsError`, :func:`permanent`). The follower then ends at once
   instead of waiting; anything unmarked counts as transient.
9. A sink that stores a run key uses :func:`run_key` of ``context.session_root``:
   the absolute, resolved folder, so a relative and an absolute name of one run are one
   run and two folders of the same name are two.

In production TraceML passes its own ``ExporterContext`` and record classes (from
``traceml_ai.aggregator.export``); in tests the SDK passes look-alikes. The exporter
imports neither: it relies only on the attributes below, whatever the class.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

__all__ = [
    "ExportRecord",
    "ExporterContext",
    "SettingsError",
    "kept_columns",
    "permanent",
    "record_data",
    "releasing",
    "run_key",
]

_E = TypeVar("_E", bound=BaseException)


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
    """One export record: dispatch on ``STREAM``, read fields by ``COLUMNS`` or ``to_dict()``."""

    STREAM: ClassVar[str]
    COLUMNS: ClassVar[tuple[str, ...]]

    def to_dict(self) -> dict[str, Any]:
        """``stream``, ``schema_version``, then every field in ``COLUMNS`` order."""


@contextmanager
def releasing(release: Callable[[], object]) -> Iterator[None]:
    """Rule 6 for one method's body: on any failure, ``release()`` first, then re-raise.

    TraceML calls nothing more after a method raises, not even ``close()``, so the
    failing method itself must let go of files, connections and clients.
    """
    try:
        yield
    except BaseException:
        release()
        raise


class SettingsError(ValueError):
    """A setting (an environment variable) has a value this exporter cannot use: rule 8."""

    permanent = True


def permanent(error: _E) -> _E:
    """``error``, marked permanent (rule 8): waiting and a new exporter cannot fix it."""
    setattr(error, "permanent", True)  # noqa: B010 - any exception class, ours or not
    return error


def record_data(record: ExportRecord, include_hostname: bool) -> dict[str, Any]:
    """Rule 4 for one record: ``record.to_dict()``, without ``hostname`` unless kept."""
    data = record.to_dict()
    if not include_hostname:
        data.pop("hostname", None)
    return data


def kept_columns(columns: Sequence[str], include_hostname: bool) -> tuple[str, ...]:
    """Rule 4 for a stream's ``COLUMNS``: every one, but ``hostname`` only when kept."""
    return tuple(name for name in columns if include_hostname or name != "hostname")


def run_key(session_root: str | Path) -> str:
    """Rule 9: the run's folder, absolute and resolved (symbolic links, ``..``), as text."""
    return str(Path(session_root).resolve())
