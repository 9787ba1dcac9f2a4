"""The built-in ``jsonl`` exporter: one JSON Lines file per selected stream that gets records.

Each record is one line, ``orjson.dumps(record.to_dict())``, with ``hostname``
dropped unless ``include_hostname``. A stream's file is made when the stream
gets its first record, so a stream that got none has no file (a re-run adds no
empty parts). Each file ends with one closing line::

    {"stream": "step_time", "closing": true, "written_records": 1200, "dropped_batches": 0}

which a reader tells from a record line by its ``closing`` key (no record has
that field, and the closing line has no ``schema_version``). ``written_records``
counts the record lines of that file; ``dropped_batches`` is the worker-wide
count, the same in every file (with no file, only the worker's report holds it).
A file without a closing line was not closed normally (the exporter failed, or
the run stopped before ``close``); its last line may be cut off, and is then
the only line without a trailing ``\\n``.

Lines are UTF-8 and end with ``\\n``. U+2028, U+2029 and U+0085, which some
line readers (``str.splitlines``, JavaScript) take for line breaks, are written
as ``\\u`` escapes, so every reader sees one record per line; the decoded
values are unchanged. Integers beyond 64 bits, which orjson rejects, and
strings holding lone surrogates are written through ``json`` instead; a
non-finite float is ``null`` either way. An integer is written exactly however
long, also past Python's int-to-text limit (4300 digits by default), which
``json`` alone refuses.
"""

from __future__ import annotations

import contextlib
import json
import math
import operator
import os
import secrets
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import orjson

from ._export import run_files
from .context import ExporterContext
from .records import ExportRecord

__all__ = ["CLOSING_KEY", "JsonlExporter", "encode_line", "make_exporter"]

CLOSING_KEY = "closing"
_OPTIONS = orjson.OPT_APPEND_NEWLINE
_BUFFER_SIZE = 1 << 18
_stream_of = operator.attrgetter("STREAM")
_LINE_BREAKS = (
    (b"\xe2\x80\xa8", b"\\u2028"),
    (b"\xe2\x80\xa9", b"\\u2029"),
    (b"\xc2\x85", b"\\u0085"),
)


