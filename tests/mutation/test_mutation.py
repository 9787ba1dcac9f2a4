"""The mutator, the reviewed survivors list, and a fixed sample of ``nox -s mutation`` (CI).

The whole session mutates every module of the jsonl exporter and of the baked sqlite
and parquet sinks (``default=False``: it takes the better part of an hour on two
cores); here a few fixed jsonl mutants run through the same code, so CI sees the
suite kill them and the reviewed list still name a survivor rightly.
"""

from __future__ import annotations

import ast
import functools
import json
import sys
from pathlib import Path

import pytest
import tomllib

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run  # noqa: E402
from traceml_exporter_sdk.testing._mutation import Mutant, PackageCopy, mutants, verdict  # noqa: E402

JSONL = run.ROOT / "sdk" / "src" / "traceml_exporter_sdk" / "jsonl.py"

SAMPLE_KILLED = (
    "jsonl.py:JsonlExporter._write:delete:14",  # a record's line is never written
    "jsonl.py:JsonlExporter.flush:reraise:1",  # a failing flush no longer releases its files
    "jsonl.py:JsonlExporter._start_files:compare:1",  # unselected streams pass
)
"""Mutants the suite alone must kill (each breaks a rule of the contract)."""
SAMPLE_SURVIVOR = "jsonl.py:<module>:constant:3"
"""A reviewed equivalent mutant (a file buffer twice as large): it must survive both runs."""

SOURCE = '''
"""Docstring."""
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    import os
__all__ = ["f"]


def f(a: int, b: list[int]) -> int:
    """Its docstring."""
    total = 0
    for x in b:
        if x < a and not x == 3:
            total += x * 2
        else:
            break
    try:
        total = total // a
    except ZeroDivisionError:
        total = -1
    if total is None:
        raise ValueError("never a mutated message")
    return total
'''


@pytest.fixture
def module(tmp_path: Path) -> Path:
    path = tmp_path / "sample.py"
    path.write_text(SOURCE, encoding="utf-8")
    return path


def test_every_operator_gives_code_that_compiles_and_differs(module: Path) -> None:
    found = list(mutants(module))
    original = ast.dump(ast.parse(SOURCE))
    for mutant in found:
        compile(mutant.source, mutant.id, "exec")
        assert ast.dump(ast.parse(mutant.source)) != original, mutant.id
    operators = {m.id.split(":")[2] for m in found}
    assert operators == {
        "compare", "arith", "boolean", "constant", "delete", "return", "handler", "reraise", "loop"
    }  # fmt: skip
    assert len({m.id for m in found}) == len(found)


def test_docstrings_type_checking_all_and_messages_are_left_alone(module: Path) -> None:
    changed = [m.description for m in mutants(module)]
    text = " ".join(changed)
    for untouched in ("Docstring", "Its docstring", "import os", "__all__"):
        assert untouched not in text
    assert "XX" not in text  # the raise's message is never mutated (the raise may be deleted)


def test_ids_name_the_function_and_survive_edits_elsewhere(module: Path) -> None:
    before = {m.id: m.description for m in mutants(module)}
    module.write_text(SOURCE + "\n\ndef g():\n    return 1 + 2\n", encoding="utf-8")
    after = {m.id: m.description for m in mutants(module)}
    assert {k: v for k, v in after.items() if k in before} == before
    assert "sample.py:f:compare:1" in before
    assert before["sample.py:f:compare:1"] == "`x < a` -> `x <= a`"


def test_the_reviewed_list_names_only_mutants_that_exist_with_a_class_and_reason() -> None:
    data = tomllib.loads(run.SURVIVORS.read_text(encoding="utf-8"))
    assert set(data) <= {"jsonl", "sqlite", "parquet"}
    reviewed = run.load_reviewed("jsonl")
    assert reviewed, "the jsonl exporter's survivors are reviewed"
    changes = {m.id: m.description for m in jsonl_mutants()}
    assert sorted(set(reviewed) - set(changes)) == []
    stale = {i: (r.change, changes[i]) for i, r in reviewed.items() if r.change != changes[i]}
    assert stale == {}, "reviewed for another change: review these again"


