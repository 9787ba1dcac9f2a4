"""Which TensorBoard scalars a record becomes: tags, step, wall time and rank folder.

Works on ``record.to_dict()`` only. A value that is None is left out (never written as 0);
a flag (``is_gpu``) and an identifier (``gpu_device_index``, ``pid``) are not measures and
are left out too. Nanosecond times are never values: they become ``wall_time`` (a double).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any, Final

from ._measures import EVENT_MEASURES, MEASURES
from ._tensorboard_events import float32, scalar_prefix

__all__ = [
    "EVENT_MEASURES",
    "GPU_FIELDS",
    "MEMORY_FIELDS",
    "SNAPSHOT_FIELDS",
    "ScalarValues",
    "rank_of",
    "step_of",
    "wall_time_of",
]

MEMORY_FIELDS: Final = MEASURES["step_memory"]
"""step_memory's measures: ``step_memory/<device>/<field>``."""
GPU_FIELDS: Final = MEASURES["system_gpu"]
"""system_gpu's measures: ``system_gpu/<gpu_idx>/<field>``."""
SNAPSHOT_FIELDS: Final = {stream: MEASURES[stream] for stream in ("system", "process")}
"""The measures of system and process records: ``<stream>/<field>``."""

STEPPED_STREAMS: Final = frozenset({"step_time", "step_memory"})
"""Streams whose ``step`` is the training step; the others are snapshots counted by ``seq``."""

_pack_f32 = struct.Struct("<f").pack


class ScalarValues:
    """Encodes a record's measures as ``Summary.value`` entries, one float32 scalar each.

    The bytes before the value depend only on the tag, so they are made once per tag.
    """

    def __init__(self) -> None:
        self._prefixes: dict[tuple[Any, ...], tuple[tuple[str, bytes], ...]] = {}

    def _of(
        self, key: tuple[Any, ...], base: str, names: tuple[str, ...]
    ) -> tuple[tuple[str, bytes], ...]:
        pairs = tuple((name, scalar_prefix(f"{base}/{name}")) for name in names)
        self._prefixes[key] = pairs
        return pairs

    def values(self, stream: str, data: Mapping[str, Any]) -> list[bytes]:
        """The entries of every measure ``data`` holds, None (and bool) values left out."""
        try:
            return self._values(stream, data, _pack_f32)
        except OverflowError:  # a value beyond float32's range: stored as ±inf
            return self._values(stream, data, float32)

    def _values(
        self, stream: str, data: Mapping[str, Any], pack: Callable[[Any], bytes]
    ) -> list[bytes]:
        out: list[bytes] = []
        append = out.append
        prefixes = self._prefixes
        if stream == "step_time":
            for event, devices in (data.get("events") or {}).items():
                for device, stats in devices.items():
                    pairs = prefixes.get((event, device)) or self._of(
                        (event, device), f"step_time/{event}/{device}", EVENT_MEASURES
                    )
                    for name, prefix in pairs:
                        value = stats.get(name)
                        if value is not None and value is not True and value is not False:
                            append(prefix + pack(value))
            return out
        if stream == "step_memory":
            key: tuple[Any, ...] = (stream, data.get("device"))
            names: tuple[str, ...] = MEMORY_FIELDS
        elif stream == "system_gpu":
            key, names = (stream, data.get("gpu_idx")), GPU_FIELDS
        else:
            key, names = (stream,), SNAPSHOT_FIELDS.get(stream, ())
        pairs = prefixes.get(key) or self._of(key, "/".join(map(str, key)), names)
        for name, prefix in pairs:
            value = data.get(name)
            if value is not None and value is not True and value is not False:
                append(prefix + pack(value))
        return out


def step_of(stream: str, data: Mapping[str, Any]) -> int:
    """The event's step: the training step (step_time, step_memory) or ``seq``, else 0,
    clamped to int64."""
    step = data.get("step") if stream in STEPPED_STREAMS else None
    if step is None:
        step = data.get("seq")
    if not isinstance(step, int):
        return 0
    return max(-(1 << 63), min(step, (1 << 63) - 1))  # protobuf's int64


def wall_time_of(data: Mapping[str, Any]) -> float:
    """Seconds since the epoch: the source's ``timestamp_unix_ns``, else the observed stamp."""
    stamp = data.get("timestamp_unix_ns")
    if not isinstance(stamp, int):
        stamp = data.get("observed_timestamp_unix_ns")
    return stamp / 1e9 if isinstance(stamp, int) else 0.0


def rank_of(data: Mapping[str, Any]) -> int | None:
    """The rank folder a record goes to: its ``rank``, else ``global_rank``, else None."""
    rank = data.get("rank")
    if rank is None:
        rank = data.get("global_rank")
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None
