"""ExampleExporter: one JSON Lines file per selected stream.

Select it in TraceML with ``traceml_exporter_example.exporter:make_exporter``; the
rules of TraceML's export contract it keeps are listed in ``_contract.py``.

Under ``context.export_dir`` (``<session_root>/aggregator/export``)::

    <STREAM>.jsonl        one line per record: record.to_dict() as JSON, then \\n
    export_summary.json   written by close(): lines per stream and dropped_batches

``hostname`` is left out unless ``context.include_hostname``. Files are opened for
appending (a second run into the same folder adds to them, after cutting off a last
line a killed run left unfinished) and fsynced by ``flush()`` and ``close()``: what
TraceML counts as delivered is on disk.

Any text is written, and read back by Python's ``json`` as the same ``str``. orjson
writes each line (NUL as ``\\u0000``, U+2028 as itself: split lines on ``\\n`` only).
A line orjson refuses, one with an integer beyond 64 bits or a ``str`` holding a
lone surrogate (which is not UTF-8), is written by ``json`` as ASCII, the surrogate
as its ``\\udXXX`` escape.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import orjson

from ._contract import ExporterContext, ExportRecord, permanent, record_data
from ._files import export_folder, open_append, write_atomically
from ._lifecycle import Lifecycle

__all__ = ["SUMMARY_FILE", "ExampleExporter", "encode_line", "make_exporter"]

SUMMARY_FILE = "export_summary.json"
"""Written by ``close()``: ``{"written_records": {stream: n}, "dropped_batches": n}``."""


def encode_line(data: dict[str, Any]) -> bytes:
    """One JSON line, ``\\n`` included."""
    try:
        return orjson.dumps(data, option=orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError:  # an integer beyond 64 bits, or a lone surrogate
        return json.dumps(data, separators=(",", ":")).encode() + b"\n"


class ExampleExporter(Lifecycle):
    """Append every record as one line of ``<export_dir>/<record.STREAM>.jsonl``."""

    def __init__(
        self, export_dir: Path, streams: Sequence[str], *, include_hostname: bool = False
    ) -> None:
        # Settings only: open() opens the files, on the export worker's thread.
        self.export_dir = export_dir
        self.streams = tuple(streams)
        self.include_hostname = include_hostname
        self._files: dict[str, IO[bytes]] | None = None  # None unless open
        self._written: dict[str, int] = {}

    def open(self) -> None:
        """Create the export folder and open one file per selected stream."""
        with self._opening():
            self._files = {}
            export_folder(self.export_dir)  # no planted link, no other user's folder
            for stream in self.streams:
                self._file(stream)

    def write(self, records: Sequence[ExportRecord]) -> None:
        """Append each record to its stream's file, in the order given."""
        with self._running("write"):
            for record in records:
                data = record_data(record, self.include_hostname)
                self._file(record.STREAM).write(encode_line(data))
                self._written[record.STREAM] += 1

    def flush(self) -> None:
        """Make every line written so far durable: flush and fsync each file."""
        with self._running("flush"):
            self._sync()

    def close(self, *, dropped_batches: int = 0) -> None:
        """Flush, fsync and close every file, then write ``SUMMARY_FILE``."""
        with self._closing():
            for handle in self._sync():
                handle.close()
            summary = {"written_records": self._written, "dropped_batches": dropped_batches}
            write_atomically(self.export_dir / SUMMARY_FILE, orjson.dumps(summary))

    def _file(self, stream: str) -> IO[bytes]:
        """The open file of ``stream``; a stream seen for the first time gets one."""
        files = self._held(self._files)
        handle = files.get(stream)
        if handle is None:
            if not stream.isidentifier():  # a STREAM is a plain name; never let it be a path
                raise permanent(ValueError(f"record STREAM {stream!r} is not a plain name"))
            path = self.export_dir / f"{stream}.jsonl"
            _cut_torn_line(path)
            handle = files[stream] = open_append(path)
            self._written.setdefault(stream, 0)
        return handle

    def _sync(self) -> list[IO[bytes]]:
        """Flush and fsync every file; return them."""
        handles = list(self._held(self._files).values())
        for handle in handles:
            handle.flush()
            os.fsync(handle.fileno())
        return handles

    def _release(self) -> None:
        """Close every file, raising nothing: after a failure TraceML calls nothing more."""
        files, self._files = self._files or {}, None
        for handle in files.values():
            with contextlib.suppress(OSError):  # the sink is already broken
                handle.close()


def _cut_torn_line(path: Path) -> None:
    """Drop a last line a kill or a full disk cut off (no trailing ``\\n``), so the next
    line appended does not continue it; every flushed line ends with ``\\n`` and stays."""
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        handle = os.fdopen(fd, "r+b")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        end = position = handle.seek(0, os.SEEK_END)
        keep = 0
        while position > 0:
            start = max(0, position - 65536)
            handle.seek(start)
            newline = handle.read(position - start).rfind(b"\n")
            if newline >= 0:
                keep = start + newline + 1
                break
            position = start
        if keep < end:
            handle.truncate(keep)


def make_exporter(context: ExporterContext) -> ExampleExporter:
    """The factory TraceML calls as ``factory(context)`` on the aggregator's main thread."""
    return ExampleExporter(
        context.export_dir, context.streams, include_hostname=context.include_hostname
    )
