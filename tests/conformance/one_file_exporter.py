"""The contract's ``OneFileExporter`` example, copied verbatim (indentation restored).

Source: the "Custom exporters" section of export-records-contract.txt. It must
pass every conformance check; ``test_reference_exporters.py`` runs the suite on it.
"""
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