def encode_line(data: dict[str, Any]) -> bytes:
    """One JSON line as the exporter writes it, ``\\n`` included."""
    try:
        line = orjson.dumps(data, option=_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError: an int beyond 64 bits, a lone surrogate
        line = _fallback_line(data)
    return line if line.isascii() else _escape_line_breaks(line)


def _fallback_line(data: dict[str, Any]) -> bytes:
    """What orjson would write, for the values it refuses (the rare path)."""
    try:
        text = _dumps(_finite(data))
    except ValueError:  # an int past sys.get_int_max_str_digits(): write its digits ourselves
        longs: list[int] = []
        token = f"\x00long-int-{secrets.token_hex(8)}-"
        text = _dumps(_finite(data, longs, token))
        for index, value in enumerate(longs):
            text = text.replace(json.dumps(f"{token}{index}"), _digits(value), 1)
    # A lone surrogate cannot be UTF-8; backslashreplace writes it as the JSON escape \udXXX.
    return text.encode("utf-8", "backslashreplace") + b"\n"


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _finite(value: Any, longs: list[int] | None = None, token: str = "") -> Any:
    """``value`` with every NaN or infinity replaced by None, as orjson writes them.

    With ``longs``, each int longer than Python will print becomes the string
    ``token + index`` and is appended to ``longs``.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if longs is not None and isinstance(value, int) and value.bit_length() > _SAFE_BITS:
        longs.append(value)
        return f"{token}{len(longs) - 1}"
    if isinstance(value, dict):
        return {key: _finite(item, longs, token) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item, longs, token) for item in value]
    return value


_SAFE_BITS = 3000  # under 1000 decimal digits: always printable
_CHUNK_DIGITS = 1000


def _digits(value: int) -> str:
    """The decimal text of ``value``, in chunks each under the int-to-text limit."""
    if value < 0:
        return "-" + _digits(-value)
    chunks: list[int] = []
    base = 10**_CHUNK_DIGITS
    while value >= base:
        value, chunk = divmod(value, base)
        chunks.append(chunk)
    return str(value) + "".join(str(chunk).zfill(_CHUNK_DIGITS) for chunk in reversed(chunks))


def _escape_line_breaks(blob: bytes) -> bytes:
    # These byte sequences only ever encode the three characters (UTF-8 is
    # self-synchronising), and JSON puts them only inside strings.
    for raw, escaped in _LINE_BREAKS:
        if raw in blob:
            blob = blob.replace(raw, escaped)
    return blob


class JsonlExporter:
    """Write ``<export_dir>/<stream>.jsonl`` for every selected stream that gets a record.

    ``open`` makes ``export_dir``, through no link under ``session_root`` (a run
    folder other users may write: ``_export.run_files``), the run owner's when made by root; a
    stream's file is made exclusively, never through a link, with the run folder's
    read and write permission bits, by the
    ``write`` that brings its first record, so an earlier export in the same
    folder is never overwritten or appended to, and a stream with no record
    has no file. When an earlier export is there (a follower started again
    after a crash, a second replay into one run), this export writes part
    ``N``, ``<stream>.N.jsonl``, ``N`` one past the highest part any selected
    stream has: read ``<stream>.jsonl`` and then the parts in order of ``N``
    (numbers may skip a stream that got no record in an export). As nothing
    is appended, no line continues one that a crash or full disk cut off.
    A ``write`` that raises (a full disk, a value no encoder takes) may have
    put part of its batch in the files, the last line possibly cut off; the
    worker uses the exporter no more, so a failing ``write`` or ``flush``
    closes every file before it raises. ``flush`` and ``close`` hand the bytes
    to the operating system; neither calls ``fsync``, so shutdown does not
    wait on the disk (a slow or network file system could otherwise push
    ``close`` past the worker's timeout).
    """

    def __init__(self, context: ExporterContext) -> None:
        self._dir = context.export_dir
        self._root = context.session_root
        self._folder: run_files.Folder | None = None
        self._streams = context.streams
        self._selected = frozenset(context.streams)
        self._include_hostname = context.include_hostname
        self._files: dict[str, IO[bytes]] = {}
        self._writers: dict[str, Callable[[bytes], object]] = {}
        self._written: dict[str, int] = {}
        self._part = 0
        self._is_open = False

    def paths(self, part: int | None = None) -> dict[str, Path]:
        """Stream -> the file this exporter writes it to (after ``open``: the part it chose).

        A file is there only once its stream got a record.
        """
        if part is None:
            part = self._part
        suffix = f".{part}.jsonl" if part else ".jsonl"
        return {stream: self._dir / f"{stream}{suffix}" for stream in self._streams}

    def _next_part(self) -> int:
        """One past the highest part any selected stream has in the folder; 0 with none.

        Every part of this export comes after every earlier export's, also for
        a stream to which the earlier export wrote nothing.
        """
        assert self._folder is not None
        highest = -1
        for name in os.listdir(self._folder.fd):
            stream, _, rest = name.partition(".")
            if stream not in self._selected:
                continue
            if rest == "jsonl":
                highest = max(highest, 0)
                continue
            number, _, extension = rest.partition(".")
            if extension == "jsonl" and number.isascii() and number.isdigit():
                highest = max(highest, int(number))
        return highest + 1

    def open(self) -> None:
        self._close_folder()
        try:
            parts = self._dir.relative_to(self._root).parts
            base = self._root
        except ValueError:
            parts, base = (), self._dir
        base.mkdir(parents=True, exist_ok=True)
        self._folder = run_files.open_folder(base, parts, create=True)
        try:
            self._part = self._next_part()
        except BaseException:
            self._close_folder()
            raise
        self._is_open = True

    def _close_folder(self) -> None:
        folder, self._folder = self._folder, None
        if folder is not None:
            folder.close()

    def _start_files(self, kinds: set[str]) -> None:
        """Make the file of each stream in ``kinds`` that has none yet; refuse unselected ones.

        Raises:
            ValueError: a stream is not selected (nothing is made).
            RuntimeError: the exporter is not open, or closed.
        """
        if not kinds <= self._selected:
            unselected = ", ".join(sorted(map(repr, kinds - self._selected)))
            raise ValueError(
                f"records of stream {unselected} are not selected; "
                f"this exporter writes {', '.join(self._streams)}"
            )
        if not self._is_open:
            raise RuntimeError("write on a jsonl exporter that is not open, or closed")
        paths = self.paths()
        folder = self._folder
        assert folder is not None
        for stream in sorted(kinds - self._files.keys()):
            fd = folder.create(paths[stream].name, folder.mode & 0o644)
            try:
                handle = open(fd, "wb", buffering=_BUFFER_SIZE)  # noqa: SIM115 - see close()
            except BaseException:
                os.close(fd)
                raise
            self._files[stream] = handle
            self._writers[stream] = handle.write
            self._written[stream] = 0

    def write(self, records: Sequence[ExportRecord]) -> None:
        try:
            self._write(records)
        except BaseException:
            self._release()
            raise

    def _write(self, records: Sequence[ExportRecord]) -> None:
        # The hot path. Each line goes straight into its file's buffer, so no
        # batch-sized list or blob is built (large joins cost fresh pages).
        # Streams are checked first: a record of an unselected stream writes nothing.
        if not isinstance(records, list):
            records = list(records)
        streams = list(map(_stream_of, records))
        kinds = set(streams)
        writers = self._writers
        if not kinds <= writers.keys():
            self._start_files(kinds)
        drop_hostname = not self._include_hostname
        dumps = orjson.dumps
        options = _OPTIONS
        for record, stream in zip(records, streams, strict=True):
            data = record.to_dict()
            if drop_hostname:
                data.pop("hostname", None)
            try:
                line = dumps(data, option=options)
            except TypeError:  # an int beyond 64 bits, a lone surrogate
                line = _fallback_line(data)
            if not line.isascii():
                line = _escape_line_breaks(line)
            writers[stream](line)
        written = self._written
        if len(kinds) == 1:
            written[streams[0]] += len(streams)
        else:
            for stream in kinds:
                written[stream] += streams.count(stream)

    def flush(self) -> None:
        try:
            for handle in self._files.values():
                handle.flush()
        except BaseException:
            self._release()
            raise

    def close(self, *, dropped_batches: int = 0) -> None:
        try:
            for stream, handle in self._files.items():
                closing = {
                    "stream": stream,
                    CLOSING_KEY: True,
                    "written_records": self._written[stream],
                    "dropped_batches": dropped_batches,
                }
                handle.write(encode_line(closing))
                handle.flush()
        finally:
            self._is_open = False
            self._close_files()

    def _release(self) -> None:
        """Close every file after a failed call: the worker will not call ``close``."""
        self._is_open = False
        with contextlib.suppress(OSError):  # the failed call's own error is the one to raise
            self._close_files()

    def _close_files(self) -> None:
        """Close every file, even when closing one raises; re-raise the first error."""
        files, self._files = self._files, {}
        self._writers = {}
        self._close_folder()
        error: BaseException | None = None
        for handle in files.values():
            try:
                handle.close()
            except BaseException as exc:
                error = error or exc
        if error is not None:
            raise error


def make_exporter(context: ExporterContext) -> JsonlExporter:
    """Factory for ``traceml_exporter_sdk.jsonl:make_exporter`` (same as the ``jsonl`` setting)."""
    return JsonlExporter(context)
