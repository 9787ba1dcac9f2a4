"""TensorBoard's event-file format, encoded by hand: ``Event`` protobufs in TFRecord framing.

TensorBoard's and tensorboardX's writers hand every event to a background thread, which
TraceML's contract forbids; this module encodes on the caller's thread and needs neither
package. A record on disk is::

    uint64 length (little-endian) | uint32 masked CRC-32C of the length |
    the Event's bytes             | uint32 masked CRC-32C of the bytes

so a reader skips a torn last record (its length or checksum does not match) and keeps
every record before it. Only the fields this exporter writes are encoded:
``Event.wall_time`` (1, double), ``Event.step`` (2, int64), ``Event.file_version``
(3, string), ``Event.summary`` (5); ``Summary.Value.tag`` (1), ``simple_value`` (2, float32),
``tensor`` (8, a ``DT_STRING`` ``TensorProto``) and ``metadata`` (9, its plugin name).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence

import google_crc32c

from ._protobuf import length_delimited, varint

__all__ = [
    "FILE_VERSION",
    "StringTensors",
    "event",
    "file_version_event",
    "float32",
    "frame",
    "scalar_prefix",
]

FILE_VERSION = b"brain.Event:2"
"""The first event of every file: TensorBoard reads restarts from SessionLog, not steps."""

_DT_STRING = 7
_MASK_DELTA = 0xA282EAD8
_FLOAT32_MAX = 3.4028234663852886e38
_pack_length = struct.Struct("<Q").pack
_pack_u32 = struct.Struct("<I").pack
_pack_f32 = struct.Struct("<f").pack
_pack_f64 = struct.Struct("<d").pack
_crc = google_crc32c.value


def _masked_crc(data: bytes) -> int:
    crc: int = _crc(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def _field(key: int, payload: bytes) -> bytes:
    """A length-delimited field: its key byte, the length, the bytes."""
    return length_delimited(bytes((key,)), payload)


def _utf8(text: str) -> bytes:
    """A protobuf ``string`` must be UTF-8: a lone surrogate goes as its ``\\udXXX`` escape."""
    return text.encode("utf-8", "backslashreplace")


def frame(data: bytes) -> bytes:
    """One TFRecord: the length, its masked CRC-32C, the data, the data's masked CRC-32C."""
    length = _pack_length(len(data))
    return length + _pack_u32(_masked_crc(length)) + data + _pack_u32(_masked_crc(data))


def float32(value: float) -> bytes:
    """``value`` as the float32 TensorBoard stores; beyond float32's range it is ±inf."""
    try:
        return _pack_f32(value)
    except OverflowError:  # finite but beyond float32, or an int beyond any float
        return _pack_f32(math.copysign(math.inf, value))


def scalar_prefix(tag: str) -> bytes:
    """Everything of a ``Summary.value`` entry holding one ``simple_value`` but the 4 value bytes.

    The entry's length does not depend on the value, so the prefix of a tag is reused.
    """
    tag_field = _field(0x0A, _utf8(tag))
    return b"\x0a" + varint(len(tag_field) + 5) + tag_field + b"\x15"


class StringTensors:
    """``Summary.value`` entries holding a 1-D ``DT_STRING`` tensor, tagged for a plugin.

    The tag, plugin and shape are encoded once per tag and string count.
    """

    def __init__(self, plugin: str) -> None:
        self._metadata = _field(0x4A, _field(0x0A, _field(0x0A, _utf8(plugin))))
        self._parts: dict[tuple[str, int], tuple[bytes, bytes]] = {}

    def value(self, tag: str, strings: Sequence[bytes]) -> bytes:
        """The entry of ``strings`` under ``tag``."""
        parts = self._parts.get((tag, len(strings)))
        if parts is None:
            shape = _field(0x12, _field(0x12, b"\x08" + varint(len(strings))))
            parts = (_field(0x0A, _utf8(tag)), b"\x08" + varint(_DT_STRING) + shape)
            self._parts[(tag, len(strings))] = parts
        tag_field, head = parts
        tensor = head + b"".join([b"\x42" + varint(len(s)) + s for s in strings])
        return _field(0x0A, tag_field + b"\x42" + varint(len(tensor)) + tensor + self._metadata)


def event(wall_time: float, step: int, values: Iterable[bytes]) -> bytes:
    """One framed ``Event`` with a ``Summary`` of the encoded ``values`` entries."""
    summary = b"".join(values)
    data = b"\x09" + _pack_f64(wall_time) + b"\x10" + varint(step) + _field(0x2A, summary)
    return frame(data)


def file_version_event(wall_time: float) -> bytes:
    """The framed first event of a file: ``file_version = "brain.Event:2"``."""
    return frame(b"\x09" + _pack_f64(wall_time) + _field(0x1A, FILE_VERSION))
