"""Read recorded telemetry payloads back from a file, for ``traceml-exporter replay``.

Two formats:

- ``jsonl``: JSON Lines, one payload (an envelope dict or a list of them) per line;
  blank lines are passed over.
- ``msgpack``: a stream of MessagePack messages as TraceML's TCP transport sends
  them: each message is a 4-byte big-endian length, then that many bytes of
  MessagePack (one payload). Decoded with ``msgspec`` (the SDK's ``msgpack`` extra).

A line or frame that cannot be decoded is *malformed*: it is counted, its
line (or frame) number and the reason are kept, and reading goes on. Only a
truncated msgpack frame ends the stream early, because nothing after it can be
found again; that is recorded as malformed too. JSON integers stay exact however
large: a line with one that orjson would turn into a float is decoded by ``json``. Decoded values are handed on
as they are: whatever is not an envelope is for ``records_from_payload`` to
count as a skipped unit, as TraceML's aggregator would.

The file is opened once (``open_payloads``), so a pipe, ``/dev/stdin`` or a
FIFO is read correctly: the bytes that format detection looks at are handed
on to the reader, not read a second time.
"""

from __future__ import annotations

import importlib
import io
import json
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any, Literal

import orjson

from .._build.msgspec_lines import LineMapper, line_mapper
from ..worker import NO_PAYLOAD

__all__ = [
    "FORMATS",
    "MISSING_MSGSPEC",
    "Malformed",
    "PayloadFormat",
    "PayloadReader",
    "detect_format",
    "format_of",
    "frame",
    "open_payloads",
]

PayloadFormat = Literal["jsonl", "msgpack"]
FORMATS: tuple[PayloadFormat, ...] = ("jsonl", "msgpack")

MISSING_MSGSPEC = (
    "reading msgpack payloads needs msgspec; install it with "
    "pip install 'traceml-exporter-sdk[msgpack]'"
)

MAX_KEPT = 1000
"""Malformed lines whose number and reason are kept (all are counted)."""

_HEADER = struct.Struct("!I")
# orjson turns an integer past u64 (20+ digits) or below i64 (minus and 19+ digits) into
# a float. A line with such a digit run is decoded by ``json`` instead, which keeps it exact.
# The check maps every digit to "0" and finds the run: C speed (a regex is 10x slower).
_DIGITS = bytes(48 if 48 <= i <= 57 else 45 if i == 45 else 32 for i in range(256))
_RUN_20 = b"0" * 20
_NEG_RUN_19 = b"-" + b"0" * 19


def _has_big_int(line: bytes) -> bool:
    shape = line.translate(_DIGITS)
    return _RUN_20 in shape or _NEG_RUN_19 in shape


_CHUNK = 1 << 20
"""Read buffer: a payload line is often longer than the default 8 KiB, and reading a
line that crosses the buffer's end copies it piecewise (a tenth of a replay's CPU)."""


@dataclass(frozen=True, slots=True)
class Malformed:
    """One line or frame that could not be decoded (numbers count from 1)."""

    number: int
    reason: str
    offset: int = 0


def frame(message: bytes) -> bytes:
    """One transport frame: the 4-byte big-endian length, then the message."""
    return _HEADER.pack(len(message)) + message


def detect_format(path: Path) -> PayloadFormat:
    """The format of a regular file (see ``format_of``); a pipe's bytes would be lost here."""
    with path.open("rb") as fh:
        return format_of(fh.read(_HEAD))


_HEAD = 5


def format_of(head: bytes) -> PayloadFormat:
    """``jsonl`` when ``head`` (a file's first 5 bytes) starts like JSON text, ``msgpack``
    when it starts like a frame.

    A frame starts with a length whose high byte is 0 for any message under
    16 MiB, so its first byte is NUL, which JSON text never starts with. An
    empty file is ``jsonl`` (with no payloads).
    """
    stripped = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    if not head or stripped[:1] in (b"{", b"[") or not stripped:
        return "jsonl"
    if len(head) >= 5 and head[0] == 0:
        return "msgpack"
    return "jsonl"


def _open(path: Path) -> io.BufferedReader:
    """``path`` for reading, through a ``_CHUNK`` buffer."""
    return io.BufferedReader(io.FileIO(path, "r"), buffer_size=_CHUNK)


def open_payloads(path: Path, fmt: PayloadFormat | None = None) -> tuple[PayloadFormat, IO[bytes]]:
    """Open ``path`` once and detect its format (unless ``fmt`` is given) without losing
    the bytes detection reads, also from a pipe or FIFO. The caller closes the stream.

    Raises:
        OSError: the file cannot be opened or read.
    """
    fh = _open(path)
    try:
        if fmt is not None:
            return fmt, fh
        head = fh.read(_HEAD)
        if fh.seekable():
            fh.seek(0)
            return format_of(head), fh
        return format_of(head), io.BufferedReader(_Prefixed(head, fh), buffer_size=_CHUNK)
    except BaseException:
        fh.close()
        raise


