"""ExampleExporter: crash-safe Parquet files per stream, read by any Parquet reader.

Select it in TraceML with ``traceml_exporter_example.exporter:make_exporter``.

Layout under ``context.export_dir`` (``<session_root>/aggregator/export``)::

    <stream>/part-<run>-<first>-<last>.parquet   the stream's records (pyarrow, snappy)
    export_summary.json                           written by close(): records per stream

so ``read_parquet('<export_dir>/step_time/*.parquet')`` (DuckDB),
``pl.read_parquet`` (polars) or ``pq.read_table`` (pyarrow) read a stream as it
is. ``<stream>`` is a link to the current generation of the stream's files (see
``_parquet_layout``): every ``flush`` that has records of a stream adds them as one new
part (a complete file, renamed into place), and parts are compacted at close
and whenever a stream has more than ``part_limit`` of them, with no moment at
which a glob reader sees a record twice or misses one.

Each stream's schema is declared from the record's ``COLUMNS`` (``_parquet_arrow``),
never inferred: ``stream`` and ``schema_version`` first, then the fields,
``hostname`` only when ``context.include_hostname``; ints as int64, floats as
float64, None as null, ``events`` as a map of maps of the five stats.

``write`` only buffers, column-wise and bounded: rows become Arrow columns every
``STAGE_ROWS`` rows, and a stream whose buffer passes ``backlog_bytes`` is
written out as a part at once rather than held until the next flush.

The rules of TraceML's export contract this class keeps:

* the factory only stores settings; folders and files are made in ``open()``
  and later calls, on the export worker's thread;
* one writer per export folder: ``open()`` takes an exclusive lock on it
  (``ExportDirLock``) and refuses a folder another exporter holds; ``close()``
  and any failure release it;
* records are told apart by ``record.STREAM``, never by their class;
* ``close(*, dropped_batches=0)`` writes what was buffered, compacts, and
  leaves no file open and no thread behind;
* a failure is raised with the path and the error: the failing method has
  already dropped its buffers and removed its temporary file, since TraceML
  calls nothing more (not even ``close``) and records the loss in
  ``finalization_warning.json``.
"""

from __future__ import annotations

import json
import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from pathlib import Path
from typing import Any

import pyarrow as pa

from ._contract import ExporterContext, ExportRecord, kept_columns, permanent
from ._files import export_folder, fsync_path, write_atomically
from ._lifecycle import Lifecycle
from ._parquet_arrow import stream_schema, to_arrow
from ._parquet_layout import CLOSE_GRACE_S, ExportDirLock, SinkError, StreamFolder
from ._parquet_read import read_export

__all__ = [
    "BACKLOG_BYTES",
    "PART_LIMIT",
    "STAGE_ROWS",
    "SUMMARY_FILE",
    "ExampleExporter",
    "make_exporter",
    "read_export",
]

SUMMARY_FILE = "export_summary.json"
"""Written by ``close()``: ``{"written_records": {stream: n}, "dropped_batches": n, ...}``."""

PART_LIMIT = 64
"""A stream with more parts of this run than this is compacted at the next flush."""

STAGE_ROWS = 8192
"""Rows of a stream held as Python tuples before they become Arrow columns."""

BACKLOG_BYTES = 64 << 20
"""Arrow bytes of a stream held between flushes before they are written out as a part."""


@dataclass(slots=True, eq=False)
class _Stream:
    """The buffer of one stream: staged rows, Arrow batches, and its folder.

    A row is the tuple of the record's kept fields; ``stream`` and
    ``schema_version`` are the same for the whole stream (``constants``).
    """

    schema: pa.Schema
    columns: tuple[str, ...]
    constants: tuple[str, int]
    row_of: Callable[[Any], tuple[Any, ...]]
    folder: StreamFolder
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    batches: list[pa.RecordBatch] = field(default_factory=list)
    batch_bytes: int = 0