def test_scores_count_the_classes() -> None:
    sample = jsonl_mutants()[0]
    reviewed = {
        "a": run.Review("equivalent", "", "x"),
        "b": run.Review("format", "", "y"),
        "c": run.Review("contract", "", "z"),
    }
    score = run.Score()
    outcomes = [
        run.Outcome(sample, "jsonl.py", "killed"),
        run.Outcome(sample.__class__("a", 1, "", ""), "jsonl.py", "survived", "survived"),
        run.Outcome(sample.__class__("b", 1, "", ""), "jsonl.py", "survived", "killed"),
        run.Outcome(sample.__class__("c", 1, "", ""), "jsonl.py", "survived", "survived"),
        run.Outcome(sample.__class__("d", 1, "", ""), "jsonl.py", "survived", "survived"),
        run.Outcome(sample.__class__("e", 1, "", ""), "jsonl.py", "error"),
    ]
    for outcome in outcomes:
        score.add(outcome, reviewed)
    assert (score.mutants, score.suite_killed, score.killed) == (5, 1, 2)
    assert (score.equivalent, score.contract, score.non_equivalent) == (1, 2, 4)
    assert score.unreviewed == ["d"]
    assert score.errors == ["e"]
    assert score.suite_score == 0.5


@pytest.mark.parametrize(
    ("code", "said"), [(0, "survived"), (1, "killed"), (2, "killed"), (3, "error"), (4, "error"),
                       (5, "error"), (-9, "error")]
)  # fmt: skip
def test_only_a_failing_test_or_collection_kills(code: int, said: str) -> None:
    assert verdict(code) == said


PLANTED = "jsonl.py:<module>:constant:2"
"""A real jsonl mutant the planted outcomes below say survived."""


@functools.cache
def jsonl_mutants() -> tuple[Mutant, ...]:
    return tuple(mutants(JSONL, label="jsonl.py"))


def _planted(tmp_path: Path, entry: str | None) -> tuple[Path, list[run.Outcome]]:
    (mutant,) = [m for m in jsonl_mutants() if m.id == PLANTED]
    survivors = tmp_path / "survivors.toml"
    survivors.write_text("[jsonl]\n" + (f'"{PLANTED}" = {entry}\n' if entry else ""), "utf-8")
    killed = [m for m in jsonl_mutants() if m.id in SAMPLE_KILLED]
    outcomes = [run.Outcome(m, "jsonl.py", "killed") for m in killed]
    return survivors, [*outcomes, run.Outcome(mutant, "jsonl.py", "survived", "survived")]


def test_the_gate_fails_on_a_planted_unreviewed_survivor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    survivors, outcomes = _planted(tmp_path, None)
    assert run.report("jsonl", outcomes, full=False, survivors=survivors) == 1
    assert f"FAIL: 1 survivor(s) not in survivors.toml: {PLANTED}" in capsys.readouterr().out
    assert run.report("jsonl", outcomes, full=True, survivors=survivors) == 1


def test_the_gate_fails_on_a_survivor_reviewed_for_another_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = '{ class = "equivalent", change = "`x = 1` deleted", reason = "an earlier code\'s" }'
    survivors, outcomes = _planted(tmp_path, old)
    assert run.report("jsonl", outcomes, full=False, survivors=survivors) == 1
    out = capsys.readouterr().out
    assert (
        f"reviewed for another change (review them again): {PLANTED} (reviewed for `x = 1`" in out
    )


def test_the_gate_passes_a_survivor_reviewed_for_its_change(tmp_path: Path) -> None:
    (change,) = [m.description for m in jsonl_mutants() if m.id == PLANTED]
    entry = f'{{ class = "equivalent", change = "{change}", reason = "a larger buffer" }}'
    survivors, outcomes = _planted(tmp_path, entry)
    assert run.report("jsonl", outcomes, full=False, survivors=survivors) == 0


def test_the_gate_fails_when_pytest_tested_nothing_or_nothing_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    survivors, outcomes = _planted(tmp_path, None)
    errored = [run.Outcome(outcomes[0].mutant, "jsonl.py", "error")]
    assert run.report("jsonl", errored, full=False, survivors=survivors) == 1
    assert "1 mutant(s) pytest could not test" in capsys.readouterr().out
    assert run.report("jsonl", [], full=False, survivors=survivors) == 1
    assert "no mutant ran" in capsys.readouterr().out


def test_a_review_without_its_change_is_refused(tmp_path: Path) -> None:
    survivors = tmp_path / "survivors.toml"
    survivors.write_text(f'[jsonl]\n"{PLANTED}" = {{ class = "equivalent", reason = "r" }}\n')
    with pytest.raises(SystemExit, match="the change it was reviewed for"):
        run.load_reviewed("jsonl", survivors)


