"""``check``: the conformance suite against any importable module:factory, summarised."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_helpers import error_lines, run_cli

SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped$")

FACTORY_OPENS_A_FILE = """
import tempfile

class Eager:
    def __init__(self, handle):
        self.handle = handle
    def open(self):
        pass
    def write(self, records):
        pass
    def flush(self):
        pass
    def close(self, *, dropped_batches=0):
        self.handle.close()

def make(context):
    return Eager(tempfile.TemporaryFile())  # a resource made in the factory: not inert
"""

FACTORY_CONNECTS = """
import sqlite3

class Connected:
    def __init__(self, context):
        context.export_dir.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(context.export_dir / "index.db")  # on the main thread
    def open(self):
        self.db.execute("CREATE TABLE IF NOT EXISTS t (n INTEGER)")
    def write(self, records):
        pass
    def flush(self):
        pass
    def close(self, *, dropped_batches=0):
        self.db.close()

def make(context):
    return Connected(context)
"""

ONE_FILE = (Path(__file__).resolve().parents[1] / "one_file_exporter.py").read_text(
    encoding="utf-8"
)
ONE_FILE += """

def read_back(context):
    out = {}
    path = context.export_dir / "records.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        data = json.loads(line)
        out.setdefault(data["stream"], []).append(data)
    return out
