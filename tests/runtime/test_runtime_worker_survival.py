"""The worker thread survives anything an exporter, a producer or a payload does.

And if the thread ever ends without finishing, ``shutdown`` says so: a failure,
with the queued batches counted as dropped and the warning file written.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any, NoReturn

import pytest
from runtime_helpers import context, step_payload, warning_of
from traceml_exporter_sdk import ExporterContext, ExportWorker
from waiting import wait_for


class UnprintableError(Exception):
    """An exception whose ``str()`` raises: formatting it must not kill the worker."""

    def __str__(self) -> str:
        raise RuntimeError("str() of this exception fails")

    def __repr__(self) -> str:
        raise RuntimeError("repr() of this exception fails")


class UnprintableBase(BaseException):
    def __str__(self) -> str:
        raise KeyboardInterrupt


class Raising:
    """An exporter whose ``method`` raises ``error``; the rest is a no-op."""

    def __init__(self, method: str, error: BaseException) -> None:
        self.method = method
        self.error = error
        self.calls: list[str] = []

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name == self.method:
            raise self.error

    def open(self) -> None:
        self._call("open")

    def write(self, records: Any) -> None:
        self._call("write")

    def flush(self) -> None:
        self._call("flush")

    def close(self, *, dropped_batches: int = 0) -> None:
        self._call("close")


def _run(ctx: ExporterContext, exporter: object, batches: int = 3) -> Any:
    """Run ``exporter`` (an object, or a setting string) over ``batches`` payloads of 5 steps."""
    setting: Any = exporter if isinstance(exporter, str) else (lambda _c: exporter)
    worker = ExportWorker(setting, ctx, flush_interval_s=3600.0)
    worker.start()
    for i in range(batches):
        assert worker.submit(step_payload(0, i * 5, 5))
    return worker.shutdown(timeout=10.0)


@pytest.mark.parametrize("method", ["open", "write", "flush", "close"])
@pytest.mark.parametrize(
    "error", [UnprintableError(), UnprintableBase()], ids=["exception", "base"]
)
def test_an_exception_whose_str_raises_is_still_a_recorded_failure(
    tmp_path: Path, method: str, error: BaseException
) -> None:
    ctx = context(tmp_path, "step_time")
    exporter = Raising(method, error)
    report = _run(ctx, exporter)

    assert report.failure is not None
    assert report.failure.method == method
    assert report.failure.error.startswith(type(error).__name__)
    assert "unprintable" in report.failure.error
    assert report.admitted_records == 15
    assert not report.timed_out
    block = warning_of(ctx)
    assert block["exporter_failed"] is True
    assert block["failed_method"] == method
    assert exporter.calls[-1] == method  # nothing more after the raise
    if method != "close":
        assert report.delivered_records == 0
        assert block["failed_records"] == 15


@pytest.mark.parametrize("interval", [math.inf, 1e10, 1e300])
def test_a_huge_flush_interval_means_flush_at_shutdown_only(
    tmp_path: Path, interval: float
) -> None:
    ctx = context(tmp_path, "step_time")
    exporter = Raising("none", RuntimeError())
    worker = ExportWorker(lambda _c: exporter, ctx, flush_interval_s=interval)
    worker.start()
    for i in range(3):
        assert worker.submit(step_payload(0, i * 5, 5))
        # The worker waits for the interval with records pending: that wait overflowed.
        writes = i + 1
        wait_for(lambda: worker._waiting and exporter.calls.count("write") == writes, "a wait")  # noqa: B023
    report = worker.shutdown(timeout=10.0)

    assert report.failure is None
    assert report.delivered_records == report.admitted_records == 15
    assert exporter.calls[0] == "open"
    assert exporter.calls[-2:] == ["flush", "close"]
    assert worker.thread is not None
    assert not worker.thread.is_alive()


@pytest.mark.parametrize("interval", [math.nan, 0.0, -1.0])
def test_a_flush_interval_that_is_not_positive_is_refused(tmp_path: Path, interval: float) -> None:
    with pytest.raises(ValueError, match="flush_interval_s"):
        ExportWorker("jsonl", context(tmp_path), flush_interval_s=interval)


@pytest.mark.parametrize("timeout", [math.inf, 1e300])
def test_shutdown_with_an_infinite_timeout_waits_for_the_worker(
    tmp_path: Path, timeout: float
) -> None:
    ctx = context(tmp_path, "step_time")
    exporter = Raising("none", RuntimeError())
    worker = ExportWorker(lambda _c: exporter, ctx)
    worker.start()
    worker.submit(step_payload(0, 0, 5))
    report = worker.shutdown(timeout=timeout)
    assert report.delivered_records == 5
    assert not report.timed_out


def test_shutdown_refuses_a_nan_timeout(tmp_path: Path) -> None:
    worker = ExportWorker("jsonl", context(tmp_path))
    worker.start()
    with pytest.raises(ValueError, match="timeout"):
        worker.shutdown(timeout=math.nan)
    assert not worker.shutdown(timeout=10.0).timed_out


def _exit() -> NoReturn:
    raise SystemExit(3)


def _interrupt() -> NoReturn:
    raise KeyboardInterrupt


def _unprintable() -> NoReturn:
    raise UnprintableBase


@pytest.mark.parametrize("produce", [_exit, _interrupt, _unprintable])
def test_a_deferred_producer_raising_any_base_exception_is_one_skipped_unit(
    tmp_path: Path, produce: Any
) -> None:
    ctx = context(tmp_path, "step_time")
    exporter = Raising("none", RuntimeError())
    worker = ExportWorker(lambda _c: exporter, ctx)
    worker.start()
    assert worker.submit(step_payload(0, 0, 5))
    assert worker.submit_deferred(produce)
    assert worker.submit(step_payload(0, 5, 5))
    report = worker.shutdown(timeout=10.0)

    assert report.failure is None
    assert report.skipped_units == 1
    assert report.delivered_records == report.admitted_records == 10
    assert exporter.calls[-1] == "close"


class _HostnameInterrupts:
    def __str__(self) -> str:
        raise KeyboardInterrupt

    __repr__ = __str__


class _Stream:
    """A STREAM value that hashes but compares unequal to every name."""

    def __hash__(self) -> int:
        raise KeyboardInterrupt


class _OddRecord:
    STREAM = _Stream()


@pytest.mark.parametrize(
    "submit",
    [
        lambda w: w.submit(step_payload(0, 0, 2, hostname=_HostnameInterrupts())),
        lambda w: w.submit_records([_OddRecord()]),
    ],
    ids=["hostname-str-interrupts", "stream-hash-interrupts"],
)
def test_a_payload_that_raises_base_exception_is_one_skipped_unit(
    tmp_path: Path, submit: Any
) -> None:
    ctx = context(tmp_path, "step_time")
    exporter = Raising("none", RuntimeError())
    worker = ExportWorker(lambda _c: exporter, ctx)
    worker.start()
    assert submit(worker)
    assert worker.submit(step_payload(0, 5, 5))
    report = worker.shutdown(timeout=10.0)

    assert report.failure is None
    assert report.skipped_units == 1
    assert report.delivered_records == report.admitted_records == 5
    assert exporter.calls[-1] == "close"


def test_a_worker_thread_that_dies_is_reported_as_a_failure_with_the_loss_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in the worker itself (here: its admission step) must still be reported."""
    ctx = context(tmp_path, "step_time")
    exporter = Raising("none", RuntimeError())
    worker = ExportWorker(lambda _c: exporter, ctx)
    release = threading.Event()
    calls = 0

    def broken_admit(group: Any) -> NoReturn:
        nonlocal calls
        calls += 1
        release.wait(10.0)
        raise UnprintableBase

    monkeypatch.setattr(worker, "_admit", broken_admit)
    worker.start()
    assert worker.submit(step_payload(0, 0, 5))
    # The worker is inside _admit with that batch; three more wait in the queue.
    for i in range(1, 4):
        assert worker.submit(step_payload(0, i * 5, 5))
    release.set()
    assert worker.thread is not None
    worker.thread.join(10.0)
    assert not worker.thread.is_alive()
    assert not worker.submit(step_payload(0, 20, 5))  # a dead worker drops, and counts
    report = worker.shutdown(timeout=10.0)

    assert report.failure is not None
    assert report.failure.method == "worker"
    assert "UnprintableBase" in report.failure.error
    assert report.dropped_batches == 5  # the one in admission, three queued, one refused
    assert report.warning_path is not None
    block = warning_of(ctx)
    assert block["exporter_failed"] is True
    assert block["failed_method"] == "worker"
    assert block["dropped_batches"] == 5
    assert exporter.calls == ["open"]
    assert calls == 1


