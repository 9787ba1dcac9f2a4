"""Every shell command of the docs runs, as written, in a sandbox, and succeeds.

Each command not in ``doc_lists.NOT_RUN`` runs once (the same command in two docs
is one test) through ``bash -e -o pipefail``, in a fresh sandbox (conftest.py), with
this environment's ``traceml-exporter`` first on ``PATH``, the sandbox's ``src`` on
``PYTHONPATH`` and ``HOME`` in the sandbox, Enter pressed at every prompt; only ``doc_lists.SUBSTITUTE``'s
placeholders are replaced. It must exit 0 within two minutes. ``pip install`` and
``nox`` commands are not run (they install, or run the repository's sessions: minutes
to hours), but what they name must be there: extras, folders, the TraceML pin, sessions.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from child_env import child_env
from doc_blocks import DOCS, ROOT, SHELL, Block, Command, blocks, commands
from doc_lists import NOT_RUN, SHOWN_BY, SHOWN_PATHS, SUBSTITUTE
from packaging.requirements import Requirement

FIXTURES = Path(__file__).parent / "fixtures"
TIMEOUT_S = 120
ENTER = "\n" * 64
"""stdin: the reader pressing Enter at every question (``new``, ``cookiecutter``): the defaults."""


def runnable(paths: tuple[Path, ...] | list[Path]) -> dict[str, list[Command]]:
    """Command key -> where the docs give it, for every shell command not listed and not
    one that is checked instead (``pip install``, ``nox``)."""
    out: dict[str, list[Command]] = {}
    for path in paths:
        for block in blocks(path):
            if block.language in SHELL:
                for command in commands(block):
                    if not command.checked_not_run and f"{block.doc}: {command.key}" not in NOT_RUN:
                        out.setdefault(command.key, []).append(command)
    return out


def run(command: Command, sandbox: Path) -> subprocess.CompletedProcess[str]:
    text = command.text
    for placeholder, value in SUBSTITUTE.items():
        text = text.replace(placeholder, value.format(root=ROOT, sandbox=sandbox))
    return bash(text, sandbox, "-e", "-o", "pipefail")


def bash(script: str, sandbox: Path, *options: str) -> subprocess.CompletedProcess[str]:
    bin_dir = Path(sys.executable).parent
    env = child_env(
        [sandbox / "src"],
        HOME=str(sandbox / "home"),
        PATH=os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
    )
    return subprocess.run(
        ["bash", *options, "-c", script],
        cwd=sandbox,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        input=ENTER,
        check=False,
    )


def output_problems(block: Block, script: str, sandbox: Path) -> list[str]:
    """The block's lines its script does not print (paths of ``SHOWN_PATHS`` replaced)."""
    result = bash(script, sandbox)
    printed = {" ".join(line.split()) for line in (result.stdout + result.stderr).splitlines()}
    problems = []
    for line in block.text.splitlines():
        for shown, real in SHOWN_PATHS.items():
            line = line.replace(shown, real.format(root=ROOT, sandbox=sandbox))
        if line.strip() and " ".join(line.split()) not in printed:
            problems.append(f"{block}: not printed: {line.strip()}")
    return problems


COMMANDS = runnable(DOCS)


def test_the_docs_have_commands_to_run() -> None:
    assert len(COMMANDS) > 15
    for doc in ("README.md", "docs/cli.md", "docs/follow.md", "docs/template.md"):
        assert any(c.block.doc == doc for where in COMMANDS.values() for c in where), doc


@pytest.mark.parametrize("key", sorted(COMMANDS), ids=lambda key: key)
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


READERS_PATHS = {"./my-exporter"}
"""Install arguments that are the reader's own folders (their exporter project)."""


