"""The one set of value coercions and the events-map normalisation every mapping path uses.

The payload paths (``_build.projection``, the careful reference; ``_build.fast_builders``;
the msgspec ``_build.msgspec_lines``) and the SQLite rows (``_bridge.sqlite_rows``:
backfill of both layouts and the follower) coerce each field with these functions, so a
value means the same whichever way it came. They mirror traceml-ai 0.5.0's writers (``wire-format.md``):

- ``opt_int``/``opt_str``: identity and best-effort fields, anything that raises is None;
- ``to_int``/``to_float``/``to_str``/``bool01``/``unix_ns``: strict row fields;
- ``identity_fields``: the seven identity fields of an envelope, plain values taken as they are;
- ``normalised_events``: the events map, a fast reading of plain dicts that falls back to
  ``careful_events`` (TraceML's ``_normalize_events``) for anything else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..records import EventStats

__all__ = [
    "FloatNCalls",
    "as_str",
    "bool01",
    "careful_events",
    "drop_deviceless",
    "fast_float",
    "identity_fields",
    "normalised_events",
    "opt_int",
    "opt_str",
    "rows_of",
    "to_float",
    "to_int",
    "to_str",
    "unix_ns",
]

Meta = Mapping[Any, Any]


def opt_int(value: Any) -> int | None:
    if type(value) is int or value is None:
        return value
    try:
        return int(value)
    except Exception:
        return None


def opt_str(value: Any) -> str | None:
    if type(value) is str or value is None:
        return value
    try:
        return as_str(value)
    except Exception:
        return None


def as_str(value: Any) -> str:
    """``str(value)`` as a plain ``str``: ``__str__`` may return a str subclass.

    Raises whatever ``str(value)`` raises, as TraceML's ``str()`` does.
    """
    out = str(value)
    return out if type(out) is str else str.__str__(out)


def to_int(value: Any) -> int | None:
    if type(value) is int:
        return value
    return int(value) if isinstance(value, int) else None


def to_float(value: Any) -> float | None:
    if type(value) is float:
        return value
    return float(value) if isinstance(value, (int, float)) else None


def to_str(value: Any) -> str | None:
    if type(value) is str:
        return value
    return as_str(value) if isinstance(value, str) else None


def bool01(value: Any) -> int | None:
    """A payload's True/False as the writer stores it, 1/0; anything else None."""
    if value is True:
        return 1
    if value is False:
        return 0
    return None


def unix_ns(value: Any) -> int | None:
    """Integer Unix nanoseconds; float seconds from older ranks give None."""
    if type(value) is int:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    return None


def rows_of(tables: Mapping[Any, Any]) -> list[dict[Any, Any]]:
    """Every dict row of every list in ``tables`` (TraceML ignores table names)."""
    if not isinstance(tables, dict):
        return []
    return [
        row
        for rows in tables.values()
        if isinstance(rows, list)
        for row in rows
        if isinstance(row, dict)
    ]


def careful_events(raw: Any) -> dict[str, dict[str, EventStats]]:
    """Keep ``events[name][device]`` stats exactly as TraceML's ``_normalize_events``."""
    out: dict[str, dict[str, EventStats]] = {}
    if not isinstance(raw, dict):
        return out
    for event_name, by_device in raw.items():
        if not isinstance(by_device, dict):
            continue
        event_key = event_name if type(event_name) is str else as_str(event_name)
        devices: dict[str, EventStats] = {}
        out[event_key] = devices
        for device, stats in by_device.items():
            if not isinstance(stats, dict):
                continue
            get = stats.get
            is_gpu = get("is_gpu")
            devices[device if type(device) is str else as_str(device)] = {
                "is_gpu": is_gpu if is_gpu is True or is_gpu is False else None,
                "duration_ms": to_float(get("duration_ms")),
                "cpu_ms": to_float(get("cpu_ms")),
                "gpu_ms": to_float(get("gpu_ms")),
                "n_calls": to_int(get("n_calls")),
            }
        if not devices:
            del out[event_key]
    return out


