"""Importability: the spec loads in a fresh interpreter, as TraceML's aggregator loads it."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..environment import Env
from ..errors import ConformanceConfigError
from ..registry import CheckGroup

GROUP = CheckGroup("importability")


_IMPORT_SCRIPT = r"""
import dataclasses, importlib, pathlib, sys
spec, root = sys.argv[1], pathlib.Path(sys.argv[2])

@dataclasses.dataclass(frozen=True)
class ExporterContext:  # TraceML's own class, not the SDK's: only the four fields count
    session_root: pathlib.Path
    export_dir: pathlib.Path
    include_hostname: bool
    streams: tuple

module_name, attribute = spec.split(":")
module = importlib.import_module(module_name)
factory = getattr(module, attribute)
exporter = factory(ExporterContext(root, root / "aggregator" / "export", False, ("step_time",)))
if exporter is None:
    sys.exit("the factory returned None")
missing = [m for m in ("open", "write", "flush", "close") if not callable(getattr(exporter, m, None))]
if missing:
    sys.exit("the exporter has no " + ", ".join(missing))
print("ok", type(exporter).__name__)
"""


@GROUP.check
def check_fresh_subprocess(env: Env) -> None:
    """Rule: the spec imports and the factory runs in a fresh interpreter whose only extra
    import path is the package's source root on PYTHONPATH, as the aggregator loads it
    (no test directory, no conftest, no working directory on the path).

    Contract: "Install the module, or put its directory on PYTHONPATH."
    """
    spec = env.spec
    if spec is None:
        pytest.skip(
            "factory is a callable that cannot be named as module:factory; set factory to a "
            "'module:factory' string to check importability"
        )
    module_name = spec.partition(":")[0]
    root = _source_root(module_name)
    env_vars = {
        k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "PYTEST_ADDOPTS"
    }
    env_vars["PYTHONPATH"] = str(root)
    env_vars["PYTHONDONTWRITEBYTECODE"] = "1"
    cwd = env.tmp_path / "empty-cwd"
    cwd.mkdir()
    session = env.context().session_root
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_SCRIPT, spec, str(session)],
        env=env_vars,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, (
        f"{spec!r} does not load in a fresh interpreter with PYTHONPATH={root} only "
        f"(exit {proc.returncode}):\n{(proc.stderr or proc.stdout).strip()[-2000:]}\n"
        "TraceML's aggregator is a separate process: the module must import from an installed "
        "package or from its directory on PYTHONPATH, without the test run's sys.path."
    )


def _source_root(module_name: str) -> Path:
    top = importlib.import_module(module_name.partition(".")[0])
    file = getattr(top, "__file__", None)
    if file:
        path = Path(file).resolve()
        return path.parent.parent if path.name == "__init__.py" else path.parent
    locations = list(getattr(top, "__path__", []))
    if locations:
        return Path(locations[0]).resolve().parent
    raise ConformanceConfigError(f"cannot tell where module {module_name!r} lives")
