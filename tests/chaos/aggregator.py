"""A synthetic TraceML 0.5.0 run as processes: a launcher and its aggregator, as
``traceml run`` starts them, so a follower sees in ``/proc`` what it sees of a real run.

``python -m chaos.aggregator launch SPEC_JSON`` starts ``... aggregate SPEC_JSON`` as its
child and waits for it. The aggregator writes the run folder with ``writer050.Writer050``
(0.5.0's schema and transactions): ``rows`` step_time rows every ``every`` seconds, and,
with ``retention``, deletes in the same transaction the rows committed more than
``retention`` seconds ago (0.5.0's history retention). Each commit and each prune is
appended to the ledger (outside the run folder, which may be deleted): the checker's
record of every row TraceML wrote. It ends when ``seconds`` passed or the stop file
appears: checkpoint, close, manifest ``complete``. When its launcher dies (``kill -9``
of the launcher alone) it stops writing and holds the database open, orphaned, as
0.5.0's aggregator does, until it is killed (``HOLD_S`` at most).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["HOLD_S", "aggregate", "launch"]

HOLD_S = 600.0
"""How long an orphaned aggregator holds the database before it exits by itself."""
TABLE = "step_time_samples"


def _append(ledger: Path, entry: dict[str, Any]) -> None:
    with open(ledger, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry) + "\n")
        fh.flush()


def aggregate(spec: dict[str, Any]) -> int:
    from writer050 import Writer050, step_records

    root, ledger = Path(spec["root"]), Path(spec["ledger"])
    stop = Path(spec["stop"])
    launcher = os.getppid()
    writer = Writer050(root, session_id=root.name)
    Path(spec["pid_file"]).write_text(str(os.getpid()), encoding="utf-8")  # the run is there
    deadline = time.monotonic() + float(spec["seconds"])
    retention = spec.get("retention")
    commits: list[tuple[float, int]] = []
    step = 0
    while time.monotonic() < deadline and not stop.exists():
        if os.getppid() != launcher:
            _append(ledger, {"t": time.time(), "orphaned": True})
            time.sleep(HOLD_S)
            return 0
        now = time.time()
        prune: dict[str, int] = {}
        if retention is not None:
            old = [last for at, last in commits if at < now - float(retention)]
            if old:
                prune[TABLE] = max(old)
                commits = [(at, last) for at, last in commits if last > max(old)]
        count = int(spec["rows"])
        ids = writer.flush(step_records(step, count, observed=time.time_ns()), prune=prune)[TABLE]
        _append(ledger, {"t": time.time(), "first_id": ids[0], "last_id": ids[-1], "step": step})
        if prune:
            _append(ledger, {"t": time.time(), "prune_upto": prune[TABLE]})
        commits.append((now, ids[-1]))
        step += count
        time.sleep(float(spec["every"]))
    writer.close()
    _append(ledger, {"t": time.time(), "complete": True})
    return 0


def launch(spec_json: str) -> int:
    child = subprocess.Popen([sys.executable, "-m", "chaos.aggregator", "aggregate", spec_json])
    return child.wait()


if __name__ == "__main__":
    command, argument = sys.argv[1], sys.argv[2]
    if command == "launch":
        sys.exit(launch(argument))
    sys.exit(aggregate(json.loads(argument)))
