"""Lifecycle: the four methods exist, and open, write/flush zero or more times, close works."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from ...context import ExporterContext
from .._kill import Moment, kill_child
from .._lanes import Lane, as_traceml_run, lane_batches, lanes_delivered_problems, run_problems
from .._records import PoisonedRecord
from .._resources import file_states, leftover_files, lost_files, tree_digest
from ..environment import Env
from ..registry import CheckGroup
from ._common import corpus, difference, merged

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
    then the first's output is left as it was. Returns what the second wrote.

    The second writes each stream it has in two batches and flushes after each, as
    ``follow`` does on its cadence, so a sink that merges or rotates its own parts does
    so beside the first's output."""
    root = context.session_root
    files = file_states(root)
    halves = [part for b in corpus()[-4:] for part in (b[: len(b) // 2], b[len(b) // 2 :])]
    second = env.worker(context, halves, flush_interval_s=1e-9, pace=True)
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
    second.before.wait_released([second.thread], grace=env.grace)  # stragglers: elsewhere
    written = list(second.log.written())
    actual = env.read_back(context)
    if actual is not None:
        problems = env.delivery_problems([*first, *written], context, actual)
        assert not problems, _restart_loss(env, what, [*first, *written], context, actual) + (
            ":\n" + "\n".join(problems)
        )
        return written
    shrunk = lost_files(files, root)
    assert not shrunk, (
        f"a second instance {what} on the same context removed or truncated the first's "
        f"files: {', '.join(shrunk[:5])}; a restart must keep what the first wrote"
    )
    return written


def _restart_loss(
    env: Env,
    what: str,
    records: Sequence[Any],
    context: ExporterContext,
    actual: Mapping[str, Sequence[Any]],
) -> str:
    """What went wrong when two instances' read-back is not their records, in the reader's
    terms: records missing (the restart lost the first's), or more than both wrote."""
    expected = env.expected(records, context)
    streams = set(expected) | set(actual)
    more = [s for s in streams if len(actual.get(s, ())) > len(expected.get(s, ()))]
    fewer = [s for s in streams if len(actual.get(s, ())) < len(expected.get(s, ()))]
    if more and not fewer:
        return (
            f"after a second instance {what} on the same context, more records came back "
            "than the two wrote: the export holds records that are not this run's (another "
            "run's, from a store shared between instances or keyed by something other than "
            "the resolved session_root), or the same records twice"
        )
    if fewer:
        return (
            f"a second instance {what} on the same context lost what the first wrote (a "
            "restart, as `follow` does, must keep it: open what exists for appending, or "
            "refuse in open with a clear error)"
        )
    return (
        f"after a second instance {what} on the same context, the export is not what the two wrote"
    )


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


# -- scenarios of the runners: several runs at once, a kill, another stream selection ---

_RUNS = (("A", "logs-a/run"), ("B", "logs-b/run"), ("C", "logs-a/run-c"))
"""The runs side by side: A and B have one folder name under two parents (two logs
folders), C sits beside A."""


@GROUP.check
def check_instances_side_by_side(env: Env) -> None:
    """Rule: instances of different runs live side by side in one process: each run's
    export holds exactly its own records, and every instance delivers, while another
    closes or fails.

    As ``follow --logs-dir`` runs them: three runs (two with the same folder name under
    two parents), each instance on its own worker thread, made by the factory on a job
    thread of its own; their writes and flushes interleaved batch by batch. Run C's
    instance closes after two batches, run B's fails after three (a record whose
    ``to_dict()`` raises), and run A's goes on to the end.
    Catches state instances share: a class attribute, a module-level client that one
    instance's ``close()`` shuts down, a store keyed by the run folder's name.

    Contract: "The aggregator process imports the module, reads the attribute and calls
    it as factory(context)."
    """
    streams = env.context().streams
    batches = {run: merged(lane_batches(i, streams), 4) for i, (run, _) in enumerate(_RUNS)}
    lanes = {i: run for i, (run, _) in enumerate(_RUNS)}
    contexts = {run: as_traceml_run(env.context(name=folder)) for run, folder in _RUNS}
    made = {run: Lane(env.factory, contexts[run], run) for run, _ in _RUNS}
    live = dict(made)
    events: list[str] = []
    problems: list[str] = []

    def failed(run: str, lane: Lane, when: str) -> None:
        happened = f" (after {', '.join(events)})" if events else ""
        problems.append(
            f"run {run}'s instance{when}, while other runs' instances were alive{happened}: "
            f"the exporter failed in {lane.failure}"
        )

    for index in range(len(batches["A"])):
        for run, lane in list(live.items()):
            if not lane.send(batches[run][index]):
                failed(run, live.pop(run), "")
        if index == 1 and "C" in live:
            if live.pop("C").finish().failure is not None:
                failed("C", made["C"], " at close")
            events.append("run C's instance closed")
        if index == 2 and "B" in live:
            live.pop("B").worker.submit_records([PoisonedRecord()])
            made["B"].finish()
            events.append("run B's instance failed")
    for run, lane in live.items():
        if lane.finish().failure is not None:
            failed(run, lane, " at close")
    for lane in made.values():
        lane.finish()  # those that failed: their worker's report
    own = {
        "A": made["A"].log.written(),
        "B": [r for r in made["B"].delivered() if not isinstance(r, PoisonedRecord)],
        "C": made["C"].log.written(),
    }
    for run, _ in _RUNS:
        problems += run_problems(env, run, contexts[run], own[run], lanes)
    assert not problems, (
        "instances of different runs in one process (as `follow --logs-dir` runs them) "
        "disturbed each other:\n" + "\n".join(problems) + "\nKeep every piece of state on "
        "the instance: no class attribute or module-level client shared between "
        "instances, no store keyed by the run folder's name (two runs may share it: "
        "key a run by its whole resolved session_root)"
    )


@GROUP.check
def check_restart_with_other_streams(env: Env) -> None:
    """Rule: a restart with another stream selection keeps both: a first instance with
    ``export_streams`` ``step_time``, then a second on the same run folder with ``all``;
    every record both wrote is readable through the second's context (or, as for any
    restart, the second refuses in open and changes nothing).

    ``follow`` and ``replay --session-root`` may be started again on one run with
    another ``--streams``. Catches an exporter that fixes the run's streams (its files,
    tables or schema) at the first open and drops or refuses the others later.

    Contract: "The aggregator process imports the module, reads the attribute and calls
    it as factory(context)."
    """
    first_context = env.context("step_time")
    first = env.worker(first_context, corpus("step_time"))
    env.assert_clean(first, "the first instance (export_streams: step_time)")
    first.before.wait_released([first.thread], grace=env.grace)
    context = env.context("all")
    files = file_states(context.session_root)
    second = env.worker(context, lane_batches(0))
    if second.failed_method == "open" and not lost_files(files, context.session_root):
        return  # it refuses every restart: two_instances_in_sequence and the outage check
    env.assert_clean(
        second,
        "a second instance with export_streams all, on the run folder of a first one that "
        "had step_time",
    )
    actual = env.read_back(context)
    if actual is None:
        return
    problems = env.delivery_problems([*first.log.written(), *second.log.written()], context, actual)
    records = [*first.log.written(), *second.log.written()]
    assert not problems, (
        "after a restart with another stream selection (step_time, then all), "
        f"{difference(env, records, context, actual)}:\n" + "\n".join(problems) + "\nA "
        "run's streams are not fixed at its first open: `follow` may be started again "
        "with another --streams"
    )


@GROUP.check
def check_restart_after_kill(env: Env) -> None:
    """Rule: a kill loses only what was not flushed: the exporter runs in a child process,
    killed with SIGKILL right after a flush, then another killed in the middle of a
    write; a new instance on the same folder then opens, and everything flushed before
    either kill and everything the new instance wrote is readable.

    Processes die by SIGKILL and the OOM killer, and ``follow`` starts again on the same
    folder. Catches a format that cannot be appended to after an unfinished write (a JSON
    array, a file with a footer, a line cut off and continued), and a lock that outlives
    the process that took it. Needs the factory as ``module:factory``.

    Contract: "A method may raise. The worker then logs the failure, stops using the
    exporter, and records the loss in finalization_warning.json."
    """
    if env.spec is None:
        pytest.skip("the factory has no module:factory name, so a child process cannot load it")
    context = env.context()
    kills: tuple[tuple[Moment, int, int], ...] = (("after-flush", 0, 9), ("mid-write", 1, 2))
    for moment, done, pending in kills:
        child = kill_child(
            env.spec, context, moment, export_streams="all", flushed=done, unflushed=pending
        )
        assert child.killed, (
            f"a child process to be killed ({moment}) ended first: the exporter failed in "
            f"child: {child.error}"
        )
    flushed = [r for i in (0, 1) for batch in lane_batches(i, context.streams) for r in batch]
    third = env.worker(context, lane_batches(3, context.streams))
    if third.failed_method == "open":
        assert third.report is not None
        assert third.report.failure is not None
        leftovers = leftover_files(context.session_root)
        left = f" ({', '.join(leftovers)} left by the killed one)" if leftovers else ""
        pytest.fail(
            f"a new instance refused in open after a kill{left}: the exporter failed in "
            f"open: {third.report.failure.error}\nA killed process cleans nothing up: a "
            "lock must go with its process (an flock, not a file that exists), and open "
            "must accept what a kill leaves",
            pytrace=False,
        )
    env.assert_clean(third, "a new instance on the folder of two killed ones")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a torn last line is what a kill leaves
            actual = env.read_back(context)
    except Exception as exc:
        pytest.fail(
            f"after a kill in the middle of a write and a new instance, the export cannot be "
            f"read: {type(exc).__name__}: {exc}. A kill leaves an unfinished write: a new "
            "instance must not continue it (start a new file or part, or cut the torn end "
            "in open)",
            pytrace=False,
        )
    if actual is None:
        return
    lanes = {0: "flushed", 1: "flushed", 2: "unflushed", 3: "new"}
    if env.aggregating:
        return  # a sink of series: what of the unflushed writes arrived is unknown
    required = [*flushed, *third.log.written()]
    problems = lanes_delivered_problems(env, context, required, actual, lanes, "unflushed")
    assert not problems, (
        "after a kill right after a flush and one in the middle of a write, a new instance "
        "on the same folder: of what was flushed before the kills and what the new "
        f"instance wrote, {difference(env, required, context, actual)}:\n" + "\n".join(problems)
    )
