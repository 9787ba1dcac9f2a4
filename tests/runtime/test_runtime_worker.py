"""ExportWorker with real threads: call threads and order, failures, drops, timeout, flushing.

Timing never decides a result here: a blocked exporter waits on an Event the
test sets, and ``wait_for`` polls with a deadline only so a bug fails the test
instead of hanging it.
"""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import (
    FAILURES,
    Recorder,
    RecordingExporter,
    WriteModule,
    all_streams_payload,
    context,
    failing_setting,
    recording_factory,
    step_payload,
    warning_of,
)
from traceml_exporter_sdk import (
    ExporterContext,
    ExportWorker,
    StepTimeRecord,
    records_from_payload,
)
from waiting import wait_for

LONG = 3600.0  # a flush interval that never passes during a test


def worker_for(
    recorder: Recorder,
    ctx: ExporterContext,
    *,
    flush_interval_s: float = LONG,
    queue_size: int = 1024,
    max_batches_per_write: int = 64,
    **exporter_kwargs: Any,
) -> ExportWorker:
    factory = recording_factory(recorder, **exporter_kwargs)
    return ExportWorker(
        factory,
        ctx,
        flush_interval_s=flush_interval_s,
        queue_size=queue_size,
        max_batches_per_write=max_batches_per_write,
    )


def exporter_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "traceml_exporter_sdk" and r.levelno >= logging.ERROR
    ]


def no_warning_file(ctx: ExporterContext) -> bool:
    return not (ctx.session_root / "aggregator" / "finalization_warning.json").exists()


# -- threads and order -----------------------------------------------------------


def test_factory_runs_on_the_caller_and_every_call_on_one_other_thread(tmp_path: Path) -> None:
    recorder = Recorder()
    worker = worker_for(recorder, context(tmp_path, "all"), flush_interval_s=0.001)
    worker.start()
    worker.submit(all_streams_payload(0))
    wait_for(lambda: "flush" in recorder.methods(), "an interval flush")
    worker.submit(all_streams_payload(1))
    report = worker.shutdown()

    assert worker.thread is not None
    assert recorder.factory_thread == threading.get_ident()
    assert worker.thread.ident != threading.get_ident()
    assert {"open", "write", "flush", "close"} <= set(recorder.methods())
    assert {call.thread for call in recorder.calls} == {worker.thread.ident}
    assert report.failure is None


def test_open_once_then_writes_and_flushes_then_close_once_never_overlapping(
    tmp_path: Path,
) -> None:
    """Eight producer threads submit at once; each exporter call lasts a while."""
    recorder = Recorder()
    ctx = context(tmp_path, "all")
    worker = worker_for(recorder, ctx, flush_interval_s=0.002, busy_s=0.0005)
    worker.start()

    def produce(rank: int) -> None:
        for _ in range(25):
            assert worker.submit(all_streams_payload(rank))

    producers = [threading.Thread(target=produce, args=(rank,)) for rank in range(8)]
    for thread in producers:
        thread.start()
    for thread in producers:
        thread.join()
    report = worker.shutdown()

    methods = recorder.methods()
    assert re.fullmatch(r"open(,(write|flush))*,close", ",".join(methods))
    assert methods.count("write") >= 1
    assert methods.count("flush") >= 1
    assert recorder.overlaps == 0
    times = [call.at for call in recorder.calls]
    assert times == sorted(times)
    assert len(recorder.written) == report.admitted_records == 8 * 25 * 8
    assert report.delivered_records == report.admitted_records
    assert no_warning_file(ctx)


def test_flush_comes_on_the_interval_while_the_worker_runs(tmp_path: Path) -> None:
    recorder = Recorder()
    worker = worker_for(recorder, context(tmp_path), flush_interval_s=0.02)
    worker.start()
    worker.submit(step_payload(0, 0, 3))
    wait_for(lambda: recorder.methods().count("flush") == 1, "the first interval flush")
    worker.submit(step_payload(0, 3, 3))
    wait_for(lambda: recorder.methods().count("flush") == 2, "the second interval flush")
    flushes = [call for call in recorder.calls if call.method == "flush"]
    writes = [call for call in recorder.calls if call.method == "write"]
    report = worker.shutdown()

    assert recorder.methods() == ["open", "write", "flush", "write", "flush", "close"]
    assert writes[0].at <= flushes[0].at <= writes[1].at <= flushes[1].at
    assert report.delivered_records == 6