def test_a_warning_file_that_cannot_be_written_is_in_the_report_and_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = context(tmp_path, "step_time")
    ctx.session_root.mkdir(parents=True)
    (ctx.session_root / "aggregator").write_text("a file where the folder goes")
    report = _run(ctx, Raising("write", RuntimeError("sink gone")))

    assert report.warning_path is None
    assert report.warning_error is not None
    assert report.warning_error.startswith(
        f"could not write {ctx.session_root / 'aggregator' / 'finalization_warning.json'}: "
    )
    logged = [r.getMessage() for r in caplog.records if r.name == "traceml_exporter_sdk"]
    assert any(report.warning_error in m and "'failed_records': 15" in m for m in logged), logged


class _CustomBase(BaseException):
    pass


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        (UnprintableError(), "the factory raised <unprintable UnprintableError>"),
        (_CustomBase("odd"), "the factory raised _CustomBase('odd')"),
        (GeneratorExit(), "the factory raised GeneratorExit()"),
    ],
    ids=["unprintable", "custom-base", "generator-exit"],
)
def test_a_factory_raising_anything_is_a_factory_failure(
    tmp_path: Path, error: BaseException, shown: str
) -> None:
    def factory(_context: ExporterContext) -> NoReturn:
        raise error

    ctx = context(tmp_path, "step_time")
    worker = ExportWorker(factory, ctx)
    worker.start()
    assert worker.submit(step_payload(0, 0, 5))
    report = worker.shutdown(timeout=10.0)
    assert report.failure is not None
    assert report.failure.method == "factory"
    assert report.failure.error == shown
    assert report.failed_records == 5


@pytest.mark.parametrize("where", ["import", "attribute"])
def test_a_module_raising_an_unprintable_error_is_a_factory_failure(
    tmp_path: Path, write_module: Any, where: str
) -> None:
    source = (
        "class Unprintable(Exception):\n"
        "    def __str__(self):\n"
        "        raise RuntimeError('no str')\n"
        "    __repr__ = __str__\n"
    )
    if where == "import":
        source += "\nraise Unprintable()\n"
    else:
        source += "\ndef __getattr__(name):\n    raise Unprintable()\n"
    name = write_module("unprintable", source)
    report = _run(context(tmp_path, "step_time"), f"{name}:make_exporter")
    assert report.failure is not None
    assert report.failure.method == "factory"
    assert "<unprintable Unprintable>" in report.failure.error
