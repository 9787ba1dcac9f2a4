"""Replay the SDK's sample corpus through an exporter with ExportWorker, as TraceML would.

    python tests/template/replay_corpus.py MODULE:FACTORY SESSION_ROOT

Every stream is selected. Prints what was delivered per stream and where the
exporter wrote; exits 1 if the exporter failed or lost a record.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from traceml_exporter_sdk import ExporterContext, ExportWorker

_IDENTITY = {
    "rank": 0,
    "global_rank": 0,
    "local_rank": 0,
    "world_size": 1,
    "local_world_size": 1,
    "node_rank": 0,
    "hostname": "node-a",
    "timestamp": 1_764_230_400_123_456_789,
}
FALLBACK_PAYLOADS: list[Any] = [
    [
        {
            "meta": {**_IDENTITY, "sampler": "StepTimeSampler"},
            "body": {
                "tables": {
                    "StepTimeTable": [
                        {
                            "timestamp": 1_764_230_400_223_456_789 + step,
                            "seq": step,
                            "step": step,
                            "events": {
                                "forward": {
                                    "cuda:0": {"is_gpu": True, "duration_ms": 1.5, "n_calls": 1}
                                }
                            },
                        }
                        for step in range(3)
                    ]
                }
            },
        },
        {
            "meta": {**_IDENTITY, "sampler": "SystemSampler"},
            "body": {
                "tables": {
                    "SystemTable": [
                        {
                            "seq": 0,
                            "ts": 1_764_230_400_323_456_789,
                            "cpu": 0.0,
                            "ram_used": 1e9,
                            "ram_total": 8e9,
                            "gpu_available": True,
                            "gpu_count": 1,
                            "gpus": [[50.0, 1e9, 8e10, 60.0, 200.0, 300.0]],
                        }
                    ]
                }
            },
        },
        {
            "meta": {**_IDENTITY, "sampler": "Stdout/Stderr"},
            "body": {"tables": {"StdoutStderrTable": [{"line": "epoch 1 loss=0.25"}]}},
        },
    ]
]
"""Used only when the SDK has no corpus loader (``traceml_exporter_sdk.testing.load_corpus``)."""


def sample_payloads() -> tuple[list[Any], str]:
    try:
        from traceml_exporter_sdk.testing import load_corpus
    except (ImportError, AttributeError):
        return FALLBACK_PAYLOADS, "built-in sample payloads (the SDK has no corpus loader)"
    return load_corpus(), "the SDK's sample corpus"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write(__doc__ or "")
        return 2
    spec, root = argv[0], Path(argv[1])
    payloads, source = sample_payloads()
    context = ExporterContext.create(root, export_streams="all")
    worker = ExportWorker(spec, context).start()
    for payload in payloads:
        worker.submit(payload)
    report = worker.shutdown()
    print(f"replayed {len(payloads)} payloads of {source} through {spec}")
    for stream in context.streams:
        print(f"  {stream:<22} {report.admitted_by_stream.get(stream, 0):>6} records")
    print(f"  delivered {report.delivered_records} of {report.admitted_records}")
    if report.failure is not None or report.failed_records:
        print(f"FAILED: {report.failure} (see {report.warning_path})")
        return 1
    print(f"output: {context.export_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
