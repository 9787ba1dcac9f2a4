"""Stream names and the ``export_streams`` setting that selects them."""

from __future__ import annotations

from collections.abc import Collection

__all__ = [
    "ALL_STREAMS",
    "DEFAULT_EXPORT_STREAMS",
    "EXPORT_STREAM_NAMES",
    "parse_export_streams",
    "validate_stream_filter",
]

ALL_STREAMS: tuple[str, ...] = (
    "step_time",
    "step_memory",
    "system",
    "system_gpu",
    "process",
    "runtime_environment",
    "stdout_stderr",
)
"""Every record STREAM, in the contract's record-table order."""

_SETTING_STREAMS: dict[str, frozenset[str]] = {
    "step_time": frozenset({"step_time"}),
    "step_memory": frozenset({"step_memory"}),
    "process": frozenset({"process"}),
    "system": frozenset({"system", "system_gpu"}),
    "all": frozenset(ALL_STREAMS),
}

EXPORT_STREAM_NAMES: tuple[str, ...] = tuple(_SETTING_STREAMS)
"""The five names the ``export_streams`` setting accepts."""

DEFAULT_EXPORT_STREAMS = "step_time"


def parse_export_streams(value: str | None = None) -> tuple[str, ...]:
    """Parse an ``export_streams`` setting into STREAM names, in record-table order.

    The setting is a comma-separated list of ``step_time``, ``step_memory``,
    ``process``, ``system`` (its SystemRecord and SystemGpuRecord) and ``all``;
    spaces around names are allowed and ``None`` means the default ``step_time``.

    Raises:
        ValueError: a name is unknown, or the value names no stream; the
            message lists the supported names.
    """
    if value is None:
        value = DEFAULT_EXPORT_STREAMS
    if not isinstance(value, str):
        raise ValueError(
            f"export_streams must be a string of comma-separated names, got "
            f"{type(value).__name__}; {_supported()}"
        )
    names = [part.strip() for part in value.split(",")]
    unknown = [name for name in names if name and name not in _SETTING_STREAMS]
    if unknown:
        raise ValueError(
            f"export_streams {value!r}: unknown name {', '.join(map(repr, unknown))}; "
            f"{_supported()}"
        )
    selected: set[str] = set()
    for name in names:
        if name:
            selected |= _SETTING_STREAMS[name]
    if not selected:
        raise ValueError(f"export_streams {value!r} names no stream; {_supported()}")
    return tuple(stream for stream in ALL_STREAMS if stream in selected)


def validate_stream_filter(streams: Collection[str] | None) -> frozenset[str] | None:
    """Validate the ``streams`` argument of ``records_from_payload``.

    ``None`` keeps every stream. Otherwise a non-empty collection of STREAM
    names (not a single string) is required.

    Raises:
        ValueError: a string, an empty collection, an unknown STREAM name, or an
            object that cannot be iterated; never anything else.
    """
    global _last_checked  # one pair, replaced whole: consistent across threads
    if streams is None:
        return None
    last_streams, last_selected = _last_checked
    if streams is last_streams and type(streams) in (tuple, frozenset):
        return last_selected  # the worker passes its own tuple with every payload
    if isinstance(streams, (str, bytes)):
        raise ValueError(
            f"streams must be a collection of STREAM names, not a string ({streams!r}); "
            f"for example ['step_time']. Valid names: {', '.join(ALL_STREAMS)}"
        )
    try:
        names = list(streams)
    except Exception as exc:
        raise ValueError(
            f"streams must be a collection of STREAM names, got {type(streams).__name__} "
            f"({_failure(exc)}); valid names: {', '.join(ALL_STREAMS)}"
        ) from None
    if not names:
        raise ValueError(
            f"streams is empty; pass None for every stream or some of: {', '.join(ALL_STREAMS)}"
        )
    # Plain str copies only: a name's own __hash__, __eq__ or __repr__ never runs.
    plain = [str.__str__(name) if type(name) is str or _is_str(name) else name for name in names]
    unknown = sorted(
        {repr(name) if type(name) is str else f"a {type(name).__name__}" for name in plain}
        - {repr(name) for name in ALL_STREAMS}
    )
    if unknown:
        raise ValueError(
            f"streams has unknown name {', '.join(unknown)}; valid names: {', '.join(ALL_STREAMS)}"
        )
    selected = frozenset(plain)
    _last_checked = (streams, selected)
    return selected


_last_checked: tuple[object, frozenset[str] | None] = (None, None)
"""The last ``streams`` checked and its result, compared by identity (never hashed)."""


def _is_str(value: object) -> bool:
    """A str subclass, judged by the type alone (``isinstance`` may ask ``__class__``)."""
    return issubclass(type(value), str)


def _failure(exc: Exception) -> str:
    """``iterating it raised TypeError``: the exception's type only (its text may not print)."""
    return f"iterating it raised {type(exc).__name__}"


def _supported() -> str:
    return f"supported names: {', '.join(EXPORT_STREAM_NAMES)} (comma separated)"
