"""This sink's part of the shared tests: how to read back what the exporter wrote.

``tests/test_conformance.py`` gives ``read_export`` to the SDK's conformance suite
(it turns the data-fidelity checks on). The suite's default ``break_sink`` and
``broken_context`` break this sink (its files live under ``export_dir``), so this
module defines neither.
"""

from __future__ import annotations

import json
from typing import Any

from traceml_exporter_sdk import ExporterContext

SKIP_CHECKS = {
    "special_floats": (
        "JSON has no NaN or infinity: orjson writes them as null, so a measured NaN "
        "reads back as unavailable (this sink's documented JSON Lines format)"
    ),
    "permanent_fault_marked": (
        "a file sink has no fault waiting cannot fix (a full disk, a folder moved away or "
        "a file another process holds may all pass), so there is no break_sink_permanently "
        "to check the permanent marker with"
    ),
}
"""The suite's checks this sink cannot pass or run, with the reason (declared limitations)."""


def read_export(context: ExporterContext) -> dict[str, list[dict[str, Any]]]:
    """Each selected stream's ``<STREAM>.jsonl``, one dict per line, in file order.

    A stream with no file reads as ``[]``. Lines are split on ``\\n`` only (a ``str``
    may hold U+2028, which ``str.splitlines`` splits on) and decoded by ``json``,
    which keeps big integers exact and reads ``\\udXXX`` escapes back.
    """
    out: dict[str, list[dict[str, Any]]] = {}
    for stream in context.streams:
        path = context.export_dir / f"{stream}.jsonl"
        data = path.read_bytes() if path.exists() else b""
        out[stream] = [json.loads(line) for line in data.split(b"\n") if line]
    return out
