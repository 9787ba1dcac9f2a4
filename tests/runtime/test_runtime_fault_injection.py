"""Fault injection with hypothesis: whatever the exporter and the payloads do, nothing is lost
silently.

Each example draws a behaviour for every exporter method (return, raise any
BaseException, raise one whose ``str()`` raises, block, be slow) and a sequence
of batches (good payloads, ready records and deferred payloads, and batches
that are not payloads, raise anything, or carry values whose ``__str__`` or
``__hash__`` raise). After every run:

- ``shutdown`` returned within its timeout (plus scheduling slack);
- every submitted batch is accounted exactly once: its records admitted, one
  skipped unit, or one dropped batch (a full queue, or still queued at the
  timeout); so ``admitted = delivered + failed`` holds for a real reason;
- the worker never reports more delivered than the exporter saw flushed, and
  exactly that when it did not time out;
- nothing is called after a raise, calls never overlap, one thread makes them;
- ``finalization_warning.json`` exists exactly when something was lost
  (a failure, a drop, a timeout), and says what the report says;
- ``traceml-exporter replay`` exits 4 exactly when that file exists, else 0.

A blocked call waits on an Event that the test sets once ``shutdown`` returned,
so no thread outlives its example.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import logging
import math
import re
import time
from typing import Any, NoReturn

import fault_exporter
import orjson
from fault_exporter import ERRORS, METHODS, Behaviour, Plan
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from runtime_helpers import step_payload
from traceml_exporter_sdk import ExporterContext, ExportWorker, records_from_payload
from traceml_exporter_sdk.cli import main

TIMEOUT = 0.25
SLACK = 3.0
"""Scheduling slack on a shared 2-core machine; a hang would take 60 s (the block's own cap)."""

# -- strategies --------------------------------------------------------------------

behaviours = st.one_of(
    st.just(Behaviour()),
    st.builds(
        Behaviour,
        kind=st.just("raise"),
        at_call=st.integers(1, 3),
        error=st.sampled_from(sorted(ERRORS)),
    ),
    st.builds(Behaviour, kind=st.just("block"), at_call=st.integers(1, 2)),
    st.builds(Behaviour, kind=st.just("slow"), delay_s=st.floats(0, 0.005)),
)
# The factory runs on the caller's thread, where KeyboardInterrupt is a real Ctrl-C.
factory_behaviours = st.one_of(
    st.just(Behaviour()),
    st.just(Behaviour()),
    st.just(Behaviour()),
    st.builds(
        Behaviour,
        kind=st.just("raise"),
        error=st.sampled_from(sorted(set(ERRORS) - {"KeyboardInterrupt"})),
    ),
)
plans = st.fixed_dictionaries(
    {m: st.one_of(st.just(Behaviour()), st.just(Behaviour()), behaviours) for m in METHODS},
    optional={"factory": factory_behaviours},
)
faulty_plans = st.fixed_dictionaries(
    dict.fromkeys(METHODS, behaviours), optional={"factory": factory_behaviours}
)
"""Each method misbehaves three times in four: the replay runs fewer examples."""

GOOD = ("payload", "deferred", "records")
BAD = ("not_envelope", "deferred_raises", "hostname_raises", "no_stream", "stream_hash_raises")
batches = st.lists(
    st.tuples(st.sampled_from(GOOD + GOOD + BAD), st.sampled_from(sorted(ERRORS))), max_size=25
)


class _Interrupting:
    def __str__(self) -> str:
        raise KeyboardInterrupt

    __repr__ = __str__


class _HashRaises:
    def __hash__(self) -> int:
        raise fault_exporter.UnprintableBaseError


class _OddRecord:
    STREAM = _HashRaises()


def _raiser(error: str) -> Any:
    def produce() -> NoReturn:
        raise ERRORS[error]()

    return produce


def _submit(worker: ExportWorker, kind: str, error: str, step: int) -> bool:
    """Submit one batch of ``kind``: a good one gives 2 records, a bad one 1 skipped unit."""
    payload = step_payload(0, step, 2)
    if kind == "payload":
        return worker.submit(payload)
    if kind == "deferred":
        return worker.submit_deferred(lambda: payload)
    if kind == "records":
        return worker.submit_records(records_from_payload(payload).records)
    if kind == "not_envelope":
        return worker.submit(42)
    if kind == "deferred_raises":
        return worker.submit_deferred(_raiser(error))
    if kind == "hostname_raises":
        return worker.submit(step_payload(0, step, 2, hostname=_Interrupting()))
    if kind == "no_stream":
        return worker.submit_records([object()])
    assert kind == "stream_hash_raises"
    return worker.submit_records([_OddRecord()])


def _check_calls(plan: Plan, thread: int) -> None:
    methods = [m for m, _ in plan.calls]
    assert plan.overlaps == 0
    assert {t for _, t in plan.calls} <= {thread}
    assert re.fullmatch(r"(open(,(write|flush))*(,close)?)?", ",".join(methods)), methods
    if plan.raised == "factory":
        assert methods == []
    elif plan.raised is not None:
        assert methods[-1] == plan.raised, "a call after a raise"


# -- the worker ------------------------------------------------------------------------


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    behaviour=plans,
    batch_list=batches,
    queue_size=st.integers(1, 8),
    most=st.sampled_from([1, 2, 64]),
    interval=st.sampled_from([0.001, 0.01, 3600.0, math.inf]),
)
def test_the_worker_never_loses_a_batch_silently(
    tmp_path_factory: Any,
    behaviour: dict[str, Behaviour],
    batch_list: list[tuple[str, str]],
    queue_size: int,
    most: int,
    interval: float,
) -> None:
    root = tmp_path_factory.mktemp("fault")
    ctx = ExporterContext.create(root, "step_time")
    plan = Plan(behaviours=behaviour)
    worker = ExportWorker(
        fault_exporter.factory_for(plan),
        ctx,
        queue_size=queue_size,
        flush_interval_s=interval,
        max_batches_per_write=most,
    )
    worker.start()
    assert worker.thread is not None
    refused = 0
    for step, (kind, error) in enumerate(batch_list):
        refused += not _submit(worker, kind, error, step * 2)
    started = time.monotonic()
    report = worker.shutdown(TIMEOUT)
    elapsed = time.monotonic() - started
    plan.release.set()
    worker.thread.join(10)

    assert elapsed < TIMEOUT + SLACK
    assert not worker.thread.is_alive(), "the worker thread outlived its released exporter"
    assert report.failure is None or report.failure.method != "worker"
    # Every batch exactly once: admitted (2 records each), skipped, or dropped.
    good_admitted, odd = divmod(report.admitted_records, 2)
    assert odd == 0
    assert good_admitted + report.skipped_units + report.dropped_batches == len(batch_list)
    assert report.dropped_batches >= refused
    assert report.admitted_records == report.delivered_records + report.failed_records
    assert report.failed_records >= 0
    _check_calls(plan, worker.thread.ident or 0)
    assert report.delivered_records <= plan.delivered
    if not report.timed_out:
        assert report.delivered_records == plan.delivered
        assert report.dropped_batches == refused
        assert (report.failure is None) == (plan.raised is None)
        if report.failure is not None:
            assert report.failure.method == plan.raised
            assert plan.raised is not None
            assert behaviour[plan.raised].error in report.failure.error
        if plan.raised is None:
            assert [m for m, _ in plan.calls][-1] == "close"
            assert report.failed_records == 0
    lost = report.failure is not None or report.dropped_batches > 0 or report.timed_out
    warning = root / "aggregator" / "finalization_warning.json"
    assert warning.exists() == lost
    assert report.failed_records == 0 or warning.exists()
    if lost:
        assert json.loads(warning.read_text()) == {"export": report.warning_block()}