def test_an_idle_worker_does_not_flush_again(tmp_path: Path) -> None:
    recorder = Recorder()
    worker = worker_for(recorder, context(tmp_path), flush_interval_s=0.005)
    worker.start()
    worker.submit(step_payload(0, 0, 3))
    wait_for(lambda: "flush" in recorder.methods(), "the interval flush")
    idle = threading.Event()
    idle.wait(0.1)  # 20 intervals with nothing written
    assert recorder.methods() == ["open", "write", "flush"]
    worker.shutdown()
    assert recorder.methods() == ["open", "write", "flush", "close"]


def test_what_is_still_pending_is_flushed_at_shutdown_before_close(tmp_path: Path) -> None:
    recorder = Recorder()
    worker = worker_for(recorder, context(tmp_path), max_batches_per_write=1)
    worker.start()
    worker.submit(step_payload(0, 0, 2))
    worker.submit(step_payload(0, 2, 2))
    wait_for(lambda: recorder.methods().count("write") == 2, "both writes")
    assert "flush" not in recorder.methods()
    report = worker.shutdown()
    assert recorder.methods() == ["open", "write", "write", "flush", "close"]
    assert report.delivered_records == report.admitted_records == 4


def test_close_gets_no_flush_before_it_when_nothing_is_pending(tmp_path: Path) -> None:
    recorder = Recorder()
    report = worker_for(recorder, context(tmp_path)).start().shutdown()
    assert recorder.methods() == ["open", "close"]
    assert recorder.calls[-1].dropped_batches == 0
    assert report.admitted_records == 0


# -- stream selection and write batches -------------------------------------------


def test_selection_is_applied_before_the_exporter_sees_a_record(tmp_path: Path) -> None:
    recorder = Recorder()
    worker = worker_for(recorder, context(tmp_path, "system"))
    worker.start()
    worker.submit(all_streams_payload(0))
    mixed = records_from_payload(all_streams_payload(1)).records
    worker.submit_records(mixed)
    report = worker.shutdown()

    expected = [r for r in mixed if r.STREAM in ("system", "system_gpu")]
    assert [r.STREAM for r in recorder.written] == ["system", "system_gpu", "system_gpu"] * 2
    assert recorder.written[3:] == expected
    assert report.admitted_records == 6
    assert report.admitted_by_stream == {"system": 2, "system_gpu": 4}


def test_a_batch_with_no_selected_record_gives_no_write(tmp_path: Path) -> None:
    recorder = Recorder()
    worker = worker_for(recorder, context(tmp_path, "process"))
    worker.start()
    worker.submit(step_payload(0, 0, 5))
    report = worker.shutdown()
    assert recorder.methods() == ["open", "close"]
    assert report.admitted_records == 0


def test_skipped_units_are_counted(tmp_path: Path) -> None:
    recorder = Recorder()
    worker = worker_for(recorder, context(tmp_path))
    worker.start()
    worker.submit([*step_payload(0, 0, 2), "not an envelope", {"meta": 1}])
    report = worker.shutdown()
    assert report.skipped_units == 2
    assert report.admitted_records == 2


def test_a_batch_that_cannot_be_read_is_one_skipped_unit_and_the_worker_goes_on(
    tmp_path: Path,
) -> None:
    recorder = Recorder()
    worker = worker_for(recorder, context(tmp_path))
    worker.start()
    worker.submit_records([object()])  # type: ignore[list-item]  # no STREAM
    worker.submit_records(42)  # type: ignore[arg-type]
    worker.submit_records(iter(records_from_payload(step_payload(0, 0, 3)).records))  # type: ignore[arg-type]
    worker.submit(step_payload(0, 3, 2))
    report = worker.shutdown()
    assert report.failure is None
    assert report.skipped_units == 2
    assert report.admitted_records == len(recorder.written) == 5
    assert report.admitted_by_stream == {"step_time": 5}
    assert [r.step for r in recorder.written] == [0, 1, 2, 3, 4]


def test_one_write_per_batch_while_the_exporter_keeps_up(tmp_path: Path) -> None:
    recorder = Recorder()
    worker = worker_for(recorder, context(tmp_path), max_batches_per_write=1)
    worker.start()
    for step in range(0, 12, 3):
        worker.submit(step_payload(0, step, 3))
    worker.shutdown()
    assert [c.records for c in recorder.calls if c.method == "write"] == [3, 3, 3, 3]


