"""Lifecycle: the four methods exist, and open, write/flush zero or more times, close works."""

from __future__ import annotations

import dataclasses
import inspect

from .. import _compare as cmp
from .._resources import tree_digest
from ..environment import Env
from ..registry import CheckGroup
from ._common import corpus

GROUP = CheckGroup("lifecycle")


@GROUP.check
def check_method_signatures(env: Env) -> None:
    """Rule: the exporter has open(), write(records), flush() and close(*, dropped_batches=0).

    ``close`` takes ``dropped_batches`` as a keyword-only parameter with default 0
    (checked with ``inspect.signature``), because the worker calls
    ``close(dropped_batches=n)``.

    Contract: "It implements the Exporter interface from traceml_ai.aggregator.export:
    open(), write(records), flush() and close(*, dropped_batches=0)."
    """
    exporter = env.factory(env.context())
    assert exporter is not None, "the factory returned None, not an exporter"
    problems = []
    for method, args in (("open", ()), ("write", ([],)), ("flush", ()), ("close", ())):
        target = getattr(exporter, method, None)
        if not callable(target):
            problems.append(f"it has no {method}() method")
            continue
        try:
            signature = inspect.signature(target)
        except (TypeError, ValueError):
            continue
        try:
            signature.bind(*args)
        except TypeError as exc:
            problems.append(
                f"{method}{signature} cannot be called as {method}({'records' if args else ''}): {exc}"
            )
        if method == "close":
            param = signature.parameters.get("dropped_batches")
            if param is None:
                problems.append(f"close{signature} has no dropped_batches parameter")
            elif param.kind is not inspect.Parameter.KEYWORD_ONLY:
                problems.append(
                    f"close{signature}: dropped_batches must be keyword-only (after *), "
                    f"it is {param.kind.description}"
                )
            elif param.default is inspect.Parameter.empty or param.default != 0:
                problems.append(f"close{signature}: dropped_batches must default to 0")
    assert not problems, (
        "the exporter does not have the Exporter interface: "
        + "; ".join(problems)
        + ". Expected: open(), write(records), flush(), close(*, dropped_batches=0)"
    )


@GROUP.check
def check_open_close(env: Env) -> None:
    """Rule: open then close, with no write in between, works (an idle run).

    Contract: "It calls open once, then write and flush zero or more times, then close once."
    """
    run = env.worker(env.context())
    env.assert_clean(run, "open -> close")
    assert run.log.methods() == ["factory", "open", "close"], run.log.describe()


@GROUP.check
def check_open_flush_close(env: Env) -> None:
    """Rule: open, flush with nothing written, close works.

    Contract: "It calls open once, then write and flush zero or more times, then close once."
    """
    run = env.script(env.context(), [("open", None), ("flush", None), ("close", 0)])
    env.assert_clean(run, "open -> flush -> close")
    assert run.log.methods() == ["factory", "open", "flush", "close"], run.log.describe()


@GROUP.check
def check_flush_twice(env: Env) -> None:
    """Rule: two flush calls in a row (the second with nothing new) work.

    Contract: "It calls open once, then write and flush zero or more times, then close once."
    """
    batch = corpus()[0]
    steps = [("open", None), ("write", batch), ("flush", None), ("flush", None), ("close", 0)]
    run = env.script(env.context(), steps)
    env.assert_clean(run, "open -> write -> flush -> flush -> close")
    assert run.log.methods() == ["factory", "open", "write", "flush", "flush", "close"]


@GROUP.check
def check_writes_interleaved_with_flushes(env: Env) -> None:
    """Rule: many writes each followed by a flush work, and (with read_back) every stream
    reads back as many records as were written.

    The worker runs with a tiny flush interval, so it flushes after every write,
    and each batch is submitted once the previous one was flushed.

    Contract: "It calls open once, then write and flush zero or more times, then close once."
    """
    context = env.context()
    batches = corpus()
    run = env.worker(context, batches, flush_interval_s=1e-9, pace=True)
    env.assert_clean(run, "write/flush interleaved")
    methods = run.log.methods()
    assert methods == ["factory", "open", *["write", "flush"] * len(batches), "close"], (
        f"the worker should have alternated write and flush: {run.log.describe()}"
    )
    actual = env.read_back(context)
    if actual is not None:
        expected = cmp.expected_by_stream(
            run.log.written(), include_hostname=context.include_hostname
        )
        problems = cmp.count_problems(expected, actual)
        assert not problems, "after interleaved writes and flushes:\n" + "\n".join(problems)


@GROUP.check
def check_two_instances_in_sequence(env: Env) -> None:
    """Rule: two exporters from one factory, one after the other on the same paths, both work.

    After the first run its output is moved aside (the session folder is
    renamed, so an exporter that refuses to overwrite, like the contract's
    OneFileExporter with mode "x", still passes); the second instance must
    work and must leave the first one's output intact. Nothing may carry over
    between instances (module-level state, process-wide locks). With read_back,
    each instance's output holds as many records per stream as it was given.

    Contract: "The aggregator process imports the module, reads the attribute and calls
    it as factory(context)."
    """
    context = env.context()
    root = context.session_root
    batches = corpus()
    half = len(batches) // 2
    first = env.worker(context, batches[:half])
    env.assert_clean(first, "first instance")
    first.before.wait_released([first.thread], grace=env.grace)  # stragglers, checked elsewhere
    moved = root.with_name(root.name + "-first-run")
    root.rename(moved)
    root.mkdir()
    digest = tree_digest(moved)
    second = env.worker(context, batches[half:])
    env.assert_clean(second, "second instance on the same paths (first output moved aside)")
    assert tree_digest(moved) == digest, (
        "the second instance changed the first instance's output (moved aside to "
        f"{moved.name}): files before {sorted(digest)}, after {sorted(tree_digest(moved))}"
    )
    first_context = dataclasses.replace(
        context, session_root=moved, export_dir=moved / context.export_dir.relative_to(root)
    )
    for label, ctx, run in (("first", first_context, first), ("second", context, second)):
        actual = env.read_back(ctx)
        if actual is None:
            continue
        expected = cmp.expected_by_stream(run.log.written(), include_hostname=ctx.include_hostname)
        problems = cmp.count_problems(expected, actual)
        assert not problems, f"the {label} instance's output:\n" + "\n".join(problems)
