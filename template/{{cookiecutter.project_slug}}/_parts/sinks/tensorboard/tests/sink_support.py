"""What the shared conformance suite needs from this sink: its export, read back.

``read_export`` reads every event file with TensorBoard's own ``EventAccumulator`` (no
TensorFlow) and rebuilds the records from their ``traceml/record/<stream>`` copies;
``scalars_of`` gives the scalars TensorBoard shows. The suite's default ``break_sink``
and ``broken_context`` (a regular file where ``export_dir`` should be) fit this sink.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tensorboard.backend.event_processing import event_accumulator
from traceml_exporter_sdk import ExporterContext

from traceml_exporter_example.exporter import RECORD_TAG, make_exporter

SKIP_CHECKS = {
    "special_floats": (
        "the records this sink keeps are JSON, which has no NaN or infinity: NaN "
        "and the infinities read back as null, so a measured NaN looks unavailable"
    ),
    "permanent_fault_marked": (
        "a file sink has no fault waiting cannot fix (a full disk, a folder moved away or "
        "a file another process holds may all pass), so there is no break_sink_permanently "
        "to check the permanent marker with"
    ),
}
"""The suite's checks this sink cannot pass or run, with the reason (declared limitations)."""

__all__ = ["SKIP_CHECKS", "accumulator", "log_root", "read_export", "read_records", "scalars_of"]

KEEP_ALL = {
    event_accumulator.SCALARS: 0,
    event_accumulator.TENSORS: 0,
    event_accumulator.COMPRESSED_HISTOGRAMS: 0,
    event_accumulator.IMAGES: 0,
    event_accumulator.AUDIO: 0,
    event_accumulator.HISTOGRAMS: 0,
}
"""Size guidance 0 keeps every event (the default samples 10 tensors per tag)."""


def log_root(context: ExporterContext) -> Path:
    """The folder this context's exporter writes its rank folders into."""
    return make_exporter(context).root


def accumulator(run_dir: Path) -> event_accumulator.EventAccumulator:
    """Every event of one rank folder, loaded, as TensorBoard reads it."""
    events = event_accumulator.EventAccumulator(
        str(run_dir), size_guidance=KEEP_ALL, purge_orphaned_data=False
    )
    return events.Reload()


def read_records(root: Path) -> dict[str, list[dict[str, Any]]]:
    """The record copies under ``root``, per stream, in the order they were written."""
    found: list[tuple[tuple[int, int], str, dict[str, Any]]] = []
    for run_dir in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else ():
        events = accumulator(run_dir)
        for tag in events.Tags()[event_accumulator.TENSORS]:
            if not tag.startswith(RECORD_TAG):
                continue
            for tensor in events.Tensors(tag):
                order, text = tensor.tensor_proto.string_val
                opened, index = map(int, order.split())
                found.append(((opened, index), tag.removeprefix(RECORD_TAG), json.loads(text)))
    out: dict[str, list[dict[str, Any]]] = {}
    for _, stream, data in sorted(found, key=lambda item: item[0]):
        out.setdefault(stream, []).append(data)
    return out


def read_export(context: ExporterContext) -> Mapping[str, list[dict[str, Any]]]:
    """What this context's exporter wrote, per selected stream, as record dicts."""
    records = read_records(log_root(context))
    return {stream: records.get(stream, []) for stream in context.streams}


def scalars_of(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Each scalar tag of a rank folder: ``(step, value)`` as TensorBoard holds them."""
    events = accumulator(run_dir)
    return {
        tag: [(point.step, point.value) for point in events.Scalars(tag)]
        for tag in events.Tags()[event_accumulator.SCALARS]
    }


crash_exporter = make_exporter
"""The crash driver's exporter: the factory's, defaults and all."""
