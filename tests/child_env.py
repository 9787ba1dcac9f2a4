"""``child_env``: the one environment a test gives a process it starts (follow, a run, a tool)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def child_env(pythonpath: Iterable[str | Path] = (), **variables: str) -> dict[str, str]:
    """This process's environment with ``pythonpath`` put first on ``PYTHONPATH`` (what
    was there stays after it: a baked sink's ``src`` under nox) and ``variables`` set."""
    env = dict(os.environ)
    path = [str(p) for p in pythonpath]
    if path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [*path, env.get("PYTHONPATH")]))
    env.update(variables)
    return env