def test_a_backlog_is_written_in_one_call_in_queue_order(tmp_path: Path) -> None:
    recorder = Recorder()
    release = threading.Event()
    worker = worker_for(recorder, context(tmp_path), block={"write": release})
    worker.start()
    worker.submit(step_payload(0, 0, 1))
    wait_for(lambda: "write" in recorder.methods(), "the first write")
    for step in range(1, 4):
        worker.submit(step_payload(0, step, 1))
    release.set()
    worker.shutdown()
    assert [c.records for c in recorder.calls if c.method == "write"] == [1, 3]
    assert [r.step for r in recorder.written] == [0, 1, 2, 3]


# -- an exporter that raises -------------------------------------------------------

FAILED_RECORDS = {"open": 6, "write": 6, "flush": 6, "close": 0}
"""failed_records when the first call of each method raises (6 records admitted)."""


@pytest.mark.parametrize("method", ["open", "write", "flush", "close"])
def test_after_a_method_raises_nothing_more_is_called(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, method: str
) -> None:
    recorder = Recorder()
    ctx = context(tmp_path)
    worker = worker_for(recorder, ctx, fail={method: 1})
    worker.start()
    worker.submit(step_payload(0, 0, 3))
    if method in ("open", "write"):
        wait_for(lambda: worker.failure is not None, f"{method} to fail")
    worker.submit(step_payload(0, 3, 3))  # admitted and counted even after a failure
    report = worker.shutdown()

    methods = recorder.methods()
    assert methods[-1] == method
    assert methods.count(method) == 1
    if method != "close":
        assert "close" not in methods
    assert report.failure is not None
    assert report.failure.method == method
    assert "failed on purpose" in report.failure.error
    assert report.admitted_records == 6
    assert report.failed_records == FAILED_RECORDS[method]
    block = warning_of(ctx)
    assert block["exporter"] == worker.label
    assert block["exporter_failed"] is True
    assert block["failed_method"] == method
    assert "RuntimeError: " + method + " failed on purpose" in block["error"]
    assert block["admitted_records"] == 6
    assert block["failed_records"] == FAILED_RECORDS[method]
    errors = exporter_errors(caplog)
    assert len(errors) == 1
    assert errors[0].startswith("[TraceML] ")
    assert repr(worker.label) in errors[0]
    assert f"failed in {method}" in errors[0]


def test_close_is_not_called_when_open_raised(tmp_path: Path) -> None:
    recorder = Recorder()
    worker = worker_for(recorder, context(tmp_path), fail={"open": 1})
    worker.start()
    report = worker.shutdown()
    assert recorder.methods() == ["open"]
    assert report.failure is not None
    assert report.failure.method == "open"


def test_an_exporter_missing_a_method_fails_when_that_method_is_first_called(
    tmp_path: Path,
) -> None:
    class NoFlush:
        def open(self) -> None:
            pass

        def write(self, records: Any) -> None:
            pass

        def close(self, *, dropped_batches: int = 0) -> None:
            raise AssertionError("close must not be called after flush failed")

    ctx = context(tmp_path)
    worker = ExportWorker(lambda _ctx: NoFlush(), ctx)
    worker.start()
    worker.submit(step_payload(0, 0, 4))
    report = worker.shutdown()
    assert report.failure is not None
    assert report.failure.method == "flush"
    assert "AttributeError" in report.failure.error
    assert report.failed_records == 4
    assert warning_of(ctx)["failed_method"] == "flush"


def test_system_exit_from_a_method_is_an_exporter_failure(tmp_path: Path) -> None:
    class Exits(RecordingExporter):
        def write(self, records: Any) -> None:
            raise SystemExit(2)

    recorder = Recorder()
    worker = ExportWorker(lambda _ctx: Exits(recorder), context(tmp_path))
    worker.start()
    worker.submit(step_payload(0, 0, 2))
    report = worker.shutdown()
    assert worker.thread is not None
    assert not worker.thread.is_alive()
    assert report.failure is not None
    assert report.failure.method == "write"
    assert report.failure.error == "SystemExit: 2"
    assert recorder.methods() == ["open"]


# -- failed / delivered arithmetic -----------------------------------------------


