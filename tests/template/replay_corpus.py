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
from traceml_exporter_sdk.testing import load_corpus


def sample_payloads() -> list[Any]:
    """The SDK's sample corpus: all seven streams, four ranks on two nodes, edge values."""
    return load_corpus()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write(__doc__ or "")
        return 2
    spec, root = argv[0], Path(argv[1])
    payloads = sample_payloads()
    context = ExporterContext.create(root, export_streams="all")
    worker = ExportWorker(spec, context).start()
    for payload in payloads:
        worker.submit(payload)
    report = worker.shutdown()
    print(f"replayed {len(payloads)} payloads of the SDK's sample corpus through {spec}")
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
