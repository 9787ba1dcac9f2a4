"""Which MLflow metrics and tags a record becomes, by MLflow's rules for keys and values.

Works on ``record.to_dict()`` only. A metric is ``{key, value, timestamp, step}``: the
key names the measure (``step_time/<event>/<device>/<measure>``, ...), ``step`` is the
record's step (``seq`` for the snapshot streams), ``timestamp`` its time in
milliseconds (MLflow refuses a negative one: it becomes 0). None is left out, never sent as 0; flags and identifiers are not metrics.
runtime_environment records become tags of their rank's run; stdout_stderr is not
exported (MLflow has no place for log lines).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

from ._measures import EVENT_MEASURES, MEASURES

__all__ = [
    "MAX_KEY",
    "MAX_TAG_VALUE",
    "NOT_EXPORTED",
    "TAG_PREFIX",
    "metric_key",
    "metrics",
    "rank_of",
    "runtime_tags",
    "timestamp_ms",
    "wire_value",
]

MAX_KEY: Final = 250
"""MLflow's longest metric or tag key."""
MAX_TAG_VALUE: Final = 8000
"""MLflow's longest tag value; a longer one is cut."""
TAG_PREFIX: Final = "traceml.runtime."
"""runtime_environment fields as tags: ``traceml.runtime.<field>``."""
NOT_EXPORTED: Final = frozenset({"stdout_stderr"})
"""Streams this sink does not send (counted in the receipt and a tag of the session run)."""

FIELDS: Final = MEASURES
"""The measures of the other metric streams, under ``<stream>/`` (step_memory: ``/<device>``,
system_gpu: ``/<gpu_idx>``)."""
STEPPED: Final = frozenset({"step_time", "step_memory"})
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_/.\- :]")
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _segments(key: str) -> str:
    return "/".join(part if part not in ("", ".", "..") else "_" for part in key.split("/"))


@functools.lru_cache(maxsize=65536)
def metric_key(key: str) -> str:
    """``key`` as MLflow accepts it: ASCII letters, digits and ``_/.- :`` (others become
    ``_``), no empty, ``.`` or ``..`` path segment (MLflow refuses a name that would
    resolve to another as a path; such a segment becomes ``_``), 250 characters."""
    key = _segments(_NOT_ALLOWED.sub("_", key))
    if len(key) > MAX_KEY:
        cut = _segments(key[:MAX_KEY])  # a cut that ends in "/" gains a "_"
        key = cut if len(cut) <= MAX_KEY else _segments(key[: MAX_KEY - 1])
    return key


def wire_value(value: float) -> float | str:
    """A metric value as MLflow's JSON takes it: non-finite values as protobuf's names."""
    try:
        number = float(value)
    except OverflowError:  # an integer beyond any float
        number = math.copysign(math.inf, value)
    if math.isfinite(number):
        return number
    return "NaN" if math.isnan(number) else ("Infinity" if number > 0 else "-Infinity")


def _int64(value: int) -> int:
    return max(_INT64[0], min(value, _INT64[1]))


def _measures(stream: str, data: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    if stream == "step_time":
        for event, devices in (data.get("events") or {}).items():
            for device, stats in devices.items():
                for name in EVENT_MEASURES:
                    yield f"step_time/{event}/{device}/{name}", stats.get(name)
        return
    base = stream
    if stream == "step_memory":
        base = f"{stream}/{data.get('device')}"
    elif stream == "system_gpu":
        base = f"{stream}/{data.get('gpu_idx')}"
    for name in FIELDS.get(stream, ()):
        yield f"{base}/{name}", data.get(name)


def timestamp_ms(data: Mapping[str, Any]) -> int:
    """A record's time in ms: ``timestamp_unix_ns``, else the observed stamp; never below 0."""
    stamp = data.get("timestamp_unix_ns")
    if not isinstance(stamp, int):
        stamp = data.get("observed_timestamp_unix_ns")
    return max(0, _int64(stamp // 1_000_000)) if isinstance(stamp, int) else 0


def metrics(stream: str, data: Mapping[str, Any], *, under: str = "") -> list[dict[str, Any]]:
    """The record's metrics as ``log-batch`` entries; empty for a stream without any.
    ``under`` goes after the stream's name (``process/<rank>/...`` in the session run)."""
    timestamp = timestamp_ms(data)
    step = data.get("step") if stream in STEPPED else None
    if step is None:
        step = data.get("seq")
    step = _int64(step) if isinstance(step, int) else 0
    cut = len(stream) + 1
    return [
        {
            "key": metric_key(f"{stream}/{under}/{key[cut:]}" if under else key),
            "value": wire_value(value),
            "timestamp": timestamp,
            "step": step,
        }
        for key, value in _measures(stream, data)
        if value is not None and value is not True and value is not False
    ]


def runtime_tags(data: Mapping[str, Any]) -> dict[str, str]:
    """A runtime_environment record's fields as tags (None left out, long values cut)."""
    skip = {"stream", "schema_version", "observed_timestamp_unix_ns", "timestamp_unix_ns"}
    return {
        metric_key(TAG_PREFIX + name): _text(str(value))[:MAX_TAG_VALUE]
        for name, value in data.items()
        if name not in skip and value is not None
    }


def _text(value: str) -> str:
    """``value`` as valid UTF-8 text: a lone surrogate as its ``\\udXXX`` escape."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def rank_of(data: Mapping[str, Any]) -> int | None:
    """The rank whose run a record goes to: ``rank``, else ``global_rank``, else None."""
    rank = data.get("rank")
    if rank is None:
        rank = data.get("global_rank")
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None
