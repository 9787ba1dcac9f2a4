"""ExampleExporter: TensorBoard event files, one folder per rank.

Select it in TraceML with ``traceml_exporter_example.exporter:make_exporter``; the
rules of TraceML's export contract it keeps are listed in ``_contract.py``.

Under ``context.export_dir`` (``<session_root>/aggregator/export``), or under
``$TRACEML_TENSORBOARD_LOGDIR/<run name>`` when that variable is set::

    tensorboard/rank_<N>/events.out.tfevents.<s>.<host>.<pid>.<ns>   one file per open()
    tensorboard/unranked/...                                          records with no rank
    export_summary.json                                               written by close()

Each record is one ``Event``: ``step`` is the record's step (``seq`` for the snapshot
streams), ``wall_time`` its time in seconds, and its ``Summary`` holds one float32 scalar
per measure (``_tensorboard_scalars``) and the record itself as JSON in a string tensor
of the ``traceml_record`` plugin, which TensorBoard does not display; ``read_records``
in the tests turns it back into exactly what was written. Events are encoded and
written on the export worker's thread (``_tensorboard_events``): no writer thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

import orjson

from ._contract import ExporterContext, ExportRecord, record_data
from ._files import write_atomically
from ._lifecycle import Lifecycle
from ._tensorboard_events import StringTensors, event, file_version_event
from ._tensorboard_scalars import ScalarValues, rank_of, step_of, wall_time_of

__all__ = [
    "LOGDIR_ENV",
    "RECORD_PLUGIN",
    "RECORD_TAG",
    "SUMMARY_FILE",
    "ExampleExporter",
    "make_exporter",
    "rank_folder",
]

LOGDIR_ENV: Final = "TRACEML_TENSORBOARD_LOGDIR"
"""A TensorBoard log dir shared by runs: events go to ``<it>/<run name>/rank_<N>``."""
RECORD_TAG: Final = "traceml/record/"
"""The tag prefix of the record copies: ``traceml/record/<stream>``."""
RECORD_PLUGIN: Final = "traceml_record"
"""The plugin name of the record copies; no TensorBoard plugin shows it."""
SUMMARY_FILE: Final = "export_summary.json"
"""Written by ``close()`` in ``export_dir``: records per stream, dropped batches, files."""
BUFFER_BYTES: Final = 1 << 20
"""Write buffer per file: ``flush()`` empties it."""

_HOST = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "host"


def rank_folder(rank: int | None) -> str:
    """The folder (a TensorBoard run) of a rank's events."""
    return "unranked" if rank is None else f"rank_{rank}"


def encode_record(data: dict[str, Any]) -> bytes:
    """The record as JSON: orjson, or ASCII ``json`` for what orjson refuses (a lone
    surrogate, an integer beyond 64 bits), which Python's ``json`` reads back the same."""
    try:
        return orjson.dumps(data)
    except orjson.JSONEncodeError:
        return json.dumps(data, separators=(",", ":")).encode()


@dataclass
class _EventFile:
    path: Path
    handle: IO[bytes]


class ExampleExporter(Lifecycle):
    """Write every record as one TensorBoard event of its rank's file, synchronously."""

    def __init__(self, root: Path, summary_dir: Path, *, include_hostname: bool = False) -> None:
        # Settings only: open() creates folders and files, on the export worker's thread.
        self.root = root
        self.summary_dir = summary_dir
        self.include_hostname = include_hostname
        self._files: dict[int | None, _EventFile] | None = None  # None unless open
        self._written: dict[str, int] = {}
        self._scalars = ScalarValues()
        self._records = StringTensors(RECORD_PLUGIN)
        self._opened_ns = 0
        self._count = 0

    def open(self) -> None:
        """Create the log folder; each rank's file is created with its first record."""
        with self._opening():
            self.root.mkdir(parents=True, exist_ok=True)
            self._files = {}
            self._opened_ns = time.time_ns()
            self._count = 0

    def write(self, records: Sequence[ExportRecord]) -> None:
        """Encode each record as an event and append it to its rank's file, in order."""
        with self._running("write"):
            files = self._held(self._files)
            scalar_values = self._scalars.values
            record_value = self._records.value
            opened = self._opened_ns
            for record in records:
                stream = record.STREAM
                data = record_data(record, self.include_hostname)
                values = scalar_values(stream, data)
                order = b"%d %d" % (opened, self._count)
                values.append(record_value(RECORD_TAG + stream, (order, encode_record(data))))
                rank = rank_of(data)
                file = files.get(rank) or self._new_file(rank)
                file.handle.write(event(wall_time_of(data), step_of(stream, data), values))
                self._count += 1
                self._written[stream] = self._written.get(stream, 0) + 1

    def flush(self) -> None:
        """Hand every event written so far to the operating system (it survives a crash of
        this process; ``close()`` fsyncs it for a crash of the machine)."""
        with self._running("flush"):
            for file in self._held(self._files).values():
                file.handle.flush()

    def close(self, *, dropped_batches: int = 0) -> None:
        """Flush, fsync and close every file, then write ``SUMMARY_FILE``."""
        with self._closing():
            files = self._held(self._files)
            for file in files.values():
                file.handle.flush()
                os.fsync(file.handle.fileno())
                file.handle.close()
            summary = {
                "written_records": self._written,
                "dropped_batches": dropped_batches,
                "files": sorted(str(file.path) for file in files.values()),
            }
            write_atomically(self.summary_dir / SUMMARY_FILE, orjson.dumps(summary))

    def _new_file(self, rank: int | None) -> _EventFile:
        """A new event file in the rank's folder, named as TensorBoard names its own; it is
        created exclusively, so an old file is never appended to."""
        folder = self.root / rank_folder(rank)
        folder.mkdir(exist_ok=True)
        now = time.time_ns()
        path = folder / f"events.out.tfevents.{now // 10**9}.{_HOST}.{os.getpid()}.{now}"
        handle = open(path, "xb", buffering=BUFFER_BYTES)  # noqa: SIM115
        file = self._held(self._files)[rank] = _EventFile(path, handle)
        handle.write(file_version_event(now / 1e9))
        return file

    def _release(self) -> None:
        """Close every file, raising nothing: after a failure TraceML calls nothing more."""
        files, self._files = self._files or {}, None
        for file in files.values():
            with contextlib.suppress(OSError):  # the sink is already broken
                file.handle.close()


def make_exporter(context: ExporterContext) -> ExampleExporter:
    """The factory TraceML calls as ``factory(context)`` on the aggregator's main thread."""
    logdir = os.environ.get(LOGDIR_ENV, "").strip()
    root = (
        Path(logdir) / context.session_root.name if logdir else context.export_dir / "tensorboard"
    )
    return ExampleExporter(root, context.export_dir, include_hostname=context.include_hostname)
