"""Lifecycle: the four methods exist, and open, write/flush zero or more times, close works."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from ...context import ExporterContext
from .._records import PoisonedRecord
from .._resources import file_states, lost_files, tree_digest
from ..environment import Env
from ..registry import CheckGroup
from ._common import corpus, merged

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
        problems = env.delivery_problems(run.log.written(), context, actual)
        assert not problems, "after interleaved writes and flushes:\n" + "\n".join(problems)


def _restart(env: Env, context: ExporterContext, first: Sequence[Any], what: str) -> list[Any]:
    """A second instance on ``context``, after a first that delivered ``first``: it either
    works, and then the first's records and its own are readable, or refuses in open, and
    then the first's output is left as it was. Returns what the second wrote."""
    root = context.session_root
    files = file_states(root)
    second = env.worker(context, corpus()[-4:])
    if second.failed_method == "open":
        assert second.report is not None
        assert second.report.failure is not None
        error = second.report.failure.error
        assert error.partition(": ")[2].strip(), (
            f"the second instance refused in open with no message ({error!r}); say why"
        )
        shrunk = lost_files(files, root)
        assert not shrunk, (
            f"a second instance {what} refused in open ({error}) but its open removed or "
            f"truncated the first's files: {', '.join(shrunk[:5])}"
        )
        actual = env.read_back(context)
        if actual is not None:
            problems = env.delivery_problems(first, context, actual)
            assert not problems, (
                f"after a second instance {what} refused in open, the first's records:\n"
                + "\n".join(problems)
            )
        return []
    env.assert_clean(second, f"a second instance {what}, on the same context")
    written = list(second.log.written())
    actual = env.read_back(context)
    if actual is not None:
        problems = env.delivery_problems([*first, *written], context, actual)
        assert not problems, (
            f"a second instance {what} on the same context lost what the first wrote (a "
            "restart, as `follow` does, must keep it: open what exists for appending, or "
            "refuse in open with a clear error):\n" + "\n".join(problems)
        )
        return written
    shrunk = lost_files(files, root)
    assert not shrunk, (
        f"a second instance {what} on the same context removed or truncated the first's "
        f"files: {', '.join(shrunk[:5])}; a restart must keep what the first wrote"
    )
    return written


@GROUP.check
def check_two_instances_in_sequence(env: Env) -> None:
    """Rule: a restart keeps what was written: a second exporter from the factory, on the
    same context after the first closed, leaves everything the first wrote readable (with
    its own records after it), or refuses in open with a clear error and changes nothing.
    Then a third instance on the same paths, the folder moved aside first, works: nothing
    carries over between instances (module-level state, process-wide locks).

    ``follow`` restarts an exporter on the same session folder after a crash; an
    exporter that opens its files with mode "w" there loses the first run. With
    read_back the records are compared (per-stream counts, or ``expected_export``);
    without it, no file of the first run may shrink or vanish.

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
    second_written = _restart(env, context, first.log.written(), "after the first closed")
    moved = root.with_name(root.name + "-earlier-runs")
    root.rename(moved)
    root.mkdir()
    digest = tree_digest(moved)
    third = env.worker(context, batches[half:])
    env.assert_clean(third, "a third instance on the same paths (earlier output moved aside)")
    assert tree_digest(moved) == digest, (
        "the third instance changed the earlier instances' output (moved aside to "
        f"{moved.name}): files before {sorted(digest)}, after {sorted(tree_digest(moved))}"
    )
    actual = env.read_back(context)
    if actual is not None:
        problems = env.delivery_problems(third.log.written(), context, actual)
        # A sink that finds its run by the run key (the resolved folder, rule 9), such as
        # an MLflow run tagged with it, rightly shows the earlier instances' records too.
        every = [*first.log.written(), *second_written, *third.log.written()]
        assert not problems or not env.delivery_problems(every, context, actual), (
            "the third instance's output (neither its own records alone, nor the three "
            "instances' records of the same run key):\n" + "\n".join(problems)
        )


@GROUP.check
def check_restart_after_failure(env: Env) -> None:
    """Rule: a restart after a failure keeps what was delivered: after a first exporter
    raised (the suite hands it a record whose to_dict() and fields raise), a second one on
    the same context leaves every record the first flushed readable (with its own after
    it), or refuses in open with a clear error and changes nothing.

    Driven as open, write, flush, write, flush, write([poisoned record]) on the
    first instance (nothing more is called once a method raised, as in the worker),
    then a whole worker run of the second.

    Contract: "A method may raise. The worker then logs the failure, stops using the
    exporter, and records the loss in finalization_warning.json."
    """
    context = env.context()
    first, second = merged(corpus(), 12)[:2]
    steps = [
        ("open", None),
        ("write", first),
        ("flush", None),
        ("write", second),
        ("flush", None),
        ("write", [PoisonedRecord()]),
        ("flush", None),
        ("close", 0),
    ]
    run = env.script(context, steps)
    assert not run.timed_out, f"the first instance hung: {run.log.describe()}"
    healthy = run.log.exporter_calls()[:5]  # open, write, flush, write, flush
    if any(not call.ok for call in healthy):
        env.assert_clean(run, "the first instance, before the poisoned record")
    assert run.failure is not None, (
        "a record whose to_dict() and every field raise was written, flushed and closed "
        "without an error: the exporter swallowed a failure (let it propagate, so the "
        f"worker records the loss): {run.log.describe()}"
    )
    run.before.wait_released([run.thread], grace=env.grace)  # leaks are checked elsewhere
    delivered = [r for r in run.log.written() if not isinstance(r, PoisonedRecord)]
    _restart(env, context, delivered, "after the first failed")