def test_flush_succeeds_once_then_write_fails(tmp_path: Path) -> None:
    """3 delivered by the flush; the 5 of the failing write and the 7 after it failed."""
    recorder = Recorder()
    ctx = context(tmp_path)
    worker = worker_for(recorder, ctx, flush_interval_s=0.001, fail={"write": 2})
    worker.start()
    worker.submit(step_payload(0, 0, 3))
    wait_for(lambda: "flush" in recorder.methods(), "the first flush")
    worker.submit(step_payload(0, 3, 5))
    wait_for(lambda: worker.failure is not None, "the second write to fail")
    worker.submit(step_payload(0, 8, 7))
    report = worker.shutdown()

    assert recorder.methods() == ["open", "write", "flush", "write"]
    assert (report.admitted_records, report.delivered_records, report.failed_records) == (15, 3, 12)
    assert warning_of(ctx) == {
        "exporter": worker.label,
        "exporter_failed": True,
        "failed_method": "write",
        "error": "RuntimeError: write failed on purpose (call 2)",
        "admitted_records": 15,
        "failed_records": 12,
        "dropped_batches": 0,
        "timed_out": False,
    }


def test_records_written_since_the_last_good_flush_fail_with_the_flush(tmp_path: Path) -> None:
    """write 3, flush ok, write 5, write 2, flush raises: 3 delivered, 7 failed."""
    recorder = Recorder()
    ctx = context(tmp_path)
    worker = worker_for(
        recorder, ctx, flush_interval_s=0.001, fail={"flush": 2}, max_batches_per_write=1
    )
    worker.start()
    worker.submit(step_payload(0, 0, 3))
    wait_for(lambda: "flush" in recorder.methods(), "the first flush")
    worker.submit(step_payload(0, 3, 5))
    worker.submit(step_payload(0, 8, 2))
    report = worker.shutdown()

    methods = recorder.methods()
    assert methods[:3] == ["open", "write", "flush"]
    assert methods[-1] == "flush"
    assert methods.count("flush") == 2
    assert report.delivered_records == 3
    assert report.failed_records == 7
    assert warning_of(ctx)["failed_records"] == 7


def test_nothing_is_delivered_when_the_only_flush_raises(tmp_path: Path) -> None:
    recorder = Recorder()
    ctx = context(tmp_path)
    worker = worker_for(recorder, ctx, fail={"flush": 1}, max_batches_per_write=1)
    worker.start()
    worker.submit(step_payload(0, 0, 3))
    worker.submit(step_payload(0, 3, 5))
    report = worker.shutdown()
    assert recorder.methods() == ["open", "write", "write", "flush"]
    assert (report.admitted_records, report.delivered_records, report.failed_records) == (8, 0, 8)
    block = warning_of(ctx)
    assert (block["admitted_records"], block["failed_records"]) == (8, 8)


def test_no_warning_file_without_failure_or_drop(tmp_path: Path) -> None:
    recorder = Recorder()
    ctx = context(tmp_path)
    worker = worker_for(recorder, ctx)
    worker.start()
    worker.submit(step_payload(0, 0, 3))
    report = worker.shutdown()
    assert report.warning_path is None
    assert report.failed_records == 0
    assert no_warning_file(ctx)
    assert not (ctx.session_root / "aggregator").exists()


# -- factory failures through the worker ---------------------------------------------


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_a_factory_failure_loses_every_admitted_record_and_the_run_goes_on(
    write_module: WriteModule,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    case: str,
) -> None:
    setting, _kind, text = failing_setting(write_module, case)
    ctx = context(tmp_path)
    worker = ExportWorker(setting, ctx)
    worker.start()
    assert worker.failure is not None  # known before the worker thread runs
    for step in range(0, 15, 5):
        assert worker.submit(step_payload(0, step, 5))
    report = worker.shutdown()

    assert report.failure is not None
    assert report.failure.method == "factory"
    assert text in report.failure.error
    assert report.admitted_records == report.failed_records == 15
    block = warning_of(ctx)
    assert block["exporter"] == setting
    assert block["exporter_failed"] is True
    assert block["failed_method"] == "factory"
    assert text in block["error"]
    assert block["admitted_records"] == block["failed_records"] == 15
    assert block["dropped_batches"] == 0
    errors = exporter_errors(caplog)
    assert len(errors) == 1
    assert errors[0].startswith("[TraceML] ")
    assert repr(setting) in errors[0]
    assert text in errors[0]


# -- drops and the shutdown timeout ---------------------------------------------------


