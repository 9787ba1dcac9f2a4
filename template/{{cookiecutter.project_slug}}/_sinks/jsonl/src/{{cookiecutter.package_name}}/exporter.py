"""{{ cookiecutter.exporter_class }}: one JSON Lines file per selected stream.

Select it in TraceML with ``{{ cookiecutter.package_name }}.exporter:make_exporter``.

Layout under ``context.export_dir`` (``<session_root>/aggregator/export``)::

    <stream>.jsonl        one line per record: orjson.dumps(record.to_dict())
    export_summary.json   written by close(): lines per stream and dropped_batches

Each line keeps the ``stream`` and ``schema_version`` keys of ``to_dict()``;
``hostname`` is dropped unless ``context.include_hostname``. Files are opened
for appending, so a second run into the same folder adds to them. ``flush``
and ``close`` fsync every file: what TraceML counts as delivered is on disk.

The rules of TraceML's export contract this class keeps:

* the factory only stores settings; every file is opened in ``open()``, on the
  export worker's thread, because the factory runs on the aggregator's main thread;
* records are told apart by ``record.STREAM``, never by their class;
* ``close(*, dropped_batches=0)`` flushes what was written and releases every file;
* a failure is raised, not hidden: the worker then stops using the exporter
  (it never calls ``close``), so the failing method first closes every file,
  and TraceML records the loss in ``finalization_warning.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

import orjson

from ._contract import ExporterContext, ExportRecord

__all__ = [
    "SUMMARY_FILE",
    "{{ cookiecutter.exporter_class }}",
    "encode_line",
    "make_exporter",
    "read_export",
]

SUMMARY_FILE = "export_summary.json"
"""Written by ``close()``: ``{"written_records": {stream: n}, "dropped_batches": n}``."""

_OPTIONS = orjson.OPT_APPEND_NEWLINE


def encode_line(data: dict[str, Any]) -> bytes:
    """One JSON line; integers beyond 64 bits, which orjson refuses, go through ``json``."""
    try:
        return orjson.dumps(data, option=_OPTIONS)
    except orjson.JSONEncodeError:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        return text.encode() + b"\n"


class {{ cookiecutter.exporter_class }}:
    """Write every record as one line of ``<export_dir>/<record.STREAM>.jsonl``."""

    def __init__(
        self, export_dir: Path, streams: Sequence[str], *, include_hostname: bool = False
    ) -> None:
        # No I/O here: the factory runs on another thread than open/write/flush/close.
        self.export_dir = export_dir
        self.streams = tuple(streams)
        self.include_hostname = include_hostname
        self._files: dict[str, IO[bytes]] = {}
        self._written: dict[str, int] = {}
        self._state = "new"

    def path_for(self, stream: str) -> Path:
        """The file that records of ``stream`` go to."""
        if not stream.isidentifier():  # a STREAM is a plain name; never let it become a path
            raise ValueError(f"record STREAM {stream!r} is not a plain name")
        return self.export_dir / f"{stream}.jsonl"

    def open(self) -> None:
        """Create the export folder and open one file per selected stream."""
        if self._state != "new":
            raise RuntimeError(f"open() called on a {self._state} exporter")
        self._state = "open"
        try:
            self.export_dir.mkdir(parents=True, exist_ok=True)
            for stream in self.streams:
                self._open_stream(stream)
        except BaseException:
            self._abort()
            raise

    def write(self, records: Sequence[ExportRecord]) -> None:
        """Append each record to its stream's file, in the order given."""
        self._check_open("write")
        try:
            self._write(records)
        except BaseException:
            self._abort()
            raise

    def flush(self) -> None:
        """Make every line written so far durable (flush and fsync each file)."""
        self._check_open("flush")
        try:
            self._sync()
        except BaseException:
            self._abort()
            raise

    def close(self, *, dropped_batches: int = 0) -> None:
        """Flush, fsync and close every file; record the counts in ``SUMMARY_FILE``.

        ``dropped_batches`` is the number of payload batches TraceML's worker
        never handed to ``write``: one count for the whole worker.
        """
        self._check_open("close")
        try:
            self._sync()
            summary = {"written_records": dict(self._written), "dropped_batches": dropped_batches}
            _write_atomically(self.export_dir / SUMMARY_FILE, orjson.dumps(summary))
            for handle in self._files.values():
                handle.close()
        except BaseException:
            self._abort()
            raise
        self._files = {}
        self._state = "closed"

    def _write(self, records: Sequence[ExportRecord]) -> None:
        lines: dict[str, list[bytes]] = {}
        keep_hostname = self.include_hostname
        for record in records:
            data = record.to_dict()
            if not keep_hostname:
                data.pop("hostname", None)
            stream = record.STREAM
            chunk = lines.get(stream)
            if chunk is None:
                chunk = lines[stream] = []
            chunk.append(encode_line(data))
        for stream, chunk in lines.items():
            handle = self._files.get(stream) or self._open_stream(stream)
            handle.write(b"".join(chunk))
            self._written[stream] += len(chunk)

    def _open_stream(self, stream: str) -> IO[bytes]:
        handle = open(self.path_for(stream), "ab")  # noqa: SIM115 - closed in close()
        self._files[stream] = handle
        self._written.setdefault(stream, 0)
        return handle

    def _check_open(self, method: str) -> None:
        if self._state != "open":
            hint = "; call open() first" if self._state == "new" else ""
            raise RuntimeError(f"{method}() called on a {self._state} exporter{hint}")

    def _sync(self) -> None:
        for handle in self._files.values():
            handle.flush()
            os.fsync(handle.fileno())

    def _abort(self) -> None:
        """Release every file after a failure: TraceML never calls the exporter again."""
        self._state = "failed"
        files, self._files = self._files, {}
        for handle in files.values():
            with contextlib.suppress(OSError):  # the sink is already broken
                handle.close()


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def make_exporter(context: ExporterContext) -> {{ cookiecutter.exporter_class }}:
    """The factory TraceML calls as ``factory(context)`` on the aggregator's main thread."""
    return {{ cookiecutter.exporter_class }}(
        context.export_dir, context.streams, include_hostname=context.include_hostname
    )


def read_export(
    export_dir: Path, streams: Iterable[str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Read back what the exporter wrote: stream -> its records as dicts, in file order.

    ``streams`` defaults to every ``*.jsonl`` file in ``export_dir``; a
    selected stream with no file reads as an empty list. Lines are split on
    ``\\n`` only (a record's text may hold U+2028, which ``str.splitlines``
    would split on) and decoded with ``json`` so big integers stay exact.
    """
    if streams is None:
        streams = sorted(path.stem for path in export_dir.glob("*.jsonl"))
    out: dict[str, list[dict[str, Any]]] = {}
    for stream in streams:
        path = export_dir / f"{stream}.jsonl"
        data = path.read_bytes() if path.exists() else b""
        out[stream] = [json.loads(line) for line in data.split(b"\n") if line]
    return out