def test_a_fixed_sample_is_killed_by_the_suite_and_a_reviewed_survivor_survives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = JSONL.read_text(encoding="utf-8")
    target = run.jsonl_target()
    selected = run.select(target, [*SAMPLE_KILLED, SAMPLE_SURVIVOR])
    assert len(selected) == len(SAMPLE_KILLED) + 1
    found = run.run_all(target, selected, 2, tmp_path / "work", (600, 600))
    outcomes = {o.mutant.id: o for o in found}
    assert [i for i in SAMPLE_KILLED if not outcomes[i].killed_by_suite] == []
    survivor = outcomes[SAMPLE_SURVIVOR]
    assert (survivor.suite, survivor.own) == ("survived", "survived")
    assert run.load_reviewed("jsonl")[SAMPLE_SURVIVOR].kind == "equivalent"
    assert JSONL.read_text(encoding="utf-8") == before  # mutants live in the workers' copies
    # the gate on these real outcomes: passes with the reviewed list, fails without the entry
    assert run.report("jsonl", found, full=False) == 0
    planted = tmp_path / "survivors.toml"
    kept = [ln for ln in run.SURVIVORS.read_text("utf-8").splitlines() if SAMPLE_SURVIVOR not in ln]
    planted.write_text("\n".join(kept) + "\n", encoding="utf-8")
    assert run.report("jsonl", found, full=False, survivors=planted) == 1
    assert f"not in survivors.toml: {SAMPLE_SURVIVOR}" in capsys.readouterr().out


def test_a_mutant_that_stops_pytest_is_killed_when_the_unmutated_code_passes(
    tmp_path: Path,
) -> None:
    """A conftest importing the package stops pytest with a usage error (exit 4) on a
    mutant that breaks the import: the mutant's doing, so killed; a run that fails
    without the mutant too tested nothing."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text("VALUE = 1\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text("import pkg.mod\n")
    (tests / "test_it.py").write_text(
        "import pkg.mod\n\ndef test_it():\n    assert pkg.mod.VALUE\n"
    )
    copy = PackageCopy.make(package, tmp_path / "copy")  # first on PYTHONPATH; run from tests/
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)]
    broken = Mutant("mod.py:<module>:x:1", 1, "", "raise ImportError('mutated')\n")
    assert copy.with_mutant("mod.py", broken, command, tests, 120) == "killed"
    assert copy.with_mutant("mod.py", None, command, tests, 120) == "survived"
    nothing = [*command[:-1], str(tests / "no_such_test.py")]
    assert copy.with_mutant("mod.py", broken, nothing, tests, 120) == "error"
    assert (package / "mod.py").read_text() == "VALUE = 1\n"


def test_a_saved_run_matches_by_id_and_change(tmp_path: Path) -> None:
    """``mkdir(parents=True, exist_ok=True)`` gives two "True -> False" mutants on one
    line: a saved run reported again gives each its own outcome (matching by line and
    change alone once gave both the first one's, and a survivor read as killed). An edit
    above moves lines, not ids: the outcomes still match; an edit in the function that
    moves an id onto another change leaves that mutant out."""
    first = Mutant("m.py:f:constant:1", 3, "`True` -> `False`", "")
    second = Mutant("m.py:f:constant:2", 3, "`True` -> `False`", "")
    saved = tmp_path / "run.json"
    saved.write_text(
        json.dumps(
            [
                {"id": m.id, "module": "m.py", "line": 3, "description": m.description}
                | {"suite": suite, "own": "survived", "seconds": 1.0}
                for m, suite in ((first, "survived"), (second, "killed"))
            ]
        ),
        encoding="utf-8",
    )
    outcomes = run.saved_outcomes(saved, [("m.py", first), ("m.py", second)])
    assert [(o.mutant.id, o.suite) for o in outcomes] == [
        ("m.py:f:constant:1", "survived"),
        ("m.py:f:constant:2", "killed"),
    ]
    moved = Mutant(first.id, 9, first.description, "")
    changed = Mutant(second.id, 3, "`0` -> `1`", "")
    outcomes = run.saved_outcomes(saved, [("m.py", moved), ("m.py", changed)])
    assert [(o.mutant.line, o.suite) for o in outcomes] == [(9, "survived")]
