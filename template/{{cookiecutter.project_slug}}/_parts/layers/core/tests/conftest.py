"""Shared fixtures: a context as TraceML builds it, and records of several streams.

The records are the SDK's classes; tests copy them with the SDK's
``as_foreign`` into look-alike classes that are not the SDK's (as TraceML's own
classes are not), to prove the exporter only relies on ``STREAM``,
``COLUMNS``, the fields and ``to_dict()``. The sink's own fixtures (a server, a
peer) are in ``sink_support.py``, loaded here as a plugin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from traceml_exporter_sdk import (
    ExporterContext,
    ExportRecord,
    ProcessRecord,
    StdoutStderrRecord,
    StepTimeRecord,
    SystemGpuRecord,
    SystemRecord,
)

pytest_plugins = ["sink_support"]

NS = 1_712_345_678_901_234_567
"""A 19-digit nanosecond timestamp: must come back exact, not as a float."""


def _step(
    rank: int, step: int, hostname: str | None = "node-a", device: str = "cuda:0"
) -> StepTimeRecord:
    events: dict[str, Any] = {
        "_traceml_internal:forward_time": {
            device: {
                "is_gpu": True,
                "duration_ms": 12.5,
                "cpu_ms": 3.25,
                "gpu_ms": 0.0,
                "n_calls": 2,
            }
        },
        "_traceml_internal:step_time": {
            "cpu": {
                "is_gpu": False,
                "duration_ms": None,
                "cpu_ms": 1e-9,
                "gpu_ms": None,
                "n_calls": 0,
            }
        },
    }
    return StepTimeRecord(NS, rank, rank, rank, 2, 2, 0, hostname, NS + step, step, step, events)


@pytest.fixture
def records() -> list[ExportRecord]:
    """An interleaved batch of five streams, with a duplicate, None, zeros and odd text."""
    step = _step(0, 7)
    return [
        step,
        SystemRecord(NS, 0, 0, 2, 2, 0, "node-a", NS, 1, 0.0, None, 64e9, 1, 2),
        SystemGpuRecord(NS, 0, 0, 2, 2, 0, "node-a", NS, 1, 0, 99.5, 1e9, 8e10, 61.0, 250.0, None),
        SystemGpuRecord(NS, 0, 0, 2, 2, 0, "node-a", NS, 1, 1, 0.0, 0.0, 8e10, None, 0.0, 300.0),
        _step(1, 7, hostname=None),
        ProcessRecord(
            NS, 1, 1, 1, 2, 2, 0, None, None, 3, 180.5, 16, 2e9, 64e9, 0, 0, None, None, None, None
        ),
        StdoutStderrRecord(NS, 0, NS, "loss=0.25 \u2713 \u2028 and a\nnewline \U0001f600"),
        step,  # duplicates are passed through, not removed
        StdoutStderrRecord(NS, 1, None, "second line"),
    ]


@pytest.fixture
def context(tmp_path: Path) -> ExporterContext:
    """Every stream selected, hostname dropped: TraceML's ``export_streams: all``."""
    return ExporterContext.create(tmp_path / "session", export_streams="all")


@pytest.fixture
def hostname_context(tmp_path: Path) -> ExporterContext:
    """Every stream selected and ``exporter_hostname`` on."""
    return ExporterContext.create(
        tmp_path / "session", export_streams="all", exporter_hostname=True
    )


HOSTILE_TEXT = (
    "a lone surrogate \udcff (a str, but not UTF-8)",
    "NUL \x00 inside",
    "U+2028 \u2028 and U+2029 \u2029, line separators to some readers",
    "a very long line " + "x" * (1 << 20),
)


@pytest.fixture
def hostile_records() -> list[ExportRecord]:
    """Text a sink must keep exactly, in a stdout line, a hostname and an events key."""
    lines: list[ExportRecord] = [StdoutStderrRecord(NS, 0, NS, text) for text in HOSTILE_TEXT]
    return [*lines, _step(0, 1, hostname=HOSTILE_TEXT[0], device="\udcff\x00\u2028")]
