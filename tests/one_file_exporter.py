# The contract's custom-exporter example ("Custom exporters" in
# export-records-contract.txt), copied verbatim: only the indentation and blank
# lines that the contract's text lost are restored. Do not edit the code below;
# The one copy every test uses: runtime/test_runtime_one_file.py checks it against
# the contract text and runs it under ExportWorker, conformance/ runs the suite on it,
# cli/ replays and checks it, benchmarks/bench_export.py measures it.
# ruff: noqa: SIM115
import json


class OneFileExporter:
    def __init__(self, path, include_hostname):
        self._path = path
        self._include_hostname = include_hostname
        self._file = None

    def open(self):
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self._path, "x", encoding="utf-8")

    def write(self, records):
        for record in records:
            data = record.to_dict()
            if not self._include_hostname:
                data.pop("hostname", None)
            self._file.write(json.dumps(data) + "\n")

    def flush(self):
        self._file.flush()

    def close(self, *, dropped_batches=0):
        self._file.close()


def make_exporter(context):
    return OneFileExporter(
        context.export_dir / "records.jsonl",
        context.include_hostname,
    )
