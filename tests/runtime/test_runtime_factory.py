"""The exporter setting: its form check (never imports) and the module:factory loader."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import FAILURES, GOOD, WriteModule, failing_setting
from traceml_exporter_sdk import (
    ExporterContext,
    ExporterSettingError,
    FactoryFailure,
    JsonlExporter,
    load_exporter,
    validate_exporter_setting,
)

ACCEPTED = (
    "accepted: 'jsonl', or 'module:factory' - a dotted module path, one colon and one identifier"
)

# -- form check ------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "jsonl",
        "my_exporters:make_exporter",
        "pkg.sub.mod:make_exporter",
        "_private._mod:_factory",
        "a1.b2:c3",
        "Exporters:Make",
        "modülé:fabrik",  # identifiers need not be ASCII
    ],
)
def test_accepted_forms_come_back_unchanged(value: str) -> None:
    assert validate_exporter_setting(value) == value


def test_form_check_never_imports(write_module: WriteModule, tmp_path: Path) -> None:
    """A module that would fail to import, and one that is not there, both pass the check."""
    name = write_module("explodes", "raise RuntimeError('imported!')\n")
    assert validate_exporter_setting(f"{name}:make_exporter") == f"{name}:make_exporter"
    assert name not in sys.modules
    missing = "rt_surely_not_installed_pkg.sub"
    assert validate_exporter_setting(f"{missing}:make") == f"{missing}:make"
    assert "rt_surely_not_installed_pkg" not in sys.modules


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "empty"),
        (":", "empty"),
        (":x", "module path before the colon is empty"),
        ("x:", "factory name after the colon is empty"),
        ("jsonl:", "factory name after the colon is empty"),
        ("pkg.:x", "empty part"),
        (".pkg:x", "empty part"),
        ("pkg..sub:x", "empty part"),
        ("a::b", "exactly one colon, found 2"),
        ("a:b:c", "exactly one colon, found 2"),
        ("my_exporters", "exactly one colon, found 0"),
        ("JSONL", "exactly one colon, found 0"),
        (" my_exporters:make", "whitespace"),
        ("my_exporters:make ", "whitespace"),
        ("my_exporters :make", "whitespace"),
        ("my_exporters: make", "whitespace"),
        ("my exporters:make", "whitespace"),
        ("my_exporters:make\n", "whitespace"),
        ("my_exporters:\tmake", "whitespace"),
        ("path/to/mod:make", "file path"),
        ("/abs/mod.py:make", "file path"),
        ("./mod:make", "file path"),
        ("C:\\mods\\x:make", "file path"),
        ("my_exporters.py", "file path"),
        ("x:y.z", "must be one identifier, not a dotted path"),
        ("pkg.mod:Factory.create", "must be one identifier, not a dotted path"),
        ("class:make", "'class' in the module path is not an identifier (or is a keyword)"),
        ("pkg.import.sub:make", "'import' in the module path"),
        ("mod:def", "the factory 'def' is not an identifier (or is a keyword)"),
        ("mod:None", "the factory 'None'"),
        ("1mod:make", "'1mod' in the module path"),
        ("mod:1make", "the factory '1make'"),
        ("my-exporters:make", "'my-exporters' in the module path"),
        ("mod:make()", "the factory 'make()'"),
    ],
)
def test_rejected_forms_name_the_problem_and_show_the_accepted_form(
    value: str, problem: str
) -> None:
    with pytest.raises(ExporterSettingError) as info:
        validate_exporter_setting(value)
    message = str(info.value)
    assert problem in message
    assert ACCEPTED in message
    assert repr(value) in message


@pytest.mark.parametrize("value", [None, 3, b"jsonl", ["jsonl"]])
def test_a_setting_that_is_not_a_string_is_rejected(value: object) -> None:
    with pytest.raises(ExporterSettingError, match="must be a string") as info:
        validate_exporter_setting(value)
    assert ACCEPTED in str(info.value)


def test_setting_error_is_a_value_error() -> None:
    assert issubclass(ExporterSettingError, ValueError)


# -- loader ----------------------------------------------------------------------


@pytest.fixture
def context(tmp_path: Path) -> ExporterContext:
    return ExporterContext.create(tmp_path / "session", "all")


def test_loader_calls_the_factory_once_with_the_context_on_the_calling_thread(
    write_module: WriteModule, context: ExporterContext
) -> None:
    name = write_module("good", GOOD)
    results: list[Any] = []
    caller = threading.Thread(
        target=lambda: results.append(load_exporter(f"{name}:make_exporter", context))
    )
    caller.start()
    caller.join()
    module = sys.modules[name]
    assert isinstance(results[0], module.Exporter)
    calls = module.CALLS
    assert calls == [(caller.ident, context)]
    assert not context.export_dir.exists()


def test_loader_gives_the_builtin_jsonl_exporter(context: ExporterContext) -> None:
    assert isinstance(load_exporter("jsonl", context), JsonlExporter)


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_every_failure_becomes_a_factory_failure_naming_the_setting(
    write_module: WriteModule, context: ExporterContext, case: str
) -> None:
    setting, kind, text = failing_setting(write_module, case)
    failure = load_exporter(setting, context)  # nothing escapes: no exception here
    assert isinstance(failure, FactoryFailure)
    assert failure.setting == setting
    assert failure.kind == kind
    assert text in failure.error
    assert failure.message.startswith("[TraceML] ")
    assert repr(setting) in failure.message
    assert text in failure.message


def test_a_bad_form_is_a_setting_failure_and_imports_nothing(
    write_module: WriteModule, context: ExporterContext
) -> None:
    name = write_module("explodes", "raise RuntimeError('imported!')\n")
    failure = load_exporter(f"{name}.:make", context)
    assert isinstance(failure, FactoryFailure)
    assert failure.kind == "setting"
    assert ACCEPTED in failure.error
    assert name not in sys.modules
