"""Stream selection (the ``export_streams`` setting) and ExporterContext."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from traceml_exporter_sdk import (
    ALL_STREAMS,
    EXPORT_STREAM_NAMES,
    RECORD_TYPES,
    ExporterContext,
    parse_export_streams,
)

# The contract's record table, in its order.
RECORD_TABLE = (
    "step_time",
    "step_memory",
    "system",
    "system_gpu",
    "process",
    "runtime_environment",
    "stdout_stderr",
)


def test_the_setting_accepts_exactly_the_five_names() -> None:
    assert set(EXPORT_STREAM_NAMES) == {"step_time", "step_memory", "process", "system", "all"}


def test_all_streams_is_the_record_table_in_order() -> None:
    assert ALL_STREAMS == RECORD_TABLE
    assert tuple(t.STREAM for t in RECORD_TYPES) == RECORD_TABLE


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("step_time", ("step_time",)),
        ("step_memory", ("step_memory",)),
        ("process", ("process",)),
        ("system", ("system", "system_gpu")),
        ("all", RECORD_TABLE),
    ],
)
def test_each_name_selects_its_streams(value: str, expected: tuple[str, ...]) -> None:
    assert parse_export_streams(value) == expected


def test_default_is_step_time() -> None:
    assert parse_export_streams() == ("step_time",)
    assert parse_export_streams(None) == ("step_time",)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("step_time,process", ("step_time", "process")),
        (" step_time , process ", ("step_time", "process")),
        ("process,step_time", ("step_time", "process")),
        ("system, step_memory", ("step_memory", "system", "system_gpu")),
        ("\tprocess,\tsystem ", ("system", "system_gpu", "process")),
        ("step_time,step_time", ("step_time",)),
        ("all,step_time", RECORD_TABLE),
        ("step_memory,all", RECORD_TABLE),
        ("process,system,step_memory,step_time", RECORD_TABLE[:5]),
    ],
)
def test_comma_separated_names_give_the_union_in_record_table_order(
    value: str, expected: tuple[str, ...]
) -> None:
    assert parse_export_streams(value) == expected


@pytest.mark.parametrize("value", ["step_time,", ",step_time", "step_time,,process"])
def test_empty_items_between_commas_are_ignored(value: str) -> None:
    assert "step_time" in parse_export_streams(value)


def test_runtime_environment_and_stdout_stderr_only_through_all() -> None:
    selectable = set()
    for name in EXPORT_STREAM_NAMES:
        if name != "all":
            selectable |= set(parse_export_streams(name))
    assert "runtime_environment" not in selectable
    assert "stdout_stderr" not in selectable
    assert {"runtime_environment", "stdout_stderr"} <= set(parse_export_streams("all"))


def _assert_lists_supported_names(message: str) -> None:
    for name in ("step_time", "step_memory", "process", "system", "all"):
        assert name in message


@pytest.mark.parametrize(
    "value",
    [
        "gpu",
        "system_gpu",  # a STREAM, but not a setting name
        "runtime_environment",
        "stdout_stderr",
        "Step_Time",
        "step time",
        "step_time;process",
        "step_time,bogus",
        "jsonl",
    ],
)
def test_unknown_name_raises_listing_the_supported_names(value: str) -> None:
    with pytest.raises(ValueError, match="unknown name") as info:
        parse_export_streams(value)
    _assert_lists_supported_names(str(info.value))


@pytest.mark.parametrize("value", ["", " ", ",", " , ", ",,", "\t"])
def test_a_value_that_names_no_stream_raises_listing_the_supported_names(value: str) -> None:
    with pytest.raises(ValueError, match="names no stream") as info:
        parse_export_streams(value)
    _assert_lists_supported_names(str(info.value))


@pytest.mark.parametrize("value", [["step_time"], 1, b"step_time"])
def test_a_value_that_is_not_a_string_raises(value: object) -> None:
    with pytest.raises(ValueError, match="string") as info:
        parse_export_streams(value)  # type: ignore[arg-type]
    _assert_lists_supported_names(str(info.value))


# -- ExporterContext -------------------------------------------------------------


def test_context_derives_export_dir_and_creates_nothing(tmp_path: Path) -> None:
    root = tmp_path / "logs" / "run-1"
    context = ExporterContext.create(root, "system,step_time", exporter_hostname=True)
    assert context.session_root == root
    assert context.export_dir == root / "aggregator" / "export"
    assert context.include_hostname is True
    assert context.streams == ("step_time", "system", "system_gpu")
    assert not (tmp_path / "logs").exists()


def test_context_defaults(tmp_path: Path) -> None:
    context = ExporterContext.create(str(tmp_path / "run"))
    assert isinstance(context.session_root, Path)
    assert context.export_dir == tmp_path / "run" / "aggregator" / "export"
    assert context.include_hostname is False
    assert context.streams == ("step_time",)


def test_context_rejects_a_bad_streams_setting(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="supported names"):
        ExporterContext.create(tmp_path, " , ")


def test_context_is_frozen(tmp_path: Path) -> None:
    context = ExporterContext.create(tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.streams = ("all",)  # type: ignore[misc]
