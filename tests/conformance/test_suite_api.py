"""The suite's own API: ids, skip/xfail, configuration errors, hooks, plugin options, docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from traceml_exporter_sdk.testing import (
    CHECKS,
    ConformanceConfigError,
    ExporterConformance,
    check_names,
)
from traceml_exporter_sdk.testing.checks import CHECKS_BY_NAME
from traceml_exporter_sdk.testing.configuration import BUILTIN_JSONL_LIMITS
from traceml_exporter_sdk.testing.conformance import GROUPS

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO.parent / "shared" / "export-records-contract.txt"
"""The contract's copy in ``shared/`` beside the repository, where the project keeps it."""
ALL = {check.test_id for check in CHECKS}

JSONL = "traceml_exporter_sdk.jsonl:make_exporter"


def outcomes(recorder: pytest.HookRecorder) -> dict[str, str]:
    """Test id -> outcome of the call phase (a setup failure or skip counts too)."""
    out: dict[str, str] = {}
    for report in recorder.getreports("pytest_runtest_logreport"):
        name = report.nodeid.rpartition("::")[2]
        if report.failed or report.skipped or report.when == "call":
            out.setdefault(name, report.outcome)
            if report.failed:
                out[name] = "failed"
    return out


def failures(recorder: pytest.HookRecorder) -> str:
    """The failed reports' ids and the last lines of their text, for an assertion message."""
    return "\n".join(
        f"{report.nodeid} ({report.when}): {report.longreprtext[-1500:]}"
        for report in recorder.getreports("pytest_runtest_logreport")
        if report.failed
    )


# -- ids and inheritance ---------------------------------------------------------------


def test_the_groups_are_listed_once_and_each_is_a_module_and_a_test() -> None:
    """``GROUP_RULES`` is the one list: each group is the module of ``checks`` of its name
    (its checks, in suite order) and the test ``test_<group>`` with its rule as docstring;
    a module or a test of no listed group would be a check that never runs."""
    from traceml_exporter_sdk.testing import checks
    from traceml_exporter_sdk.testing.registry import GROUP_RULES

    assert tuple(GROUP_RULES) == GROUPS
    folder = Path(checks.__file__).parent
    modules = sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))
    assert modules == sorted(GROUPS)
    assert [check.group for check in CHECKS] == sorted(
        (check.group for check in CHECKS), key=GROUPS.index
    )
    tests = sorted(name for name in dir(ExporterConformance) if name.startswith("test_"))
    assert tests == sorted(f"test_{group}" for group in GROUPS)
    for group, rule in GROUP_RULES.items():
        assert getattr(ExporterConformance, f"test_{group}").__doc__ == rule


def test_the_suites_defaults_are_the_settings_defaults() -> None:
    from dataclasses import fields

    from traceml_exporter_sdk.testing.environment import Settings

    for field in fields(Settings):
        assert getattr(ExporterConformance, field.name) == field.default, field.name


def test_every_check_is_collected_with_a_readable_id(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        f"""
        from traceml_exporter_sdk.testing import ExporterConformance

        class TestX(ExporterConformance):
            factory = {JSONL!r}
        """
    )
    result = pytester.runpytest_inprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    ids = {line.rpartition("::")[2] for line in result.outlines if "::" in line}
    assert ids == ALL
    assert "test_thread_confinement[factory_is_inert]" in ids
    assert len(ids) == len(CHECKS) == len(check_names())


def test_a_subclass_of_a_subclass_inherits_every_check_and_its_settings(
    pytester: pytest.Pytester,
) -> None:
    """Checks come from the SDK's registry, so nothing is listed (or dropped) by hand."""
    pytester.makepyfile(
        f"""
        from traceml_exporter_sdk.testing import ExporterConformance

        class Base(ExporterConformance):
            factory = {JSONL!r}
            skip_checks = {{"throughput": "measured elsewhere"}}

        class TestChild(Base):
            pass
        """
    )
    result = outcomes(
        pytester.inline_run("-p", "no:cacheprovider", "-k", "lifecycle or throughput")
    )
    assert result["test_throughput[records_per_second]"] == "skipped"
    lifecycle = {k: v for k, v in result.items() if k.startswith("test_lifecycle")}
    assert set(lifecycle) == {c.test_id for c in CHECKS if c.group == "lifecycle"}
    assert set(lifecycle.values()) == {"passed"}


