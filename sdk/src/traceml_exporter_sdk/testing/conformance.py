"""``ExporterConformance``: the pytest base class that proves an exporter keeps the contract.

Subclass it in a test file and name the factory; every check of this SDK
release runs against it, each as its own test with a readable id such as
``test_thread_confinement[factory_is_inert]``::

    from traceml_exporter_sdk.testing import ExporterConformance

    class TestMyExporter(ExporterConformance):
        factory = "my_pkg.exporter:make_exporter"
        throughput_floor = 20_000                  # records/s, optional
        skip_checks = {"records_per_second": "CI machines are too slow"}
        xfail_checks = {}

        def read_back(self, context):              # optional: data-fidelity checks
            ...                                    # {STREAM: [dict, ...]}

Checks drive the exporter through the SDK's ``ExportWorker`` (a dedicated
thread, like TraceML's export worker), or for the call sequences the worker
never produces, through a scripted driver on one dedicated thread; a
recording proxy between them and the exporter logs every call, so call order
and thread identity are observed. The suite relies only on ``STREAM``,
``COLUMNS``, the fields and ``to_dict()`` of records, never on their classes.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
import inspect
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..context import ExporterContext
from ..factory import ExporterSettingError, check_exporter_setting
from ..streams import EXPORT_STREAM_NAMES, parse_export_streams
from ..worker import ExportWorker
from . import _compare as cmp
from ._harness import (
    METHODS,
    WORKER_THREAD,
    CallLog,
    Run,
    Snapshot,
    audit_events,
    describe_fd,
    describe_threads,
    open_fds,
    recording_factory,
    run_script,
    run_worker,
    thread_exceptions,
    tree,
    tree_digest,
    tree_entries,
)
from .corpus import as_foreign, corpus_batches, load_corpus
from .plugin import THROUGHPUT_PROPERTY
from .readback import read_jsonl

__all__ = [
    "CHECKS",
    "GROUPS",
    "Check",
    "ConformanceConfigError",
    "Env",
    "ExporterConformance",
    "ReadBackNotImplementedError",
    "check_names",
    "spec_test_class",
]

Factory = Callable[[ExporterContext], Any]

GROUPS = (
    "lifecycle",
    "thread_confinement",
    "stream_dispatch",
    "close_semantics",
    "data_fidelity",
    "failure_behaviour",
    "throughput",
    "importability",
)
"""The check groups; each is one test function, ``test_<group>[<check>]``."""

BUILTIN_JSONL_SPECS = frozenset({"jsonl", "traceml_exporter_sdk.jsonl:make_exporter"})

MOVE_TO_OPEN = (
    "Create connections, clients and files in open(), not in the factory: the factory runs "
    "on the main thread, and the four methods run on the worker thread, so a resource made "
    'in the factory belongs to the wrong thread (contract: "Create connections, clients '
    'and files in open, not in the factory, so they belong to the thread that uses them.").'
)


class ConformanceConfigError(ValueError):
    """A conformance test class is set up wrongly (factory, skip_checks, xfail_checks, ...)."""


class ReadBackNotImplementedError(NotImplementedError):
    """``read_back`` is not implemented for this exporter; data-fidelity checks are skipped."""


@dataclass(frozen=True)
class Check:
    """One conformance check: its group, its name, the rule and the code that enforces it."""

    group: str
    name: str
    func: Callable[[ExporterConformance, Env], None]
    needs_read_back: bool = False

    @property
    def test_id(self) -> str:
        """The pytest id, e.g. ``test_lifecycle[open_close]``."""
        return f"test_{self.group}[{self.name}]"

    @property
    def doc(self) -> str:
        """The rule and the contract sentence it enforces (the check's docstring)."""
        return inspect.cleandoc(self.func.__doc__ or "")


_REGISTRY: dict[str, Check] = {}


def _check(
    group: str, *, needs_read_back: bool = False
) -> Callable[
    [Callable[[ExporterConformance, Env], None]], Callable[[ExporterConformance, Env], None]
]:
    assert group in GROUPS, group

    def register(
        func: Callable[[ExporterConformance, Env], None],
    ) -> Callable[[ExporterConformance, Env], None]:
        name = func.__name__.removeprefix("check_")
        assert name not in _REGISTRY, name
        assert name not in GROUPS, name
        _REGISTRY[name] = Check(group, name, func, needs_read_back)
        return func

    return register


def check_names() -> tuple[str, ...]:
    """Every check name, in suite order (the keys ``skip_checks``/``xfail_checks`` accept)."""
    return tuple(_REGISTRY)


# -- the test environment ---------------------------------------------------------


class Env:
    """What one check gets: the suite instance, a temporary folder, the factory."""

    def __init__(
        self,
        suite: ExporterConformance,
        tmp_path: Path,
        record_property: Callable[[str, object], None],
    ) -> None:
        self.suite = suite
        self.tmp_path = tmp_path
        self.record_property = record_property
        self.factory = _resolved_factory(type(suite))
        self.grace = float(type(suite).grace_period)

    def context(
        self,
        export_streams: str | None = "all",
        *,
        include_hostname: bool = False,
        name: str = "session",
    ) -> ExporterContext:
        """A fresh run folder (created, as TraceML's is) and its context."""
        root = self.tmp_path / name
        root.mkdir(parents=True, exist_ok=True)
        return ExporterContext.create(root, export_streams, include_hostname)

    def worker(
        self, context: ExporterContext, batches: Sequence[Sequence[Any]] = (), **kw: Any
    ) -> Run:
        return run_worker(self.factory, context, batches, **kw)

    def script(self, context: ExporterContext, steps: Sequence[tuple[str, Any]]) -> Run:
        return run_script(self.factory, context, steps)

    @property
    def has_read_back(self) -> bool:
        return _has_read_back(type(self.suite))

    def read_back(self, context: ExporterContext) -> cmp.ReadBack | None:
        """The suite's ``read_back`` output, validated; None when it is not implemented."""
        if not self.has_read_back:
            return None
        try:
            value = self.suite.read_back(context)
        except ReadBackNotImplementedError:
            return None
        try:
            return cmp.validate_read_back(value)
        except TypeError as exc:
            pytest.fail(f"read_back returned the wrong shape: {exc}", pytrace=False)

    def require_read_back(self, context: ExporterContext) -> cmp.ReadBack:
        actual = self.read_back(context)
        if actual is None:
            pytest.skip(_NO_READ_BACK)
        return actual

    def assert_clean(self, run: Run, what: str = "the run") -> None:
        """The run finished in time and no exporter call raised."""
        if run.timed_out:
            pytest.fail(
                f"{what}: the exporter did not finish within the time limit; calls so far: "
                f"{run.log.describe()}",
                pytrace=False,
            )
        failure = run.failure
        if failure is not None:
            pytest.fail(
                f"{what}: the exporter failed in {failure}{_hint(failure)}\n"
                f"calls: {run.log.describe()}",
                pytrace=False,
            )


_NO_READ_BACK = (
    "read_back is not implemented for this exporter; implement read_back(self, context) "
    "returning {STREAM: [record dicts]} to turn the data-fidelity checks on"
)


def _hint(failure: str) -> str:
    low = failure.lower()
    if "thread" in low:
        return "\n" + MOVE_TO_OPEN
    if "dropped_batches" in low:
        return (
            "\nclose must accept a keyword-only dropped_batches: "
            "def close(self, *, dropped_batches: int = 0) -> None"
        )
    if "has no attribute" in low and any(f"'{m}'" in low for m in METHODS):
        return "\nan exporter must have the four methods open, write, flush and close"
    return ""


def _corpus(streams: str = "all") -> list[list[Any]]:
    return corpus_batches(parse_export_streams(streams))


def _merged(batches: Sequence[Sequence[Any]], per: int) -> list[list[Any]]:
    return [
        [r for batch in batches[i : i + per] for r in batch] for i in range(0, len(batches), per)
    ]


# -- lifecycle -------------------------------------------------------------------------


@_check("lifecycle")
def check_method_signatures(suite: ExporterConformance, env: Env) -> None:
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


@_check("lifecycle")
def check_open_close(suite: ExporterConformance, env: Env) -> None:
    """Rule: open then close, with no write in between, works (an idle run).

    Contract: "It calls open once, then write and flush zero or more times, then close once."
    """
    run = env.worker(env.context())
    env.assert_clean(run, "open -> close")
    assert run.log.methods() == ["factory", "open", "close"], run.log.describe()


@_check("lifecycle")
def check_open_flush_close(suite: ExporterConformance, env: Env) -> None:
    """Rule: open, flush with nothing written, close works.

    Contract: "It calls open once, then write and flush zero or more times, then close once."
    """
    run = env.script(env.context(), [("open", None), ("flush", None), ("close", 0)])
    env.assert_clean(run, "open -> flush -> close")
    assert run.log.methods() == ["factory", "open", "flush", "close"], run.log.describe()


@_check("lifecycle")
def check_flush_twice(suite: ExporterConformance, env: Env) -> None:
    """Rule: two flush calls in a row (the second with nothing new) work.

    Contract: "It calls open once, then write and flush zero or more times, then close once."
    """
    batch = _corpus()[0]
    steps = [("open", None), ("write", batch), ("flush", None), ("flush", None), ("close", 0)]
    run = env.script(env.context(), steps)
    env.assert_clean(run, "open -> write -> flush -> flush -> close")
    assert run.log.methods() == ["factory", "open", "write", "flush", "flush", "close"]


@_check("lifecycle")
def check_writes_interleaved_with_flushes(suite: ExporterConformance, env: Env) -> None:
    """Rule: many writes each followed by a flush work, and (with read_back) every stream
    reads back as many records as were written.

    The worker runs with a tiny flush interval, so it flushes after every write,
    and each batch is submitted once the previous one was flushed.

    Contract: "It calls open once, then write and flush zero or more times, then close once."
    """
    context = env.context()
    batches = _corpus()
    run = env.worker(context, batches, flush_interval_s=1e-9, pace=True)
    env.assert_clean(run, "write/flush interleaved")
    methods = run.log.methods()
    assert methods == ["factory", "open", *["write", "flush"] * len(batches), "close"], (
        f"the worker should have alternated write and flush: {run.log.describe()}"
    )
    actual = env.read_back(context)
    if actual is not None:
        expected = cmp.expected_by_stream(run.log.written(), context.include_hostname)
        problems = cmp.count_problems(expected, actual)
        assert not problems, "after interleaved writes and flushes:\n" + "\n".join(problems)


@_check("lifecycle")
def check_two_instances_in_sequence(suite: ExporterConformance, env: Env) -> None:
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
    batches = _corpus()
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
        expected = cmp.expected_by_stream(run.log.written(), ctx.include_hostname)
        problems = cmp.count_problems(expected, actual)
        assert not problems, f"the {label} instance's output:\n" + "\n".join(problems)


# -- thread confinement ---------------------------------------------------------------


@_check("thread_confinement")
def check_factory_is_inert(suite: ExporterConformance, env: Env) -> None:
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


@_check("thread_confinement")
def check_methods_on_worker_thread(suite: ExporterConformance, env: Env) -> None:
    """Rule: the factory runs on the main thread; open, write, flush and close all run, and
    work, on one other thread (the worker's).

    An exporter that made a thread-bound resource (a sqlite3 connection, a
    client) in the factory fails here, with a message to move it into open().

    Contract: "The export worker calls all four from its own background thread, and the
    calls never overlap."
    """
    run = env.worker(env.context(), _corpus())
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


@_check("thread_confinement")
def check_resources_released_after_close(suite: ExporterConformance, env: Env) -> None:
    """Rule: after close returns, every thread the exporter started ends and every file
    descriptor it opened is closed (within ``grace_period`` seconds).

    Contract: "Create connections, clients and files in open, not in the factory, so they
    belong to the thread that uses them."
    """
    run = env.worker(env.context(), _corpus())
    env.assert_clean(run)
    threads, fds = run.before.wait_released([run.thread], grace=env.grace)
    problems = []
    if threads:
        problems.append(f"thread(s) still alive: {describe_threads(threads)}")
    if fds:
        problems.append(f"file descriptor(s) still open: {', '.join(map(describe_fd, fds))}")
    assert not problems, (
        f"{env.grace:g} s after close returned: "
        + "; ".join(problems)
        + ". close must stop the exporter's threads and close what open opened."
    )


@_check("thread_confinement")
def check_no_exception_in_exporter_threads(suite: ExporterConformance, env: Env) -> None:
    """Rule: no exception escapes a thread the exporter runs (seen via ``threading.excepthook``);
    a failure must surface as a raise from one of the four methods.

    Contract: "A method may raise."
    """
    with thread_exceptions() as caught:
        run = env.worker(env.context(), _corpus())
        run.before.wait_released([run.thread], grace=env.grace, fds=False)
    assert not caught, (
        "exception(s) escaped from exporter thread(s), where the worker never sees them: "
        + "; ".join(caught)
    )
    env.assert_clean(run)


# -- STREAM dispatch ------------------------------------------------------------------


@_check("stream_dispatch")
def check_interleaved_streams(suite: ExporterConformance, env: Env) -> None:
    """Rule: one write batch may hold every selected stream, interleaved; each record goes
    to its own stream (with read_back: every stream reads back as many records as were
    written to it).

    Contract: "One write batch may hold several selected record types, interleaved in
    payload order."
    """
    context = env.context("all")
    batches = _merged(_corpus("all"), 6)
    run = env.worker(context, batches)
    env.assert_clean(run, "batches with interleaved streams")
    mixed = [
        c
        for c in run.log.calls
        if c.method == "write" and len({r.STREAM for r in c.records or ()}) > 1
    ]
    assert mixed, "no write batch held several streams (the suite's corpus should ensure it)"
    actual = env.read_back(context)
    if actual is not None:
        expected = cmp.expected_by_stream(run.log.written(), context.include_hostname)
        problems = cmp.count_problems(expected, actual)
        assert not problems, "records of interleaved batches, per stream:\n" + "\n".join(problems)


@_check("stream_dispatch")
def check_foreign_record_classes(suite: ExporterConformance, env: Env) -> None:
    """Rule: records of other classes with the same STREAM, SCHEMA_VERSION, COLUMNS, fields
    and to_dict() are handled exactly like the SDK's; in production they are TraceML's own
    classes, so dispatching with isinstance on SDK classes loses them.

    The look-alike classes are built at runtime (``dataclasses.make_dataclass``);
    the output for them must equal the output for the SDK's classes (with
    read_back: record for record; without: byte for byte in size).

    Contract: "An exporter that treats streams differently dispatches on record.STREAM or
    type(record)."
    """
    batches = _corpus("all")
    ours = env.context("all", name="sdk-classes")
    theirs = env.context("all", name="foreign-classes")
    run_ours = env.worker(ours, batches)
    env.assert_clean(run_ours, "SDK record classes")
    run_theirs = env.worker(theirs, [as_foreign(b) for b in batches])
    env.assert_clean(run_theirs, "look-alike record classes (not the SDK's)")
    written = run_theirs.log.written()
    assert written, run_theirs.log.describe()
    assert not any(type(r).__module__.startswith("traceml_exporter_sdk") for r in written)
    got_ours, got_theirs = env.read_back(ours), env.read_back(theirs)
    if got_ours is not None and got_theirs is not None:
        problems = cmp.multiset_problems(got_ours, got_theirs, drop=())
        assert not problems, (
            "look-alike record classes were not handled like the SDK's (left: SDK classes, "
            "right: look-alikes); dispatch on record.STREAM, not isinstance:\n"
            + "\n".join(problems)
        )
    else:
        size_ours = sum(tree(ours.session_root).values())
        size_theirs = sum(tree(theirs.session_root).values())
        assert size_ours == size_theirs, (
            f"the same records wrote {size_ours} bytes as SDK classes but {size_theirs} bytes as "
            "look-alike classes; dispatch on record.STREAM, not isinstance (implement read_back "
            "for a record-level comparison)"
        )


def _setting_check(setting: str) -> Callable[[ExporterConformance, Env], None]:
    def check(suite: ExporterConformance, env: Env) -> None:
        context = env.context(setting)
        run = env.worker(context, payloads=load_corpus())
        env.assert_clean(run, f"export_streams={setting!r} (streams {', '.join(context.streams)})")
        seen = {r.STREAM for r in run.log.written()}
        assert seen, run.log.describe()
        assert seen <= set(context.streams), f"the worker handed over {sorted(seen)}"
        actual = env.read_back(context)
        if actual is not None:
            stray = {
                s: len(rows) for s, rows in actual.items() if rows and s not in context.streams
            }
            assert not stray, f"records of unselected streams were read back: {stray}"
            expected = cmp.expected_by_stream(run.log.written(), context.include_hostname)
            problems = cmp.count_problems(expected, actual)
            assert not problems, f"export_streams={setting!r}:\n" + "\n".join(problems)

    check.__name__ = f"check_setting_{setting}"
    check.__doc__ = f"""Rule: the exporter works with export_streams={setting!r}, whose streams
    reach it through the worker's selection, and writes exactly those (with read_back:
    nothing under another stream, per-stream counts equal).

    The whole corpus is sent as raw payloads; the worker maps and selects them.

    Contract: "The export_streams setting chooses which records reach the exporter."
    """
    return check


for _setting in EXPORT_STREAM_NAMES:
    _check("stream_dispatch")(_setting_check(_setting))


# -- close semantics --------------------------------------------------------------------


@_check("close_semantics")
def check_unflushed_records_readable_after_close(suite: ExporterConformance, env: Env) -> None:
    """Rule: records written but never flushed are in the sink after close; close flushes.

    Driven as open, write, write, close (no flush). With read_back every
    record must read back (per-stream counts); without it the output must be
    as large as after an explicit flush.

    Contract: "It calls open once, then write and flush zero or more times, then close once."
    """
    batches = _corpus()
    first, second = _merged(batches, len(batches) // 2 + 1)[:2]
    context = env.context()
    run = env.script(context, [("open", None), ("write", first), ("write", second), ("close", 0)])
    env.assert_clean(run, "open -> write -> write -> close")
    actual = env.read_back(context)
    if actual is not None:
        expected = cmp.expected_by_stream(run.log.written(), context.include_hostname)
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


@_check("close_semantics")
def check_close_accepts_dropped_batches(suite: ExporterConformance, env: Env) -> None:
    """Rule: close(dropped_batches=3) is accepted; a loss count is information, not an error.

    Contract: "dropped_batches is the number of payload batches the worker never handed to
    write."
    """
    context = env.context()
    batch = _corpus()[0]
    run = env.script(context, [("open", None), ("write", batch), ("flush", None), ("close", 3)])
    env.assert_clean(run, "close(dropped_batches=3)")
    close = [c for c in run.log.calls if c.method == "close"]
    assert close, run.log.describe()
    assert close[0].kwargs == {"dropped_batches": 3}
    actual = env.read_back(context)
    if actual is not None:
        expected = cmp.expected_by_stream(run.log.written(), context.include_hostname)
        problems = cmp.count_problems(expected, actual)
        assert not problems, "after close(dropped_batches=3):\n" + "\n".join(problems)


@_check("close_semantics")
def check_nothing_written_after_close(suite: ExporterConformance, env: Env) -> None:
    """Rule: once close returns the exporter is done: the files under session_root do not
    change over ``settle_time`` seconds and no thread it started is alive.

    Contract: "It calls open once, then write and flush zero or more times, then close once."
    """
    context = env.context()
    run = env.worker(context, _corpus())
    env.assert_clean(run)
    sizes = tree(context.session_root)
    time.sleep(float(type(suite).settle_time))
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


# -- data fidelity --------------------------------------------------------------------


def _fidelity_run(env: Env, *, include_hostname: bool = False) -> tuple[Run, cmp.ReadBack]:
    if not env.has_read_back:
        pytest.skip(_NO_READ_BACK)
    context = env.context(include_hostname=include_hostname)
    run = env.worker(context, _corpus())
    env.assert_clean(run)
    return run, env.require_read_back(context)


@_check("data_fidelity", needs_read_back=True)
def check_every_record_once(suite: ExporterConformance, env: Env) -> None:
    """Rule: every written record is read back once per write, under its own stream
    (per-stream counts; the values are values_equal_to_dict's business).

    Contract: "A custom exporter receives the same records as the built-in jsonl exporter,
    those of the selected streams."
    """
    run, actual = _fidelity_run(env)
    expected = cmp.expected_by_stream(run.log.written())
    problems = cmp.count_problems(expected, actual)
    assert not problems, "records per stream:\n" + "\n".join(problems)


@_check("data_fidelity", needs_read_back=True)
def check_per_stream_order(suite: ExporterConformance, env: Env) -> None:
    """Rule: within each stream, records read back in the order they were written.

    Contract: "Records preserve payload order and are not sorted by this mapper."
    """
    run, actual = _fidelity_run(env)
    problems = cmp.order_problems(cmp.expected_by_stream(run.log.written()), actual)
    assert not problems, "order within a stream changed:\n" + "\n".join(problems)


@_check("data_fidelity", needs_read_back=True)
def check_duplicates_kept(suite: ExporterConformance, env: Env) -> None:
    """Rule: duplicates are kept: a batch written twice, and a record twice in one batch,
    read back as often as written.

    Contract: "Duplicate rows are passed through, not removed, so a consumer that needs one
    row per key deduplicates on that key."
    """
    if not env.has_read_back:
        pytest.skip(_NO_READ_BACK)
    batches = _corpus()
    context = env.context()
    twice = [*batches[0], batches[0][0]]
    run = env.worker(context, [batches[0], batches[0], twice])
    env.assert_clean(run)
    actual = env.require_read_back(context)
    problems = cmp.count_problems(cmp.expected_by_stream(run.log.written()), actual)
    assert not problems, "duplicates were not kept:\n" + "\n".join(problems)


@_check("data_fidelity", needs_read_back=True)
def check_values_equal_to_dict(suite: ExporterConformance, env: Env) -> None:
    """Rule: each record reads back equal to its to_dict(): None stays null, a measured 0
    stays 0, unicode, \\n and U+2028 inside stdout lines survive, 19-digit nanosecond
    integers are exact, events maps are intact (hostname is checked separately; stream and
    schema_version are compared when read_back returns them).

    Contract: "An unavailable value remains None; a measured zero remains 0."
    """
    run, actual = _fidelity_run(env)
    expected = cmp.expected_by_stream(run.log.written())
    problems = cmp.meta_problems(actual) + cmp.multiset_problems(expected, actual)
    assert not problems, "values differ from to_dict():\n" + "\n".join(problems)


@_check("data_fidelity", needs_read_back=True)
def check_hostname_dropped_by_default(suite: ExporterConformance, env: Env) -> None:
    """Rule: with include_hostname False, no record keeps a hostname key.

    Contract: "The JSON Lines exporter omits hostname unless exporter_hostname is on."
    """
    _, actual = _fidelity_run(env, include_hostname=False)
    kept = {s: sum("hostname" in row for row in rows) for s, rows in actual.items()}
    kept = {s: n for s, n in kept.items() if n}
    assert not kept, f"hostname was kept although include_hostname is False: {kept} records"


@_check("data_fidelity", needs_read_back=True)
def check_hostname_kept_when_enabled(suite: ExporterConformance, env: Env) -> None:
    """Rule: with include_hostname True, every record that has a hostname field keeps it,
    as null when the rank sent none.

    Contract: "When enabled, records that have a hostname field keep it, with null when the
    rank sent no hostname."
    """
    run, actual = _fidelity_run(env, include_hostname=True)
    expected = cmp.expected_by_stream(run.log.written(), include_hostname=True)
    problems = []
    for stream, rows in expected.items():
        if "hostname" not in rows[0]:
            continue
        got = actual.get(stream, [])
        missing = sum("hostname" not in row for row in got)
        if missing:
            problems.append(f"{stream}: {missing} of {len(got)} records have no hostname key")
            continue
        want_values = sorted(map(repr, (row["hostname"] for row in rows)))
        got_values = sorted(map(repr, (row["hostname"] for row in got)))
        if want_values != got_values:
            problems.append(
                f"{stream}: hostname values differ: expected {sorted(set(want_values))}, "
                f"got {sorted(set(got_values))}"
            )
    assert not problems, "with include_hostname True:\n" + "\n".join(problems)


# -- failure behaviour -------------------------------------------------------------------


@_check("failure_behaviour")
def check_open_failure_leaks_nothing(suite: ExporterConformance, env: Env) -> None:
    """Rule: an open that fails leaves no file descriptor and no thread behind.

    The context comes from the overridable ``broken_context(context)`` hook; by
    default export_dir is blocked by a regular file (which stops root too). The
    check is skipped when open does not fail with that context.

    Contract: "close is not called when open raised."
    """
    context = suite.broken_context(env.context())
    run = env.worker(context, _corpus()[:3])
    if run.failure is None:
        pytest.skip(
            "open() did not fail with the context from broken_context(); override "
            "broken_context(self, context) to return a context this exporter's open rejects"
        )
    assert "close" not in run.log.methods()
    threads, fds = run.before.wait_released([run.thread], grace=env.grace)
    problems = []
    if threads:
        problems.append(f"thread(s) left alive: {describe_threads(threads)}")
    if fds:
        problems.append(f"file descriptor(s) left open: {', '.join(map(describe_fd, fds))}")
    assert not problems, (
        f"after {run.failure}: "
        + "; ".join(problems)
        + ". close is never called after a failed open, so open must clean up before it raises."
    )


class _SinkFailure:
    """One run where the sink breaks for good after the first batch was flushed."""

    def __init__(self, suite: ExporterConformance, env: Env) -> None:
        self.context = env.context()
        self.log = CallLog(keep_records=False)
        self.before = Snapshot.take()
        batches = _corpus()
        worker = ExportWorker(
            recording_factory(env.factory, self.log),
            self.context,
            queue_size=len(batches) + 1,
            flush_interval_s=1e-9,
            thread_name=WORKER_THREAD,
        )
        self.worker = worker
        worker.start()
        worker.submit_records(batches[0])
        deadline = time.monotonic() + 30
        while not any(c.method == "flush" and c.done for c in self.log.calls):
            if worker.failure is not None or time.monotonic() > deadline:
                break
            time.sleep(0.005)
        self.early = worker.failure
        if self.early is not None:
            worker.shutdown(5)
            return
        devnull_before = _fds_on("/dev/full")
        suite.break_sink(self.context)
        self.broken_at = time.monotonic()
        for batch in batches[1:]:
            worker.submit_records(batch)
        self.report = worker.shutdown(float(type(suite).failure_timeout))
        self.elapsed = time.monotonic() - self.broken_at
        _neutralise(_fds_on("/dev/full") - devnull_before)

    def require_healthy_start(self) -> None:
        if self.early is not None:
            failure = f"{self.early.method}: {self.early.error}"
            pytest.fail(
                f"the exporter failed before the sink was broken: {failure}{_hint(failure)}",
                pytrace=False,
            )


def _fds_on(target: str) -> set[int]:
    out = set()
    for fd in open_fds():
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                out.add(fd)
        except OSError:
            continue
    return out


def _neutralise(fds: set[int]) -> None:
    """Point fds that break_sink aimed at /dev/full to /dev/null, so late finalizers pass."""
    if not fds:
        return
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in fds:
            try:
                os.dup2(null, fd)
            except OSError:
                continue
    finally:
        os.close(null)


@_check("failure_behaviour")
def check_sink_failure_raised(suite: ExporterConformance, env: Env) -> None:
    """Rule: a permanent sink failure in write or flush is raised (after bounded retry, at
    most ``failure_timeout`` seconds), not hidden.

    After the first batch is flushed the overridable ``break_sink(context)``
    hook breaks the sink for good; by default every descriptor open on a file
    under session_root is pointed at /dev/full (writes fail with ENOSPC) and
    export_dir is replaced by a regular file, which stops root too.

    Contract: "A method may raise. The worker then logs the failure, stops using the
    exporter, and records the loss in finalization_warning.json."
    """
    run = _SinkFailure(suite, env)
    run.require_healthy_start()
    report = run.report
    assert not report.timed_out, (
        f"after break_sink the exporter was still busy after failure_timeout="
        f"{type(suite).failure_timeout:g} s; retry for a bounded time, then raise"
    )
    assert report.failure is not None, (
        "after break_sink every write, flush and close returned normally, so the loss was "
        f"hidden: {run.log.describe(20)}. Let the error propagate (a bounded retry is fine). "
        "If this exporter's sink is not a file under session_root, override break_sink(context)."
    )
    assert report.failure.method in ("write", "flush", "close"), report.failure


@_check("failure_behaviour")
def check_no_non_daemon_thread_after_failure(suite: ExporterConformance, env: Env) -> None:
    """Rule: after a method failed, no non-daemon thread of the exporter stays alive (the
    worker never calls close after a failure, and such a thread would hold the aggregator
    at exit).

    Contract: "The worker then logs the failure, stops using the exporter, and records the
    loss in finalization_warning.json."
    """
    run = _SinkFailure(suite, env)
    run.require_healthy_start()
    if run.report.failure is None:
        pytest.skip("the exporter did not raise after break_sink (see sink_failure_raised)")
    threads, _ = run.before.wait_released(
        [run.worker.thread], grace=env.grace, non_daemon_only=True, fds=False
    )
    assert not threads, (
        f"{env.grace:g} s after {run.report.failure.method} failed, non-daemon thread(s) are "
        f"still alive: {describe_threads(threads)}. close is not called after a failure: make "
        "background threads daemon threads, or stop them when a method fails."
    )


# -- throughput -------------------------------------------------------------------------


@cache
def _throughput_batches(repeat: int) -> list[list[Any]]:
    return corpus_batches(parse_export_streams("all"), repeat=repeat)


@_check("throughput")
def check_records_per_second(suite: ExporterConformance, env: Env) -> None:
    """Rule: the exporter sustains ``throughput_floor`` records/s (default 20,000) on the
    sample corpus, driven by the worker from open to close. Time the worker thread spent
    waiting for a CPU (Linux schedstat) is left out, and the best of up to three runs
    counts, so a busy machine does not fail a fast exporter; a clearly slow one gets no
    second run.
    The figure is reported as the user property
    ``traceml_exporter_records_per_second`` and in the terminal summary.

    Contract: "dropped_batches is the number of payload batches the worker never handed to
    write." (a slow exporter fills the worker's queue and batches are dropped)
    """
    floor = float(type(suite).throughput_floor)
    per_repeat = sum(map(len, _throughput_batches(1)))
    target = max(10_000, int(floor))
    batches = _throughput_batches(-(-target // per_repeat))
    total = sum(map(len, batches))
    limit = 2.0 * total / floor + 1.0
    rates: list[float] = []
    for attempt in range(3):
        context = env.context(name=f"throughput-{attempt}")
        start = time.perf_counter()
        run = env.worker(context, batches, flush_interval_s=1.0, keep_records=False, timeout=limit)
        elapsed = time.perf_counter() - start
        if run.timed_out:
            done = run.report.admitted_records if run.report is not None else 0
            env.record_property(THROUGHPUT_PROPERTY, round(done / elapsed, 1))
            env.record_property("traceml_exporter_throughput_floor", int(floor))
            pytest.fail(
                f"{total} records did not go through in {limit:.1f} s (twice the time the floor "
                f"of {floor:,.0f} records/s allows; {done} were taken in that time); set "
                "throughput_floor lower if that is expected",
                pytrace=False,
            )
        env.assert_clean(run)
        rates.append(total / _busy_seconds(run, elapsed))
        if rates[-1] >= floor or rates[-1] < floor / 2:
            break
    best = max(rates)
    env.record_property(THROUGHPUT_PROPERTY, round(best, 1))
    env.record_property("traceml_exporter_throughput_floor", int(floor))
    assert best >= floor, (
        f"{best:,.0f} records/s, below the floor of {floor:,.0f} records/s ({total} records "
        f"per run, open to close; runs: {', '.join(f'{r:,.0f}' for r in rates)}); set "
        "throughput_floor on the class to change the floor"
    )


def _busy_seconds(run: Run, elapsed: float) -> float:
    """Open to close on the worker thread, minus the time it waited for a CPU (Linux).

    Other processes on a busy machine take CPUs away from the worker thread;
    that wait is the machine's, not the exporter's, so it is left out.
    """
    calls = run.log.exporter_calls()
    if not calls or calls[-1].end is None:
        return elapsed
    span = calls[-1].end - calls[0].start
    return max(span - run.log.runqueue_wait_s(), span * 0.05, 1e-6)


# -- importability --------------------------------------------------------------------------

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


@_check("importability")
def check_fresh_subprocess(suite: ExporterConformance, env: Env) -> None:
    """Rule: the spec imports and the factory runs in a fresh interpreter whose only extra
    import path is the package's source root on PYTHONPATH, as the aggregator loads it
    (no test directory, no conftest, no working directory on the path).

    Contract: "Install the module, or put its directory on PYTHONPATH."
    """
    spec = _spec_string(type(suite))
    if spec is None:
        pytest.skip(
            "factory is a callable that cannot be named as module:factory; set factory to a "
            "'module:factory' string to check importability"
        )
    module_name = spec.partition(":")[0]
    root = _source_root(module_name)
    env_vars = {
        k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "PYTEST_ADDOPTS"
    }
    env_vars["PYTHONPATH"] = str(root)
    env_vars["PYTHONDONTWRITEBYTECODE"] = "1"
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


# -- the base class ----------------------------------------------------------------------

CHECKS: tuple[Check, ...] = tuple(_REGISTRY.values())
"""Every check of this SDK release, in suite order."""


class ExporterConformance:
    """Subclass in a test file and set ``factory``; every check runs as its own test.

    Class attributes:
        factory: ``"module:factory"`` (or ``"jsonl"``), or the factory callable.
        throughput_floor: records/s the exporter must sustain (default 20,000).
        skip_checks / xfail_checks: ``{check or group name: reason}``; a reason is required.
        grace_period: seconds for threads and fds to go after close (default 2).
        settle_time: seconds the sink must stay unchanged after close (default 0.3).
        failure_timeout: seconds a broken sink may be retried before it must raise (default 10).

    Hooks to override: ``read_back(context)``, ``broken_context(context)``,
    ``break_sink(context)``.
    """

    factory: ClassVar[Any] = None
    throughput_floor: ClassVar[float] = 20_000
    skip_checks: ClassVar[Mapping[str, str]] = {}
    xfail_checks: ClassVar[Mapping[str, str]] = {}
    grace_period: ClassVar[float] = 2.0
    settle_time: ClassVar[float] = 0.3
    failure_timeout: ClassVar[float] = 10.0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _validate(cls)

    # -- hooks ---------------------------------------------------------------------

    def read_back(self, context: ExporterContext) -> Mapping[str, list[dict[str, Any]]]:
        """Return what the exporter wrote for ``context``: ``{STREAM: [record dicts]}``.

        Override it to turn the data-fidelity checks on. Each dict is one
        record's ``to_dict()`` as the sink kept it (``stream`` and
        ``schema_version`` may be left out; ``hostname`` only when kept), in
        the sink's order. The built-in jsonl exporter's is built in
        (``read_jsonl``). Raise ``ReadBackNotImplementedError`` to switch it off.
        """
        if _is_builtin_jsonl(type(self)):
            return read_jsonl(context)
        raise ReadBackNotImplementedError(_NO_READ_BACK)

    def broken_context(self, context: ExporterContext) -> ExporterContext:
        """Return a context this exporter's ``open`` must fail with.

        Default: a regular file is put where ``export_dir`` should be, so
        creating the folder or anything in it fails (for root as well).
        Override it for a sink that does not live in ``export_dir``.
        """
        context.export_dir.parent.mkdir(parents=True, exist_ok=True)
        context.export_dir.write_text("a regular file where the export folder should be\n")
        return context

    def break_sink(self, context: ExporterContext) -> None:
        """Break the exporter's sink for good, mid-run (called on the main thread).

        Default: every file descriptor open on a file under ``session_root``
        is pointed at /dev/full (each write fails with ENOSPC), and
        ``export_dir`` is renamed and replaced by a regular file, so reopening
        fails too; neither needs permissions, so it works as root. Override it
        for a sink that is not a file under ``session_root`` (stop a test
        server, revoke a token, fill a quota, ...).
        """
        root = str(context.session_root.resolve()) + os.sep
        if os.path.exists("/dev/full"):
            full = os.open("/dev/full", os.O_RDWR)
            try:
                for fd in open_fds():
                    try:
                        target = os.readlink(f"/proc/self/fd/{fd}")
                    except OSError:
                        continue
                    if target.startswith(root):
                        os.dup2(full, fd)
            finally:
                os.close(full)
        export_dir = context.export_dir
        if export_dir.is_dir():
            export_dir.rename(export_dir.with_name(export_dir.name + ".moved-by-break-sink"))
        export_dir.parent.mkdir(parents=True, exist_ok=True)
        export_dir.write_text("a regular file where the export folder was\n")

    # -- pytest wiring -------------------------------------------------------------

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize each ``test_<group>`` with its checks, marked per skip/xfail_checks."""
        group = metafunc.function.__name__.removeprefix("test_")
        if group not in GROUPS or "check" not in metafunc.fixturenames:
            return
        cls = metafunc.cls if metafunc.cls is not None else type(self)
        _validate(cls)
        params = []
        for check in CHECKS:
            if check.group != group:
                continue
            marks: list[pytest.MarkDecorator] = []
            reason = _reason(cls.skip_checks, check)
            if reason is not None:
                marks.append(pytest.mark.skip(reason=reason))
            reason = _reason(cls.xfail_checks, check)
            if reason is not None:
                marks.append(pytest.mark.xfail(reason=reason, strict=False))
            params.append(pytest.param(check.name, id=check.name, marks=marks))
        metafunc.parametrize("check", params)

    @pytest.fixture
    def conformance_env(self, tmp_path: Path, request: pytest.FixtureRequest) -> Env:
        """The per-check environment: a temporary folder and the resolved factory.

        Figures go to ``user_properties`` directly rather than through the
        ``record_property`` fixture, which warns under ``--junitxml`` (xunit2)
        and so breaks projects that turn warnings into errors.
        """
        properties = request.node.user_properties

        def record(name: str, value: object) -> None:
            properties.append((name, value))

        return Env(self, tmp_path, record)

    def test_lifecycle(self, check: str, conformance_env: Env) -> None:
        """Lifecycle order: open once, write/flush zero or more times, close once."""
        _run(self, "lifecycle", check, conformance_env)

    def test_thread_confinement(self, check: str, conformance_env: Env) -> None:
        """Thread confinement: an inert factory on the main thread, methods on the worker's."""
        _run(self, "thread_confinement", check, conformance_env)

    def test_stream_dispatch(self, check: str, conformance_env: Env) -> None:
        """STREAM dispatch: interleaved streams, foreign record classes, every setting."""
        _run(self, "stream_dispatch", check, conformance_env)

    def test_close_semantics(self, check: str, conformance_env: Env) -> None:
        """Close semantics: close flushes, accepts dropped_batches, and ends all writing."""
        _run(self, "close_semantics", check, conformance_env)

    def test_data_fidelity(self, check: str, conformance_env: Env) -> None:
        """Data fidelity (needs read_back): every record once, in order, values exact."""
        _run(self, "data_fidelity", check, conformance_env)

    def test_failure_behaviour(self, check: str, conformance_env: Env) -> None:
        """Failure behaviour: failures are raised, and leave nothing behind."""
        _run(self, "failure_behaviour", check, conformance_env)

    def test_throughput(self, check: str, conformance_env: Env) -> None:
        """Throughput: at least throughput_floor records/s on the sample corpus."""
        _run(self, "throughput", check, conformance_env)

    def test_importability(self, check: str, conformance_env: Env) -> None:
        """Importability: the spec loads in a fresh interpreter, as the aggregator loads it."""
        _run(self, "importability", check, conformance_env)


def _run(suite: ExporterConformance, group: str, name: str, env: Env) -> None:
    check = _REGISTRY[name]
    assert check.group == group, (group, name)
    if check.needs_read_back and not env.has_read_back:
        pytest.skip(_NO_READ_BACK)
    check.func(suite, env)


# -- configuration -----------------------------------------------------------------------


def _class_attr(cls: type, name: str) -> Any:
    """A class attribute as written in the class body (a function stays a function)."""
    for klass in cls.__mro__:
        if name in vars(klass):
            value = vars(klass)[name]
            if isinstance(value, (staticmethod, classmethod)):
                return value.__func__
            return value
    return None


def _validate(cls: type) -> None:
    """Raise ConformanceConfigError for a wrongly configured class, naming what is valid."""
    name = cls.__qualname__
    factory = _class_attr(cls, "factory")
    if factory is not None and not isinstance(factory, str) and not callable(factory):
        raise ConformanceConfigError(
            f"{name}.factory must be a 'module:factory' string or a callable, "
            f"got {type(factory).__name__}"
        )
    if isinstance(factory, str):
        try:
            check_exporter_setting(factory)
        except ExporterSettingError as exc:
            raise ConformanceConfigError(f"{name}.factory: {exc}") from None
    floor = getattr(cls, "throughput_floor", None)
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not floor > 0:
        raise ConformanceConfigError(
            f"{name}.throughput_floor must be a positive number of records/s, got {floor!r}"
        )
    for attr in ("grace_period", "settle_time", "failure_timeout"):
        value = getattr(cls, attr, None)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConformanceConfigError(f"{name}.{attr} must be a positive number of seconds")
    valid = (*_REGISTRY, *GROUPS)
    declared: dict[str, str] = {}
    for attr in ("skip_checks", "xfail_checks"):
        value = getattr(cls, attr, None)
        if not isinstance(value, Mapping):
            raise ConformanceConfigError(
                f"{name}.{attr} must be a dict of {{check name: reason}}, got {type(value).__name__}"
            )
        for key, reason in value.items():
            if key not in valid:
                raise ConformanceConfigError(
                    f"{name}.{attr} names unknown check {key!r}; valid check names: "
                    f"{', '.join(_REGISTRY)}; or a whole group: {', '.join(GROUPS)}"
                )
            if not isinstance(reason, str) or not reason.strip():
                raise ConformanceConfigError(
                    f"{name}.{attr}[{key!r}] needs a reason: a non-empty string saying why, "
                    f"got {reason!r}"
                )
            if key in declared:
                raise ConformanceConfigError(
                    f"{name}: {key!r} is in both skip_checks and xfail_checks; pick one"
                )
            declared[key] = attr


def _reason(declared: Mapping[str, str], check: Check) -> str | None:
    reason = declared.get(check.name, declared.get(check.group))
    return None if reason is None else f"{check.name}: {reason}"


@cache
def _import_factory(spec: str) -> Factory:
    if spec == "jsonl":
        spec = "traceml_exporter_sdk.jsonl:make_exporter"
    module_name, attribute = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ConformanceConfigError(
            f"factory {spec!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    try:
        factory = getattr(module, attribute)
    except AttributeError:
        raise ConformanceConfigError(
            f"factory {spec!r}: module {module_name!r} has no attribute {attribute!r}"
        ) from None
    if not callable(factory):
        raise ConformanceConfigError(
            f"factory {spec!r} is a {type(factory).__name__}, not callable"
        )
    return factory  # type: ignore[no-any-return]


def _resolved_factory(cls: type) -> Factory:
    factory = _class_attr(cls, "factory")
    if factory is None:
        pytest.fail(
            f"{cls.__qualname__} has no factory: set factory = 'my_pkg.exporter:make_exporter' "
            "(or the factory callable) on the class",
            pytrace=False,
        )
    if isinstance(factory, str):
        try:
            return _import_factory(factory)
        except ConformanceConfigError as exc:
            problem = str(exc)
        pytest.fail(problem, pytrace=False)
    return factory  # type: ignore[no-any-return]


def _spec_string(cls: type) -> str | None:
    factory = _class_attr(cls, "factory")
    if isinstance(factory, str):
        return "traceml_exporter_sdk.jsonl:make_exporter" if factory == "jsonl" else factory
    module = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", "")
    if not module or module == "__main__" or not qualname.isidentifier():
        return None
    try:
        resolved = getattr(importlib.import_module(module), qualname)
    except Exception:
        return None
    return f"{module}:{qualname}" if resolved is factory else None


def _is_builtin_jsonl(cls: type) -> bool:
    factory = _class_attr(cls, "factory")
    if isinstance(factory, str):
        return factory in BUILTIN_JSONL_SPECS
    from .. import jsonl

    return factory is jsonl.make_exporter or factory is jsonl.JsonlExporter


def _has_read_back(cls: type) -> bool:
    overridden = _class_attr(cls, "read_back") is not ExporterConformance.__dict__["read_back"]
    return overridden or _is_builtin_jsonl(cls)


def spec_test_class(spec: Any, *, read_back: str | None = None) -> type[ExporterConformance]:
    """The suite for ``spec`` as a test class, as ``--traceml-exporter SPEC`` collects it.

    ``read_back`` optionally names a ``module:function`` taking the context.
    """
    namespace: dict[str, Any] = {"factory": spec, "__doc__": f"Conformance suite for {spec}."}
    if read_back is not None:
        try:
            check_exporter_setting(read_back)
        except ExporterSettingError as exc:
            raise ConformanceConfigError(f"--traceml-read-back: {exc}") from None
        reader = _import_factory(read_back)

        def read_back_hook(self: ExporterConformance, context: ExporterContext) -> Any:
            return reader(context)

        namespace["read_back"] = read_back_hook
    return type("TestExporter", (ExporterConformance,), namespace)