def test_a_full_queue_drops_batches_and_submit_never_waits_for_the_exporter(
    tmp_path: Path,
) -> None:
    recorder = Recorder()
    release = threading.Event()
    ctx = context(tmp_path)
    worker = worker_for(recorder, ctx, queue_size=2, block={"write": release})
    worker.start()
    worker.submit(step_payload(0, 0, 4))
    wait_for(lambda: "write" in recorder.methods(), "the blocking write")

    assert worker.queued_batches == 0
    results: list[bool] = []

    def produce() -> None:
        for step in range(4, 44, 4):
            results.append(worker.submit(step_payload(0, step, 4)))

    producer = threading.Thread(target=produce)
    producer.start()
    producer.join(timeout=30)
    # Every submit returned while the exporter was still blocked in write.
    assert not producer.is_alive()
    assert not release.is_set()
    assert results == [True, True] + [False] * 8
    assert worker.queued_batches == 2
    release.set()
    report = worker.shutdown()

    assert recorder.calls[-1].method == "close"
    assert recorder.calls[-1].dropped_batches == 8
    assert report.dropped_batches == 8
    assert report.admitted_records == len(recorder.written) == 12
    assert report.failed_records == 0
    assert [r.step for r in recorder.written] == list(range(12))
    block = warning_of(ctx)
    assert block["exporter_failed"] is False
    assert block["failed_method"] is None
    assert block["dropped_batches"] == 8
    assert block["failed_records"] == 0


def test_shutdown_timeout_counts_the_rest_of_the_queue_as_dropped(tmp_path: Path) -> None:
    recorder = Recorder()
    release = threading.Event()
    ctx = context(tmp_path)
    # A short interval: a worker that went on after the stuck write would flush at once.
    worker = worker_for(recorder, ctx, flush_interval_s=0.001, block={"write": release})
    worker.start()
    worker.submit(step_payload(0, 0, 3))
    wait_for(lambda: "write" in recorder.methods(), "the blocking write")
    worker.submit(step_payload(0, 3, 3))
    worker.submit(step_payload(0, 6, 3))
    report = worker.shutdown(timeout=0.2)

    assert report.timed_out is True
    assert report.dropped_batches == 2
    assert (report.admitted_records, report.delivered_records) == (3, 0)
    assert report.failure is None
    block = warning_of(ctx)
    assert block["timed_out"] is True
    assert block["exporter_failed"] is False
    assert (block["dropped_batches"], block["admitted_records"], block["failed_records"]) == (
        2,
        3,
        3,
    )
    assert worker.shutdown() is report

    # Once the stuck write returns, the abandoned worker calls nothing more.
    release.set()
    assert worker.thread is not None
    worker.thread.join(timeout=30)
    assert not worker.thread.is_alive()
    assert recorder.methods() == ["open", "write"]


def test_submit_after_shutdown_is_refused(tmp_path: Path) -> None:
    recorder = Recorder()
    worker = worker_for(recorder, context(tmp_path)).start()
    worker.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        worker.submit(step_payload(0, 0, 1))


def test_healthy_worker_keeps_order_and_count_per_stream(tmp_path: Path) -> None:
    recorder = Recorder()
    worker = worker_for(recorder, context(tmp_path, "all"), flush_interval_s=0.001)
    worker.start()
    for rank in range(4):
        worker.submit(all_streams_payload(rank))
        worker.submit(step_payload(rank, 1, 10))
    report = worker.shutdown()
    expected = [
        r
        for rank in range(4)
        for payload in (all_streams_payload(rank), step_payload(rank, 1, 10))
        for r in records_from_payload(payload, observed_timestamp_unix_ns=0).records
    ]

    def key(record: Any) -> tuple[Any, ...]:
        data = record.to_dict()
        data.pop("observed_timestamp_unix_ns")
        return tuple(sorted(data.items(), key=lambda kv: kv[0]))

    assert [key(r) for r in recorder.written] == [key(r) for r in expected]
    assert report.admitted_by_stream["step_time"] == 44
    assert sum(isinstance(r, StepTimeRecord) for r in recorder.written) == 44
    assert report.delivered_records == report.admitted_records == len(expected)


def test_submit_deferred_makes_the_payload_on_the_worker_thread(tmp_path: Path) -> None:
    """A deferred producer runs on the worker's thread; NO_PAYLOAD adds nothing, a raise one skipped unit."""
    from traceml_exporter_sdk.worker import NO_PAYLOAD

    threads: list[int] = []

    def produce() -> object:
        threads.append(threading.get_ident())
        return step_payload(0, 0, 3)

    def broken() -> object:
        raise ValueError("not a payload")

    worker = ExportWorker(recording_factory(Recorder()), context(tmp_path)).start()
    assert worker.submit_deferred(produce)
    assert worker.submit_deferred(lambda: NO_PAYLOAD)
    assert worker.submit_deferred(broken)
    report = worker.shutdown()
    assert worker.thread is not None
    assert threads == [worker.thread.ident]
    assert report.admitted_records == 3
    assert report.skipped_units == 1
    assert report.failure is None