# -- skip / xfail ------------------------------------------------------------------------


def test_skip_and_xfail_by_check_or_group_name_with_reasons(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        f"""
        from traceml_exporter_sdk.testing import ExporterConformance

        class TestX(ExporterConformance):
            factory = {JSONL!r}
            skip_checks = {{"factory_is_inert": "audited by hand", "importability": "vendored"}}
            xfail_checks = {{"records_per_second": "slow CI runners"}}
        """
    )
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-rsxX", "-k", "confinement or importability or throughput"
    )
    result.stdout.fnmatch_lines(
        [
            "*SKIPPED*factory_is_inert: audited by hand*",
            "*SKIPPED*fresh_subprocess: vendored*",
            "*SKIPPED*import_has_no_side_effects: vendored*",
            "*XPASS*records_per_second*slow CI runners*",
        ]
    )


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        (
            {"skip_checks": {"no_such_check": "why"}},
            "unknown check 'no_such_check'; valid check names: method_signatures, open_close",
        ),
        ({"xfail_checks": {"open_close": ""}}, "xfail_checks['open_close'] needs a reason"),
        ({"skip_checks": {"open_close": None}}, "skip_checks['open_close'] needs a reason"),
        ({"skip_checks": ["open_close"]}, "skip_checks must be a dict of {check name: reason}"),
        (
            {"skip_checks": {"open_close": "a"}, "xfail_checks": {"open_close": "b"}},
            "'open_close' is in both skip_checks and xfail_checks",
        ),
        ({"factory": "my exporter.py"}, "TestBad.factory: exporter setting 'my exporter.py'"),
        ({"factory": 42}, "TestBad.factory must be a 'module:factory' string or a callable"),
        ({"throughput_floor": 0}, "throughput_floor must be a positive number"),
        ({"grace_period": -1}, "grace_period must be a positive number of seconds"),
    ],
)
def test_a_misconfigured_class_is_a_clear_error_at_definition(
    attrs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConformanceConfigError) as info:
        type("TestBad", (ExporterConformance,), attrs)
    assert message in str(info.value)


def test_the_unknown_name_error_lists_every_check_and_group() -> None:
    with pytest.raises(ConformanceConfigError) as info:
        type("TestBad", (ExporterConformance,), {"skip_checks": {"flush": "x"}})
    for name in (*check_names(), *GROUPS):
        assert name in str(info.value)


def test_a_misconfigured_class_fails_collection_with_the_message(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        f"""
        from traceml_exporter_sdk.testing import ExporterConformance

        class TestX(ExporterConformance):
            factory = {JSONL!r}
            skip_checks = {{"factory_is_inert": "  "}}
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(
        ["*ConformanceConfigError*skip_checks?'factory_is_inert'? needs a reason*"]
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED


# -- factory forms ---------------------------------------------------------------------------


def test_factory_may_be_a_callable(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from traceml_exporter_sdk.jsonl import make_exporter
        from traceml_exporter_sdk.testing import ExporterConformance

        class TestX(ExporterConformance):
            factory = make_exporter
        """
    )
    recorder = pytester.inline_run("-p", "no:cacheprovider", "-k", "not throughput")
    result = outcomes(recorder)
    # the jsonl exporter's declared limitation (JSON has no NaN) and the permanent-fault
    # check (a file sink has no fault waiting cannot fix) are skipped, with their reasons
    limits = {CHECKS_BY_NAME[name].test_id for name in BUILTIN_JSONL_LIMITS}
    limits.add("test_failure_behaviour[permanent_fault_marked]")
    assert {k for k, v in result.items() if v != "passed"} == limits, failures(recorder)
    assert {result[k] for k in limits} == {"skipped"}
    assert len(result) == len(CHECKS) - 1


