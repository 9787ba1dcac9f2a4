"""Every method of an exporter failed at every point it does I/O, and out of descriptors.

A disk that errs (EIO), a folder that cannot be listed, a process out of descriptors
(EMFILE): each fails whatever the exporter does next. In a child process the exporter's
lifecycle (open, one write of every stream, flush, close) runs again and again; each
time one method meets one fault: its ``n``-th I/O call raises ``OSError`` (an audit hook
on the calls in ``EVENTS``: opens, listings, renames, sockets, locks, and a file
object's close), ``n`` = 1, 2, ...
until the method makes fewer calls; then it runs with ``k`` free descriptors
(``RLIMIT_NOFILE`` just above the highest one in use, the holes below it filled),
``k`` = 0, 1, ... until it returns, which reaches what C libraries open. A method that
raises must have released everything the instance took (the worker calls nothing more
on it, not even close); one that returns must have done its work, so the rest of the
lifecycle must not fail and its records must be readable. With ``recover``, after a
method raised at an I/O call, a new instance on the same run folder runs a whole lifecycle
with no fault, as ``follow`` does once the sink is back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..context import ExporterContext
from ._kill import child_env

__all__ = ["EVENTS", "MAX_BUDGET", "MAX_POINTS", "Attempt", "Pressure", "under_pressure"]

MAX_BUDGET = 64
"""The most free descriptors a method is given before it is taken to need more."""
MAX_POINTS = 256
"""The most I/O calls of one method that are failed in turn."""
EVENTS = [
    "open",
    "os.listdir",
    "os.scandir",
    "os.mkdir",
    "os.rename",
    "os.replace",
    "os.remove",
    "os.rmdir",
    "os.truncate",
    "os.chmod",
    "os.chown",
    "os.link",
    "os.symlink",
    "os.utime",
    "fcntl.flock",
    "fcntl.lockf",
    "fcntl.fcntl",
    "socket.__new__",
    "socket.connect",
    "socket.bind",
    "socket.getaddrinfo",
    "sqlite3.connect",
    "tempfile.mkstemp",
    "tempfile.mkdtemp",
    "shutil.copyfile",
    "shutil.move",
    "shutil.rmtree",
    "file.close",
]
"""The audit events (``sys.addaudithook``) of I/O calls a fault is injected into, and
``file.close``: the close of a file object made by ``open`` (``io.open``, ``os.fdopen``,
``Path.open``), which no audit event marks. A failed close is one that fails after the
file's buffer reached it, as NFS reports a lost write-back: what the file object wrote
is cut off (``ftruncate`` to its size when opened), its descriptor is closed, then
``OSError`` is raised."""

_MARK = "traceml-conformance-io-fault "
"""Starts each line the child reports on stdout (an exporter may print there too)."""

_CHILD = r"""
import builtins, errno, gc, io, json, os, resource, sys, threading, traceback, weakref
from traceml_exporter_sdk.context import ExporterContext
from traceml_exporter_sdk.factory import resolve_factory
from traceml_exporter_sdk.testing.corpus import corpus_batches
from traceml_exporter_sdk.testing._lanes import lane_base
from traceml_exporter_sdk.testing._resources import describe_fd as describe, open_fds as fds

spec, root, streams, hostname, max_budget, max_points, events, recover, MARK = sys.argv[1:]
EVENTS = frozenset(events.split(","))
METHODS = ("open", "write", "flush", "close")
factory = resolve_factory(spec)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
lane = 0
armed = None  # [I/O calls left before the fault, the worker thread's ident]
fired_at = ""  # the event the last fault was injected into

def due(event):
    # Only the worker thread's calls: an exporter's own threads would make the count vary.
    global armed, fired_at
    if armed is None or event not in EVENTS or threading.get_ident() != armed[1]:
        return False
    armed[0] -= 1
    if armed[0] == 0:
        armed, fired_at = None, event
        return True
    return False

def hook(event, args):
    if due(event):
        raise OSError(errno.EIO, f"fault injected by the conformance suite at {event}")

sys.addaudithook(hook)
real_open = io.open

