"""A fixed sample of ``nox -s mutation`` on the baked sqlite and parquet sinks (CI).

The whole run mutates every module of a baked sink (``nox -s mutation -- sqlite``, on
request: it takes the better part of an hour on two cores); here a few fixed mutants
go through the same code in the sink's template session: the suite must kill the
contract mistakes, and a reviewed survivor must survive the suite and meet its
reviewed fate in the sink's own tests, with the gate passing on those outcomes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from bake import bake

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mutation"))
import run

SAMPLES = {
    "sqlite": (
        (
            "_lifecycle.py:Lifecycle._opening:constant:1",  # open() refuses a new exporter
            "exporter.py:_text:handler:1",  # a lone surrogate raises instead of being kept
            "exporter.py:quote:boolean:1",  # every STREAM refused as a table name
        ),
        ("exporter.py:SqliteExporter.write:delete:10", "killed"),  # run-log counts (format)
    ),
    "parquet": (
        (
            "_lifecycle.py:Lifecycle._opening:constant:1",  # open() refuses a new exporter
            "exporter.py:ParquetExporter.flush:delete:1",  # flush writes no part
            "_parquet_text.py:to_array:handler:1",  # a lone surrogate raises
        ),
        ("_files.py:replacing:constant:1", "killed"),  # summary not fsynced (format)
    ),
}
"""Per sink: mutants the suite alone must kill, and one reviewed survivor of the suite with
its fate in the sink's own tests (ids name the classes of a project named after its
sink, as ``nox -s mutation`` bakes it)."""


def test_a_fixed_mutation_sample(sink: str, tmp_path: Path) -> None:
    if sink not in SAMPLES:
        pytest.skip(f"nox -s mutation covers the jsonl exporter, {' and '.join(SAMPLES)}")
    killed, (survivor, own) = SAMPLES[sink]
    # its package comes from PYTHONPATH (the mutant's copy), its dependencies from the
    # session, which installed this sink's default project
    project = bake(tmp_path / "baked", sink=sink, project_name=sink)
    target = run.baked_target(sink, project)
    selected = run.select(target, [*killed, survivor])
    assert len(selected) == len(killed) + 1
    found = run.run_all(target, selected, 2, tmp_path / "work", (900, 900))
    outcomes = {o.mutant.id: o for o in found}
    assert [i for i in killed if not outcomes[i].killed_by_suite] == []
    assert run.load_reviewed(sink)[survivor].kind in ("equivalent", "format")
    assert (outcomes[survivor].suite, outcomes[survivor].own) == ("survived", own)
    assert run.report(sink, found, full=False) == 0
