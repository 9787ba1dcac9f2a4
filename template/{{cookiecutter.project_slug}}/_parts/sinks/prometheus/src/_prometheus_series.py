"""Records folded into Prometheus series: cumulative counters, histograms and last values.

A record is an event, not a sample: records of TraceML 0.5.0 carry no source time
and every record of an envelope shares its observed stamp, so one sample per
record would collide. :class:`Aggregator` keeps, per series, what Prometheus'
own model expects (counters that only grow, histograms as ``_bucket``/``_sum``/
``_count``, gauges holding the last value seen) and :meth:`Aggregator.snapshot`
gives one value per series for the next request. The mapping (also in the
README):

* step_time, labels ``rank``, ``node``: ``traceml_steps_total`` (records),
  ``traceml_last_step`` (the last ``step``); per ``phase`` (the events map's name)
  and ``device``: ``traceml_step_phase_seconds`` (a histogram of
  ``duration_ms``), ``traceml_step_phase_cpu_seconds`` and
  ``traceml_step_phase_gpu_seconds`` (``_sum``/``_count`` of ``cpu_ms``,
  ``gpu_ms``), ``traceml_step_phase_calls_total`` (``n_calls``);
* step_memory, labels ``rank``, ``node``, ``device``: ``traceml_step_memory_records_total``,
  ``traceml_step_memory_peak_allocated_bytes`` and ``..._peak_reserved_bytes`` (the
  largest peak seen);
* system (``node``), system_gpu (``node``, ``gpu``), process (``rank``, ``node``):
  a ``..._snapshots_total`` counter and one last-value gauge per numeric field;
* runtime_environment: ``traceml_runtime_info`` = 1 with the rank's latest
  topology and strategy as labels (a replaced one ends with a staleness marker);
  stdout_stderr: ``traceml_output_lines_total``.

None is left out: it is no observation of a histogram or sum, and leaves a gauge at
its last value (a series appears once it has a value). ``hostname`` is a label
only with ``include_hostname``. A None label is left out.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from ._contract import ExportRecord
from ._prometheus_wire import STALE_NAN, encode_labels, label_text

__all__ = [
    "BUCKETS_MS",
    "FAMILIES",
    "GAUGES",
    "Aggregator",
    "CardinalityError",
    "as_float",
    "bucket_label",
    "chunks",
]

BUCKETS_MS = (1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0)
"""Histogram bounds in ms; ``le`` is in seconds. A duration is counted where ``ms <= bound``."""
_N_BUCKETS = len(BUCKETS_MS)
MAX_SERIES = 100_000
"""More series than this is an error (a label without bound), not a silent cut."""

GAUGES: dict[str, dict[str, str]] = {
    "system": {
        "cpu_percent": "traceml_system_cpu_percent",
        "ram_used_bytes": "traceml_system_memory_used_bytes",
        "ram_total_bytes": "traceml_system_memory_total_bytes",
        "gpu_available": "traceml_system_gpu_available",
        "gpu_count": "traceml_system_gpus",
    },
    "system_gpu": {
        "util": "traceml_gpu_utilization_percent",
        "mem_used_bytes": "traceml_gpu_memory_used_bytes",
        "mem_total_bytes": "traceml_gpu_memory_total_bytes",
        "temperature_c": "traceml_gpu_temperature_celsius",
        "power_usage_w": "traceml_gpu_power_watts",
        "power_limit_w": "traceml_gpu_power_limit_watts",
    },
    "process": {
        "cpu_percent": "traceml_process_cpu_percent",
        "cpu_logical_core_count": "traceml_process_cpu_logical_cores",
        "ram_used_bytes": "traceml_process_memory_used_bytes",
        "ram_total_bytes": "traceml_process_memory_total_bytes",
        "gpu_available": "traceml_process_gpu_available",
        "gpu_count": "traceml_process_gpus",
        "gpu_device_index": "traceml_process_gpu_device_index",
        "gpu_mem_used_bytes": "traceml_process_gpu_memory_used_bytes",
        "gpu_mem_reserved_bytes": "traceml_process_gpu_memory_reserved_bytes",
        "gpu_mem_total_bytes": "traceml_process_gpu_memory_total_bytes",
    },
}
"""Snapshot stream -> field -> the last-value gauge it feeds."""
SNAPSHOT_COUNTERS = {
    "system": "traceml_system_snapshots_total",
    "system_gpu": "traceml_gpu_snapshots_total",
    "process": "traceml_process_snapshots_total",
}
INFO_FIELDS = (
    "global_rank", "local_rank", "world_size", "local_world_size", "pid", "topology",
    "distributed_initialized", "distributed_backend", "training_strategy", "strategy_source",
    "strategy_confidence",
)  # fmt: skip
"""runtime_environment fields that become labels of ``traceml_runtime_info``."""

FAMILIES: list[tuple[str, str, str]] = [
    ("traceml_steps_total", "counter", "Steps seen (step_time records)."),
    ("traceml_last_step", "gauge", "The last step number seen."),
    ("traceml_step_phase_seconds", "histogram", "Wall time of a step phase on a device."),
    ("traceml_step_phase_cpu_seconds", "summary", "CPU time of a step phase on a device."),
    ("traceml_step_phase_gpu_seconds", "summary", "GPU time of a step phase on a device."),
    ("traceml_step_phase_calls_total", "counter", "Calls of a step phase (n_calls)."),
    ("traceml_step_memory_records_total", "counter", "step_memory records seen."),
    ("traceml_step_memory_peak_allocated_bytes", "gauge", "Largest peak allocated memory."),
    ("traceml_step_memory_peak_reserved_bytes", "gauge", "Largest peak reserved memory."),
    *((name, "counter", f"{stream} snapshots seen.") for stream, name in SNAPSHOT_COUNTERS.items()),
    *(
        (name, "gauge", f"Last {field} of a {stream} snapshot.")
        for stream, fields in GAUGES.items()
        for field, name in fields.items()
    ),
    ("traceml_runtime_info", "info", "A rank's latest runtime environment, as labels."),
    ("traceml_output_lines_total", "counter", "Captured stdout/stderr lines."),
]
"""Every metric family: name, type, help (sent as the request's metadata)."""


class CardinalityError(ValueError):
    """The records would make more series than the bound: some label has no bound.

    Permanent (``_contract`` rule 8): a new exporter fed the same records makes the
    same series, so waiting cannot help.
    """

    permanent = True


def as_float(value: Any) -> float:
    """A sample value: ints that a double cannot hold become +-inf rather than raising."""
    try:
        return float(value)
    except OverflowError:
        return math.copysign(math.inf, value)


def bucket_label(bound_ms: float) -> str:
    """The ``le`` label of a bound, in seconds, as Prometheus' clients write it."""
    return (
        repr(bound_ms / 1000).removesuffix(".0") if bound_ms % 1000 else str(int(bound_ms // 1000))
    )


def _label(value: Any) -> str:
    if value is None:
        return ""
    return label_text(value if isinstance(value, str) else str(value))


_COUNT, _SUM, _CPU_COUNT, _CPU, _GPU_COUNT, _GPU, _CALLS, _BUCKETS, _ENCODED = range(9)
"""Slots of a phase's state (a list: the hot path indexes it): counts and sums of
``duration_ms``, ``cpu_ms``, ``gpu_ms``, calls, per-bucket counts, the encoded series."""
_TOP_MS = BUCKETS_MS[-1]


def _new_phase(encoded: list[bytes]) -> list[Any]:
    return [0, 0.0, 0, 0.0, 0, 0.0, 0, [0] * (_N_BUCKETS + 1), encoded]


def _phase_values(phase: list[Any]) -> list[float]:
    """The 21 values of a phase's series, in the order of its encoded labels."""
    cumulative: list[float] = []
    total = 0
    for n in phase[_BUCKETS]:
        total += n
        cumulative.append(float(total))
    return [
        *cumulative,
        phase[_SUM] / 1000,
        float(phase[_COUNT]),
        phase[_CPU] / 1000,
        float(phase[_CPU_COUNT]),
        phase[_GPU] / 1000,
        float(phase[_GPU_COUNT]),
        as_float(phase[_CALLS]),
    ]


class Aggregator:
    """Folds records into series; ``snapshot()`` gives each series' current value."""

    def __init__(
        self, base: Mapping[str, str], *, include_hostname: bool, max_series: int = MAX_SERIES
    ) -> None:
        self.base = dict(base)
        self.include_hostname = include_hostname
        self.max_series = max_series
        self.series = 0
        self._steps: dict[tuple[Any, ...], list[Any]] = {}
        self._phases: list[list[Any]] = []
        self._memory: dict[tuple[Any, ...], list[Any]] = {}
        self._snapshots: dict[tuple[Any, ...], list[Any]] = {}
        self._info: dict[tuple[Any, ...], list[Any]] = {}
        self._lines: dict[tuple[Any, ...], list[Any]] = {}
        self._ended: list[bytes] = []
        """Series replaced since the last snapshot (an info whose labels changed): each gets
        a staleness marker, so it ends rather than lingering for five minutes."""
        self._by_labels: dict[bytes, Any] = {}
        """State by its first series' encoded labels: raw keys whose labels are equal (None
        and "", texts equal once escaped or cut) share one state, so no series repeats."""
        self._add: dict[str, Callable[[ExportRecord], None]] = {
            "step_time": self._step_time,
            "step_memory": self._step_memory,
            "system": self._snapshot,
            "system_gpu": self._snapshot,
            "process": self._snapshot,
            "runtime_environment": self._runtime,
            "stdout_stderr": self._line,
        }

    # -- folding ---------------------------------------------------------------------

    def add(self, records: Sequence[ExportRecord]) -> None:
        """Fold every record in; a stream this version does not know is ignored by design."""
        adders = self._add
        for record in records:
            adder = adders.get(record.STREAM)
            if adder is not None:
                adder(record)

    def _encode(self, name: str, labels: Mapping[str, str]) -> bytes:
        return encode_labels({**self.base, **labels, "__name__": name})

    def _shared(self, encoded: bytes, make: Callable[[], Any]) -> tuple[Any, bool]:
        """The state whose first series is ``encoded``, made by ``make`` if new; (state, new)."""
        state = self._by_labels.get(encoded)
        if state is not None:
            return state, False
        state = self._by_labels[encoded] = make()
        return state, True

    def _grow(self, count: int) -> None:
        self.series += count
        if self.series > self.max_series:
            raise CardinalityError(
                f"the records make more than {self.max_series:,} series; some label (phase, "
                "device, rank, hostname ...) takes unboundedly many values, which Prometheus "
                "cannot store well; nothing past this point is exported"
            )

    def _identity(self, record: Any, rank: bool = True) -> dict[str, str]:
        labels = {"node": _label(record.node_rank)}
        if rank:
            labels["rank"] = _label(record.rank)
        if self.include_hostname:
            labels["hostname"] = _label(record.hostname)
        return labels

    def _step_time(self, record: Any) -> None:
        host = record.hostname if self.include_hostname else None
        ident = (record.rank, record.node_rank, host)
        steps = self._steps.get(ident)
        if steps is None:
            labels = self._identity(record)
            encoded = [
                self._encode(n, labels) for n in ("traceml_steps_total", "traceml_last_step")
            ]
            steps, new = self._shared(encoded[0], lambda: [encoded, 0, None, {}])
            if new:
                self._grow(2)
            self._steps[ident] = steps
        steps[1] += 1
        if record.step is not None:
            steps[2] = record.step
        by_name: dict[str, dict[str, list[Any]]] = steps[3]
        # The hot path: locals and literal slots (_COUNT 0, _SUM 1, _CPU_COUNT 2, _CPU 3,
        # _GPU_COUNT 4, _GPU 5, _CALLS 6, _BUCKETS 7), no global lookups per event.
        find, bounds, top, inf_bucket = bisect_left, BUCKETS_MS, _TOP_MS, _N_BUCKETS
        for name, devices in record.events.items():
            by_device = by_name.get(name)
            if by_device is None:
                by_device = by_name[name] = {}
            for device, stats in devices.items():
                phase = by_device.get(device)
                if phase is None:
                    phase = by_device[device] = self._phase(record, name, device)
                get = stats.get
                duration = get("duration_ms")
                if duration is not None:
                    phase[0] += 1
                    phase[1] += duration
                    # NaN fails every comparison: it is counted in +Inf only
                    phase[7][find(bounds, duration) if duration <= top else inf_bucket] += 1
                cpu = get("cpu_ms")
                if cpu is not None:
                    phase[2] += 1
                    phase[3] += cpu
                gpu = get("gpu_ms")
                if gpu is not None:
                    phase[4] += 1
                    phase[5] += gpu
                calls = get("n_calls")
                if calls is not None:
                    phase[6] += calls

    def _phase(self, record: Any, name: str, device: str) -> list[Any]:
        labels = {**self._identity(record), "phase": _label(name), "device": _label(device)}
        histogram = "traceml_step_phase_seconds"
        encoded = [
            self._encode(f"{histogram}_bucket", {**labels, "le": bucket_label(bound)})
            for bound in BUCKETS_MS
        ]
        encoded.append(self._encode(f"{histogram}_bucket", {**labels, "le": "+Inf"}))
        others = (
            f"{histogram}_sum", f"{histogram}_count",
            "traceml_step_phase_cpu_seconds_sum", "traceml_step_phase_cpu_seconds_count",
            "traceml_step_phase_gpu_seconds_sum", "traceml_step_phase_gpu_seconds_count",
            "traceml_step_phase_calls_total",
        )  # fmt: skip
        encoded.extend(self._encode(other, labels) for other in others)
        phase, new = self._shared(encoded[0], lambda: _new_phase(encoded))
        if new:
            self._phases.append(phase)
            self._grow(len(encoded))
        result: list[Any] = phase
        return result

    def _step_memory(self, record: Any) -> None:
        host = record.hostname if self.include_hostname else None
        key = (record.rank, record.node_rank, host, record.device)
        memory = self._memory.get(key)
        if memory is None:
            labels = {**self._identity(record), "device": _label(record.device)}
            names = (
                "traceml_step_memory_records_total",
                "traceml_step_memory_peak_allocated_bytes",
                "traceml_step_memory_peak_reserved_bytes",
            )
            encoded = [self._encode(n, labels) for n in names]
            memory, new = self._shared(encoded[0], lambda: [encoded, 0, None, None])
            if new:
                self._grow(1)
            self._memory[key] = memory
        memory[1] += 1
        for slot, value in ((2, record.peak_alloc_bytes), (3, record.peak_reserved_bytes)):
            if value is not None and (memory[slot] is None or value > memory[slot]):
                if memory[slot] is None:
                    self._grow(1)
                memory[slot] = value

    def _snapshot(self, record: Any) -> None:
        stream = record.STREAM
        fields = GAUGES[stream]
        host = record.hostname if self.include_hostname else None
        gpu = record.gpu_idx if stream == "system_gpu" else None
        rank = record.rank if stream == "process" else None
        key = (stream, rank, record.node_rank, host, gpu)
        state = self._snapshots.get(key)
        if state is None:
            labels = self._identity(record, rank=stream == "process")
            if stream == "system_gpu":
                labels["gpu"] = _label(gpu)
            names = [SNAPSHOT_COUNTERS[stream], *fields.values()]
            encoded = [self._encode(n, labels) for n in names]
            state, new = self._shared(encoded[0], lambda: [encoded, 0, *([None] * len(fields))])
            if new:
                self._grow(1)
            self._snapshots[key] = state
        state[1] += 1
        for slot, field in enumerate(fields, 2):
            value = getattr(record, field)
            if value is not None:
                if state[slot] is None:
                    self._grow(1)
                state[slot] = value

    def _runtime(self, record: Any) -> None:
        host = record.hostname if self.include_hostname else None
        key = (record.rank, record.node_rank, host)
        labels = self._identity(record)
        labels.update((field, _label(getattr(record, field))) for field in INFO_FIELDS)
        state = self._info.get(key)
        if state is None:
            first = self._encode("traceml_runtime_info", self._identity(record))
            state, new = self._shared(first, lambda: [b"", None])
            if new:
                self._grow(1)
            self._info[key] = state
        if state[1] != labels:
            if state[0]:
                self._ended.append(state[0])
            state[0] = self._encode("traceml_runtime_info", labels)
            state[1] = labels

    def _line(self, record: Any) -> None:
        key = (record.rank,)
        state = self._lines.get(key)
        if state is None:
            encoded = self._encode("traceml_output_lines_total", {"rank": _label(record.rank)})
            state, new = self._shared(encoded, lambda: [encoded, 0])
            if new:
                self._grow(1)
            self._lines[key] = state
        state[1] += 1

    # -- reading out -----------------------------------------------------------------

    def snapshot(self) -> list[tuple[bytes, float]]:
        """``(encoded labels, value)`` of every series that has a value, in a stable order."""
        out: list[tuple[bytes, float]] = []
        for (total, last), count, step, _ in _unique(self._steps):
            out.append((total, float(count)))
            if step is not None:
                out.append((last, as_float(step)))
        for phase in self._phases:
            out.extend(zip(phase[_ENCODED], _phase_values(phase), strict=True))
        for encoded, count, *peaks in _unique(self._memory):
            out.append((encoded[0], float(count)))
            out.extend(
                (e, as_float(v)) for e, v in zip(encoded[1:], peaks, strict=True) if v is not None
            )
        for encoded, count, *values in _unique(self._snapshots):
            out.append((encoded[0], float(count)))
            out.extend(
                (e, as_float(v)) for e, v in zip(encoded[1:], values, strict=True) if v is not None
            )
        out.extend((encoded, 1.0) for encoded, _ in _unique(self._info))
        out.extend((encoded, float(count)) for encoded, count in _unique(self._lines))
        current = {encoded for encoded, _ in out}
        out.extend(
            (encoded, STALE_NAN) for encoded in dict.fromkeys(self._ended) if encoded not in current
        )
        self._ended = []
        return out


def _unique(states: Mapping[Any, Any]) -> Iterator[Any]:
    """Each state once, though several raw keys may share it."""
    seen: set[int] = set()
    for state in states.values():
        if id(state) not in seen:
            seen.add(id(state))
            yield state


def chunks(series: list[tuple[bytes, float]], size: int) -> Iterable[list[tuple[bytes, float]]]:
    """Consecutive runs of at most ``size`` series: one request each."""
    for start in range(0, len(series), size):
        yield series[start : start + size]
