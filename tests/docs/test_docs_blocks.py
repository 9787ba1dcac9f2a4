"""Every fenced block of README.md and docs/*.md is run, validated or listed as not run.

The gate of the docs tests: each doc's blocks are counted twice (Sybil's lexer, and
its fence lines), each block goes to the test of its language or is in
``doc_lists.NOT_RUN`` with a reason, and each entry of that list still names a block
or command. A new block of an unknown language, or a new command that runs nowhere,
fails here until it is run or listed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doc_blocks import DOCS, SHELL, Block, blocks, commands, fence_lines
from doc_lists import NOT_RUN, SHOWN_BY
from traceml_exporter_sdk.cli import build_parser

FIXTURES = Path(__file__).parent / "fixtures"
HANDLED = {
    **dict.fromkeys(SHELL, "test_docs_shell.py"),
    "python": "test_docs_python.py",
    "ini": "test_docs_systemd.py",
    "yaml": "test_docs_kubernetes.py",
    "json": "test_docs_json.py",
}
"""Language -> the test that runs or validates its blocks."""


def block_key(block: Block) -> str:
    return f"{block.doc}: {block.first_line}"


def unhandled(paths: tuple[Path, ...] | list[Path]) -> list[str]:
    """Blocks of ``paths`` that no test takes and no entry lists. (A shell command is
    run unless listed, so a new one runs: test_docs_shell.py.)"""
    return [
        f"{block} ({block.language or 'no language'}): {block.first_line}"
        for path in paths
        for block in blocks(path)
        if block.language not in HANDLED
        and block_key(block) not in NOT_RUN
        and block_key(block) not in SHOWN_BY
    ]


def listed_keys(paths: tuple[Path, ...]) -> set[str]:
    """Every ``NOT_RUN`` key the docs could match: whole blocks and shell commands."""
    keys = set()
    for path in paths:
        for block in blocks(path):
            keys.add(block_key(block))
            keys.update(f"{block.doc}: {c.key}" for c in commands(block) if block.language in SHELL)
    return keys


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_block_of_a_doc_is_seen(path: Path) -> None:
    """The lexer finds as many blocks as the doc has pairs of fence lines."""
    fences = fence_lines(path)
    assert fences % 2 == 0, f"{path}: an unclosed fence ({fences} fence lines)"
    assert len(blocks(path)) == fences // 2


def test_the_docs_have_blocks_of_each_kind() -> None:
    """The docs tests have something to test: the reader sees shell, python, a unit and a
    manifest (the deployment section of docs/follow.md)."""
    languages = [b.language for path in DOCS for b in blocks(path)]
    assert len(DOCS) > 10
    assert len(languages) > 40
    for language in ("bash", "python", "ini", "yaml", "json"):
        assert language in languages


def test_every_block_is_run_validated_or_listed() -> None:
    assert unhandled(DOCS) == []


def test_every_listed_entry_names_a_block_or_command() -> None:
    assert sorted((set(NOT_RUN) | set(SHOWN_BY)) - listed_keys(DOCS)) == []


def test_no_config_block_is_listed() -> None:
    """A unit, a manifest or a JSON block is always validated: listing one would only
    mislead (their tests do not read the list)."""
    configs = {
        block_key(b)
        for path in DOCS
        for b in blocks(path)
        if b.language in HANDLED and b.language not in (*SHELL, "python")
    }
    assert sorted(configs & set(NOT_RUN)) == []


def test_every_entry_has_a_reason() -> None:
    assert [key for key, reason in NOT_RUN.items() if len(reason) < 10] == []


def test_a_new_block_neither_run_nor_listed_fails() -> None:
    """The planted doc: a ``sql`` block and an untagged one that nothing takes."""
    found = unhandled([FIXTURES / "unlisted_blocks.md"])
    assert [entry.split(": ", 1)[0] for entry in found] == [
        "tests/docs/fixtures/unlisted_blocks.md:5 (sql)",
        "tests/docs/fixtures/unlisted_blocks.md:9 (no language)",
    ]


def test_the_follow_synopsis_is_the_parsers() -> None:
    """docs/cli.md's usage of follow names the options ``follow --help`` has, no other."""
    (synopsis,) = [
        b
        for b in blocks(Path(__file__).parents[2] / "docs" / "cli.md")
        if b.first_line.startswith("traceml-exporter follow SPEC")
    ]
    parser = build_parser()
    (follow,) = [
        action.choices["follow"]
        for action in parser._subparsers._group_actions  # type: ignore[union-attr]
        if getattr(action, "choices", None) and "follow" in action.choices
    ]
    options = {o for a in follow._actions for o in a.option_strings if o not in ("-h", "--help")}
    assert set(re.findall(r"--[a-z][a-z-]+", synopsis.text)) == options
