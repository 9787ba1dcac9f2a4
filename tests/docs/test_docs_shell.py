"""Every shell command of the docs runs, as written, in a sandbox, and succeeds.

Each command not in ``doc_lists.NOT_RUN`` runs once (the same command in two docs
is one test) through ``bash -e -o pipefail``, in a fresh sandbox (conftest.py), with
this environment's ``traceml-exporter`` first on ``PATH``, the sandbox's ``src`` on
``PYTHONPATH`` and ``HOME`` in the sandbox, Enter pressed at every prompt; only ``doc_lists.SUBSTITUTE``'s
placeholders are replaced. It must exit 0 within two minutes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from child_env import child_env
from doc_blocks import DOCS, ROOT, SHELL, Command, blocks, commands
from doc_lists import NOT_RUN, SUBSTITUTE

FIXTURES = Path(__file__).parent / "fixtures"
TIMEOUT_S = 120
ENTER = "\n" * 64
"""stdin: the reader pressing Enter at every question (``new``, ``cookiecutter``): the defaults."""


def runnable(paths: tuple[Path, ...] | list[Path]) -> dict[str, list[Command]]:
    """Command key -> where the docs give it, for every shell command not listed."""
    out: dict[str, list[Command]] = {}
    for path in paths:
        for block in blocks(path):
            if block.language in SHELL:
                for command in commands(block):
                    if f"{block.doc}: {command.key}" not in NOT_RUN:
                        out.setdefault(command.key, []).append(command)
    return out


def run(command: Command, sandbox: Path) -> subprocess.CompletedProcess[str]:
    text = command.text
    for placeholder, value in SUBSTITUTE.items():
        text = text.replace(placeholder, value.format(root=ROOT, sandbox=sandbox))
    bin_dir = Path(sys.executable).parent
    env = child_env(
        [sandbox / "src"],
        HOME=str(sandbox / "home"),
        PATH=os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
    )
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", text],
        cwd=sandbox,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        input=ENTER,
        check=False,
    )


COMMANDS = runnable(DOCS)


def test_the_docs_have_commands_to_run() -> None:
    assert len(COMMANDS) > 15
    for doc in ("README.md", "docs/cli.md", "docs/follow.md", "docs/template.md"):
        assert any(c.block.doc == doc for where in COMMANDS.values() for c in where), doc


@pytest.mark.parametrize("key", sorted(COMMANDS), ids=lambda key: key[:60])
def test_command_runs(key: str, sandbox: Path) -> None:
    where = COMMANDS[key]
    result = run(where[0], sandbox)
    places = ", ".join(str(c.block) for c in where)
    assert result.returncode == 0, (
        f"{places}: `{key}` exited {result.returncode}\n{result.stdout[-3000:]}\n"
        f"{result.stderr[-3000:]}"
    )


def test_a_failing_command_fails(sandbox: Path) -> None:
    """The planted doc's commands: an option follow does not have, and a missing database."""
    planted = runnable([FIXTURES / "failing_commands.md"])
    assert len(planted) == 2
    for where in planted.values():
        assert run(where[0], sandbox).returncode != 0, where[0].key
