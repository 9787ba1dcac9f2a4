"""Every systemd unit of the docs passes ``systemd-analyze verify`` and runs ``follow`` as
the docs say.

An ``ini`` block is a unit whose first line names its file
(``# /etc/systemd/system/traceml-follow.service``). It is written under that name and
verified with the ExecStart program pointed at this environment's
``traceml-exporter`` (verify checks that the program exists; nothing else of the unit
changes). systemd says "ignoring" and still exits 0 for a setting it cannot parse
(``Restart=on-failure  # a comment``), so any message at all fails. Then what the
follow section promises of the unit: its command line is one ``follow`` accepts, with
every stream; it runs as a user, not root; it restarts on failure but not on the
exits that need a fix; systemd waits longer than ``--shutdown-timeout`` before SIGKILL.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import DOCS, Block, blocks
from traceml_exporter_sdk.cli import EXIT_CODES, build_parser

FIXTURES = Path(__file__).parent / "fixtures"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze") or "/usr/bin/systemd-analyze"
NEED_A_FIX = {2, 3, 5, 7}
"""Exits docs/follow.md says to fix, not retry; 4 (the sink down too long) is retried."""
_TIMESPAN = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|sec|min|m)?$")


def unit_blocks(paths: tuple[Path, ...] | list[Path]) -> list[Block]:
    return [b for path in paths for b in blocks(path) if b.language == "ini"]


def parse_unit(text: str) -> dict[tuple[str, str], list[str]]:
    """(section, key) -> its values in order, continuation lines joined."""
    out: dict[tuple[str, str], list[str]] = {}
    section, pending = "", ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif "=" in line:
            key, value = line.split("=", 1)
            out.setdefault((section, key.strip()), []).append(value.strip())
    return out


def seconds(span: str) -> float | None:
    """``90``, ``90s``, ``2min``; None for anything else."""
    match = _TIMESPAN.match(span)
    return float(match[1]) * (60 if match[2] in ("min", "m") else 1) if match else None


def verify(block: Block, folder: Path) -> list[str]:
    """What ``systemd-analyze verify`` says of the block's unit: nothing when it is right."""
    first = block.text.splitlines()[0]
    assert first.startswith("# /etc/systemd/"), f"{block}: first line names the unit's file"
    name = Path(first[2:].strip()).name
    program = str(Path(sys.executable).parent / "traceml-exporter")
    text = re.sub(
        r"^(ExecStart=[-@:+!]*)(\S*/)?traceml-exporter\b",
        lambda m: m[1] + program,
        block.text,
        flags=re.MULTILINE,
    )
    unit = folder / name
    unit.write_text(text, "utf-8")
    result = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    said = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    return said + ([f"exit {result.returncode}"] if result.returncode else [])


def follow_problems(block: Block) -> list[str]:
    """Where the unit's service is not the one docs/follow.md describes."""
    unit = parse_unit(block.text)
    problems = []
    user = unit.get(("Service", "User"), [""])[-1]
    if user in ("", "root", "0"):
        problems.append(f"User={user}: follow runs as the training user, not root")
    (exec_start,) = unit[("Service", "ExecStart")]
    argv = shlex.split(exec_start)
    assert Path(argv[0]).name == "traceml-exporter", argv[0]
    try:
        args = build_parser().parse_args(argv[1:])
    except SystemExit:
        return [*problems, f"follow refuses the command line: {shlex.join(argv[1:])}"]
    if args.command != "follow":
        return [*problems, f"not follow: {args.command}"]
    if args.streams != "all":
        problems.append(
            f"--streams {args.streams or 'not given (step_time)'}: the service exports every stream"
        )
    if unit.get(("Service", "Restart"), [""])[-1] not in ("on-failure", "always"):
        problems.append("Restart=on-failure: exit 4 (the sink down past --max-outage) is retried")
    prevent = " ".join(unit.get(("Service", "RestartPreventExitStatus"), []))
    codes = {int(c) for c in prevent.split() if c.isdigit()}
    if prevent.split() != [str(c) for c in sorted(codes)] or codes != NEED_A_FIX:
        problems.append(f"RestartPreventExitStatus={prevent}: exits {sorted(NEED_A_FIX)} alone")
    stop = unit.get(("Service", "TimeoutStopSec"), ["90"])[-1]
    span = seconds(stop)
    if span is None or span <= args.shutdown_timeout:
        problems.append(
            f"TimeoutStopSec={stop} is not longer than --shutdown-timeout {args.shutdown_timeout}"
        )
    return problems


UNITS = unit_blocks(DOCS)


def test_the_docs_have_a_unit() -> None:
    assert "docs/follow.md" in [b.doc for b in UNITS]


def test_the_exits_to_fix_are_the_clis() -> None:
    assert set(EXIT_CODES) >= NEED_A_FIX | {4}


def test_systemd_analyze_is_here() -> None:
    assert Path(SYSTEMD_ANALYZE).exists(), (
        "systemd-analyze not found: apt-get install systemd (the docs' units are verified with it)"
    )


@pytest.mark.parametrize("block", UNITS, ids=str)
def test_unit_verifies(block: Block, tmp_path: Path) -> None:
    assert verify(block, tmp_path) == []


@pytest.mark.parametrize("block", UNITS, ids=str)
def test_unit_runs_follow_as_documented(block: Block) -> None:
    assert follow_problems(block) == []


def test_the_planted_units_fail(tmp_path: Path) -> None:
    """A trailing comment after User= (systemd exits 1) and after Restart= (systemd only
    warns, exit 0); a TimeoutStopSec shorter than the follower's drain."""
    planted = unit_blocks([FIXTURES / "broken_units.md"])
    assert len(planted) == 3
    said = [verify(block, tmp_path) for block in planted[:2]]
    assert (
        "Invalid user/group name or numeric ID: trainer   # the user the jobs run as: /proc must show their fds"
        in "\n".join(said[0])
    )
    assert said[0][-1] == "exit 1"
    assert any("Failed to parse service restart specifier" in line for line in said[1])
    assert not any(line.startswith("exit") for line in said[1])
    assert verify(planted[2], tmp_path) == []
    assert follow_problems(planted[2]) == [
        "TimeoutStopSec=30 is not longer than --shutdown-timeout 60.0"
    ]
