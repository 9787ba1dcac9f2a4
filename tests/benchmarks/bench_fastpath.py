"""Each fast builder of ``fast_builders`` against the careful path alone, per stream.

``records_from_payload`` runs a sampler's fast builder first and the careful
projection (``projection``: row tuples as TraceML's writers build them, then records)
only for what the fast one could not build. Here both run on the same messages in the
same run, best of ``--repeats`` (``time.perf_counter``, garbage collection paused while
timing, the two in turn in every repeat): ``records_from_payload`` as shipped, and with
the fast builders taken away (``mapping._FAST`` emptied), which is the careful path
alone. The messages are ``bench_mapping.py``'s (64 ranks, 5 rows an envelope), plus
the two streams it leaves out: a runtime_environment record per rank, and 20 lines of
output per rank and tick.

Target (issue 32): a fast builder is kept only where it builds at least 1.3x the
careful path's records/s. Prints PASS or MISS per stream that has a fast builder and
exits 0 either way; a stream without one is timed too, its ratio about 1.0x: the
figure that removed runtime_environment's and stdout_stderr's builders (1.05x and
1.1-1.3x when they were there).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from _smoke import scaled, summary, verdict
from bench_mapping import RANKS, STEPS, Message, best_of, message, messages_of
from traceml_exporter_sdk import mapping, records_from_payload
from traceml_exporter_sdk._build.fast_builders import FAST_BUILDERS
from traceml_exporter_sdk._build.projection import PROJECTION_BY_SAMPLER

TARGET = 1.3
REPEATS = scaled(15, 1)
LINES = 20


def runtime_environment_messages() -> list[Message]:
    row = {
        "seq": 0,
        "ts": 1_760_000_000.25,
        "topology": "multi_node",
        "distributed_initialized": True,
        "distributed_backend": "nccl",
        "training_strategy": "ddp",
        "strategy_source": "runtime_model",
        "strategy_confidence": "high",
    }
    return [
        message(
            rank=rank,
            sampler="RuntimeEnvironmentSampler",
            table="RuntimeEnvironmentTable",
            tick=0,
            rows=[dict(row, seq=tick) for tick in range(STEPS)],
        )
        for rank in range(RANKS)
    ]


def stdout_stderr_messages() -> list[Message]:
    return [
        message(
            rank=rank,
            sampler="Stdout/Stderr",
            table="stdout_stderr",
            tick=tick,
            rows=[
                {"line": f"[rank {rank}] step {tick} loss {0.5 / (i + 1):.4f}"}
                for i in range(LINES)
            ],
        )
        for rank in range(RANKS)
        for tick in range(max(1, STEPS // 5))
    ]


def messages(stream: str) -> list[Message]:
    if stream == "runtime_environment":
        return runtime_environment_messages()
    if stream == "stdout_stderr":
        return stdout_stderr_messages()
    return messages_of(stream, 5)


def shipped(batch: list[Message]) -> int:
    return sum(len(records_from_payload(msg).records) for msg in batch)


@contextmanager
def careful_path() -> Iterator[None]:
    """``records_from_payload`` without its fast builders: the careful path alone."""
    fast = dict(mapping._FAST)
    mapping._FAST.clear()
    try:
        yield
    finally:
        mapping._FAST.update(fast)


def careful(batch: list[Message]) -> int:
    with careful_path():
        return shipped(batch)


def same_records(batch: list[Message]) -> bool:
    """The two paths build equal records (bar the observed stamp) on this input."""

    def built() -> list[Any]:
        return [
            r for m in batch for r in records_from_payload(m, observed_timestamp_unix_ns=1).records
        ]

    fast = built()
    with careful_path():
        return fast == built()


STREAMS = ("step_time", "step_memory", "system", "process", "runtime_environment", "stdout_stderr")
FAST_STREAMS = {
    PROJECTION_BY_SAMPLER[sampler].tables[0].removesuffix("_samples") for sampler in FAST_BUILDERS
}
"""The streams whose sampler has a fast builder (system's also builds system_gpu)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args, _ = parser.parse_known_args(argv)  # nox -s bench passes its posargs to every script
    print(
        "fast builders vs the careful path alone (records_from_payload with mapping._FAST "
        f"emptied); best of {args.repeats}; records/s (higher is better)\n"
    )
    header = (
        f"{'stream':<20} {'records':>8} {'fast/s':>11} {'careful/s':>11} {'ratio':>6} {'target':>7}"
    )
    print(header)
    print("-" * (len(header) + 8))
    met: list[bool] = []
    for stream in STREAMS:
        batch = messages(stream)
        if not same_records(batch):
            raise SystemExit(f"{stream}: the fast and careful paths built different records")
        results = best_of({"fast": (shipped, batch), "careful": (careful, batch)}, args.repeats)
        (fast_s, n), (careful_s, careful_n) = results.values()
        if n != careful_n:
            raise SystemExit(f"{stream}: fast built {n} records, careful {careful_n}")
        ratio = careful_s / fast_s
        if stream in FAST_STREAMS:
            met.append(ratio >= TARGET)
            judged = f"{f'>={TARGET:g}x':>7} {verdict(met[-1])}"
        else:
            judged = "(no fast builder: the careful path both times)"
        print(
            f"{stream:<20} {n:>8} {n / fast_s:>11,.0f} {n / careful_s:>11,.0f} "
            f"{ratio:>5.2f}x {judged}"
        )
    print(f"\n{summary(met)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