# -- the replay ------------------------------------------------------------------------

LINES = {
    "good": lambda step: orjson.dumps(step_payload(0, step, 2)),
    "malformed": lambda step: b'{"meta": {"rank": ' + str(step).encode(),
    "not_envelope": lambda step: b"42",
    "blank": lambda step: b"",
}


@contextlib.contextmanager
def _cli_state() -> Any:
    """``main`` tunes the GC and detaches the SDK's logger; put both back afterwards."""
    threshold = gc.get_threshold()
    log = logging.getLogger("traceml_exporter_sdk")
    propagate, handlers = log.propagate, list(log.handlers)
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
        log.propagate = propagate
        log.handlers[:] = handlers


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(behaviour=faulty_plans, lines=st.lists(st.sampled_from(sorted(LINES)), max_size=60))
# The cases of issue 9, always run: an exception that cannot be formatted killed the
# worker (exit 0, "delivered 0 of 2"); a stalled write hung the replay for ever.
@example(behaviour={"open": Behaviour("raise", 1, "UnprintableError")}, lines=["good"])
@example(behaviour={"write": Behaviour("raise", 1, "UnprintableBaseError")}, lines=["good"] * 3)
@example(behaviour={"write": Behaviour("block", 1)}, lines=["good", "malformed"] * 30)
def test_replay_exits_4_exactly_when_the_warning_file_records_a_loss(
    tmp_path_factory: Any, behaviour: dict[str, Behaviour], lines: list[str]
) -> None:
    folder = tmp_path_factory.mktemp("replay")
    path = folder / "p.jsonl"
    path.write_bytes(b"".join(LINES[kind](step) + b"\n" for step, kind in enumerate(lines)))
    root = folder / "session"
    plan = Plan(behaviours=behaviour)
    fault_exporter.PLAN = plan
    out, err = io.StringIO(), io.StringIO()
    args = ["replay", "fault_exporter:make", "--payloads", str(path), "--session-root", str(root)]
    started = time.monotonic()
    with _cli_state(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, "--shutdown-timeout", str(TIMEOUT)])
    elapsed = time.monotonic() - started
    plan.release.set()

    # A stall waits TIMEOUT for room, then shuts down at once; else one TIMEOUT at shutdown.
    assert elapsed < 2 * TIMEOUT + SLACK
    warning = root / "aggregator" / "finalization_warning.json"
    assert code in (0, 4), err.getvalue()
    assert (code == 4) == warning.exists(), (code, err.getvalue())
    assert "Traceback" not in err.getvalue()
    good = 2 * lines.count("good")
    if code == 0:
        assert err.getvalue() == ""
        assert f"ok (delivered {good:,} of {good:,} records)" in out.getvalue()
        assert plan.raised is None
    else:
        [line] = err.getvalue().splitlines()
        assert line.startswith("traceml-exporter: error: ")
        block = json.loads(warning.read_text())["export"]
        assert block["admitted_records"] <= good
        assert block["exporter_failed"] or block["timed_out"] or block["dropped_batches"] > 0, block
