"""The follower's tests' run: a writer of TraceML 0.5.0's database (``writer050``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from writer050 import Writer050


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Writer050]:
    writer = Writer050(tmp_path / "logs" / "run1")
    yield writer
    writer.disconnect()
