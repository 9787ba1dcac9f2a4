"""``schema``: JSON Schemas that the jsonl exporter's real output validates against."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import all_stream_payloads, error_lines, read_export, run_cli, write_jsonl
from jsonschema import Draft202012Validator
from traceml_exporter_sdk import RECORD_TYPES
from traceml_exporter_sdk.cli.record_schema import FIELD_NOTES, missing_notes
from traceml_exporter_sdk.streams import ALL_STREAMS


def _schema(tmp_path: Path, *args: str) -> dict[str, Any]:
    result = run_cli("schema", *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    schema: dict[str, Any] = json.loads(result.stdout)
    Draft202012Validator.check_schema(schema)
    return schema


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Path]:
    """The jsonl exporter's output for every stream, with and without hostname."""
    base = tmp_path_factory.mktemp("schema-export")
    payloads = write_jsonl(base / "payloads.jsonl", all_stream_payloads())
    roots = {}
    for hostname in (False, True):
        root = base / f"run-hostname-{hostname}"
        args = ["replay", "jsonl", "--payloads", str(payloads), "--streams", "all"]
        args += ["--session-root", str(root)] + (["--hostname"] if hostname else [])
        result = run_cli(*args, cwd=base)
        assert result.returncode == 0, result.stdout + result.stderr
        roots[hostname] = root
    return roots


def test_every_field_has_contract_text() -> None:
    assert missing_notes() == []
    streams = {stream for stream, _ in FIELD_NOTES}
    assert streams <= {*ALL_STREAMS, "*", "step_time.events"}


@pytest.mark.parametrize("stream", ALL_STREAMS)
@pytest.mark.parametrize("hostname", [False, True], ids=["no-hostname", "hostname"])
def test_jsonl_output_validates_against_the_stream_schema(
    stream: str, hostname: bool, exported: dict[bool, Path], tmp_path: Path
) -> None:
    schema = _schema(tmp_path, "--stream", stream)
    combined = _schema(tmp_path)
    records, closing = read_export(exported[hostname], stream)
    assert records, f"the corpus gave no {stream} record"
    assert len(closing) == 1
    for validator in (Draft202012Validator(schema), Draft202012Validator(combined)):
        for record in records:
            errors = [e.message for e in validator.iter_errors(record)]
            assert errors == [], (record, errors)
            assert ("hostname" in record) == (hostname and "hostname" in schema["properties"])


@pytest.mark.parametrize("stream", ALL_STREAMS)
def test_schema_follows_the_dataclass(stream: str, tmp_path: Path) -> None:
    schema = _schema(tmp_path, "--stream", stream)
    [cls] = [t for t in RECORD_TYPES if stream == t.STREAM]
    fields = [f.name for f in dataclasses.fields(cls)]
    assert list(schema["properties"]) == ["stream", "schema_version", *fields]
    assert schema["properties"]["stream"] == {
        "description": "The record's STREAM.",
        "const": stream,
    }
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"stream", "schema_version", *fields} - {"hostname"}
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_types_nullability_units_and_none_means(tmp_path: Path) -> None:
    props = _schema(tmp_path, "--stream", "system_gpu")["properties"]
    assert props["observed_timestamp_unix_ns"]["type"] == "integer"
    assert props["gpu_idx"]["type"] == "integer"
    assert props["temperature_c"]["type"] == ["number", "null"]
    assert props["temperature_c"]["x-unit"] == "degrees C"
    assert props["temperature_c"]["description"] == "Unit: degrees C. None means: not measured."
    assert props["hostname"]["type"] == ["string", "null"]
    assert "rank" not in props
    process = _schema(tmp_path, "--stream", "process")["properties"]
    assert process["gpu_available"]["enum"] == [0, 1, None]
    stdout = _schema(tmp_path, "--stream", "stdout_stderr")["properties"]
    assert stdout["line"]["type"] == "string"
    assert "this record has no global_rank field" in stdout["rank"]["description"]


def test_schema_rejects_what_the_contract_rules_out(tmp_path: Path) -> None:
    validator = Draft202012Validator(_schema(tmp_path, "--stream", "step_time"))
    good: dict[str, Any] = {
        "stream": "step_time",
        "schema_version": 1,
        "observed_timestamp_unix_ns": 1,
        "rank": None,
        "global_rank": None,
        "local_rank": None,
        "world_size": None,
        "local_world_size": None,
        "node_rank": None,
        "timestamp_unix_ns": None,
        "seq": None,
        "step": None,
        "events": {
            "e": {
                "cpu": {
                    "is_gpu": None,
                    "duration_ms": 1,
                    "cpu_ms": None,
                    "gpu_ms": None,
                    "n_calls": None,
                }
            }
        },
    }
    assert validator.is_valid(good)
    for change in (
        {"observed_timestamp_unix_ns": None},
        {"events": None},
        {"step": 1.5},
        {"stream": "process"},
        {"schema_version": 2},
        {"extra": 1},
        {"events": {"e": {"cpu": {"is_gpu": True}}}},
    ):
        assert not validator.is_valid({**good, **change}), change


def test_markdown_is_like_the_contract(tmp_path: Path) -> None:
    result = run_cli("schema", "--format", "markdown", cwd=tmp_path)
    assert result.returncode == 0
    text = result.stdout
    for cls in RECORD_TYPES:
        assert f"## {cls.__name__}\n" in text
    assert "| Field | Type | Unit | None means |" in text
    assert "| peak_alloc_bytes | float | bytes | the row had no peak |" in text
    assert "| gpu_available | int | 0 or 1 | not reported |" in text
    assert "| cpu_ms | float | milliseconds | the rank did not send it |" in text
    one = run_cli("schema", "--format", "markdown", "--stream", "process", cwd=tmp_path).stdout
    assert one.startswith("## ProcessRecord\n")
    assert "## SystemRecord" not in one


def test_unknown_stream_is_a_usage_error(tmp_path: Path) -> None:
    result = run_cli("schema", "--stream", "gpu", cwd=tmp_path)
    assert result.returncode == 2
    [line] = error_lines(result)
    assert line.startswith(
        "traceml-exporter schema: error: argument --stream: invalid choice: 'gpu'"
    )
