"""Fixtures of the runtime tests: importable exporter modules written to tmp_path."""

from __future__ import annotations

import importlib
import itertools
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

_serial = itertools.count()


@pytest.fixture
def write_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str, str], str]]:
    """Write ``source`` as a fresh importable module; returns its (unique) name.

    The folder goes on ``sys.path`` for the test only, and every module written
    here is removed from ``sys.modules`` afterwards, so no test sees another's.
    """
    folder = tmp_path / "modules"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    names: list[str] = []

    def write(stem: str, source: str) -> str:
        name = f"rt_{stem}_{next(_serial)}"
        (folder / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        importlib.invalidate_caches()
        names.append(name)
        return name

    yield write
    for name in names:
        sys.modules.pop(name, None)