"""


def _counts(stdout: str) -> tuple[int, int, int]:
    match = SUMMARY.match(stdout.splitlines()[-1])
    assert match, stdout
    passed, failed, skipped = (int(g) for g in match.groups())
    return passed, failed, skipped


@pytest.fixture
def exporters(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "eager.py").write_text(FACTORY_OPENS_A_FILE)
    (src / "connected.py").write_text(FACTORY_CONNECTS)
    (src / "not_importable.py").write_text("import no_such_dependency_here\n")
    (src / "one_file.py").write_text(ONE_FILE)
    return src


def test_builtin_jsonl_passes_every_check(tmp_path: Path) -> None:
    result = run_cli("check", "jsonl", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == "conformance suite for jsonl"
    assert any(
        re.fullmatch(r"  throughput [\d,]+ records/s \(floor [\d,]+\)", line) for line in lines
    )
    passed, failed, skipped = _counts(result.stdout)
    assert passed >= 25
    # a file sink has no fault waiting cannot fix, and JSON has no NaN (the jsonl
    # exporter's declared limitation): those two checks are skipped, with why
    assert (failed, skipped) == (0, 2)
    assert "  skipped  test_failure_behaviour[permanent_fault_marked]: " in result.stdout
    assert "  skipped  test_data_fidelity[special_floats]: " in result.stdout


def test_failing_checks_are_named_with_the_reason(tmp_path: Path, exporters: Path) -> None:
    result = run_cli("check", "eager:make", cwd=tmp_path, pythonpath=[exporters])
    assert result.returncode == 1
    failed_lines = [line for line in result.stdout.splitlines() if line.startswith("  FAILED ")]
    assert any(
        line.startswith("  FAILED   test_thread_confinement[factory_is_inert]: AssertionError: ")
        for line in failed_lines
    ), result.stdout
    _, failed, _ = _counts(result.stdout)
    assert failed >= 1
    [line] = error_lines(result)
    assert re.fullmatch(
        rf"traceml-exporter: error: {failed} of \d+ conformance checks failed for eager:make "
        r"\(--verbose shows pytest's report\)",
        line,
    )


def test_a_cascade_is_named_once_first_with_its_hint(tmp_path: Path, exporters: Path) -> None:
    """A connection made in the factory fails every run: one CAUSE line says so, first."""
    result = run_cli(
        "check",
        "connected:make",
        "--",
        "-k",
        "lifecycle or thread_confinement",
        cwd=tmp_path,
        pythonpath=[exporters],
    )
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "conformance suite for connected:make"
    assert re.fullmatch(
        r"  CAUSE    (\d+) checks failed from one cause: the factory made a file, a connection "
        r"or a thread \(factory_is_inert\): create connections, clients and files in open\(\), "
        r"not in the factory",
        lines[1],
    ), result.stdout
    explained = int(lines[1].split()[1])
    _, failed, _ = _counts(result.stdout)
    assert explained == failed >= 5
    assert not [line for line in lines if line.startswith("  FAILED ")], "all explained"
    [line] = error_lines(result)
    assert f"{failed} from one cause" in line


def test_a_module_that_does_not_import_is_one_line(tmp_path: Path, exporters: Path) -> None:
    result = run_cli("check", "not_importable:make", cwd=tmp_path, pythonpath=[exporters])
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stdout == ""
    assert error_lines(result) == [
        "traceml-exporter: error: not_importable:make: module 'not_importable' does not import "
        "(ModuleNotFoundError: No module named 'no_such_dependency_here'); install its package "
        "or put the folder that holds it on PYTHONPATH"
    ]


def test_skips_have_reasons_and_read_back_turns_fidelity_on(
    tmp_path: Path, exporters: Path
) -> None:
    # The contract's example, verbatim, keeps its file open when a write raises, and its
    # open refuses a second instance on the run: the checks it fails are left out.
    leaves_out = (
        "--",
        "-k",
        "not (failure_releases_resources or new_instance_after_outage or restart_after_kill)",
    )
    without = run_cli(
        "check", "one_file:make_exporter", *leaves_out, cwd=tmp_path, pythonpath=[exporters]
    )
    assert without.returncode == 0, without.stdout + without.stderr
    skipped_lines = [line for line in without.stdout.splitlines() if line.startswith("  skipped ")]
    assert any(
        line.startswith("  skipped  ")
        and "test_data_fidelity[" in line
        and "--read-back MODULE:FUNCTION" in line
        and "traceml_exporter_sdk.testing:read_jsonl" in line
        and "--project" in line
        for line in skipped_lines
    ), without.stdout
    _, _, skipped_without = _counts(without.stdout)
    assert skipped_without > 0

    with_read_back = run_cli(
        "check",
        "one_file:make_exporter",
        "--read-back",
        "one_file:read_back",
        *leaves_out,
        cwd=tmp_path,
        pythonpath=[exporters],
    )
    assert with_read_back.returncode == 0, with_read_back.stdout + with_read_back.stderr
    assert "test_data_fidelity[" not in with_read_back.stdout
    _, failed, skipped_with = _counts(with_read_back.stdout)
    assert failed == 0
    assert skipped_with < skipped_without


def test_pytest_arguments_after_double_dash(tmp_path: Path) -> None:
    full = _counts(run_cli("check", "jsonl", cwd=tmp_path).stdout)
    some = run_cli("check", "jsonl", "--", "-k", "lifecycle", cwd=tmp_path)
    assert some.returncode == 0, some.stdout + some.stderr
    passed, failed, _ = _counts(some.stdout)
    assert 0 < passed < full[0]
    assert failed == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["jsonl", "--", "--no-such-option"],
            "traceml-exporter: error: pytest did not run the suite (exit 4): python -m pytest: "
            "error: unrecognized arguments: --no-such-option",
        ),
        (
            ["jsonl", "--", "-k", "no_check_is_named_this"],
            "traceml-exporter: error: no conformance check ran for jsonl (pytest exit 5); check "
            "the pytest arguments after '--'",
        ),
    ],
)
def test_bad_pytest_arguments_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    result = run_cli("check", *args, cwd=tmp_path)
    assert result.returncode == 2
    assert error_lines(result) == [message]


def test_malformed_spec_exit_2(tmp_path: Path) -> None:
    result = run_cli("check", "pkg/mod.py:make", cwd=tmp_path)
    assert result.returncode == 2
    [line] = error_lines(result)
    assert line.startswith("traceml-exporter: error: exporter setting 'pkg/mod.py:make': ")


def test_without_pytest_exit_5(tmp_path: Path) -> None:
    result = run_cli(
        "check", "jsonl", cwd=tmp_path, prelude="import sys\nsys.modules['pytest'] = None"
    )
    assert result.returncode == 5
    [line] = error_lines(result)
    assert re.fullmatch(
        r"traceml-exporter: error: check needs pytest; install it with "
        r"pip install '(traceml-exporter-sdk|/\S+)\[new,testing\]'",
        line,
    ), line


HOSTILE_CONFTEST = """
import pytest

@pytest.fixture(autouse=True)
def everything_fails_here():
    raise RuntimeError("a conftest.py of the folder check was started from")
"""

PROJECT_SUITE = """
import json

from traceml_exporter_sdk.testing import ExporterConformance


class TestJsonl(ExporterConformance):
    factory = "jsonl"

    def break_sink(self, context):
        # the project's own way to break its sink, which the default would not find
        (context.export_dir / "BROKEN").write_text("")
        super().break_sink(context)

    def repair_sink(self, context):
        super().repair_sink(context)
        (context.export_dir / "BROKEN").unlink()


def test_not_a_check():
    raise AssertionError("check runs the conformance class's checks only")
