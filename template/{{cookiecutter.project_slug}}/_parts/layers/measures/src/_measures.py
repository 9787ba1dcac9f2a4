"""The numbers a scalar sink plots, per stream: what a TensorBoard scalar or an MLflow
metric is made of. Identifiers (``pid``, ``gpu_device_index``, ``gpu_idx``), times and
flags are not among them."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["EVENT_MEASURES", "MEASURES"]

EVENT_MEASURES: tuple[str, ...] = ("duration_ms", "cpu_ms", "gpu_ms", "n_calls")
"""The numbers of one step_time event on one device (its ``stats``, without ``is_gpu``)."""

MEASURES: Mapping[str, tuple[str, ...]] = {
    "step_memory": ("peak_alloc_bytes", "peak_reserved_bytes"),
    "system": ("cpu_percent", "ram_used_bytes", "ram_total_bytes", "gpu_available", "gpu_count"),
    "system_gpu": (
        "util",
        "mem_used_bytes",
        "mem_total_bytes",
        "temperature_c",
        "power_usage_w",
        "power_limit_w",
    ),
    "process": (
        "cpu_percent",
        "cpu_logical_core_count",
        "ram_used_bytes",
        "ram_total_bytes",
        "gpu_available",
        "gpu_count",
        "gpu_mem_used_bytes",
        "gpu_mem_reserved_bytes",
        "gpu_mem_total_bytes",
    ),
}
"""The fields of each other metric stream, in the order they are written."""
