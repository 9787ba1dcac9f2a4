"""Importability: the spec loads in a fresh interpreter, as TraceML's aggregator loads it."""

from __future__ import annotations

import importlib
import json
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
    env_vars = _fresh_environment(module_name)
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


_SIDE_EFFECTS_SCRIPT = r"""
import importlib, json, os, pathlib, sys, threading
module_name, watched = sys.argv[1], [pathlib.Path(p) for p in sys.argv[2:]]
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

def tree(folder):
    return {str(p) for p in folder.rglob("*")}

def fds():
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return found

events = []
def audit(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        mode, flags = args[1] or "", args[2] or 0
        if any(c in mode for c in "wax+") or flags & WRITE:
            events.append(f"opened {os.fsdecode(args[0])} for writing")
    elif event == "socket.connect":  # a bind is a probe (urllib3's IPv6 test); one kept open
        events.append(f"{event} {args[1]!r}")  # is a file descriptor, below
    elif event in ("os.mkdir", "os.symlink", "os.link", "os.rename"):
        events.append(f"{event} {args[0]!r}")
    elif event in ("subprocess.Popen", "os.system", "os.fork", "os.posix_spawn"):
        events.append(event)

trees = {p: tree(p) for p in watched}
before_fds, before_threads = fds(), {t.ident for t in threading.enumerate()}
sys.addaudithook(audit)
try:
    importlib.import_module(module_name)
except Exception as exc:
    print(json.dumps({"import_error": f"{type(exc).__name__}: {exc}"}))
    sys.exit(0)
found = list(events)
found += [f"new file or folder {p}" for w in watched for p in sorted(tree(w) - trees[w])]
found += [f"file descriptor {fd} -> {target}" for fd, target in sorted(fds().items())
          if fd not in before_fds]
found += [f"thread {t.name!r}" for t in threading.enumerate() if t.ident not in before_threads]
print(json.dumps(found))
"""


@GROUP.check
def check_import_has_no_side_effects(env: Env) -> None:
    """Rule: importing the exporter's module does nothing but define things: in a fresh
    interpreter, no file or folder appears (in the working folder, HOME, TMPDIR or
    anywhere written through ``open``), no file descriptor or socket stays open, no
    thread or process starts.

    TraceML's aggregator imports the module in its own process, in whatever folder it
    runs; a module-level log file handler, client or thread there outlives every run
    and belongs to no exporter's open() and close().

    Contract: "Create connections, clients and files in open, not in the factory, so they
    belong to the thread that uses them."
    """
    spec = env.spec
    if spec is None:
        pytest.skip(
            "factory is a callable that cannot be named as module:factory; set factory to a "
            "'module:factory' string to check what importing it does"
        )
    module_name = spec.partition(":")[0]
    folders = {name: env.tmp_path / f"import-{name.lower()}" for name in ("cwd", "HOME", "TMPDIR")}
    for folder in folders.values():
        folder.mkdir()
    env_vars = _fresh_environment(module_name)
    env_vars.update(HOME=str(folders["HOME"]), TMPDIR=str(folders["TMPDIR"]))
    proc = subprocess.run(
        [sys.executable, "-c", _SIDE_EFFECTS_SCRIPT, module_name, *map(str, folders.values())],
        env=env_vars,
        cwd=folders["cwd"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"the import probe failed (exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}",
            pytrace=False,
        )
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    if isinstance(found, dict):  # importability[fresh_subprocess] fails and says why
        pytest.skip(f"{module_name!r} does not import on its own: {found['import_error']}")
    assert not found, (
        f"importing {module_name!r} had side effects: "
        + "; ".join(found[:8])
        + ". An import must only define things: make files, clients, log handlers and "
        "threads in open() (and let close() end them)."
    )


def _fresh_environment(module_name: str) -> dict[str, str]:
    """This process's environment without Python's settings, the module's root on PYTHONPATH."""
    env_vars = {
        k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "PYTEST_ADDOPTS"
    }
    env_vars["PYTHONPATH"] = str(_source_root(module_name))
    env_vars["PYTHONDONTWRITEBYTECODE"] = "1"
    return env_vars


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