def test_a_missing_or_unimportable_factory_errors_each_check_with_a_clear_message(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        from traceml_exporter_sdk.testing import ExporterConformance

        class TestNone(ExporterConformance):
            pass

        class TestMissing(ExporterConformance):
            factory = "no_such_module_here:make_exporter"
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-k", "open_close")
    result.stdout.fnmatch_lines(
        [
            "*TestNone has no factory: set factory = 'my_pkg.exporter:make_exporter'*",
            "*cannot import 'no_such_module_here'*",
        ]
    )
    result.assert_outcomes(errors=2)


SQLITE_IN_FACTORY = """
import sqlite3

class Exporter:
    def __init__(self, context):
        context.export_dir.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(context.export_dir / "x.db")
    def open(self):
        self.db.execute("CREATE TABLE IF NOT EXISTS t (x)")
    def write(self, records):
        pass
    def flush(self):
        pass
    def close(self, *, dropped_batches=0):
        self.db.close()

def make_exporter(context):
    return Exporter(context)
"""


# The exporter above leaks a connection per factory call on purpose; Python 3.13 warns
# about each unclosed one when it is collected. The in-process suite run inherits this
# test's warning filters, so here those warnings are ignored rather than errors.
LEAKS_CONNECTIONS = pytest.mark.filterwarnings(
    "ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning"
)


@LEAKS_CONNECTIONS
def test_a_factory_that_opens_a_file_is_told_to_move_it_into_open(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        side_effect=SQLITE_IN_FACTORY,
        test_side_effect="""
        from traceml_exporter_sdk.testing import ExporterConformance

        class TestX(ExporterConformance):
            factory = "side_effect:make_exporter"
        """,
    )
    pytester.syspathinsert()
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-k", "factory_is_inert or methods_on_worker_thread"
    )
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*20 factory calls were not inert*sqlite3.connect*",
            "*Create connections, clients and files in open(), not in the factory*",
            "*failed in open: ProgrammingError: SQLite objects created in a thread*",
            "*Create connections, clients and files in open(), not in the factory*",
        ],
        consecutive=False,
    )


@LEAKS_CONNECTIONS
def test_the_summary_names_a_cascades_root_cause_first(pytester: pytest.Pytester) -> None:
    """One cause, its hint and the checks it explains, before pytest's own report."""
    pytester.makepyfile(
        side_effect=SQLITE_IN_FACTORY,
        test_side_effect="""
        from traceml_exporter_sdk.testing import ExporterConformance

        class TestX(ExporterConformance):
            factory = "side_effect:make_exporter"
        """,
    )
    pytester.syspathinsert()
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-k", "lifecycle or inert")
    failed = result.parseoutcomes()["failed"]
    assert failed >= 5
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "TraceML exporter: root cause" in line)
    section = [line for line in lines[start + 1 :] if line]
    assert section[0] == (
        f"{failed} checks failed from one cause: the factory made a file, a connection or a "
        "thread (factory_is_inert): create connections, clients and files in open(), not in the "
        "factory"
    )
    assert section[1].startswith("  in test_side_effect.py::TestX: factory_is_inert, ")
    assert "FAILURES" in section[2]
    # pytest's own report follows, whole: every failure, then the short summary.
    result.stdout.fnmatch_lines(["*short test summary info*"])
    assert sum(line.startswith("FAILED ") for line in lines) == failed


@LEAKS_CONNECTIONS
def test_a_lone_failure_gets_no_root_cause_section(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        side_effect=SQLITE_IN_FACTORY,
        test_side_effect="""
        from traceml_exporter_sdk.testing import ExporterConformance

        class TestX(ExporterConformance):
            factory = "side_effect:make_exporter"
        """,
    )
    pytester.syspathinsert()
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-k", "inert")
    result.assert_outcomes(failed=1)
    assert "root cause" not in result.stdout.str()


# -- hooks -----------------------------------------------------------------------------------

MEMORY_EXPORTER = """
SINK = {"broken": False, "rows": {}}


class MemoryExporter:
    def __init__(self, context):
        self.key = str(context.session_root)

    def open(self):
        SINK["rows"][self.key] = []

    def write(self, records):
        _check()
        SINK["rows"][self.key].extend(r.to_dict() for r in records)

    def flush(self):
        _check()

    def close(self, *, dropped_batches=0):
        pass


def _check():
    if SINK["broken"] == "permanent":
        error = PermissionError("the sink refused the credentials")
        error.permanent = True
        raise error
    if SINK["broken"]:
        raise ConnectionError("sink unreachable")


def make_exporter(context):
    return MemoryExporter(context)
"""


