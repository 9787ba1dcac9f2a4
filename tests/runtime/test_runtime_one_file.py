"""The contract's OneFileExporter example, copied verbatim, runs unchanged under ExportWorker."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from runtime_helpers import T0, all_streams_payload, context, step_payload
from traceml_exporter_sdk import ExportWorker, records_from_payload

HERE = Path(__file__).resolve().parent
COPY = HERE.parent / "one_file_exporter.py"
CONTRACT = HERE.parents[2] / "shared" / "export-records-contract.txt"
SETTING = "one_file_exporter:make_exporter"


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The shared copy, importable as ``one_file_exporter``."""
    monkeypatch.syspath_prepend(str(COPY.parent))
    monkeypatch.delitem(sys.modules, "one_file_exporter", raising=False)
    import one_file_exporter

    assert Path(one_file_exporter.__file__).resolve() == COPY
    yield one_file_exporter
    sys.modules.pop("one_file_exporter", None)


def _code_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


@pytest.mark.skipif(not CONTRACT.exists(), reason="the contract text is not beside the repository")
def test_the_copy_is_verbatim() -> None:
    """Line for line the contract's example, once indentation and blank lines are ignored."""
    contract = CONTRACT.read_text(encoding="utf-8")
    start = contract.index("import json\nclass OneFileExporter:")
    end = contract.index("Internal mapping example")
    ours = [
        line for line in _code_lines(COPY.read_text(encoding="utf-8")) if not line.startswith("#")
    ]
    assert ours == _code_lines(contract[start:end])


def test_it_runs_under_the_worker_and_writes_every_selected_record(
    example: ModuleType, tmp_path: Path
) -> None:
    ctx = context(tmp_path, "all")
    records = records_from_payload(
        [*all_streams_payload(0), *step_payload(0, 1, 3)], observed_timestamp_unix_ns=T0
    ).records
    worker = ExportWorker(SETTING, ctx)
    worker.start()
    worker.submit_records(records)
    worker.submit(all_streams_payload(1, omit=("hostname",)))
    report = worker.shutdown()

    assert report.failure is None
    assert report.warning_path is None
    assert sorted(p.name for p in ctx.export_dir.iterdir()) == ["records.jsonl"]
    lines = (ctx.export_dir / "records.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == report.admitted_records == len(records) + 8
    written = [json.loads(line) for line in lines]
    expected = [{k: v for k, v in r.to_dict().items() if k != "hostname"} for r in records]
    assert written[: len(records)] == expected
    assert [w["stream"] for w in written[len(records) :]] == [
        "runtime_environment",
        "system",
        "system_gpu",
        "system_gpu",
        "process",
        "step_time",
        "step_memory",
        "stdout_stderr",
    ]
    assert all("hostname" not in w for w in written)


def test_it_keeps_hostname_when_on(example: ModuleType, tmp_path: Path) -> None:
    ctx = context(tmp_path, "step_time", hostname=True)
    worker = ExportWorker(SETTING, ctx)
    worker.start()
    worker.submit(step_payload(0, 0, 2))
    worker.submit(step_payload(1, 0, 2, omit=("hostname",)))
    report = worker.shutdown()
    assert report.failure is None
    written = [
        json.loads(line)
        for line in (ctx.export_dir / "records.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert [w["hostname"] for w in written] == ["node-a", "node-a", None, None]
    assert {w["stream"] for w in written} == {"step_time"}
