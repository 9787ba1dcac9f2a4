"""``validate``: flag > environment > traceml.yaml > default, each value's source, exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import error_lines, run_cli
from traceml_exporter_sdk.settings import NESTED, ConfigError, parse_flat_yaml

HIDE_YAML = "import sys\nsys.modules['yaml'] = None"


def _lines(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        key, _, rest = line.partition(" ")
        out[key] = rest.strip()
    return out


def test_defaults_with_no_config(tmp_path: Path) -> None:
    result = run_cli("validate", "--no-config", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = _lines(result.stdout)
    assert lines["traceml.yaml"] == "not read (--no-config)"
    assert lines["exporter"] == "(none: export is off)  [from default]"
    assert lines["export_streams"] == "step_time  -> streams step_time  [from default]"
    assert lines["exporter_hostname"] == "false  [from default]"
    assert result.stdout.rstrip().endswith(
        "valid (the exporter module was not imported; its form was checked)"
    )


CONFIG = 'exporter: "cfg_mod:make"\nexport_streams: process\nexporter_hostname: true\n'
ENV = {
    "TRACEML_EXPORTER": "env_mod:make",
    "TRACEML_EXPORT_STREAMS": "system",
    "TRACEML_EXPORTER_HOSTNAME": "0",
}


@pytest.mark.parametrize("yaml_reader", ["pyyaml", "flat"])
def test_precedence_flag_then_environment_then_config(tmp_path: Path, yaml_reader: str) -> None:
    config = tmp_path / "traceml.yaml"
    config.write_text(CONFIG)
    prelude = HIDE_YAML if yaml_reader == "flat" else None

    only_config = run_cli("validate", "--config", str(config), cwd=tmp_path, prelude=prelude)
    assert only_config.returncode == 0, only_config.stderr
    lines = _lines(only_config.stdout)
    assert lines["traceml.yaml"] == str(config)
    assert lines["exporter"] == f"cfg_mod:make  [from config {config}]"
    assert lines["export_streams"] == f"process  -> streams process  [from config {config}]"
    assert lines["exporter_hostname"] == f"true  [from config {config}]"

    env_wins = run_cli("validate", "--config", str(config), cwd=tmp_path, env=ENV, prelude=prelude)
    assert env_wins.returncode == 0, env_wins.stderr
    lines = _lines(env_wins.stdout)
    assert lines["exporter"] == "env_mod:make  [from environment TRACEML_EXPORTER]"
    assert lines["export_streams"] == (
        "system  -> streams system, system_gpu  [from environment TRACEML_EXPORT_STREAMS]"
    )
    assert lines["exporter_hostname"] == "false  [from environment TRACEML_EXPORTER_HOSTNAME]"

    flags_win = run_cli(
        "validate",
        "--config",
        str(config),
        "--exporter",
        "jsonl",
        "--streams",
        "step_time,step_memory",
        "--hostname",
        cwd=tmp_path,
        env=ENV,
        prelude=prelude,
    )
    assert flags_win.returncode == 0, flags_win.stderr
    lines = _lines(flags_win.stdout)
    assert lines["exporter"] == "jsonl  [from --exporter]"
    assert lines["export_streams"] == (
        "step_time,step_memory  -> streams step_time, step_memory  [from --streams]"
    )
    assert lines["exporter_hostname"] == "true  [from --hostname]"


def test_empty_environment_variable_counts_as_unset(tmp_path: Path) -> None:
    result = run_cli("validate", "--no-config", cwd=tmp_path, env={"TRACEML_EXPORTER": ""})
    assert result.returncode == 0
    assert _lines(result.stdout)["exporter"] == "(none: export is off)  [from default]"


def test_config_found_walking_up(tmp_path: Path) -> None:
    (tmp_path / "traceml.yaml").write_text("exporter: up_mod:make\n")
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    result = run_cli("validate", cwd=deep)
    assert result.returncode == 0, result.stderr
    lines = _lines(result.stdout)
    assert lines["traceml.yaml"] == str(tmp_path / "traceml.yaml")
    assert lines["exporter"].startswith("up_mod:make  [from config ")


def test_invalid_values_exit_1_with_one_line_each(tmp_path: Path) -> None:
    result = run_cli(
        "validate",
        "--no-config",
        "--exporter",
        "my_exporters.py",
        cwd=tmp_path,
        env={"TRACEML_EXPORT_STREAMS": "step_time,gpu", "TRACEML_EXPORTER_HOSTNAME": "maybe"},
    )
    assert result.returncode == 1
    lines = _lines(result.stdout)
    assert lines["exporter"] == "'my_exporters.py'  INVALID  [from --exporter]"
    assert "valid (" not in result.stdout
    assert error_lines(result) == [
        "traceml-exporter: error: exporter setting 'my_exporters.py': it looks like a file path; "
        "name the module by its import path instead; accepted: 'jsonl', or 'module:factory' - a "
        "dotted module path, one colon and one identifier, e.g. 'my_exporters:make_exporter' or "
        "'pkg.sub.mod:make_exporter' (from --exporter)",
        "traceml-exporter: error: export_streams 'step_time,gpu': unknown name 'gpu'; supported "
        "names: step_time, step_memory, process, system, all (comma separated) "
        "(from environment TRACEML_EXPORT_STREAMS)",
        "traceml-exporter: error: exporter_hostname 'maybe' is not a boolean; use 1, on, true, yes "
        "or 0, false, no, off (from environment TRACEML_EXPORTER_HOSTNAME)",
    ]


def test_never_imports_the_exporter(tmp_path: Path) -> None:
    (tmp_path / "boom.py").write_text("raise SystemExit('imported!')\n")
    result = run_cli(
        "validate", "--no-config", "--exporter", "boom:make", cwd=tmp_path, pythonpath=[tmp_path]
    )
    assert result.returncode == 0
    assert "imported!" not in result.stdout + result.stderr


def test_config_with_wrong_types(tmp_path: Path) -> None:
    config = tmp_path / "traceml.yaml"
    config.write_text("export_streams: [step_time, system]\nexporter_hostname: yes please\n")
    result = run_cli("validate", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 1
    assert error_lines(result) == [
        "traceml-exporter: error: export_streams must be a string of comma-separated names, got "
        "list; supported names: step_time, step_memory, process, system, all (comma separated) "
        f"(from config {config})",
        "traceml-exporter: error: exporter_hostname 'yes please' is not a boolean; use true or "
        f"false (also 1/0) (from config {config})",
    ]


def test_missing_config_file_exit_3(tmp_path: Path) -> None:
    result = run_cli("validate", "--config", "nope.yaml", cwd=tmp_path)
    assert result.returncode == 3
    assert error_lines(result) == ["traceml-exporter: error: config file not found: nope.yaml"]


def test_yaml_syntax_error_exit_3(tmp_path: Path) -> None:
    (tmp_path / "traceml.yaml").write_text("exporter: [unclosed\n")
    result = run_cli("validate", cwd=tmp_path)
    assert result.returncode == 3
    [line] = error_lines(result)
    assert line.startswith(
        f"traceml-exporter: error: {tmp_path / 'traceml.yaml'}: YAML syntax error:"
    )


def test_top_level_not_a_mapping_exit_3(tmp_path: Path) -> None:
    (tmp_path / "traceml.yaml").write_text("- a\n- b\n")
    result = run_cli("validate", cwd=tmp_path)
    assert result.returncode == 3
    assert error_lines(result) == [
        f"traceml-exporter: error: {tmp_path / 'traceml.yaml'}: expected a mapping of settings "
        "at the top level, got list"
    ]


def test_flat_reader_needs_pyyaml_for_nested_values(tmp_path: Path) -> None:
    (tmp_path / "traceml.yaml").write_text(
        "mode: cli\nguard:\n  max_step_time_ms: 10\nexport_streams:\n  - step_time\n"
    )
    result = run_cli("validate", cwd=tmp_path, prelude=HIDE_YAML)
    assert result.returncode == 1
    assert error_lines(result) == [
        "traceml-exporter: error: is not a flat value the built-in reader takes; install PyYAML "
        "(pip install 'traceml-exporter-sdk[cli]') to read it "
        f"(from config {tmp_path / 'traceml.yaml'})"
    ]


def test_flat_reader_subset() -> None:
    text = (
        "# settings\n---\nexporter: 'my_mod:make'  # comment\n"
        'export_streams: "step_time, system"\nexporter_hostname: false\n'
        "interval: 0.5\nlogs_dir: ./logs # here\nhash: 'a#b'\nguard:\n  a: 1\n  b: [1]\nempty:\n"
        "retries: 3\n"
    )
    assert parse_flat_yaml(text) == {
        "exporter": "my_mod:make",
        "export_streams": "step_time, system",
        "exporter_hostname": False,
        "interval": 0.5,
        "logs_dir": "./logs",
        "hash": "a#b",
        "guard": NESTED,
        "empty": None,
        "retries": 3,
    }
    with pytest.raises(ConfigError, match="line 1: not a 'key: value' line"):
        parse_flat_yaml("just words\n")