def test_break_sink_and_broken_context_can_be_overridden(pytester: pytest.Pytester) -> None:
    """A sink that is not a file needs the hooks; with them the failure checks pass."""
    pytester.makepyfile(memory_exporter=MEMORY_EXPORTER)
    pytester.makepyfile(
        test_memory="""
        import pytest
        import memory_exporter
        from traceml_exporter_sdk.testing import ExporterConformance

        @pytest.fixture(autouse=True)
        def healthy_sink():
            memory_exporter.SINK["broken"] = False
            yield
            memory_exporter.SINK["broken"] = False

        class TestDefaultHooks(ExporterConformance):
            factory = "memory_exporter:make_exporter"

        class TestOwnHooks(ExporterConformance):
            factory = "memory_exporter:make_exporter"

            def break_sink(self, context):
                memory_exporter.SINK["broken"] = True

            def broken_context(self, context):
                memory_exporter.SINK["broken"] = True
                return context

            def repair_sink(self, context):
                memory_exporter.SINK["broken"] = False

            def break_sink_permanently(self, context):
                memory_exporter.SINK["broken"] = "permanent"

        class TestNoRepair(ExporterConformance):
            factory = "memory_exporter:make_exporter"

            def break_sink(self, context):
                memory_exporter.SINK["broken"] = True
        """
    )
    pytester.syspathinsert()
    recorder = pytester.inline_run("-p", "no:cacheprovider", "-k", "failure_behaviour")
    result = {
        r.nodeid.partition("::")[2]: r.outcome
        for r in recorder.getreports("pytest_runtest_logreport")
        if r.when == "call" or r.outcome != "passed"
    }
    no_repair = {k: v for k, v in result.items() if k.startswith("TestNoRepair::")}
    # break_sink without repair_sink: the outage cycle cannot be run, and says so
    assert no_repair["TestNoRepair::test_failure_behaviour[new_instance_after_outage]"] == "skipped"
    assert no_repair["TestNoRepair::test_failure_behaviour[transient_fault_not_permanent]"] == (
        "passed"
    )
    result = {k: v for k, v in result.items() if k not in no_repair}
    assert result == {
        "TestDefaultHooks::test_failure_behaviour[open_failure_leaks_nothing]": "skipped",
        "TestDefaultHooks::test_failure_behaviour[sink_failure_raised]": "failed",
        "TestDefaultHooks::test_failure_behaviour[no_non_daemon_thread_after_failure]": "skipped",
        # with no read_back, a close that returns normally cannot be told from a swallowed one
        "TestDefaultHooks::test_failure_behaviour[close_failure_raised]": "skipped",
        "TestDefaultHooks::test_failure_behaviour[failure_releases_resources]": "skipped",
        # the default break_sink does not reach this sink: nothing failed to look at
        "TestDefaultHooks::test_failure_behaviour[transient_fault_not_permanent]": "skipped",
        "TestDefaultHooks::test_failure_behaviour[permanent_fault_marked]": "skipped",
        "TestDefaultHooks::test_failure_behaviour[new_instance_after_outage]": "skipped",
        # a sink in memory makes no I/O call to fail and needs no descriptor: nothing leaks
        "TestDefaultHooks::test_failure_behaviour[fault_at_every_io_call]": "passed",
        "TestOwnHooks::test_failure_behaviour[fault_at_every_io_call]": "passed",
        "TestOwnHooks::test_failure_behaviour[open_failure_leaks_nothing]": "passed",
        "TestOwnHooks::test_failure_behaviour[sink_failure_raised]": "passed",
        "TestOwnHooks::test_failure_behaviour[no_non_daemon_thread_after_failure]": "passed",
        "TestOwnHooks::test_failure_behaviour[close_failure_raised]": "skipped",
        "TestOwnHooks::test_failure_behaviour[failure_releases_resources]": "passed",
        "TestOwnHooks::test_failure_behaviour[transient_fault_not_permanent]": "passed",
        "TestOwnHooks::test_failure_behaviour[permanent_fault_marked]": "passed",
        "TestOwnHooks::test_failure_behaviour[new_instance_after_outage]": "passed",
    }


