"""Thread confinement: an inert factory on the main thread, the methods on the worker's."""

from __future__ import annotations

import gc
import threading
import time
from itertools import pairwise
from typing import Any

import pytest

from .._harness import METHODS, WORKER_THREAD
from .._off_worker import OffWorkerCalls, code_roots
from .._resources import (
    Snapshot,
    audit_events,
    describe_fd,
    describe_threads,
    thread_exceptions,
    tree_entries,
)
from ..environment import MOVE_TO_OPEN, Env
from ..registry import CheckGroup
from ._common import corpus

GROUP = CheckGroup("thread_confinement")


@GROUP.check
def check_factory_is_inert(env: Env) -> None:
    """Rule: the factory runs on the main thread and only builds an object.

    Twenty factory calls create no file under session_root, no new file
    descriptor (``/proc/self/fd``), no thread (``threading.enumerate()``) and no
    socket, sqlite3 connection or process (``sys.addaudithook``).

    Contract: "Create connections, clients and files in open, not in the factory, so they
    belong to the thread that uses them."
    """
    assert threading.current_thread() is threading.main_thread(), (
        "the suite must run on the main thread, where TraceML calls the factory"
    )
    context = env.context()
    root = context.session_root
    entries = tree_entries(root)
    before = Snapshot.take()
    made: list[Any] = []
    with audit_events() as events:
        try:
            for _ in range(20):
                made.append(env.factory(context))
        except Exception as exc:
            pytest.fail(f"the factory raised {type(exc).__name__}: {exc}", pytrace=False)
    problems = []
    created = sorted(tree_entries(root) - entries)
    if created:
        problems.append(f"files under session_root: {', '.join(created[:5])}")
    fds = before.new_fds()
    if fds:
        problems.append(
            f"{len(fds)} new file descriptor(s): {', '.join(map(describe_fd, fds[:5]))}"
        )
    threads = before.new_threads()
    if threads:
        problems.append(f"{len(threads)} new thread(s): {describe_threads(threads[:5])}")
    if events:
        kinds = sorted({event for event, _ in events})
        problems.append(f"{len(events)} audited resource event(s): {', '.join(kinds)}")
    del made
    gc.collect()
    assert not problems, (
        "20 factory calls were not inert: " + "; ".join(problems) + ".\n" + MOVE_TO_OPEN
    )


@GROUP.check
def check_methods_on_worker_thread(env: Env) -> None:
    """Rule: the factory runs on the main thread; open, write, flush and close all run, and
    work, on one other thread (the worker's).

    An exporter that made a thread-bound resource (a sqlite3 connection, a
    client) in the factory fails here, with a message to move it into open().

    Contract: "The export worker calls all four from its own background thread, and the
    calls never overlap."
    """
    run = env.worker(env.context(), corpus())
    env.assert_clean(run, "a run on the worker thread")
    main = threading.main_thread().ident
    factory_calls = [c for c in run.log.calls if c.method == "factory"]
    assert factory_calls, run.log.describe()
    assert factory_calls[0].thread_id == main, "the factory ran off the main thread"
    calls = run.log.exporter_calls()
    assert {c.method for c in calls} == set(METHODS), run.log.describe()
    threads = {(c.thread_id, c.thread_name) for c in calls}
    assert run.thread is not None
    assert run.thread.ident != main
    assert threads == {(run.thread.ident, run.thread.name)}, (
        f"the four methods should all run on the worker thread: {run.log.describe()}"
    )
    spans = sorted((c.start, c.end or c.start) for c in calls)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in pairwise(spans)), "calls overlapped"


@GROUP.check
def check_resources_released_after_close(env: Env) -> None:
    """Rule: after close returns, every thread the exporter started ends and every file
    descriptor it opened is closed (within ``grace_period`` seconds).

    Contract: "Create connections, clients and files in open, not in the factory, so they
    belong to the thread that uses them."
    """
    run = env.worker(env.context(), corpus())
    env.assert_clean(run)
    problems = run.before.left_behind(run.thread, env.grace)
    assert not problems, (
        f"{env.grace:g} s after close returned: "
        + problems
        + ". close must stop the exporter's threads and close what open opened."
    )


@GROUP.check
def check_no_exception_in_exporter_threads(env: Env) -> None:
    """Rule: no exception escapes a thread the exporter runs (seen via ``threading.excepthook``);
    a failure must surface as a raise from one of the four methods.

    Contract: "A method may raise."
    """
    with thread_exceptions() as caught:
        run = env.worker(env.context(), corpus())
        run.before.wait_released([run.thread], grace=env.grace, fds=False)
    assert not caught, (
        "exception(s) escaped from exporter thread(s), where the worker never sees them: "
        + "; ".join(caught)
    )
    env.assert_clean(run)


WATCH_S = 2.5
"""How long the exporter stays open under watch: past two ticks of a 1 s timer."""


@GROUP.check
def check_only_worker_thread_runs_exporter(env: Env) -> None:
    """Rule: only the worker touches the sink: while the exporter is open (2.5 s, writes
    and flushes spread over it), no code of the exporter's package runs on any thread but
    the worker's, such as a periodic auto-flush timer, a pool or a client's callback.

    The worker serializes the four calls; a thread of the exporter's own writes, flushes
    or sends beside them, so records are lost or interleaved, and a flush no longer
    acknowledges what it says. Seen with a profile hook and a stack sampler (``_off_worker``).

    Contract: "The export worker calls all four from its own background thread, and the
    calls never overlap."
    """
    context = env.context()
    probe = env.factory(context)
    roots = code_roots(type(probe).__module__, getattr(env.factory, "__module__", None) or "")
    del probe
    batches = corpus()[:5]
    pause = WATCH_S / len(batches)
    watch = OffWorkerCalls(roots, allowed={WORKER_THREAD, threading.main_thread().name})
    with watch.watching():
        run = env.worker(
            context,
            batches,
            flush_interval_s=1e-9,
            pace=True,
            after_flush=lambda _: time.sleep(pause),
        )
    env.assert_clean(run, "a run kept open 2.5 s")
    assert not watch.found, (
        "the exporter's code ran on thread(s) other than the worker's while it was open: "
        + "; ".join(f"{thread!r}: {place}" for thread, place in sorted(watch.found.items()))
        + ". Only the worker may touch the sink: no timer, pool or callback of the "
        "exporter's own may write, flush or send; do that work in write() and flush()."
    )
