"""Protobuf's wire format, the little the hand-written encoders need: varints and fields.

The otlp, prometheus and tensorboard sinks encode their few message types by hand, a
generated message class costing several times more per record; this is what they share.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ONE_BYTE", "length_delimited", "varint"]

ONE_BYTE: Final = [bytes((n,)) for n in range(0x80)]
"""The varint of each value below 128: one byte, looked up rather than built."""


def varint(value: int) -> bytes:
    """A varint; a negative int64 as its 10-byte two's complement, as protobuf writes it."""
    if 0 <= value < 0x80:
        return ONE_BYTE[value]
    if 0 < value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_delimited(key: bytes, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): its key bytes, the length, the payload."""
    return key + varint(len(payload)) + payload