def test_data_fidelity_is_skipped_with_a_reason_without_read_back(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(memory_exporter=MEMORY_EXPORTER)
    pytester.makepyfile(
        test_memory="""
        from traceml_exporter_sdk.testing import ExporterConformance

        class TestX(ExporterConformance):
            factory = "memory_exporter:make_exporter"
        """
    )
    pytester.syspathinsert()
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rs", "-k", "data_fidelity")
    fidelity = [c for c in CHECKS if c.group == "data_fidelity"]
    needs = sum(c.needs_read_back for c in fidelity)
    assert needs == 8
    result.assert_outcomes(skipped=needs, passed=len(fidelity) - needs)
    result.stdout.fnmatch_lines(["*read_back is not implemented for this exporter*"])


def test_read_back_of_the_wrong_shape_is_a_clear_failure(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        f"""
        from traceml_exporter_sdk.testing import ExporterConformance

        class TestX(ExporterConformance):
            factory = {JSONL!r}

            def read_back(self, context):
                return {{"steps": []}}
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-k", "every_record_once")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*read_back returned key 'steps', which is not a STREAM name*"])


# -- plugin options --------------------------------------------------------------------------


def test_spec_option_rejects_a_bad_spec(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--traceml-exporter", "my/file.py"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--traceml-exporter 'my/file.py'*looks like a file path*"])


def test_read_back_option_needs_the_spec_option(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--traceml-read-back", "a:b")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_read_back_option_turns_fidelity_checks_on(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess(
        "-p",
        "no:cacheprovider",
        "--traceml-exporter",
        JSONL,
        "--traceml-read-back",
        "traceml_exporter_sdk.testing.readback:read_jsonl",
        "-k",
        "data_fidelity",
    )
    fidelity = sum(c.group == "data_fidelity" for c in CHECKS)
    limits = len(BUILTIN_JSONL_LIMITS)  # declared: JSON has no NaN
    result.assert_outcomes(passed=fidelity - limits, skipped=limits)


def test_throughput_figure_is_a_user_property_and_in_the_summary(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess(
        "-p",
        "no:cacheprovider",
        "--traceml-exporter",
        "jsonl",
        "-k",
        "throughput",
        f"--junitxml={pytester.path / 'out.xml'}",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*TraceML exporter throughput*",
            "*test_throughput?records_per_second?: *records/s (floor 20,000)",
        ]
    )
    xml = (pytester.path / "out.xml").read_text()
    assert re.search(r'property name="traceml_exporter_records_per_second" value="[0-9.]+"', xml)


# -- docstrings ---------------------------------------------------------------------------------


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
def test_each_check_states_its_rule_and_quotes_the_contract(check: object) -> None:
    doc = check.doc  # type: ignore[attr-defined]
    assert doc.startswith("Rule: ")
    match = re.search(r'Contract: "(.+?)"', doc, re.S)
    assert match, f"{check} quotes no contract sentence"
    if not CONTRACT.is_file():
        pytest.skip(f"the contract text is not beside the repository ({CONTRACT} is missing)")
    quoted = " ".join(match.group(1).split())
    contract = " ".join(CONTRACT.read_text(encoding="utf-8").split())
    assert quoted in contract


def test_docs_describe_every_check() -> None:
    docs = REPO / "docs" / "conformance.md"
    text = docs.read_text(encoding="utf-8")
    missing = [c.name for c in CHECKS if f"`{c.name}`" not in text and c.name not in text]
    assert missing == []
    assert all(f"`test_{group}`" in text for group in GROUPS)


def test_a_restart_without_read_back_is_judged_by_files_cut_in_place(tmp_path: Path) -> None:
    """Without read_back the restart checks look at the first run's files: one emptied in
    place (mode "w") or removed is lost; one replaced whole (a summary rewritten through a
    new file and a rename) is not."""
    from traceml_exporter_sdk.testing._resources import file_states, lost_files

    (tmp_path / "data.jsonl").write_text("a\nb\n")
    (tmp_path / "summary.json").write_text('{"written": 2}')
    (tmp_path / "gone.jsonl").write_text("c\n")
    before = file_states(tmp_path)
    assert lost_files(before, tmp_path) == []
    (tmp_path / "new.json").write_text("{}")
    (tmp_path / "new.json").replace(tmp_path / "summary.json")
    (tmp_path / "data.jsonl").write_text("a\nb\nc\n")
    assert lost_files(before, tmp_path) == []
    (tmp_path / "gone.jsonl").unlink()
    with (tmp_path / "data.jsonl").open("w") as file:  # the restart that truncates
        file.write("c\n")
    assert lost_files(before, tmp_path) == ["data.jsonl", "gone.jsonl"]
