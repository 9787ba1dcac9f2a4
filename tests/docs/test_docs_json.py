"""Every JSON block of the docs has the shape of what the code writes.

A block is told by its top-level keys; the code is run to make its real counterpart
(``MAKERS``): ``finalization_warning.json`` from a worker whose exporter fails, the
same with a replay's ``replay`` block, the jsonl exporter's closing line. The block
has the real object's keys (all of them, unless it shows ``"..."`` for the rest)
and each value the real one's JSON type (``null`` where the real value is null or
not, for the fields that are null when nothing failed). A JSON block no maker
matches fails: say how the code makes it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from doc_blocks import DOCS, Block, blocks
from traceml_exporter_sdk import ExporterContext, ExportWorker
from traceml_exporter_sdk._export.feeding import Stop, record_stop
from traceml_exporter_sdk.testing import load_corpus

FIXTURES = Path(__file__).parent / "fixtures"


class _FailingWrite:
    def __init__(self, context: ExporterContext) -> None:
        pass

    def open(self) -> None:
        pass

    def write(self, records: object) -> None:
        raise RuntimeError("write failed on purpose")

    def flush(self) -> None:
        pass

    def close(self, *, dropped_batches: int = 0) -> None:
        pass


def _failed_worker(root: Path) -> tuple[ExportWorker, Any]:
    worker = ExportWorker(_FailingWrite, ExporterContext.create(root, "all"))
    worker.start()
    for payload in load_corpus()[:4]:
        assert worker.submit(payload)
    return worker, worker.shutdown(timeout=30.0)


def warning_file(root: Path) -> dict[str, Any]:
    _, report = _failed_worker(root)
    return dict(json.loads(report.warning_path.read_text("utf-8")))


def replay_stop(root: Path) -> dict[str, Any]:
    worker, report = _failed_worker(root)
    report = record_stop(worker, report, Stop("interrupted", 40), "at byte 14,400")
    return dict(json.loads(report.warning_path.read_text("utf-8")))


def jsonl_closing_line(root: Path) -> dict[str, Any]:
    context = ExporterContext.create(root, "all")
    worker = ExportWorker("jsonl", context)
    worker.start()
    for payload in load_corpus():
        assert worker.submit(payload)
    worker.shutdown(timeout=30.0)
    lines = (context.export_dir / "step_time.jsonl").read_text("utf-8").splitlines()
    return dict(json.loads(lines[-1]))


MAKERS: dict[frozenset[str], Callable[[Path], dict[str, Any]]] = {
    frozenset({"export"}): warning_file,
    frozenset({"export", "replay"}): replay_stop,
    frozenset({"stream", "closing", "written_records", "dropped_batches"}): jsonl_closing_line,
}
"""A block's top-level keys -> what makes its real counterpart in a folder."""


def shape_problems(shown: Any, real: Any, where: str = "") -> list[str]:
    if isinstance(shown, dict) and isinstance(real, dict):
        keys = set(shown) - {"..."}
        problems = [f"{where}.{k}: the code writes no such key" for k in sorted(keys - set(real))]
        if "..." not in shown:
            problems += [f"{where}.{k}: the doc leaves it out" for k in sorted(set(real) - keys)]
        for key in sorted(keys & set(real)):
            problems += shape_problems(shown[key], real[key], f"{where}.{key}")
        return problems
    if shown is None or real is None or type(shown) is type(real):
        return []
    return [f"{where}: {type(shown).__name__} in the doc, {type(real).__name__} written"]


def problems_of(block: Block, folder: Path) -> list[str]:
    shown = json.loads(block.text)
    maker = MAKERS.get(frozenset(shown))
    if maker is None:
        return [f"no maker for a block with keys {sorted(shown)}: add one to MAKERS"]
    return shape_problems(shown, maker(folder / "run"))


JSON_BLOCKS = [b for path in DOCS for b in blocks(path) if b.language == "json"]


def test_the_docs_have_json_blocks() -> None:
    assert len(JSON_BLOCKS) >= 3


@pytest.mark.parametrize("block", JSON_BLOCKS, ids=str)
def test_json_block_is_what_the_code_writes(block: Block, tmp_path: Path) -> None:
    assert problems_of(block, tmp_path) == []


def test_planted_json_blocks_fail(tmp_path: Path) -> None:
    planted = [b for b in blocks(FIXTURES / "wrong_json.md") if b.language == "json"]
    found = [problems_of(block, tmp_path / str(i)) for i, block in enumerate(planted)]
    assert found == [
        [
            ".export.failed_batches: the code writes no such key",
            ".export.dropped_batches: the doc leaves it out",
            ".export.timed_out: the doc leaves it out",
            ".export.exporter_failed: str in the doc, bool written",
        ],
        ["no maker for a block with keys ['status']: add one to MAKERS"],
    ]
