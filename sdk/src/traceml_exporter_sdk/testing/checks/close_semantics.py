"""Close semantics: close flushes, accepts ``dropped_batches``, and ends all writing."""

from __future__ import annotations

import time

from .. import _compare as cmp
from .._resources import describe_threads, tree
from ..environment import Env
from ..registry import CheckGroup
from ._common import corpus, merged

GROUP = CheckGroup("close_semantics")


@GROUP.check
def check_unflushed_records_readable_after_close(env: Env) -> None:
    """Rule: records written but never flushed are in the sink after close; close flushes.

    Driven as open, write, write, close (no flush). With read_back every
    record must read back (per-stream counts); without it the output must be
    as large as after an explicit flush.

    Contract: "It calls open once, then write and flush zero or more times, then close once."
    """
    batches = corpus()
    first, second = merged(batches, len(batches) // 2 + 1)[:2]
    context = env.context()
    run = env.script(context, [("open", None), ("write", first), ("write", second), ("close", 0)])
    env.assert_clean(run, "open -> write -> write -> close")
    actual = env.read_back(context)
    if actual is not None:
        expected = cmp.expected_by_stream(
            run.log.written(), include_hostname=context.include_hostname
        )
        problems = cmp.count_problems(expected, actual)
        assert not problems, "records never flushed before close:\n" + "\n".join(problems)
        return
    flushed = env.context(name="flushed")
    steps = [("open", None), ("write", first), ("write", second), ("flush", None), ("close", 0)]
    env.assert_clean(env.script(flushed, steps), "the same run with a flush")
    unflushed_size = sum(tree(context.session_root).values())
    flushed_size = sum(tree(flushed.session_root).values())
    assert unflushed_size == flushed_size, (
        f"close without a flush left {unflushed_size} bytes, with a flush {flushed_size}: "
        "close must flush what was written"
    )


@GROUP.check
def check_close_accepts_dropped_batches(env: Env) -> None:
    """Rule: close(dropped_batches=3) is accepted; a loss count is information, not an error.

    Contract: "dropped_batches is the number of payload batches the worker never handed to
    write."
    """
    context = env.context()
    batch = corpus()[0]
    run = env.script(context, [("open", None), ("write", batch), ("flush", None), ("close", 3)])
    env.assert_clean(run, "close(dropped_batches=3)")
    close = [c for c in run.log.calls if c.method == "close"]
    assert close, run.log.describe()
    assert close[0].kwargs == {"dropped_batches": 3}
    actual = env.read_back(context)
    if actual is not None:
        expected = cmp.expected_by_stream(
            run.log.written(), include_hostname=context.include_hostname
        )
        problems = cmp.count_problems(expected, actual)
        assert not problems, "after close(dropped_batches=3):\n" + "\n".join(problems)


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
