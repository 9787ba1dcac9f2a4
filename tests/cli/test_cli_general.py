"""The command line as a whole: help with examples and exit codes, one-line usage errors."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import error_lines, run_cli

COMMANDS = ("new", "check", "validate", "replay", "schema")


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_help_has_an_example_and_the_exit_codes(command: str, tmp_path: Path) -> None:
    result = run_cli(command, "--help", cwd=tmp_path)
    assert result.returncode == 0
    assert "example:\n  traceml-exporter " + command in result.stdout
    assert "exit codes:" in result.stdout
    for code in ("0", "1", "2", "3", "4", "5", "70"):
        assert f"\n  {code} " in result.stdout
    assert result.stderr == ""


def test_top_level_help_lists_commands(tmp_path: Path) -> None:
    result = run_cli("--help", cwd=tmp_path)
    assert result.returncode == 0
    for command in COMMANDS:
        assert f"    {command} " in result.stdout
    assert "exit codes:" in result.stdout


def test_no_command_is_a_usage_error(tmp_path: Path) -> None:
    result = run_cli(cwd=tmp_path)
    assert result.returncode == 2
    assert error_lines(result) == [
        "traceml-exporter: error: a command is required (see traceml-exporter --help)"
    ]


def test_unknown_command_is_one_line(tmp_path: Path) -> None:
    result = run_cli("frobnicate", cwd=tmp_path)
    assert result.returncode == 2
    [line] = error_lines(result)
    assert line.startswith(
        "traceml-exporter: error: argument COMMAND: invalid choice: 'frobnicate'"
    )
    assert "Traceback" not in result.stderr


def test_unknown_option_names_the_command(tmp_path: Path) -> None:
    result = run_cli("schema", "--bogus", cwd=tmp_path)
    assert result.returncode == 2
    assert error_lines(result) == [
        "traceml-exporter schema: error: unrecognized arguments: --bogus "
        "(see traceml-exporter schema --help)"
    ]


def test_passthrough_arguments_only_for_check(tmp_path: Path) -> None:
    result = run_cli("schema", "--", "-x", cwd=tmp_path)
    assert result.returncode == 2
    assert error_lines(result) == [
        "traceml-exporter: error: arguments after '--' are only for check, not schema"
    ]


def test_version(tmp_path: Path) -> None:
    result = run_cli("--version", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith("traceml-exporter ")


def test_console_script_is_installed(tmp_path: Path) -> None:
    script = shutil.which("traceml-exporter", path=str(Path(sys.executable).parent))
    assert script is not None, "the traceml-exporter console script is not installed"
    result = subprocess.run(
        [script, "schema", "--stream", "stdout_stderr", "--format", "markdown"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0
    assert "| line | str |  | never None; empty lines are not recorded |" in result.stdout


def test_internal_error_is_one_line_without_traceback(tmp_path: Path) -> None:
    prelude = (
        "import traceml_exporter_sdk.cli as c\n"
        "def boom(args, out):\n    raise RuntimeError('kaput')\n"
        "c.cmd_schema = boom\n"
        "_build = c.build_parser\n"
        "def build():\n"
        "    p = _build()\n"
        "    p._subparsers._group_actions[0].choices['schema'].set_defaults(handler=boom)\n"
        "    return p\n"
        "c.build_parser = build\n"
    )
    result = run_cli("schema", cwd=tmp_path, prelude=prelude)
    assert result.returncode == 70
    assert error_lines(result) == [
        "traceml-exporter: error: internal error: RuntimeError: kaput "
        "(set TRACEML_EXPORTER_DEBUG=1 for the traceback, and please report it)"
    ]