class _Prefixed(io.RawIOBase):
    """A non-seekable stream with the bytes already read from it put back in front."""

    def __init__(self, head: bytes, rest: io.BufferedReader) -> None:
        self._head = memoryview(head)
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read1(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._rest.close()
        super().close()


@dataclass
class PayloadReader:
    """Iterate the payloads of one file; ``malformed`` and ``position`` update as it reads.

    ``source``, when given, is read instead of opening ``path`` (``open_payloads``'
    stream, for a pipe); it is closed at the end.

    Raises on iteration:
        OSError: the file cannot be read.
        ImportError: the msgpack format without msgspec installed (message: MISSING_MSGSPEC).
    """

    path: Path
    format: PayloadFormat
    malformed_count: int = 0
    malformed: list[Malformed] = field(default_factory=list)
    payloads: int = 0
    position: int = 0
    source: IO[bytes] | None = None

    def _open(self) -> IO[bytes]:
        source, self.source = self.source, None
        return source if source is not None else _open(self.path)

    def __iter__(self) -> Iterator[Any]:
        if self.format == "msgpack":
            return self._msgpack()
        return self._jsonl()

    def _bad(self, number: int, reason: str, offset: int) -> None:
        self.malformed_count += 1
        if len(self.malformed) < MAX_KEPT:
            self.malformed.append(Malformed(number, reason, offset))

    def _jsonl(self) -> Iterator[Any]:
        for number, offset, line in self._jsonl_lines():
            payload = self.decode_line(number, offset, line)
            if payload is not NO_PAYLOAD:
                yield payload

    def deferred(self) -> Iterator[Callable[[], Any]]:
        """JSON Lines only: one ``decode()`` callable per non-blank line, for
        ``ExportWorker.submit_deferred``, so the worker thread does the decoding.

        ``payloads`` and ``malformed`` then grow as the worker decodes; read them
        after ``shutdown``.
        """
        if self.format != "jsonl":
            raise ValueError(f"deferred decoding reads JSON Lines, not {self.format}")
        decode = self.decode_line
        for number, offset, line in self._jsonl_lines():
            yield partial(decode, number, offset, line)

    def deferred_records(self, streams: tuple[str, ...]) -> Iterator[Callable[[], Any]]:
        """``deferred``, but each producer returns the line's records (a RecordBatch)
        when msgspec reads it exactly as the careful path would (``_build.msgspec_lines``), and
        otherwise the decoded payload, as ``deferred`` does. Without msgspec: ``deferred``.
        """
        mapper = line_mapper(streams) if self.format == "jsonl" else None
        if mapper is None:
            yield from self.deferred()
            return
        produce = self._map_line
        for number, offset, line in self._jsonl_lines():
            yield partial(produce, mapper, number, offset, line)

    def _map_line(self, mapper: LineMapper, number: int, offset: int, line: bytes) -> Any:
        try:
            batch = mapper(line)
        except Exception:
            return self.decode_line(number, offset, line)
        self.payloads += 1
        return batch

    def _jsonl_lines(self) -> Iterator[tuple[int, int, bytes]]:
        with self._open() as fh:
            for number, line in enumerate(fh, start=1):
                offset = self.position
                self.position += len(line)
                if not line.isspace():  # strip() would copy the whole line
                    yield number, offset, line

    def decode_line(self, number: int, offset: int, line: bytes) -> Any:
        """One JSON Lines payload, or ``NO_PAYLOAD`` after counting it as malformed."""
        try:
            payload = json.loads(line) if _has_big_int(line) else orjson.loads(line)
        except (ValueError, RecursionError) as exc:
            payload = _stdlib_json(line, exc)
            if isinstance(payload, _Bad):
                self._bad(number, payload.reason, offset)
                return NO_PAYLOAD
        self.payloads += 1
        return payload

    def _msgpack(self) -> Iterator[Any]:
        decode = _msgpack_decoder()
        with self._open() as fh:
            buffer = b""
            start = 0
            number = 0
            eof = False
            while True:
                if len(buffer) - start < _HEADER.size and not eof:
                    buffer, start, eof = _refill(fh, buffer, start, _HEADER.size)
                available = len(buffer) - start
                if available == 0:
                    return
                number += 1
                frame_offset = self.position
                if available < _HEADER.size:
                    self._bad(
                        number, f"truncated frame header ({available} of 4 bytes)", frame_offset
                    )
                    self.position += available
                    return
                (length,) = _HEADER.unpack_from(buffer, start)
                if len(buffer) - start - _HEADER.size < length and not eof:
                    buffer, start, eof = _refill(fh, buffer, start, _HEADER.size + length)
                body_available = len(buffer) - start - _HEADER.size
                if body_available < length:
                    self._bad(
                        number,
                        f"truncated frame: the header says {length} bytes, {body_available} "
                        "remain; nothing after it can be read",
                        frame_offset,
                    )
                    self.position += len(buffer) - start
                    return
                body = buffer[start + _HEADER.size : start + _HEADER.size + length]
                start += _HEADER.size + length
                self.position += _HEADER.size + length
                try:
                    payload = decode(body)
                except Exception as exc:
                    self._bad(number, f"not valid MessagePack: {_one_line(exc)}", frame_offset)
                    continue
                self.payloads += 1
                yield payload


def _refill(fh: IO[bytes], buffer: bytes, start: int, need: int) -> tuple[bytes, int, bool]:
    """Keep the unread tail and read until ``need`` bytes are there or the file ends."""
    parts = [buffer[start:]]
    have = len(parts[0])
    eof = False
    while have < need:
        chunk = fh.read(max(_CHUNK, need - have))
        if not chunk:
            eof = True
            break
        parts.append(chunk)
        have += len(chunk)
    return b"".join(parts), 0, eof


@dataclass(frozen=True, slots=True)
class _Bad:
    reason: str


def _stdlib_json(line: bytes, error: Exception) -> Any:
    """Retry with ``json`` (orjson rejects NaN and Infinity); else _Bad."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return _Bad(f"not valid JSON: {_one_line(error)}")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _msgpack_decoder() -> Callable[[bytes], Any]:
    try:
        msgpack = importlib.import_module("msgspec.msgpack")
    except ImportError:
        raise ImportError(MISSING_MSGSPEC) from None
    decoder: Callable[[bytes], Any] = msgpack.Decoder().decode
    return decoder
