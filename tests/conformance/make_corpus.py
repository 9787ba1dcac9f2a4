"""Generate the SDK's sample payload corpus (``testing/data/corpus.jsonl``).

Run ``python tests/conformance/make_corpus.py`` to rewrite it; ``test_corpus.py``
fails when the shipped file and this generator disagree.

The corpus is a short two-node DDP run in the shape of ``wire-format.md`` §4:
four ranks (two per node), each message one rank's tick, a list of
envelopes with one table each. It covers every sampler and so all seven
streams, and the edge values the contract calls out: None next to a measured
0, unicode, ``\\n`` and U+2028 inside stdout lines, 19-digit nanosecond
integers, empty events, a phase measured on two devices in one step, GPU lists (two GPUs, none, one partly unmeasured), a
rank with no hostname and a rank older than integer timestamps. Every record
it yields is distinct and every stream key is unique, so an exporter that
drops duplicates is caught only by the check that sends duplicates on purpose.

It also writes ``testing/data/hostile.jsonl``: one payload of stdout lines
holding the SDK's ``HOSTILE_TEXT`` (a lone surrogate, NUL, U+2028, a 1 MiB
line, ...), which only the ``hostile_text`` check sends. Both files are JSON
with every non-ASCII character escaped, so they are plain ASCII on disk.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from traceml_exporter_sdk.testing.corpus import HOSTILE_TEXT

# tests/, for the payloads builder when this runs as a script
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from payloads import envelope

DATA = Path(__file__).resolve().parents[2] / "sdk" / "src" / "traceml_exporter_sdk" / "testing"
OUT = DATA / "data" / "corpus.jsonl"
HOSTILE_OUT = DATA / "data" / "hostile.jsonl"

T0 = 1_764_230_400_123_456_789  # 2025-11-27, 19 digits
MS = 1_000_000
STEP_NS = 250 * MS
STEPS = 6
EVENTS = (
    "_traceml_internal:dataloader_next",
    "_traceml_internal:forward_time",
    "_traceml_internal:backward_time",
    "_traceml_internal:optimizer_step",
    "_traceml_internal:step_time",
)
NODES = {0: "node-a.cluster.local", 1: "node-b.cluster.local"}
GiB = 1024**3
RUN_STAMP = {
    "session_id": "run-2025-11-27-ddp",
    "run_nonce": "4f1c9e",
    "session_source": "traceml run",
}


def rank_envelope(
    *, rank: int, sampler: str, ts: int | float, table: str, rows: list[Any]
) -> dict[str, Any]:
    """One envelope of ``rank`` stamped with the run; rank 3 sends no hostname (None)."""
    return envelope(
        table=table,
        rows=rows,
        sampler=sampler,
        rank=rank,
        timestamp=ts,
        hostname=NODES[rank // 2],
        pid=41000 + rank,
        omit=("hostname",) if rank == 3 else (),
        **RUN_STAMP,
    )


def stats(
    cpu: float, gpu: float | None, *, is_gpu: bool | None = True, calls: int = 1
) -> dict[str, Any]:
    return {
        "is_gpu": is_gpu,
        "duration_ms": gpu if (is_gpu and gpu is not None) else cpu,
        "cpu_ms": cpu,
        "gpu_ms": gpu,
        "n_calls": calls,
    }


def step_events(rank: int, step: int) -> dict[str, Any]:
    if rank == 3 and step == 0:
        return {}  # warm-up step that recorded no events
    device = f"cuda:{rank % 2}"
    base = 10.0 + rank + step * 0.5
    events: dict[str, Any] = {
        EVENTS[0]: {device: stats(1.25 + step, None, is_gpu=False, calls=2 if step == 3 else 1)},
        EVENTS[1]: {device: stats(base * 0.3, base)},
        EVENTS[2]: {device: stats(base * 0.4, base * 2)},
        # a measured zero stays 0.0; an unmeasured phase stays None
        EVENTS[3]: {device: stats(0.75, 0.0 if step % 3 == 0 else (None if step == 4 else 1.5))},
        EVENTS[4]: {device: stats(base * 1.1, base * 3.25)},
    }
    if rank in (0, 2) and step in (1, 5):
        # one phase measured on two devices in one step (a model split over two GPUs):
        # a sink that keys an event by name alone keeps one of them
        events[EVENTS[2]]["cuda:1"] = stats(base * 0.2, base * 0.5, calls=3)
    if rank == 0 and step == 2:
        events[EVENTS[1]][device]["is_gpu"] = None  # the rank did not send is_gpu
        events[EVENTS[1]][device]["profiler_tag"] = "dropped"  # unknown keys are dropped
    return events


def stdout_lines(rank: int, step: int) -> list[Any]:
    loss = round(2.3 - 0.17 * step - 0.01 * rank, 4)
    lines: list[Any] = [f"[rank{rank}] epoch 0 step {step} loss={loss}"]
    extra = {
        (0, 0): ["✓ checkpoint → /ckpt/épreuve-0 (日本語) 🚀", "", None],
        (0, 1): ['Traceback (most recent call last):\n  File "train.py", line 3'],
        (2, 1): ["para one\u2028para two", "tab\tseparated\tvalues"],
        (0, 3): ["0", "null", "   leading and trailing spaces   "],
        (2, 4): ["ends with a newline\n", "carriage\r\nreturn"],
    }
    lines.extend(extra.get((rank, step), []))
    return lines


def tick(rank: int, step: int) -> list[dict[str, Any]]:
    """One rank's message for one step: the samplers in registration order."""
    ts = T0 + step * STEP_NS + rank * 1_337
    local = rank % 2
    out: list[dict[str, Any]] = []
    if step == 0:
        out.append(
            rank_envelope(
                rank=rank,
                sampler="RuntimeEnvironmentSampler",
                ts=ts,
                table="RuntimeEnvironmentTable",
                rows=[
                    {
                        "ts": ts,
                        "seq": 0,
                        "topology": "multi_node_multi_process",
                        "distributed_initialized": True,
                        "distributed_backend": "nccl",
                        "training_strategy": "ddp",
                        "strategy_source": "runtime_model",
                        "strategy_confidence": "high" if rank != 3 else None,
                    }
                ],
            )
        )
    if local == 0 and step % 2 == 0:
        seq = step // 2
        node = rank // 2
        if node == 1 and seq == 0:
            gpus: list[Any] = []  # the node's GPUs were not visible yet
            available, count = False, 0
        else:
            gpus = [
                [87.5 - seq, 38.2 * GiB, 80.0 * GiB, 61.0 + seq, 312.5, 700.0],
                [0.0, 1.5 * GiB, 80.0 * GiB, None, 71.25, 700.0]
                if seq == 1
                else [91.0, 40.1 * GiB, 80.0 * GiB, 63.0, 330.0, 700.0],
            ]
            if seq == 2:
                gpus.append("not a gpu entry")  # passed over; gpu_idx keeps counting
                gpus.append([50.0, 1.0 * GiB, 80.0 * GiB, 55.0, 200.0, 700.0])
            available, count = True, sum(isinstance(gpu, list) for gpu in gpus)
        out.append(
            rank_envelope(
                rank=rank,
                sampler="SystemSampler",
                ts=ts,
                table="SystemTable",
                rows=[
                    {
                        "seq": seq,
                        "ts": ts,
                        "cpu": 0.0 if seq == 0 else 35.5 + seq,
                        "ram_used": 412.5 * GiB,
                        "ram_total": None if (node == 1 and seq == 1) else 2048.0 * GiB,
                        "gpu_available": available,
                        "gpu_count": count,
                        "gpus": gpus,
                    }
                ],
            )
        )
    if step % 2 == 0:
        seq = step // 2
        first = seq == 0
        out.append(
            rank_envelope(
                rank=rank,
                sampler="ProcessSampler",
                ts=ts,
                table="ProcessTable",
                rows=[
                    {
                        "seq": seq,
                        "ts": ts,
                        "pid": 41000 + rank,
                        "cpu": 187.5 + rank if not first else 0.0,
                        "cpu_cores": 32,
                        "ram_used": 9.75 * GiB + seq,
                        "ram_total": 2048.0 * GiB,
                        "gpu_available": None if first else True,
                        "gpu_count": None if first else 2,
                        "gpu": None
                        if first
                        else {
                            "device": local,
                            "mem_used": 37.0 * GiB,
                            "mem_reserved": 0.0 if rank == 1 else 39.5 * GiB,
                            "mem_total": 80.0 * GiB,
                        },
                    }
                ],
            )
        )
    if not (rank == 1 and step == 5):
        rows: list[dict[str, Any]] = [
            {
                "seq": step,
                "timestamp": ts if not (rank == 1 and step == 2) else ts / 1e9,
                "step": step,
                "events": step_events(rank, step),
            }
        ]
        if rank == 1 and step == 4:
            # one sampler tick carrying two steps: seq repeats, the key (rank, step) does not
            rows.append(
                {
                    "seq": step,
                    "timestamp": ts + STEP_NS,
                    "step": step + 1,
                    "events": step_events(rank, 5),
                }
            )
        out.append(
            rank_envelope(
                rank=rank, sampler="StepTimeSampler", ts=ts, table="StepTimeTable", rows=rows
            )
        )
        mem_rows: list[dict[str, Any]] = [
            {
                "seq": step,
                "ts": ts,
                "device": f"cuda:{local}",
                "step": step,
                "peak_alloc": 12.5 * GiB + step * MS,
                "peak_resv": 0.0 if step == 0 else 14.0 * GiB,
            }
        ]
        if rank == 0:
            # the CPU side of rank 0: both peaks unavailable (None, not 0)
            mem_rows.append(
                {
                    "seq": step,
                    "ts": ts,
                    "device": "cpu",
                    "step": step,
                    "peak_alloc": None,
                    "peak_resv": None,
                }
            )
        out.append(
            rank_envelope(
                rank=rank, sampler="StepMemorySampler", ts=ts, table="step_memory", rows=mem_rows
            )
        )
    if rank in (0, 2):
        out.append(
            rank_envelope(
                rank=rank,
                sampler="Stdout/Stderr",
                ts=ts + 500,
                table="stdout_stderr",
                rows=[{"line": line} for line in stdout_lines(rank, step)],
            )
        )
    return out


def payloads() -> list[list[dict[str, Any]]]:
    """Every message in arrival order: steps in order, ranks interleaved within a step."""
    return [tick(rank, step) for step in range(STEPS) for rank in (0, 2, 1, 3)]


def hostile_payloads() -> list[list[dict[str, Any]]]:
    """One message of rank 2 whose stdout lines are the hostile texts, in order."""
    ts = T0 + STEPS * STEP_NS
    rows = [{"line": text} for text in HOSTILE_TEXT]
    return [
        [rank_envelope(rank=2, sampler="Stdout/Stderr", ts=ts, table="stdout_stderr", rows=rows)]
    ]


def render(messages: list[list[dict[str, Any]]] | None = None) -> str:
    chosen = payloads() if messages is None else messages
    return "".join(json.dumps(p, separators=(",", ":"), sort_keys=False) + "\n" for p in chosen)


def main() -> int:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render(), encoding="utf-8")
    HOSTILE_OUT.write_text(render(hostile_payloads()), encoding="ascii")
    print(f"wrote {OUT} ({len(payloads())} payloads) and {HOSTILE_OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
