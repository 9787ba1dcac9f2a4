"""The fenced blocks of README.md and docs/*.md, as Sybil's Markdown lexer finds them.

One reading of the docs for every docs test: a block is its file, line, info string
(the language) and text; a shell block is split into commands (backslash
continuations joined, comments dropped) whose ``key`` is what the test's lists name.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from sybil import Document
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
"""Every doc whose blocks must run or be validated."""
SHELL = ("bash", "sh", "shell")
"""Languages whose blocks are commands that run as written (a ``console`` block, with
prompts and output, is not one)."""
_INFO = re.compile(r"(?P<info>[^\n]*)$\n", re.MULTILINE)
_FENCE_LINE = re.compile(r"^[ \t]*(`{3,}|~{3,})", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    """One fenced block of a doc."""

    doc: str
    """The doc's path from the repository's root (``docs/follow.md``)."""
    line: int
    """The line of its opening fence."""
    language: str
    text: str

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.text.splitlines() if line.strip()), "")

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


@dataclass(frozen=True)
class Command:
    """One command of a shell block: what bash runs and the key the test lists name."""

    block: Block
    text: str
    """As written, continuations joined (bash runs this)."""

    @property
    def key(self) -> str:
        """The words without the comment, quotes undone, one space apart."""
        return " ".join(shlex.split(self.text, comments=True))

    @property
    def parts(self) -> list[list[str]]:
        """The words of each command joined by ``&&``."""
        out: list[list[str]] = [[]]
        for word in shlex.split(self.text, comments=True):
            if word == "&&":
                out.append([])
            else:
                out[-1].append(word)
        return out

    @property
    def checked_not_run(self) -> bool:
        """Only ``pip install`` and ``nox`` (joined by ``&&``, nothing else): they install
        or run the repository's sessions, so the tests check what they name instead."""
        words = shlex.split(self.text, comments=True)
        return not {";", "|", "||", "&"} & set(words) and all(
            installs(part) or part[:1] == ["nox"] for part in self.parts
        )


def installs(words: list[str]) -> bool:
    """``pip install ...`` or ``python -m pip install ...``."""
    return words[:2] == ["pip", "install"] or words[1:4] == ["-m", "pip", "install"]


def name_of(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path``, in order, whatever its info string."""
    text = path.read_text(encoding="utf-8")
    document = Document(text, str(path))
    lexer = RawFencedCodeBlockLexer(
        info_pattern=_INFO, mapping={"info": "info", "source": "source"}
    )
    found = []
    for region in lexer(document):
        info = str(region.lexemes["info"]).strip()
        line = text.count("\n", 0, region.start) + 1
        language = info.split()[0] if info else ""
        found.append(Block(name_of(path), line, language, str(region.lexemes["source"])))
    return found


def fence_lines(path: Path) -> int:
    """How many fence lines ``path`` has, counted without the lexer (two a block)."""
    return len(_FENCE_LINE.findall(path.read_text(encoding="utf-8")))


def commands(block: Block) -> list[Command]:
    """The commands of a shell block, one a (joined) line; blank and comment lines dropped."""
    out: list[Command] = []
    pending = ""
    for line in block.text.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        text = (pending + line).strip()
        pending = ""
        if text and not text.startswith("#"):
            out.append(Command(block, text))
    return out
