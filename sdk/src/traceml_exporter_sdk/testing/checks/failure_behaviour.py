"""Failure behaviour: a failing method leaks nothing, a broken sink is raised, no thread lingers."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ..._export.report import ExportFailure
from ...context import ExporterContext
from .._io_faults import MAX_BUDGET, under_pressure
from .._lanes import lane_batches, lanes_delivered_problems
from .._resources import describe_threads, leftover_files
from ..environment import NO_PERMANENT_FAULT, Env
from ..registry import CheckGroup
from ._common import corpus, difference, merged
from ._sink_failure import SinkFailure, fds_on, neutralise

GROUP = CheckGroup("failure_behaviour")


@GROUP.check
def check_open_failure_leaks_nothing(env: Env) -> None:
    """Rule: an open that fails leaves no file descriptor and no thread behind.

    The context comes from the overridable ``broken_context(context)`` hook; by
    default export_dir is blocked by a regular file (which stops root too). The
    check is skipped when open does not fail with that context.

    Contract: "close is not called when open raised."
    """
    context = env.hooks.broken_context(env.context())
    run = env.worker(context, corpus()[:3])
    if run.failure is None:
        pytest.skip(
            "open() did not fail with the context from broken_context(); override "
            "broken_context(self, context) to return a context this exporter's open rejects"
        )
    assert "close" not in run.log.methods()
    problems = run.before.left_behind(run.thread, env.grace)
    assert not problems, (
        f"after {run.failure}: "
        + problems
        + ". close is never called after a failed open, so open must clean up before it raises."
    )


@GROUP.check
def check_fault_at_every_io_call(env: Env) -> None:
    """Rule: a method that fails at whatever point it does I/O releases everything first;
    one that returns did its work.

    In a child process each method in turn (open, a write of every stream, flush, close)
    has its 1st, 2nd, ... I/O call fail (``OSError``), then runs with 0, 1, ... free file
    descriptors until it returns; the rest of the lifecycle runs without a fault
    (``testing/_io_faults.py``). Reaches failures no break_sink makes: listing the
    export folder, a second file, a socket, a lock, a journal. Every lifecycle that ran
    through must be readable. Needs the factory as ``module:factory``.

    Contract: "A method may raise. The worker then logs the failure, stops using the
    exporter, and records the loss in finalization_warning.json."
    """
    if env.spec is None:
        pytest.skip("the factory has no module:factory name, so a child process cannot load it")
    base = env.tmp_path / "runs"
    base.mkdir()
    pressure = under_pressure(env.spec, base, export_streams="all", include_hostname=False)
    assert not pressure.error, f"the child process running the exporter ended: {pressure.error}"
    assert pressure.attempts, "the child process running the exporter reported no lifecycle"
    warm = pressure.attempts[0]
    assert warm.outcome == "done", (
        f"with no fault injected, the exporter failed in {warm.method}: {warm.error}"
    )
    for attempt in pressure.attempts:
        if attempt.kept:
            pytest.fail(
                f"{attempt.squeezed} raised ({attempt.error}) {attempt.describe()}, and left "
                f"{', '.join(attempt.kept)} open: the worker calls nothing more on an "
                "exporter that raised, not even close, so a failing method releases "
                "everything the instance holds before it raises",
                pytrace=False,
            )
        if attempt.outcome == "later":
            pytest.fail(
                f"{attempt.squeezed} returned {attempt.describe()}, then {attempt.method} "
                f"raised ({attempt.error}) with nothing failing: {attempt.squeezed} swallowed "
                "a failure. A method that cannot do its work raises",
                pytrace=False,
            )
    last = {a.squeezed: a for a in pressure.attempts if a.fault == "descriptors"}
    for method, attempt in last.items():
        assert attempt.outcome != "failed", (
            f"{method} still failed with {MAX_BUDGET} free file descriptors: {attempt.error}"
        )
    if not env.has_read_back:
        return
    for context, attempt in pressure.delivered(base, include_hostname=False):
        actual = env.require_read_back(context)
        required = [r for b in lane_batches(attempt.lane, context.streams) for r in b]
        problems = env.delivery_problems(required, context, actual)
        if not problems:
            continue
        met = (
            f"{attempt.squeezed} returned {attempt.describe()}, and"
            if attempt.fired and attempt.squeezed
            else "with no fault met,"
        )
        assert not problems, (
            f"{met} the lifecycle ran through (open, write, flush and close returned), yet "
            f"{difference(env, required, context, actual)}: a method whose I/O failed "
            "raises, or does its work another way:\n" + "\n".join(problems)
        )


@GROUP.check
def check_sink_failure_raised(env: Env) -> None:
    """Rule: a permanent sink failure in write or flush is raised (after bounded retry, at
    most ``failure_timeout`` seconds), not hidden.

    After the first batch is flushed the overridable ``break_sink(context)``
    hook breaks the sink for good; by default every descriptor open on a file
    under session_root is pointed at /dev/full (writes fail with ENOSPC) and
    export_dir is replaced by a regular file, which stops root too.

    Contract: "A method may raise. The worker then logs the failure, stops using the
    exporter, and records the loss in finalization_warning.json."
    """
    run = SinkFailure(env)
    run.require_healthy_start()
    report = run.report
    assert not report.timed_out, (
        f"after break_sink the exporter was still busy after failure_timeout="
        f"{env.settings.failure_timeout:g} s; retry for a bounded time, then raise"
    )
    assert report.failure is not None, (
        "after break_sink every write, flush and close returned normally, so the loss was "
        f"hidden: {run.log.describe(20)}. Let the error propagate (a bounded retry is fine). "
        "If this exporter's sink is not a file under session_root, override break_sink(context)."
    )
    assert report.failure.method in ("write", "flush", "close"), report.failure


@GROUP.check
def check_no_non_daemon_thread_after_failure(env: Env) -> None:
    """Rule: after a method failed, no non-daemon thread of the exporter stays alive (the
    worker never calls close after a failure, and such a thread would hold the aggregator
    at exit).

    Contract: "The worker then logs the failure, stops using the exporter, and records the
    loss in finalization_warning.json."
    """
    run = SinkFailure(env)
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


@GROUP.check
def check_close_failure_raised(env: Env) -> None:
    """Rule: a failure at close is not swallowed: with the sink broken between the last
    flush and close (records written since), close raises, or everything written is
    readable (where the default ``break_sink`` moved export_dir aside, read there).

    Driven as open, write, flush, write, then ``break_sink``, then close. A close that
    logs the error and returns normally tells the worker the run was delivered, so the
    loss never reaches finalization_warning.json. Needs read_back to tell a close that
    had nothing left to deliver from one that hid a loss; skipped without it when close
    returns normally.

    Contract: "The worker then logs the failure, stops using the exporter, and records the
    loss in finalization_warning.json."
    """
    context = env.context()
    batches = corpus()
    first, second = merged(batches, len(batches) // 2 + 1)[:2]
    steps = [
        ("open", None),
        ("write", first),
        ("flush", None),
        ("write", second),
        ("pause", None),
        ("close", 0),
    ]
    full_before = fds_on("/dev/full")
    run = env.script(context, steps, at_pause=lambda: env.hooks.break_sink(context))
    neutralise(fds_on("/dev/full") - full_before)
    assert not run.timed_out, (
        f"after break_sink, close did not return within 30 s: {run.log.describe()}"
    )
    healthy = run.log.exporter_calls()[:4]  # open, write, flush, write
    if any(not call.ok for call in healthy):
        env.assert_clean(run, "the run before the sink was broken")
    close = [c for c in run.log.calls if c.method == "close"]
    assert close, run.log.describe()
    if close[0].error is not None:
        return
    if not env.has_read_back:
        pytest.skip(
            "close returned normally after break_sink; without read_back the suite cannot "
            "tell whether everything written had been delivered"
        )
    actual = env.read_back_after_break(context) or {}
    problems = env.delivery_problems(run.log.written(), context, actual)
    assert not problems, (
        "the sink broke between the last flush and close, and close returned normally "
        "although not everything written is readable: close swallowed the failure (raise "
        "it, so the worker records the loss):\n" + "\n".join(problems)
    )


@GROUP.check
def check_failure_releases_resources(env: Env) -> None:
    """Rule: a method that raises releases its resources first: within ``grace_period``
    after a write or flush failed (``break_sink``), no file descriptor, socket,
    connection or thread the exporter opened is left.

    Contract: "A method may raise. The worker then logs the failure, stops using the
    exporter, and records the loss in finalization_warning.json."
    """
    run = SinkFailure(env)
    run.require_healthy_start()
    if run.report.failure is None:
        pytest.skip("the exporter did not raise after break_sink (see sink_failure_raised)")
    problems = run.before.left_behind(run.worker.thread, env.grace)
    assert not problems, (
        f"{env.grace:g} s after {run.report.failure.method} raised: "
        + problems
        + ". The worker calls nothing more after a failure, not even close: a failing "
        "method closes its files, connections and threads before it raises."
    )


_TRANSIENT_HINT = (
    "`follow` ends at once (exit 7) on a failure marked permanent, and waits out any other "
    "with a new instance: mark permanent only what waiting cannot fix (credentials "
    "refused, a schema the sink refuses), never an OSError, a timeout or a refused "
    "connection as such"
)


@GROUP.check
def check_transient_fault_not_permanent(env: Env) -> None:
    """Rule: a fault that may pass is not reported as permanent: the failure ``break_sink``
    causes (by default a full disk and a folder moved away) is raised unmarked.

    An error is permanent when it, or one in its ``__cause__``/``__context__`` chain,
    has a truthy ``permanent`` attribute (``traceml_exporter_sdk.is_permanent``).
    Catches an exporter that marks every ``OSError`` permanent: ``follow`` then stops
    at the first blip instead of riding the outage out.

    Contract: "A method may raise. The worker then logs the failure, stops using the
    exporter, and records the loss in finalization_warning.json."
    """
    run = SinkFailure(env)
    run.require_healthy_start()
    failure = run.report.failure
    if failure is None:
        pytest.skip("the exporter did not raise after break_sink (see sink_failure_raised)")
    assert not failure.permanent, (
        f"a transient fault was reported as permanent: after break_sink, {failure.method} "
        f"raised {failure.error}, marked permanent. {_TRANSIENT_HINT}"
    )


@GROUP.check
def check_permanent_fault_marked(env: Env) -> None:
    """Rule: a fault waiting cannot fix is reported as permanent: after
    ``break_sink_permanently`` (credentials refused, a schema the sink refuses) the
    failure is raised within ``failure_timeout``, marked ``permanent``.

    Skipped, with the reason, for an exporter whose class defines no
    ``break_sink_permanently`` (a file sink has no such fault).

    Contract: "A method may raise. The worker then logs the failure, stops using the
    exporter, and records the loss in finalization_warning.json."
    """
    breaking = env.hooks.break_sink_permanently
    if breaking is None:
        pytest.skip(NO_PERMANENT_FAULT)
    run = SinkFailure(env, breaking)
    run.require_healthy_start()
    report = run.report
    assert not report.timed_out, (
        "after break_sink_permanently the exporter was still busy after failure_timeout="
        f"{env.settings.failure_timeout:g} s; a permanent fault is raised without waiting"
    )
    failure = report.failure
    assert failure is not None, (
        "after break_sink_permanently every write, flush and close returned normally: the "
        f"failure was hidden: {run.log.describe(20)}"
    )
    assert failure.permanent, (
        f"a permanent fault was reported as transient: after break_sink_permanently, "
        f"{failure.method} raised {failure.error}, not marked permanent. `follow` would "
        "wait for ever for a sink that will not come back: give the error (or one it is "
        "raised from) a truthy `permanent` attribute (traceml_exporter_sdk."
        "PermanentExportError, or set error.permanent = True)"
    )


@GROUP.check
def check_new_instance_after_outage(env: Env) -> None:
    """Rule: an outage is ridden out: after an instance failed on a broken sink
    (``break_sink``) and the sink was repaired (``repair_sink``), a new instance with the
    same context opens and delivers everything: what the failed one flushed before the
    break, and everything not acknowledged, written again by the new one.

    ``follow`` makes a new instance once the sink is back and resends what no flush
    acknowledged. What the failed method left in the run folder (a lock file, a
    temporary name) is named when the new instance refuses. Then, where the factory has
    a ``module:factory`` name, the I/O fault child of fault_at_every_io_call makes each
    method raise at each of its I/O calls, and after each a new instance on the same run
    folder must run a whole lifecycle and its records read back. Skipped where
    ``break_sink`` is overridden and ``repair_sink`` is not.

    Contract: "A method may raise. The worker then logs the failure, stops using the
    exporter, and records the loss in finalization_warning.json."
    """
    repair = env.hooks.repair_sink
    if repair is None:
        pytest.skip(
            "break_sink is overridden but repair_sink is not: define repair_sink(self, "
            "context) undoing it, so the suite can check that a new instance recovers"
        )
    run = SinkFailure(env)
    run.require_healthy_start()
    failure = run.report.failure
    if failure is None:
        pytest.skip("the exporter did not raise after break_sink (see sink_failure_raised)")
    _after_the_outage(env, run, failure, repair)
    if env.spec is not None:
        _after_every_io_fault(env)


def _after_the_outage(
    env: Env, run: SinkFailure, failure: ExportFailure, repair: Callable[[ExporterContext], None]
) -> None:
    """A new instance after ``break_sink``, ``repair_sink``: it delivers everything."""
    context = run.context
    run.before.wait_released([run.worker.thread], grace=env.grace)
    repair(context)
    delivered = run.report.delivered_records
    batches = corpus()
    acked: list[object] = []
    for batch in batches:
        if len(acked) + len(batch) > delivered:
            break
        acked += batch
    rest = _after(batches, len(acked))
    second = env.worker(context, rest)
    what = f"after the first failed in {failure.method} ({failure.error}) and the sink was repaired"
    if second.failure is not None:
        assert second.report is not None
        assert second.report.failure is not None
        error = second.report.failure.error
        left = leftover_files(context.session_root)
        method = second.report.failure.method
        did = "refused in open" if method == "open" else f"failed in {method}"
        leftover = f" ({', '.join(left)} left by the failed one)" if left else ""
        pytest.fail(
            f"a new instance {did} after a failure{leftover}: the exporter failed in "
            f"{method}: {error}\n{what[0].upper()}{what[1:]}. `follow` makes a new instance "
            "once the sink is back: a failing method releases what it holds (lock files "
            "and temporary files included) before it raises, and open accepts what an "
            "earlier instance left",
            pytrace=False,
        )
    env.assert_clean(second, f"a new instance {what}")
    actual = env.read_back(context)
    if actual is None:
        return
    records = [*acked, *second.log.written()]
    problems = env.delivery_problems(records, context, actual)
    assert not problems, (
        f"a new instance {what}: of what the first flushed before the break and what the "
        f"new one wrote, {difference(env, records, context, actual)}:\n" + "\n".join(problems)
    )


def _after_every_io_fault(env: Env) -> None:
    """After a method raised at each of its I/O calls in turn (the I/O fault child), a new
    instance on the same run folder runs a whole lifecycle: it works, and its records are
    all there (of the failed one's, any or none)."""
    assert env.spec is not None
    base = env.tmp_path / "runs-recovered"
    base.mkdir()
    pressure = under_pressure(
        env.spec, base, export_streams="all", include_hostname=False, recover=True
    )
    assert not pressure.error, f"the child process running the exporter ended: {pressure.error}"
    for attempt in pressure.attempts:
        if not attempt.recovery_method:
            continue
        context = ExporterContext.create(base / f"run-{attempt.lane}", "all", False)
        leftovers = leftover_files(context.session_root)
        left = f" ({', '.join(leftovers)} left by the failed one)" if leftovers else ""
        did = (
            "refused in open"
            if attempt.recovery_method == "open"
            else f"raised in {attempt.recovery_method}"
        )
        pytest.fail(
            f"a new instance on the same folder {did} ({attempt.recovery_error}) after "
            f"{attempt.squeezed} raised {attempt.describe()}{left}: follow makes a new "
            "instance once the sink is back, and open accepts whatever a failed one left",
            pytrace=False,
        )
    if not env.has_read_back or env.aggregating:
        return  # a sink of series: what of the failed instance's writes arrived is unknown
    for context, attempt in pressure.recovered(base, include_hostname=False):
        required = [r for b in lane_batches(attempt.recovery_lane, context.streams) for r in b]
        lanes = {attempt.lane: "failed", attempt.recovery_lane: "new"}
        actual = env.require_read_back(context)
        problems = lanes_delivered_problems(env, context, required, actual, lanes, "failed")
        assert not problems, (
            f"a new instance on the folder of one whose {attempt.squeezed} raised "
            f"{attempt.describe()} ran through, yet of its own records "
            f"{difference(env, required, context, actual)}:\n" + "\n".join(problems)
        )


def _after(batches: list[list[object]], count: int) -> list[list[object]]:
    """The batches after the first ``count`` records (whole batches)."""
    seen = 0
    for index, batch in enumerate(batches):
        if seen >= count:
            return batches[index:]
        seen += len(batch)
    return []
