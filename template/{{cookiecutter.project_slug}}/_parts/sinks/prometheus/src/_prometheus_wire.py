"""Prometheus remote write 1.0: ``WriteRequest`` protobuf encoded by hand, snappy-compressed.

The five messages of ``prompb`` (``WriteRequest``, ``TimeSeries``, ``Label``,
``Sample``, ``MetricMetadata``) are small and stable, and no maintained package
ships them, so their bytes are written here; the tests check them against the
real Prometheus and VictoriaMetrics servers. A series' labels never change, so
they are encoded once (:func:`encode_labels`) and only the sample is new per
request. Label names are sorted, as the protocol requires.

Field numbers (``prompb/types.proto``, ``prompb/remote.proto``)::

    WriteRequest   { repeated TimeSeries timeseries = 1; repeated MetricMetadata metadata = 3; }
    TimeSeries     { repeated Label labels = 1; repeated Sample samples = 2; }
    Label          { string name = 1; string value = 2; }
    Sample         { double value = 1; int64 timestamp = 2; }   // milliseconds
    MetricMetadata { MetricType type = 1; string metric_family_name = 2; string help = 4; }
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Mapping

import cramjam

from ._protobuf import length_delimited, varint

__all__ = [
    "CONTENT_ENCODING",
    "CONTENT_TYPE",
    "METRIC_TYPES",
    "PROTOCOL_HEADERS",
    "STALE_NAN",
    "compress",
    "encode_labels",
    "encode_metadata",
    "encode_request",
    "label_text",
]

CONTENT_TYPE = "application/x-protobuf"
CONTENT_ENCODING = "snappy"
PROTOCOL_HEADERS = {
    "Content-Type": CONTENT_TYPE,
    "Content-Encoding": CONTENT_ENCODING,
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}
METRIC_TYPES = {"counter": 1, "gauge": 2, "histogram": 3, "summary": 5, "info": 6}
"""``MetricMetadata.MetricType`` numbers."""
MAX_LABEL_CHARS = 256
"""A longer label value keeps its first 200 characters and a digest (see :func:`label_text`)."""

_pack_double = struct.Struct("<d").pack
_LABELS: dict[tuple[str, str], bytes] = {}
"""Encoded ``Label`` fields by (name, value): a run repeats a few values in many series."""
_MAX_CACHED = 65536
_NAN = _pack_double(math.nan)
"""Prometheus reserves one NaN bit pattern for staleness markers: every other NaN goes as this one."""
_STALE = struct.pack("<Q", 0x7FF0000000000002)
STALE_NAN: float = struct.unpack("<d", _STALE)[0]
"""The staleness marker: a series given this value ends (Prometheus' own scrape sends it)."""


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return length_delimited(varint(number << 3 | 2), payload)


def label_text(text: str) -> str:
    """The label value for ``text``: valid UTF-8, at most ``MAX_LABEL_CHARS`` characters.

    A lone surrogate becomes its ``\\udXXX`` escape (a label must be UTF-8); a
    longer text keeps its first 200 characters, then ``...`` and 16 hex digits of
    its SHA-256, so different long texts stay different series.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= MAX_LABEL_CHARS:
        return text
    import hashlib  # noqa: PLC0415 - only for the rare long label

    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    return f"{text[:200]}...{digest}"


def encode_labels(labels: Mapping[str, str]) -> bytes:
    """The ``labels`` fields of a TimeSeries, sorted by name; empty values are left out."""
    out = bytearray()
    cache = _LABELS
    for name in sorted(labels):
        value = labels[name]
        if value:
            encoded = cache.get((name, value))
            if encoded is None:
                label = _field(1, name.encode("utf-8")) + _field(2, value.encode("utf-8"))
                encoded = _field(1, label)
                if len(cache) < _MAX_CACHED:
                    cache[name, value] = encoded
            out += encoded
    return bytes(out)


def encode_metadata(families: Iterable[tuple[str, str, str]]) -> bytes:
    """``metadata`` fields for ``(family name, type, help)``; the type a key of METRIC_TYPES."""
    out = bytearray()
    for name, kind, text in families:
        message = (
            b"\x08"
            + varint(METRIC_TYPES[kind])
            + _field(2, name.encode())
            + _field(4, text.encode())
        )
        out += _field(3, message)
    return bytes(out)


def encode_request(
    series: Iterable[tuple[bytes, float]], timestamp_ms: int, metadata: bytes = b""
) -> bytes:
    """A WriteRequest: one sample at ``timestamp_ms`` per ``(encoded labels, value)``."""
    stamp = b"\x10" + varint(timestamp_ms)
    out = bytearray()
    for labels, value in series:
        packed = _pack_double(value)
        if value != value and packed != _STALE:  # noqa: PLR0124 - the NaN test
            packed = _NAN
        sample = b"\x09" + packed + stamp
        body = labels + b"\x12" + varint(len(sample)) + sample
        out += b"\x0a"
        out += varint(len(body))
        out += body
    out += metadata
    return bytes(out)


def compress(body: bytes) -> bytes:
    """Snappy block format (not framed), as remote write requires."""
    return bytes(cramjam.snappy.compress_raw(body))