def open_closing_badly(*args, **kwargs):
    # The file object's close, set on the instance (which io's __exit__ and finalizer call
    # too), can fail; a weak reference, so the file is still freed when dropped.
    handle = real_open(*args, **kwargs)
    try:
        start = os.fstat(handle.fileno()).st_size if handle.writable() else None
    except (OSError, ValueError):
        start = None
    ref = weakref.ref(handle)

    def close():
        handle = ref()
        if handle is None:
            return None
        if handle.closed or not due("file.close"):
            return type(handle).close(handle)
        try:
            handle.flush()
            if start is not None:
                os.ftruncate(handle.fileno(), start)
        finally:
            type(handle).close(handle)
        raise OSError(
            errno.EIO, "fault injected by the conformance suite at a file's close: what it wrote is lost"
        )

    try:
        handle.close = close
    except AttributeError:
        pass  # a file type without instance attributes: its close is not failed
    return handle

io.open = builtins.open = open_closing_badly

def say(**fields):
    print(MARK + json.dumps(fields), flush=True)

def fill_holes():
    # Every hole below the highest descriptor gets one, so the budget is exact.
    top, fillers = max(fds()), set()
    while (fd := os.open(os.devnull, os.O_RDONLY)) < top:
        fillers.add(fd)
    os.close(fd)
    return top, fillers

def call(exporter, method, records):
    if method == "write":
        exporter.write(records)
    elif method == "close":
        exporter.close(dropped_batches=0)
    else:
        getattr(exporter, method)()

def lifecycle(squeezed, fault, at, folder=None):
    # One instance on a run folder of its own (or ``folder``, a failed one's), made on this
    # (the main) thread and run on a worker thread, as TraceML's aggregator does.
    global lane
    lane += 1
    if folder is None:
        folder = os.path.join(root, f"run-{lane}")
        os.mkdir(folder)
    context = ExporterContext.create(folder, streams, hostname == "1")
    exporter = factory(context)
    out = {}
    worker = threading.Thread(
        target=lambda: out.update(run(exporter, context, squeezed, fault, at)),
        name="traceml-conformance-child-worker",
    )
    worker.start()
    worker.join()
    return out

def run(exporter, context, squeezed, fault, at):
    # ``squeezed`` meets the fault: at its ``at``-th I/O event, or with ``at`` free
    # descriptors. Returns what happened and whether the fault fired.
    global armed, fired_at
    fired_at = ""
    records = [r for b in corpus_batches(context.streams, observed_base_ns=lane_base(lane)) for r in b]
    gc.collect()
    before = fds()  # what the factory made is factory_is_inert's business
    fired = fault == "descriptors"
    for method in METHODS:
        error = None
        if method == squeezed and fault == "descriptors":
            top, fillers = fill_holes()
            now = fds()
            before.update({fd: now[fd] for fd in fillers})
            resource.setrlimit(resource.RLIMIT_NOFILE, (top + 1 + at, hard))
        elif method == squeezed:
            armed = [at, threading.get_ident()]
        try:
            call(exporter, method, records)
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"
            traceback.clear_frames(exc.__traceback__)
            del exc
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            if method == squeezed and fault == "event":
                fired, armed = armed is None, None
        if error is None:
            continue
        if method != squeezed:
            return dict(
                outcome="later", method=method, error=error, lane=lane, fired=fired, event=fired_at
            )
        gc.collect()  # garbage may close; what ``exporter`` still holds may not
        now = fds()
        kept = [describe(fd) for fd, key in sorted(now.items()) if before.get(fd) != key]
        return dict(
            outcome="failed", method=method, error=error, lane=lane, kept=kept, event=fired_at
        )
    return dict(outcome="done", lane=lane, fired=fired, event=fired_at)

warm = lifecycle(None, None, 0)  # lazy imports and first-use caches take descriptors now
say(fault="none", squeezed="", at=0, **warm)
if warm["outcome"] != "done":
    sys.exit(0)
for fault in ("event",) if recover == "1" else ("event", "descriptors"):
    for squeezed in METHODS:
        bound = int(max_points) if fault == "event" else int(max_budget)
        for at in range(int(fault == "event"), bound + 1):
            result = lifecycle(squeezed, fault, at)
            if recover == "1" and result["outcome"] == "failed":
                # as follow does once the sink is back: a new instance on the same folder
                again = lifecycle(None, None, 0, os.path.join(root, f"run-{result['lane']}"))
                result.update(
                    recovery_lane=again["lane"],
                    recovery_method=again.get("method", ""),
                    recovery_error=again.get("error", ""),
                )
            say(fault=fault, squeezed=squeezed, at=at, **result)
            if result.get("kept") and recover != "1":
                sys.exit(0)
            if not result.get("fired", True) or (
                fault == "descriptors" and result["outcome"] != "failed"
            ):
                break
