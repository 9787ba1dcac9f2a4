"""msgspec types of a StepTimeSampler body, for ``_build.msgspec_lines`` (imports msgspec).

No ``from __future__ import annotations``: msgspec reads these annotations at run
time. Defaults mirror the careful path: a missing key reads as None. The structs
are decoded, read once and dropped, and never hold a cycle, so the cyclic GC
need not track them (``gc=False``).
"""

from typing import Annotated, Any, TypedDict

import msgspec


class Stats(msgspec.Struct, gc=False):
    """One ``events[name][device]`` entry, fields in the contract's order."""

    is_gpu: bool | None = None
    duration_ms: float | None = None
    cpu_ms: float | None = None
    gpu_ms: float | None = None
    n_calls: int | None = None


class StatsMap(TypedDict):
    """``Stats`` decoded straight into the dict the record keeps, every key required (a
    map lacking one is left to the careful decoding). Its keys come in the text's order."""

    is_gpu: bool | None
    duration_ms: float | None
    cpu_ms: float | None
    gpu_ms: float | None
    n_calls: int | None


class Row(msgspec.Struct, gc=False):
    seq: int | None = None
    timestamp: int | None = None
    step: int | None = None
    events: dict[str, dict[str, Stats]] = msgspec.field(default_factory=dict)


class Body(msgspec.Struct, gc=False):
    tables: dict[str, list[Row]] = msgspec.field(default_factory=dict)


class Envelope(msgspec.Struct, gc=False):
    meta: dict[str, Any]
    body: msgspec.Raw


class StepEnvelope(msgspec.Struct, gc=False):
    """An envelope read as StepTimeSampler's in one pass; its sampler is checked after."""

    meta: dict[str, Any]
    body: Body


decode_line = msgspec.json.Decoder(list[Envelope] | Envelope).decode
decode_step_line = msgspec.json.Decoder(list[StepEnvelope] | StepEnvelope).decode
decode_step_body = msgspec.json.Decoder(Body).decode
decode_body = msgspec.json.Decoder(dict[str, Any]).decode
to_builtins = msgspec.to_builtins
DeviceMap = Annotated[dict[str, StatsMap], msgspec.Meta(min_length=1)]
"""``events[name]``; a name with no device is refused, left to the careful decoding,
which drops it as TraceML does, so a map decoded here needs no second look."""

decode_events_map = msgspec.json.Decoder(dict[str, DeviceMap]).decode
"""``events_json`` text -> the events map in dicts, in one C pass (``_bridge.sqlite_rows``)."""
