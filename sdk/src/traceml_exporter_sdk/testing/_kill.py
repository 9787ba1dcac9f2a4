"""An exporter in a child process, killed with SIGKILL at a chosen moment.

Processes die by SIGKILL and the OOM killer; ``follow`` then starts again on the same
folder. The child makes the exporter from its spec (on its main thread, as the
aggregator does), runs its methods on a thread of its own, writes and flushes lane
``flushed``'s records and says so on stdout; then it either idles (killed right after
a flush) or writes lane ``unflushed``'s records for ever without a flush (killed in the
middle of a write).
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Literal

from ..context import ExporterContext
from ._lanes import lane_base

__all__ = ["Killed", "Moment", "child_env", "kill_child"]

Moment = Literal["after-flush", "mid-write"]

_CHILD = r"""
import sys, threading, time
from traceml_exporter_sdk.context import ExporterContext
from traceml_exporter_sdk.factory import resolve_factory
from traceml_exporter_sdk.testing.corpus import corpus_batches

spec, root, streams, hostname, moment, flushed, unflushed = sys.argv[1:]
WRITING_PASSES = 5
context = ExporterContext.create(root, streams, hostname == "1")
exporter = resolve_factory(spec)(context)
selected = context.streams
first = [r for b in corpus_batches(selected, observed_base_ns=int(flushed)) for r in b]
loop = corpus_batches(selected, observed_base_ns=int(unflushed))

def run():
    exporter.open()
    exporter.write(first)
    exporter.flush()
    print("flushed", flush=True)
    if moment == "after-flush":
        time.sleep(120)
        return
    passes = 0
    while True:
        for batch in loop:
            exporter.write(batch)
        passes += 1
        if passes == WRITING_PASSES:
            print("writing", flush=True)

thread = threading.Thread(target=run, name="traceml-conformance-child-worker", daemon=True)
thread.start()
thread.join(120)
"""

KILL_AFTER_WRITING_S = 0.05
"""How long the child writes on before it is killed, once it wrote the corpus five times
without a flush (it never finishes: it writes for ever), so a writer's buffers have
spilled into the sink and a line or a row may be cut off."""


@dataclass(frozen=True)
class Killed:
    """How a child ended: killed at the moment asked for, or why not (its stderr)."""

    moment: Moment
    killed: bool
    error: str = ""


def child_env() -> dict[str, str]:
    """The environment of a child process that loads the exporter by its spec: this one's,
    with every folder on ``sys.path`` put on ``PYTHONPATH`` (a test's own modules too)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    return env


def kill_child(
    spec: str,
    context: ExporterContext,
    moment: Moment,
    *,
    export_streams: str,
    flushed: int,
    unflushed: int,
    timeout: float = 30.0,
) -> Killed:
    """Run the exporter in a child process and SIGKILL it at ``moment``; ``context`` is
    rebuilt there from its session_root, ``export_streams`` (the setting's value) and
    include_hostname."""
    args = [
        sys.executable,
        "-c",
        _CHILD,
        spec,
        str(context.session_root),
        export_streams,
        "1" if context.include_hostname else "0",
        moment,
        str(lane_base(flushed)),
        str(lane_base(unflushed)),
    ]
    with tempfile.TemporaryFile() as stderr:
        child = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=stderr, env=child_env(), cwd=context.session_root
        )
        try:
            wanted = "flushed" if moment == "after-flush" else "writing"
            reached = _wait_for_line(child, wanted, timeout)
            if reached and moment == "mid-write":
                time.sleep(KILL_AFTER_WRITING_S)
            alive = child.poll() is None
            if alive:
                child.send_signal(signal.SIGKILL)
            child.wait(timeout)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            assert child.stdout is not None
            child.stdout.close()
        stderr.seek(0)
        error = stderr.read().decode("utf-8", "replace").strip()
    if reached and alive:
        return Killed(moment, True)
    tail = error.splitlines()[-1] if error else f"exit code {child.returncode}"
    kind, colon, rest = tail.partition(": ")
    if colon and " " not in kind:  # sqlite3.ProgrammingError: ... as the worker names it
        tail = f"{kind.rpartition('.')[2]}: {rest}"
    return Killed(moment, False, tail)


def _wait_for_line(child: subprocess.Popen[bytes], wanted: str, timeout: float) -> bool:
    """True once the child printed ``wanted``; False if it ended or ``timeout`` passed."""
    assert child.stdout is not None
    deadline = time.monotonic() + timeout
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(child.stdout, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not selector.select(left):
                continue
            chunk = os.read(child.stdout.fileno(), 4096)
            if not chunk:
                return False
            buffer += chunk
            if wanted.encode() in buffer.split(b"\n"):
                return True
    return False