"""


def _project(root: Path) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_conformance.py").write_text(PROJECT_SUITE)
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = ["-ra"]\n')
    return root


def test_the_folder_check_starts_from_changes_nothing(tmp_path: Path, exporters: Path) -> None:
    """SPEC runs in a folder of its own: a conftest.py where check starts is not collected;
    a module there still imports, as `python -m` finds it."""
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    (hostile / "conftest.py").write_text(HOSTILE_CONFTEST)
    (hostile / "eager_here.py").write_text(FACTORY_OPENS_A_FILE)
    clean = tmp_path / "clean"
    clean.mkdir()
    there = run_cli("check", "eager_here:make", cwd=hostile)
    elsewhere = run_cli("check", "eager_here:make", cwd=clean, pythonpath=[hostile])
    assert there.returncode == elsewhere.returncode == 1, there.stdout + there.stderr
    assert "conftest.py of the folder" not in there.stdout
    assert _counts(there.stdout) == _counts(elsewhere.stdout)
    assert _counts(there.stdout)[1] >= 1  # the factory that opens a file still fails


def test_a_project_is_checked_with_its_own_class_from_any_folder(tmp_path: Path) -> None:
    """No SPEC inside a project (found upwards from the folder) and --project from
    anywhere run the project's conformance class, its hooks, its checks only."""
    project = _project(tmp_path / "my-exporter")
    inside = run_cli("check", cwd=project / "tests")
    outside = run_cli("check", "--project", str(project), cwd=tmp_path)
    for result in (inside, outside):
        assert result.returncode == 0, result.stdout + result.stderr
        passed, failed, skipped = _counts(result.stdout)
        assert failed == 0
        # the class has read_back: only the permanent fault a file sink lacks and the
        # jsonl exporter's declared limitation (JSON has no NaN) are skipped
        assert skipped == 2, result.stdout
        assert "  skipped  test_data_fidelity[special_floats]: " in result.stdout
        assert "test_failure_behaviour[permanent_fault_marked]" in result.stdout
        assert passed >= 40
        assert "not_a_check" not in result.stdout
    assert _counts(inside.stdout) == _counts(outside.stdout)
    assert str(project / "tests" / "test_conformance.py") in inside.stdout.splitlines()[0]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ((), 2, "no SPEC, and no tests/test_conformance.py in"),
        (("--project", "nowhere"), 3, "--project nowhere: no tests/test_conformance.py there"),
        (("jsonl", "--project", "."), 2, "give SPEC or --project, not both"),
    ],
)
def test_bad_project_requests_are_one_line(
    tmp_path: Path, args: tuple[str, ...], code: int, message: str
) -> None:
    result = run_cli("check", *args, cwd=tmp_path)
    assert result.returncode == code, result.stdout + result.stderr
    (line,) = error_lines(result)
    assert message in line


def _package(tmp_path: Path) -> Path:
    """The contract's one-file exporter as the module ``tinyexp.exporter`` of a package."""
    src = tmp_path / "src"
    (src / "tinyexp").mkdir(parents=True)
    (src / "tinyexp" / "__init__.py").write_text("")
    (src / "tinyexp" / "exporter.py").write_text(ONE_FILE)
    return src


def test_mutants_scores_each_module_and_names_the_survivors(tmp_path: Path) -> None:
    """Every mutant of the package meets the suite (here two checks, which see no records):
    one that stops the file being made is killed, one that keeps hostname survives."""
    src = _package(tmp_path)
    before = (src / "tinyexp" / "exporter.py").read_text()
    result = run_cli(
        "check",
        "tinyexp.exporter:make_exporter",
        "--mutants",
        "--jobs",
        "2",
        "--",
        "-k",
        "open_close or flush_twice",
        cwd=tmp_path,
        pythonpath=[src],
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("mutants of tinyexp: "))
    total = int(lines[start].split(": ")[1].split()[0])
    score = re.fullmatch(
        r"  exporter\.py +(\d+) mutants, the suite kills +(\d+) \(\d+\.\d%\)", lines[start + 1]
    )
    assert score, lines[start + 1]
    assert int(score[1]) == total  # the factory is the entry point: its mutants run too
    survivors = [line.split()[1] for line in lines if line.startswith("  survivor ")]
    assert "exporter.py:OneFileExporter.write:delete:2" in survivors  # hostname kept
    assert "exporter.py:OneFileExporter.open:delete:2" not in survivors  # no file made
    assert "exporter.py:make_exporter:return:1" not in survivors
    assert len(survivors) == total - int(score[2])
    assert lines[-1].startswith(f"{total} mutants, {score[2]} killed, {len(survivors)} survived")
    assert (src / "tinyexp" / "exporter.py").read_text() == before


def test_mutants_need_a_passing_suite_first(tmp_path: Path) -> None:
    src = _package(tmp_path)
    (src / "tinyexp" / "exporter.py").write_text(ONE_FILE.replace('"x"', '"r"'))
    result = run_cli(
        "check",
        "tinyexp.exporter:make_exporter",
        "--mutants",
        "--",
        "-k",
        "open_close",
        cwd=tmp_path,
        pythonpath=[src],
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "mutants of" not in result.stdout
