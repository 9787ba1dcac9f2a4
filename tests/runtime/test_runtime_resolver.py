"""The one factory resolver: alias table, then ``module:factory`` imported, never called."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from traceml_exporter_sdk import jsonl
from traceml_exporter_sdk.factory import (
    BUILTIN_ALIASES,
    BUILTIN_EXPORTERS,
    ExporterSettingError,
    FactoryResolutionError,
    factory_target,
    resolve_factory,
)

WriteModule = Callable[[str, str], str]


def test_the_alias_table_names_the_builtin_factory() -> None:
    assert BUILTIN_EXPORTERS == ("jsonl",)
    assert factory_target("jsonl") == "traceml_exporter_sdk.jsonl:make_exporter"
    assert factory_target("pkg.mod:make") == "pkg.mod:make"
    assert resolve_factory("jsonl") is jsonl.make_exporter
    assert resolve_factory(BUILTIN_ALIASES["jsonl"]) is jsonl.make_exporter


def test_the_factory_is_returned_not_called(write_module: WriteModule) -> None:
    name = write_module(
        "counting",
        """
        CALLS = []

        def make_exporter(context):
            CALLS.append(context)
            raise AssertionError("the resolver must not call the factory")
        """,
    )
    factory = resolve_factory(f"{name}:make_exporter")
    assert factory.__name__ == "make_exporter"
    assert factory.__module__ == name
    assert factory.__globals__["CALLS"] == []  # type: ignore[attr-defined]


def test_an_attribute_that_is_not_callable_is_returned_as_it_is(write_module: WriteModule) -> None:
    name = write_module("constant", "make_exporter = 42\n")
    assert resolve_factory(f"{name}:make_exporter") == 42


@pytest.mark.parametrize(
    ("source", "attribute", "kind", "text"),
    [
        ("import rt_surely_missing_dependency\n", "make", "import", "cannot import"),
        ("raise RuntimeError('boom')\n", "make", "exception", "raised RuntimeError('boom')"),
        ("raise SystemExit(3)\n", "make", "system_exit", "SystemExit(3)"),
        ("x = 1\n", "make", "attribute", "has no attribute 'make'"),
        (
            "def __getattr__(name):\n    raise SystemExit(4)\n",
            "make",
            "system_exit",
            "reading 'make'",
        ),
    ],
    ids=["import", "exception", "system-exit", "attribute", "getattr-exit"],
)
def test_each_failure_is_a_resolution_error_with_the_loaders_kind(
    write_module: WriteModule, source: str, attribute: str, kind: str, text: str
) -> None:
    name = write_module("failing", source)
    with pytest.raises(FactoryResolutionError) as info:
        resolve_factory(f"{name}:{attribute}")
    assert info.value.kind == kind
    assert text in info.value.error
    failure = info.value.failure
    assert (failure.setting, failure.kind, failure.error) == (
        f"{name}:{attribute}",
        kind,
        info.value.error,
    )


def test_a_bad_form_is_a_setting_error_and_imports_nothing() -> None:
    with pytest.raises(ExporterSettingError, match="looks like a file path"):
        resolve_factory("my/exporter.py:make")


def test_the_unreleased_old_name_of_the_form_validation_is_gone() -> None:
    """0.1.0 was never released: its deprecated alias went rather than being kept."""
    import traceml_exporter_sdk

    assert not hasattr(traceml_exporter_sdk, "check_exporter_setting")