class ExampleExporter(Lifecycle):
    """Write every record to the Parquet folder of its ``record.STREAM``.

    ``part_limit``: parts of this run a stream may have before a flush compacts
    them. ``backlog_bytes``: Arrow bytes a stream may hold between flushes.
    ``durable``: fsync each file before its rename and each folder that gains an
    entry after (the export folder's too), so a power cut loses nothing flushed either (a disk flush per part); off by
    default, as in the SDK's jsonl exporter: a killed process loses nothing
    flushed either way.
    """

    def __init__(
        self,
        export_dir: Path,
        *,
        include_hostname: bool = False,
        part_limit: int = PART_LIMIT,
        backlog_bytes: int = BACKLOG_BYTES,
        durable: bool = False,
    ) -> None:
        # Nothing is created here: the factory runs on another thread than the methods.
        self.export_dir = export_dir
        self.include_hostname = include_hostname
        self.part_limit = part_limit
        self.backlog_bytes = backlog_bytes
        self.durable = durable
        self._streams: dict[str, _Stream] = {}
        self._classes: dict[type, _Stream] = {}
        self._run = 0
        self._lock = ExportDirLock(export_dir)

    def open(self) -> None:
        """Create ``export_dir``, lock it, and clear what a killed run left in its stream folders.

        Raises ``SinkError`` when another exporter holds the folder's lock.
        """
        with self._opening():
            try:
                export_folder(self.export_dir)  # no planted link, no other user's folder
                if self.durable:
                    fsync_path(self.export_dir.parent)  # the entry of a folder made just now
                self._lock.acquire()
            except SinkError:
                raise
            except OSError as error:
                raise SinkError(f"{self.export_dir}: {type(error).__name__}: {error}") from error
            self._clear_leftovers()

    def _clear_leftovers(self) -> None:
        """Adopt each stream's generation link and drop what a killed run left beside it."""
        try:
            links = [p for p in self.export_dir.iterdir() if p.is_symlink()]
        except OSError as error:
            raise SinkError(f"{self.export_dir}: {type(error).__name__}: {error}") from error
        self._run = time.time_ns()
        for link in links:
            if link.name.isidentifier() and (self.export_dir / f".{link.name}").is_dir():
                StreamFolder(self.export_dir, link.name, self._run, durable=self.durable).prepare()

    def write(self, records: Sequence[ExportRecord]) -> None:
        """Buffer the batch per stream; a stream past ``backlog_bytes`` is written out."""
        with self._running("write"):
            self._buffer(records)
            for buffer in self._streams.values():
                if len(buffer.rows) >= STAGE_ROWS:
                    self._stage(buffer)
                if buffer.batch_bytes >= self.backlog_bytes:
                    self._write_part(buffer)

    def flush(self) -> None:
        """Write each stream's buffered records as one new part; compact past ``part_limit``."""
        with self._running("flush"):
            for buffer in self._streams.values():
                self._write_part(buffer)
                buffer.folder.compact(self.part_limit, buffer.schema)

    def close(self, *, dropped_batches: int = 0) -> None:
        """Write what is buffered, compact every stream, write ``export_summary.json``.

        ``dropped_batches`` is the number of payload batches TraceML's worker
        never handed to ``write``: one count for the whole worker.
        """
        with self._closing():
            for buffer in self._streams.values():
                self._write_part(buffer)
                buffer.folder.compact(None, buffer.schema)
            self._write_summary(dropped_batches)
            self._remove_replaced_generations()

    def _remove_replaced_generations(self) -> None:
        """Let listings of a replaced generation finish, then remove those generations."""
        ages = [b.folder.last_swap_age() for b in self._streams.values()]
        youngest = min((age for age in ages if age is not None), default=None)
        if youngest is not None and youngest < CLOSE_GRACE_S:
            time.sleep(CLOSE_GRACE_S - youngest)
        for buffer in self._streams.values():
            buffer.folder.remove_replaced(0.0)

    def _release(self) -> None:
        """Drop every buffer and release the folder's lock."""
        self._streams.clear()
        self._classes.clear()
        self._lock.release()

    def _buffer(self, records: Sequence[ExportRecord]) -> None:
        """Append each record's fields to its stream's rows, in C loops where it can.

        Records are grouped by class (``type(record)``, as the contract allows),
        each class mapped once to its stream; a batch with one class per stream
        is appended with ``map`` per class, order kept within each stream.
        """
        classes = self._classes
        kinds = list(map(type, records))
        distinct = set(kinds)
        for kind in distinct - classes.keys():
            self._register(records[kinds.index(kind)])
        if len(distinct) == 1:
            buffer = classes[kinds[0]]
            buffer.rows.extend(map(buffer.row_of, records))
            return
        buffers = [classes[kind] for kind in distinct]
        if len(set(buffers)) == len(buffers):  # no stream has two classes in this batch
            for kind, buffer in zip(distinct, buffers, strict=True):
                chosen = compress(records, map(operator.is_, kinds, repeat(kind)))
                buffer.rows.extend(map(buffer.row_of, chosen))
            return
        for record, kind in zip(records, kinds, strict=True):
            buffer = classes[kind]
            buffer.rows.append(buffer.row_of(record))

    def _register(self, record: ExportRecord) -> None:
        """Map the record's class to its stream's buffer (made by the stream's first record).

        Its ``to_dict()`` gives ``schema_version``; the stream's schema is fixed then.
        """
        stream = record.STREAM
        data = record.to_dict()
        version = data.get("schema_version")
        columns = tuple(record.COLUMNS)
        buffer = self._streams.get(stream)
        if buffer is None:
            buffer = self._new_stream(stream, columns, version)
        elif (columns, version) != (buffer.columns, buffer.constants[1]):
            raise permanent(
                ValueError(
                    f"{buffer.folder.link}: a {stream} record of schema_version {version} has "
                    f"COLUMNS {columns}, but this run writes schema_version "
                    f"{buffer.constants[1]} with {buffer.columns}"
                )
            )
        self._classes[type(record)] = buffer

    def _new_stream(self, stream: str, columns: tuple[str, ...], version: Any) -> _Stream:
        if not stream.isidentifier():
            raise permanent(
                ValueError(f"STREAM {stream!r} is not a plain name; refusing it as a folder")
            )
        if type(version) is not int:
            raise permanent(
                ValueError(f"a {stream} record's to_dict() has schema_version {version!r}")
            )
        kept = kept_columns(columns, self.include_hostname)
        folder = StreamFolder(self.export_dir, stream, self._run, durable=self.durable)
        folder.prepare()
        getter = operator.attrgetter(*kept)
        row_of = getter if len(kept) > 1 else lambda record: (getter(record),)
        schema = stream_schema(stream, ("stream", "schema_version", *kept))
        buffer = _Stream(schema, columns, (stream, version), row_of, folder)
        self._streams[stream] = buffer
        return buffer

    def _stage(self, buffer: _Stream) -> None:
        """Turn the staged rows into one Arrow record batch (column-wise from here on)."""
        if not buffer.rows:
            return
        folder = buffer.folder

        def where() -> str:
            return str(folder.link)

        batch = to_arrow(buffer.schema, buffer.constants, buffer.rows, where)
        buffer.rows.clear()
        buffer.batches.append(batch)
        buffer.batch_bytes += batch.nbytes

    def _write_part(self, buffer: _Stream) -> None:
        self._stage(buffer)
        if buffer.batches:
            buffer.folder.write_part(buffer.batches, buffer.schema)
            buffer.batches.clear()
            buffer.batch_bytes = 0

    def _write_summary(self, dropped_batches: int) -> None:
        path = self.export_dir / SUMMARY_FILE
        summary = {
            "closed_unix_ns": time.time_ns(),
            "dropped_batches": dropped_batches,
            "written_records": {s: b.folder.written for s, b in self._streams.items()},
        }
        try:
            write_atomically(path, (json.dumps(summary, indent=2) + "\n").encode())
        except OSError as error:
            raise SinkError(f"{path}: {type(error).__name__}: {error}") from error


def make_exporter(context: ExporterContext) -> ExampleExporter:
    """The factory TraceML calls as ``factory(context)`` on the aggregator's main thread."""
    return ExampleExporter(context.export_dir, include_hostname=context.include_hostname)
