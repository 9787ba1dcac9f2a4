"""Close semantics: a flush and a close deliver, close accepts ``dropped_batches``, and ends
all writing."""

from __future__ import annotations

import time

from .._harness import CallLog
from .._resources import describe_threads, tree
from ..environment import Env
from ..registry import CheckGroup
from ._common import corpus, merged

GROUP = CheckGroup("close_semantics")


@GROUP.check(needs_read_back=True)
def check_flush_is_acknowledgement(env: Env) -> None:
    """Rule: once flush() returns, everything written before it is readable through
    read_back, while the exporter is still open (for a sink with its own
    ``expected_export``: read_back equals it for the records written so far).

    A returned flush is an acknowledgement: ``follow`` moves its bookmark past what a
    flush acknowledged, so a flush that returns before the data is readable (written
    only at close, left in a client's buffer) loses it when the process dies. Driven
    by the worker, which flushes after every write; read_back runs after each flush.

    Contract: "It calls open once, then write and flush zero or more times, then close once."
    """
    context = env.context()
    batches = merged(corpus(), 8)
    problems: list[str] = []
    log = CallLog()

    def after_flush(index: int) -> None:
        if problems:
            return
        try:
            actual = env.read_back(context)
        except Exception as exc:
            problems.append(f"after flush {index}, read_back raised {type(exc).__name__}: {exc}")
            return
        if actual is None:
            return
        missing = env.delivery_problems(log.written(), context, actual)
        if missing:
            problems.append(f"after flush {index} of {len(batches)} returned:")
            problems.extend(missing)

    run = env.worker(
        context, batches, flush_interval_s=1e-9, pace=True, after_flush=after_flush, log=log
    )
    env.assert_clean(run, "write/flush with a read-back after each flush")
    assert not problems, (
        "a flush returned before what was written was readable; flush must deliver (a "
        "returned flush is an acknowledgement):\n" + "\n".join(problems)
    )


def _close_delivers(env: Env, dropped: int) -> None:
    """open, write, flush, write, write, close(dropped): every record readable after close."""
    batches = corpus()
    first, second, third = merged(batches, len(batches) // 3 + 1)[:3]
    label = f"open -> write -> flush -> write -> write -> close(dropped_batches={dropped})"
    steps = [
        ("open", None),
        ("write", first),
        ("flush", None),
        ("write", second),
        ("write", third),
        ("close", dropped),
    ]
    context = env.context()
    run = env.script(context, steps)
    env.assert_clean(run, label)
    if dropped:
        close = [c for c in run.log.calls if c.method == "close"]
        assert close, run.log.describe()
        assert close[0].kwargs == {"dropped_batches": dropped}, run.log.describe()
    actual = env.read_back(context)
    if actual is not None:
        problems = env.delivery_problems(run.log.written(), context, actual)
        assert not problems, (
            f"after {label}, records written since the last flush are not all readable; "
            "close must deliver everything written, flushed or not, whatever "
            "dropped_batches says:\n" + "\n".join(problems)
        )
        return
    flushed = env.context(name="flushed")
    with_flush = [*steps[:-1], ("flush", None), steps[-1]]
    env.assert_clean(env.script(flushed, with_flush), "the same run with a flush before close")
    unflushed_size = sum(tree(context.session_root).values())
    flushed_size = sum(tree(flushed.session_root).values())
    assert unflushed_size == flushed_size, (
        f"after {label} the sink holds {unflushed_size} bytes, with a flush before close "
        f"{flushed_size}: close must deliver what was written since the last flush"
    )


@GROUP.check
def check_unflushed_records_readable_after_close(env: Env) -> None:
    """Rule: records written since the last flush are in the sink after close; close
    delivers everything written, flushed or not.

    Driven as open, write, flush, write, write, close (no flush since the first
    write). With read_back every record must read back (per-stream counts, or the
    sink's ``expected_export``); without it the output must be as large as with a
    flush before close.

    Contract: "It calls open once, then write and flush zero or more times, then close once."
    """
    _close_delivers(env, 0)


@GROUP.check
def check_close_accepts_dropped_batches(env: Env) -> None:
    """Rule: close(dropped_batches=3) is accepted (a loss count is information, not an
    error) and still delivers everything written, including the writes since the last
    flush: a worker that dropped batches is ending a run, not aborting it.

    Driven as open, write, flush, write, write, close(dropped_batches=3).

    Contract: "dropped_batches is the number of payload batches the worker never handed to
    write."
    """
    _close_delivers(env, 3)


@GROUP.check
def check_nothing_written_after_close(env: Env) -> None:
    """Rule: once close returns the exporter is done: the files under session_root do not
    change over ``settle_time`` seconds and no thread it started is alive.

    Contract: "It calls open once, then write and flush zero or more times, then close once."
    """
    context = env.context()
    run = env.worker(context, corpus())
    env.assert_clean(run)
    sizes = tree(context.session_root)
    time.sleep(float(env.settings.settle_time))
    later = tree(context.session_root)
    changed = sorted(p for p in set(sizes) | set(later) if sizes.get(p) != later.get(p))
    threads = run.before.new_threads([run.thread])
    problems = []
    if changed:
        problems.append(
            "files changed after close: "
            + ", ".join(f"{p} ({sizes.get(p, 0)} -> {later.get(p, 0)} bytes)" for p in changed[:5])
        )
    if threads:
        problems.append(f"thread(s) alive after close: {describe_threads(threads)}")
    assert not problems, "; ".join(problems)