"""


@dataclass(frozen=True)
class Attempt:
    """One lifecycle in the child, on its own run folder (``run-<lane>``): ``squeezed``
    met ``fault`` (``event``: its ``at``-th I/O call failed; ``descriptors``: it had
    ``at`` free descriptors; ``none``: the first lifecycle, with no fault).

    ``outcome``: ``done`` (the lifecycle ran through), ``failed`` (``squeezed`` raised;
    ``kept`` lists the descriptors it still held) or ``later`` (``squeezed`` returned,
    then ``method`` raised without a fault: ``squeezed`` swallowed one). ``fired``: the
    fault was met (an ``event`` past the method's last I/O call is not).
    """

    fault: str
    squeezed: str
    at: int
    outcome: str
    lane: int
    method: str = ""
    error: str = ""
    kept: tuple[str, ...] = ()
    fired: bool = True
    event: str = ""
    """The I/O call that failed (an ``EVENTS`` name), for an ``event`` fault that fired."""
    recovery_lane: int = 0
    """After an ``event`` fault that made ``squeezed`` raise: the lane of a new instance's
    whole lifecycle on the same run folder, as ``follow`` makes once the sink is back."""
    recovery_method: str = ""
    recovery_error: str = ""
    """The method the new instance raised in, and its error; empty when it ran through."""

    def describe(self) -> str:
        """What the fault was, in a few words."""
        if self.fault == "descriptors":
            return f"with {self.at} free file descriptor{'' if self.at == 1 else 's'}"
        call = f" ({self.event})" if self.event else ""
        return f"when its I/O call number {self.at}{call} failed"


@dataclass(frozen=True)
class Pressure:
    """What the child did: its attempts, the first with no fault, and why it ended early
    (its last stderr line), if it did."""

    attempts: tuple[Attempt, ...]
    error: str = ""

    def delivered(
        self, base: Path, include_hostname: bool
    ) -> list[tuple[ExporterContext, Attempt]]:
        """The context and attempt of each lifecycle that ran through (its records are due)."""
        return [
            (self._context(base, a, include_hostname), a)
            for a in self.attempts
            if a.outcome == "done"
        ]

    def recovered(
        self, base: Path, include_hostname: bool
    ) -> list[tuple[ExporterContext, Attempt]]:
        """The context and attempt of each failed lifecycle whose new instance ran through."""
        return [
            (self._context(base, a, include_hostname), a)
            for a in self.attempts
            if a.recovery_lane and not a.recovery_method
        ]

    @staticmethod
    def _context(base: Path, attempt: Attempt, include_hostname: bool) -> ExporterContext:
        return ExporterContext.create(base / f"run-{attempt.lane}", "all", include_hostname)


def under_pressure(
    spec: str,
    base: Path,
    *,
    export_streams: str,
    include_hostname: bool,
    recover: bool = False,
    timeout: float = 120.0,
) -> Pressure:
    """Run the child, its lifecycles' run folders made under ``base``, and collect what it
    reports. ``recover``: I/O faults only, and after each that made a method raise, a new
    instance's whole lifecycle on the same folder."""
    args = [
        sys.executable,
        "-c",
        _CHILD,
        spec,
        str(base),
        export_streams,
        "1" if include_hostname else "0",
        str(MAX_BUDGET),
        str(MAX_POINTS),
        ",".join(EVENTS),
        "1" if recover else "0",
        _MARK,
    ]
    try:
        child = subprocess.run(
            args,
            capture_output=True,
            env=child_env(),
            cwd=base,
            timeout=timeout,
            check=False,
        )
        out, err, code = child.stdout, child.stderr, child.returncode
        ended = f"exit code {code}" if code else ""
    except subprocess.TimeoutExpired as exc:
        out, err = exc.stdout or b"", exc.stderr or b""
        ended = f"it did not finish within {timeout:.0f} s"
    attempts: list[Attempt] = []
    for line in out.decode("utf-8", "replace").splitlines():
        if not line.startswith(_MARK):
            continue  # the exporter's own output
        fields = json.loads(line.removeprefix(_MARK))
        fields["kept"] = tuple(fields.get("kept", ()))
        attempts.append(Attempt(**fields))
    error = ""
    if ended:
        tail = err.decode("utf-8", "replace").strip().splitlines()
        error = f"{ended}: {tail[-1]}" if tail else ended
    return Pressure(tuple(attempts), error)
