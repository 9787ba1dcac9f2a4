"""msgspec types of a StepTimeSampler body, for ``fastdecode`` (imports msgspec).

No ``from __future__ import annotations``: msgspec reads these annotations at run
time. Defaults mirror the careful path: a missing key reads as None.
"""

from typing import Any

import msgspec


class Stats(msgspec.Struct):
    """One ``events[name][device]`` entry, fields in the contract's order."""

    is_gpu: bool | None = None
    duration_ms: float | None = None
    cpu_ms: float | None = None
    gpu_ms: float | None = None
    n_calls: int | None = None


class Row(msgspec.Struct):
    seq: int | None = None
    timestamp: int | None = None
    step: int | None = None
    events: dict[str, dict[str, Stats]] = msgspec.field(default_factory=dict)


class Body(msgspec.Struct):
    tables: dict[str, list[Row]] = msgspec.field(default_factory=dict)


class Envelope(msgspec.Struct):
    meta: dict[str, Any]
    body: msgspec.Raw


decode_line = msgspec.json.Decoder(list[Envelope] | Envelope).decode
decode_step_body = msgspec.json.Decoder(Body).decode
decode_body = msgspec.json.Decoder(dict[str, Any]).decode
to_builtins = msgspec.to_builtins
decode_events = msgspec.json.Decoder(dict[str, dict[str, Stats]]).decode