def checked_problems(paths: tuple[Path, ...] | list[Path]) -> list[str]:
    """What the docs' ``pip install`` and ``nox`` commands (not run: they install, or run
    the repository's sessions) name that is not there: an SDK extra sdk/pyproject.toml
    lacks, a folder of the repository that is missing, a TraceML other than the one the
    tests run against, a nox session noxfile.py does not have."""
    project = tomllib.loads((ROOT / "sdk" / "pyproject.toml").read_text("utf-8"))
    extras = set(project["project"]["optional-dependencies"])
    oracle = Requirement(_noxfile_constant("TRACEML_ORACLE"))
    sessions = nox_sessions()
    problems = []
    for path in paths:
        for block in blocks(path):
            for command in commands(block) if block.language in SHELL else []:
                if not command.checked_not_run:
                    continue
                for words in command.parts:
                    if words[:1] == ["nox"]:
                        problems += [
                            f"{block}: nox -s {name}: noxfile.py has no such session"
                            for name in _session_names(words)
                            if name.split("(")[0] not in sessions
                        ]
                        continue
                    for word in words[words.index("install") + 1 :]:
                        if word.startswith("-"):
                            continue
                        if word.startswith(("./", "/")):
                            if word not in READERS_PATHS and not (ROOT / word).exists():
                                problems.append(f"{block}: {word}: no such folder")
                            continue
                        requirement = Requirement(word)
                        if requirement.name == "traceml-exporter-sdk":
                            problems += [
                                f"{block}: {word}: the SDK has no extra {extra}"
                                for extra in sorted(requirement.extras - extras)
                            ]
                        elif requirement.name == oracle.name and requirement != oracle:
                            problems.append(f"{block}: {word}: the tests run {oracle}")
    return problems


def _session_names(words: list[str]) -> list[str]:
    """The sessions ``nox ...`` names (``-s``/``--session``/``--sessions``, before ``--``)."""
    own = words[: words.index("--")] if "--" in words else words
    names, taking = [], False
    for word in own[1:]:
        if word in ("-s", "--session", "--sessions", "-e"):
            taking = True
        elif word.startswith("-"):
            taking = False
        elif taking:
            names.append(word)
    return names


def nox_sessions() -> set[str]:
    """The names of noxfile.py's sessions (functions under ``@nox.session``)."""
    tree = ast.parse((ROOT / "noxfile.py").read_text("utf-8"))
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any(
            isinstance(d, ast.Call)
            and isinstance(d.func, ast.Attribute)
            and d.func.attr == "session"
            for d in node.decorator_list
        )
    }


def _noxfile_constant(name: str) -> str:
    for line in (ROOT / "noxfile.py").read_text("utf-8").splitlines():
        if line.startswith(f"{name} = "):
            return str(eval(line.split(" = ", 1)[1]))
    raise AssertionError(f"noxfile.py has no {name}")


def test_checked_commands_name_what_exists() -> None:
    checked = [
        c
        for path in DOCS
        for b in blocks(path)
        if b.language in SHELL
        for c in commands(b)
        if c.checked_not_run
    ]
    assert len(checked) >= 5
    assert {"tests", "scaffold", "template"} <= nox_sessions()
    assert checked_problems(DOCS) == []


def test_planted_checked_commands_fail() -> None:
    assert checked_problems([FIXTURES / "install_lines.md"]) == [
        "tests/docs/fixtures/install_lines.md:5: traceml-exporter-sdk[follwo]: the SDK has "
        "no extra follwo",
        "tests/docs/fixtures/install_lines.md:5: traceml-ai==0.4.0: the tests run "
        "traceml-ai==0.5.0",
        "tests/docs/fixtures/install_lines.md:5: ./sdks: no such folder",
        "tests/docs/fixtures/install_lines.md:5: nox -s scafold: noxfile.py has no such session",
    ]


SHOWN = [
    (b, SHOWN_BY[f"{b.doc}: {b.first_line}"])
    for path in DOCS
    for b in blocks(path)
    if f"{b.doc}: {b.first_line}" in SHOWN_BY
]


@pytest.mark.parametrize(("block", "script"), SHOWN, ids=[str(b) for b, _ in SHOWN])
def test_output_block_is_what_its_command_prints(block: Block, script: str, sandbox: Path) -> None:
    assert output_problems(block, script, sandbox) == []


def test_a_wrong_output_block_fails(sandbox: Path) -> None:
    (block,) = blocks(FIXTURES / "wrong_output.md")
    assert output_problems(block, "traceml-exporter replay jsonl", sandbox) == [
        f"{block}: not printed: traceml-exporter replay: error: --payloads is required"
    ]