def identity_fields(
    meta: Meta,
) -> tuple[int | None, int | None, int | None, int | None, int | None, int | None, str | None]:
    """``(rank, global_rank, local_rank, world_size, local_world_size, node_rank, hostname)``.

    Each best effort (``opt_int``/``opt_str``); ``rank`` is the legacy alias, the coerced
    ``global_rank`` when there is one. Plain int/str/None values are taken as they are.
    """
    get = meta.get
    global_rank = get("global_rank")
    if not (type(global_rank) is int or global_rank is None):
        global_rank = opt_int(global_rank)
    if global_rank is None:
        rank = get("rank")
        if not (type(rank) is int or rank is None):
            rank = opt_int(rank)
    else:
        rank = global_rank
    local_rank = get("local_rank")
    world_size = get("world_size")
    local_world_size = get("local_world_size")
    node_rank = get("node_rank")
    hostname = get("hostname")
    return (
        rank,
        global_rank,
        local_rank if type(local_rank) is int or local_rank is None else opt_int(local_rank),
        world_size if type(world_size) is int or world_size is None else opt_int(world_size),
        local_world_size
        if type(local_world_size) is int or local_world_size is None
        else opt_int(local_world_size),
        node_rank if type(node_rank) is int or node_rank is None else opt_int(node_rank),
        hostname if type(hostname) is str or hostname is None else opt_str(hostname),
    )


def fast_float(value: Any) -> float | None:
    """``to_float`` with ints and None handled before the call (the usual odd values)."""
    if type(value) is int:
        return float(value)
    if value is None:
        return None
    return to_float(value)


class FloatNCalls(Exception):  # noqa: N818 - a signal, not an error
    """Raised by ``normalised_events(raw, strict=True)`` at an ``n_calls`` that is a float."""


def normalised_events(raw: Any, strict: bool = False) -> dict[str, dict[str, EventStats]]:
    """``careful_events`` for a map of plain dicts with str keys; else the careful one.

    With str keys no two names (or devices) collide, so an event is kept exactly when
    it has a device, in the careful path's order. A stats dict with all five keys is
    read by index. ``strict`` raises FloatNCalls at a float ``n_calls``: a
    JSON decoder may have turned a long integer into one (see ``_bridge.sqlite_rows``).
    """
    if type(raw) is not dict:
        return careful_events(raw)
    out: dict[str, dict[str, EventStats]] = {}
    for name, by_device in raw.items():
        if type(name) is not str or type(by_device) is not dict:
            return careful_events(raw)
        devices: dict[str, EventStats] = {}
        for device, stats in by_device.items():
            if type(device) is not str or type(stats) is not dict:
                return careful_events(raw)
            try:
                is_gpu = stats["is_gpu"]
                duration = stats["duration_ms"]
                cpu = stats["cpu_ms"]
                gpu = stats["gpu_ms"]
                n_calls = stats["n_calls"]
            except KeyError:
                get = stats.get
                is_gpu = get("is_gpu")
                duration = get("duration_ms")
                cpu = get("cpu_ms")
                gpu = get("gpu_ms")
                n_calls = get("n_calls")
            if not (type(n_calls) is int or n_calls is None):
                if strict and type(n_calls) is float:
                    raise FloatNCalls
                n_calls = to_int(n_calls)
            devices[device] = {
                "is_gpu": is_gpu if is_gpu is True or is_gpu is False else None,
                "duration_ms": duration
                if type(duration) is float or duration is None
                else fast_float(duration),
                "cpu_ms": cpu if type(cpu) is float or cpu is None else fast_float(cpu),
                "gpu_ms": gpu if type(gpu) is float or gpu is None else fast_float(gpu),
                "n_calls": n_calls,
            }
        if devices:
            out[name] = devices
    return out


def drop_deviceless(value: dict[str, Any]) -> dict[str, Any]:
    """A decoded events map without the names left with no device, as TraceML drops them
    (for maps msgspec built, whose devices are already normalised)."""
    if {} in value.values():
        return {name: devices for name, devices in value.items() if devices}
    return value
