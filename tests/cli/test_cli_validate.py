"""``validate``: flag > environment > traceml.yaml > default, each value's source, exit codes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_helpers import error_lines, run_cli
from traceml_exporter_sdk.cli.settings import NESTED, ConfigError, parse_flat_yaml

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
    config.write_text("export_streams: 12\nexporter_hostname: yes please\n")
    result = run_cli("validate", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 1
    assert error_lines(result) == [
        "traceml-exporter: error: export_streams must be a string of comma-separated names, got "
        "int; supported names: step_time, step_memory, process, system, all (comma separated) "
        f"(from config {config})",
        "traceml-exporter: error: exporter_hostname 'yes please' is not a boolean; use true or "
        f"false (also 1/0) (from config {config})",
    ]


def test_a_list_for_a_setting_is_exit_3(tmp_path: Path) -> None:
    config = tmp_path / "traceml.yaml"
    config.write_text("export_streams: [step_time, system]\n")
    result = run_cli("validate", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 3
    assert error_lines(result) == [
        f"traceml-exporter: error: {config}: export_streams must be one plain value (a string, "
        "number or boolean), not a list"
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


# -- hostile traceml.yaml: bounded reading and printing ---------------------------


def _alias_bomb(key: str) -> str:
    """About 400 bytes that expand to 9**9 strings when walked (or printed) whole."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    previous = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
        previous = name
    return "\n".join(lines) + f"\n{key}: *i\n"


def test_an_alias_bomb_as_a_setting_is_exit_3_in_one_short_line(tmp_path: Path) -> None:
    config = tmp_path / "traceml.yaml"
    config.write_text(_alias_bomb("exporter"))
    result = run_cli("validate", "--config", str(config), cwd=tmp_path, timeout=60)
    assert result.returncode == 3
    assert error_lines(result) == [
        f"traceml-exporter: error: {config}: exporter must be one plain value (a string, "
        "number or boolean), not a list"
    ]
    assert result.stdout == ""


def test_an_alias_bomb_under_another_key_is_not_walked(tmp_path: Path) -> None:
    config = tmp_path / "traceml.yaml"
    config.write_text(_alias_bomb("guard") + "exporter: jsonl\n")
    result = run_cli("validate", "--config", str(config), cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout) < 1000


@pytest.mark.parametrize("key", ["exporter", "guard"])
def test_deep_nesting_is_exit_3_not_an_internal_error(tmp_path: Path, key: str) -> None:
    config = tmp_path / "traceml.yaml"
    config.write_text(f"{key}: " + "[" * 5000 + "]" * 5000 + "\n")
    result = run_cli("validate", "--config", str(config), cwd=tmp_path, timeout=60)
    assert result.returncode == 3
    [line] = error_lines(result)
    assert line.startswith(f"traceml-exporter: error: {config}: ")
    assert "nested" in line or "not a list" in line
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("yaml_reader", ["pyyaml", "flat"])
def test_a_config_larger_than_the_bound_is_refused_without_reading_it_all(
    tmp_path: Path, yaml_reader: str
) -> None:
    config = tmp_path / "traceml.yaml"
    config.write_text("# padding\n" * 200_000 + "exporter: jsonl\n")
    prelude = HIDE_YAML if yaml_reader == "flat" else None
    result = run_cli("validate", "--config", str(config), cwd=tmp_path, prelude=prelude)
    assert result.returncode == 3
    assert error_lines(result) == [
        f"traceml-exporter: error: {config}: larger than 1 MiB; a traceml.yaml of settings "
        "is a few lines"
    ]


@pytest.mark.parametrize("kind", ["device", "fifo", "folder"])
def test_a_config_that_is_not_a_regular_file_is_refused_without_reading(
    tmp_path: Path, kind: str
) -> None:
    """/dev/zero never ends, and a FIFO with no writer would block for ever."""
    if kind == "device":
        path = Path("/dev/zero")
    elif kind == "fifo":
        path = tmp_path / "traceml.yaml"
        os.mkfifo(path)
    else:
        path = tmp_path / "folder"
        path.mkdir()
    result = run_cli("validate", "--config", str(path), cwd=tmp_path, timeout=60)
    assert result.returncode == 3
    assert error_lines(result) == [
        f"traceml-exporter: error: {path}: not a regular file; give a traceml.yaml file"
    ]


@pytest.mark.parametrize("key", ["exporter", "export_streams", "exporter_hostname"])
def test_a_huge_invalid_value_is_printed_clipped(tmp_path: Path, key: str) -> None:
    config = tmp_path / "traceml.yaml"
    config.write_text(f"{key}: '{'x' * 500_000}'\n")
    result = run_cli("validate", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 1
    assert max(len(line) for line in result.stdout.splitlines()) < 400
    [line] = error_lines(result)
    assert len(line) < 600
    assert "(500,002 characters)" in line or "(500,000 characters)" in line


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("export_streams: {step_time: 1}\n", "mapping"),
        ("exporter_hostname: !!binary aGk=\n", "bytes"),
        ("exporter: !!set {a: null}\n", "set"),
    ],
)
def test_a_setting_that_is_not_a_plain_value_is_exit_3(
    tmp_path: Path, text: str, kind: str
) -> None:
    config = tmp_path / "traceml.yaml"
    config.write_text(text)
    result = run_cli("validate", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 3
    [line] = error_lines(result)
    assert line.endswith(f"must be one plain value (a string, number or boolean), not a {kind}")
