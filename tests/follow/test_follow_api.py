"""``traceml_exporter_sdk.follow`` driven in-process, as a platform team embeds it: the
settings and their defaults, the stop event, the snapshots and notices, the result's
exported and lost figures, the typed errors, ``/metrics`` from the first second, and no
process-wide setting changed. Against ``writer050`` (a run written while it is followed
is written from a process of its own: ``WRITER``) and the SDK's jsonl exporter."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from child_env import child_env
from follow_helpers import exported
from traceml_exporter_sdk._bridge.follow.retry import permanent
from traceml_exporter_sdk.cli.commands import follow as follow_command
from traceml_exporter_sdk.context import ExporterContext
from traceml_exporter_sdk.follow import (
    REASONS,
    ExporterNotFoundError,
    FollowResult,
    FollowSettingError,
    FollowSettings,
    MetricsAddressError,
    NoReadableTableError,
    Notice,
    RunLockedError,
    RunNotFoundError,
    StopEvent,
    StoppedWaitingError,
    follow_logs_dir,
    follow_run,
)
from traceml_exporter_sdk.worker import ExportFailure, ExportWorker
from waiting import wait_for
from writer050 import Writer050, step_records

FAST = FollowSettings(streams="all", poll_interval=0.05, flush_interval=0.1, wait=20)
WRITER = """
import sys
from pathlib import Path
from writer050 import Writer050, step_records
run = Writer050(Path(sys.argv[1]), session_id=sys.argv[3])
run.flush(step_records(0, int(sys.argv[2])))
print("written", flush=True)
sys.stdin.read()
run.close() if sys.argv[4] == "complete" else run.disconnect()
"""
"""A run's writer in a process of its own: two SQLite libraries in one process (the
test's sqlite3, the follower's apsw) do not see each other's POSIX locks, so one's close
can truncate the WAL index the other has mapped (SIGBUS). A run written while followed
is written from another process, as TraceML's aggregator does."""


@contextlib.contextmanager
def live_run(root: Path, rows: int, end: str = "disconnect") -> Iterator[Path]:
    """A run with ``rows`` step_time rows whose writer keeps the database open (an
    aggregator alive) until the block ends; then it disconnects, or closes it complete."""
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), str(rows), root.name, end],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=child_env([Path(__file__).parent, Path(__file__).parents[1]]),
    )  # fmt: skip
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == "written\n"
        yield root
    finally:
        child.stdin.close()
        child.wait(30)
        child.stdout.close()


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Writer050]:
    writer = Writer050(tmp_path / "logs" / "run1")
    yield writer
    writer.disconnect()


class Seen:
    """What the callbacks were given."""

    def __init__(self) -> None:
        self.snapshots: list[dict[str, Any]] = []
        self.notices: list[Notice] = []

    def snapshot(self, snapshot: Mapping[str, Any]) -> None:
        self.snapshots.append(dict(snapshot))

    def event(self, notice: Notice) -> None:
        self.notices.append(notice)

    @property
    def states(self) -> list[str]:
        return [s["state"] for s in self.snapshots]


def in_thread(**kwargs: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """``follow_run`` on a thread of its own; its result or what it raised in the dict."""
    out: dict[str, Any] = {}

    def main() -> None:
        try:
            out["result"] = follow_run(**kwargs)
        except Exception as exc:
            out["error"] = exc

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    return thread, out


def scrape(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


# -- settings ------------------------------------------------------------------------


def test_the_settings_defaults_are_the_commands() -> None:
    """Every option of ``traceml-exporter follow`` defaults to its setting's default."""
    parser = argparse.ArgumentParser()
    follow_command.add_parser(parser.add_subparsers())
    args = parser.parse_args(["follow", "jsonl", "--session-root", "x"])
    made = follow_command._settings(args, "step_time")
    assert dataclasses.replace(made, streams=None) == FollowSettings()


def test_the_settings_are_keyword_only_and_checked() -> None:
    with pytest.raises(TypeError):
        FollowSettings(1.0)  # type: ignore[misc]
    for name, value in [("poll_interval", 0.0), ("flush_interval", float("nan")),
                        ("wait", -1.0), ("metrics_port", 70000), ("streams", "steps"),
                        ("status_interval", float("inf"))]:  # fmt: skip
        with pytest.raises(FollowSettingError) as caught:
            FollowSettings(**{name: value})
        assert caught.value.name == name
        assert str(caught.value).startswith(f"{name} must be "), caught.value
    assert FollowSettings(max_outage=float("inf")).backoff.max_outage == float("inf")


# -- one run ---------------------------------------------------------------------------


def test_a_run_is_followed_to_its_end_with_what_was_exported_and_written_down(
    run: Writer050,
) -> None:
    records = step_records(0, 120)
    run.flush(records)
    run.close()
    seen = Seen()
    result = follow_run(
        "jsonl", run.root, settings=FAST, on_status=seen.snapshot, on_event=seen.event
    )
    assert isinstance(result, FollowResult)
    assert (result.end, result.exit_code, result.lost) == ("complete", 0, {})
    assert result.exported == {"step_time": 120}
    assert len(exported(run.root)["step_time"]) == 120
    assert result.message.startswith("complete")
    assert seen.states[-1] == "done"
    assert set(seen.states) <= {"following", "done"}, "found at once: never waiting"
    assert seen.notices == [], "no metrics asked, no wait needed"
    status = json.loads((run.root / "aggregator/follow/status.json").read_text())
    assert (status["end"], status["message"]) == ("complete", result.message)
    assert not (run.root / "aggregator/follow/finalization_warning.json").exists()
    assert (run.root / "aggregator/follow/bookmark.json").exists()


def test_a_stale_warning_that_cannot_be_removed_is_counted_and_told(run: Writer050) -> None:
    """A complete end removes an earlier ``finalization_warning.json``; one that will not
    go (a folder in its place here) is the result's ``stale_warning``, a ``stale-warning``
    notice, and a count in ``status.json`` and ``/metrics``. Nothing was lost: exit 0."""
    from prometheus_client import CollectorRegistry, generate_latest
    from traceml_exporter_sdk._bridge.follow.metrics import _Collector

    stale = run.root / "aggregator/follow/finalization_warning.json"
    (stale / "kept").mkdir(parents=True)
    run.flush(step_records(0, 50))
    run.close()
    seen = Seen()
    result = follow_run(
        "jsonl", run.root, settings=FAST, on_status=seen.snapshot, on_event=seen.event
    )
    assert (result.end, result.exit_code, result.lost) == ("complete", 0, {})
    assert result.stale_warning is not None
    assert result.stale_warning.startswith(f"could not remove the earlier {stale}")
    assert [n.kind for n in seen.notices] == ["stale-warning"]
    assert seen.notices[0].line == f"follow run1: {result.stale_warning}"
    status = json.loads((run.root / "aggregator/follow/status.json").read_text())
    assert (status["end"], status["stale_warnings"]) == ("complete", 1)
    assert seen.snapshots[-1]["stale_warnings"] == 1
    registry = CollectorRegistry()
    registry.register(_Collector(lambda: [status], None))
    metrics = generate_latest(registry).decode()
    assert 'traceml_exporter_follow_stale_warnings_total{run="run1"} 1.0' in metrics
    assert stale.is_dir()


def test_a_complete_end_removes_an_earlier_warning_and_says_nothing(run: Writer050) -> None:
    """The same end with a removable warning file: gone, no notice, a count of 0."""
    stale = run.root / "aggregator/follow/finalization_warning.json"
    stale.parent.mkdir(parents=True)
    stale.write_text('{"follow": {"run_end": "exporter-failed"}}')
    run.flush(step_records(0, 50))
    run.close()
    seen = Seen()
    result = follow_run("jsonl", run.root, settings=FAST, on_event=seen.event)
    assert (result.end, result.exit_code, result.stale_warning) == ("complete", 0, None)
    assert not stale.exists()
    assert seen.notices == []
    status = json.loads((run.root / "aggregator/follow/status.json").read_text())
    assert status["stale_warnings"] == 0


def test_the_result_counts_what_was_lost_and_writes_it_down(run: Writer050) -> None:
    ids = run.flush(step_records(0, 100))["step_time_samples"]
    run.flush(step_records(100, 50), prune={"step_time_samples": ids[59]})
    run.close()
    result = follow_run("jsonl", run.root, settings=FAST)
    assert result.lost == {"pruned": 60}
    assert set(result.lost) <= set(REASONS)
    assert result.exported == {"step_time": 90}
    assert result.exit_code == 6
    warning = json.loads((run.root / "aggregator/follow/finalization_warning.json").read_text())
    assert warning["follow"]["lost"] == {"pruned": 60}
    assert warning["follow"]["exit_code"] == 6


def test_the_stop_event_drains_and_says_why(tmp_path: Path) -> None:
    stop = StopEvent()
    with live_run(tmp_path / "logs" / "run1", 50) as root:
        thread, out = in_thread(exporter="jsonl", session_root=root, settings=FAST, stop=stop)
        wait_for(lambda: len(exported(root).get("step_time", [])) == 50, "the rows exported")
        stop.stop("my-supervisor")
        thread.join(20)
    result = out["result"]
    assert (result.end, result.exit_code) == ("interrupted", 130)
    assert result.message == "interrupted (my-supervisor); drained, flushed, bookmark saved"
    assert result.exported == {"step_time": 50}


def test_a_plain_event_stops_it_too_and_a_stop_while_waiting_raises(tmp_path: Path) -> None:
    root = tmp_path / "logs" / "later"
    stop = threading.Event()
    seen = Seen()
    thread, out = in_thread(
        exporter="jsonl", session_root=root, settings=FAST, stop=stop, on_event=seen.event
    )
    wait_for(lambda: seen.notices, "the waiting notice")
    assert seen.notices[0].kind == "waiting"
    stop.set()
    thread.join(20)
    assert isinstance(out["error"], StoppedWaitingError)
    assert not root.exists(), "waiting creates nothing"


def test_metrics_and_health_are_served_while_waiting_for_the_run(tmp_path: Path) -> None:
    root = tmp_path / "logs" / "run1"
    stop = StopEvent()
    seen = Seen()
    settings = dataclasses.replace(FAST, metrics_port=0)
    thread, out = in_thread(
        exporter="jsonl", session_root=root, settings=settings, stop=stop,
        on_status=seen.snapshot, on_event=seen.event,
    )  # fmt: skip
    notice = wait_for(lambda: next((n for n in seen.notices if n.kind == "metrics"), None))
    assert notice.port is not None
    assert scrape(notice.port, "/healthz") == (200, "waiting\n")
    code, text = scrape(notice.port, "/metrics")
    assert code == 200
    assert 'traceml_exporter_follow_state{run="run1",state="waiting"} 1.0' in text
    wait_for(lambda: "waiting" in seen.states, "a snapshot of the wait")
    with live_run(root, 30):  # the run starts: followed
        wait_for(lambda: scrape(notice.port or 0, "/healthz") == (200, "ok\n"), "followed")
        exported_line = 'records_exported_total{run="run1",stream="step_time"} 30.0'
        wait_for(lambda: exported_line in scrape(notice.port or 0, "/metrics")[1], "exported")
        stop.stop("test")
        thread.join(20)
    assert out["result"].exported == {"step_time": 30}


def test_a_port_in_use_is_raised_before_anything_is_written(run: Writer050) -> None:
    run.flush(step_records(0, 10))
    run.close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = dataclasses.replace(FAST, metrics_port=port)
        with pytest.raises(MetricsAddressError, match=f"cannot listen on 127.0.0.1:{port}"):
            follow_run("jsonl", run.root, settings=settings)
        with pytest.raises(MetricsAddressError):
            follow_logs_dir("jsonl", run.root.parent, settings=settings, stop=threading.Event())
    assert not (run.root / "aggregator" / "follow").exists()


def test_each_reason_not_to_follow_is_its_own_error(run: Writer050, tmp_path: Path) -> None:
    quick = dataclasses.replace(FAST, wait=0.0)
    with pytest.raises(RunNotFoundError, match="no such folder"):
        follow_run("jsonl", tmp_path / "nope", settings=quick)
    with pytest.raises(ExporterNotFoundError, match="no_such_module"):
        follow_run("no_such_module:make", run.root, settings=quick)
    with pytest.raises(RunNotFoundError, match="holds runs"):
        follow_run("jsonl", run.root.parent, settings=quick)
    stop = threading.Event()
    with live_run(tmp_path / "live" / "run1", 10) as root:
        thread, out = in_thread(exporter="jsonl", session_root=root, settings=FAST, stop=stop)
        wait_for(lambda: _locked(root), "the first follower")
        with pytest.raises(RunLockedError):
            follow_run("jsonl", root, settings=quick)
        stop.set()
        thread.join(20)
    assert out["result"].end == "interrupted"


def test_a_database_without_a_readable_table_is_its_own_error(tmp_path: Path) -> None:
    run = Writer050(tmp_path / "run", tables=())
    run.connection.execute("CREATE TABLE step_time_samples (id INTEGER PRIMARY KEY, x)")  # type: ignore[union-attr]
    run.close()
    with pytest.raises(NoReadableTableError, match="lacks columns"):
        follow_run("jsonl", run.root, settings=FAST)
    assert not _locked(run.root), "the run's lock was let go"


def _locked(root: Path) -> bool:
    from traceml_exporter_sdk._bridge.follow import RunLock, RunLockedError

    lock = RunLock(root / "aggregator/follow/lock")
    try:
        lock.acquire()
    except RunLockedError:
        return True
    lock.release()
    return False


# -- a logs folder -----------------------------------------------------------------------


def test_a_logs_folder_is_served_until_stopped(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    first = Writer050(logs / "run1", session_id="run1")
    first.flush(step_records(0, 40))
    first.close()
    stop = StopEvent()
    seen = Seen()
    out: dict[str, Any] = {}
    settings = dataclasses.replace(FAST, runs_poll_interval=0.1)

    def main() -> None:
        out["result"] = follow_logs_dir(
            "jsonl", logs, settings=settings, stop=stop, on_status=seen.snapshot,
            on_event=seen.event,
        )  # fmt: skip

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    with live_run(logs / "run2", 25, end="complete"):  # a run that comes later
        pass
    wait_for(lambda: sum(s["state"] == "done" for s in seen.snapshots) == 2, "both runs done")
    stop.stop("SIGTERM")
    thread.join(20)
    service = out["result"]
    assert service.exit_code == 0
    assert {r.name: (r.state, r.exit_code) for r in service.runs} == {
        "run1": ("done", 0), "run2": ("done", 0),
    }  # fmt: skip
    assert {r.name: r.result.exported for r in service.runs if r.result} == {
        "run1": {"step_time": 40}, "run2": {"step_time": 25},
    }  # fmt: skip
    assert seen.notices[0].kind == "waiting"


# -- no process-wide state, and the retry decision is the follower's ---------------------


def test_following_changes_no_gc_threshold(run: Writer050) -> None:
    before = gc.get_threshold()
    during: list[tuple[int, ...]] = []
    run.flush(step_records(0, 50))
    run.close()
    follow_run(
        "jsonl", run.root, settings=FAST, on_status=lambda s: during.append(gc.get_threshold())
    )
    assert set(during) == {before}
    assert gc.get_threshold() == before


@pytest.mark.parametrize(
    ("method", "raised", "lasting"),
    [("open", ValueError, True), ("open", TypeError, True), ("open", OSError, False),
     ("write", ValueError, False), ("open", None, False)],
)  # fmt: skip
def test_a_setting_open_cannot_parse_is_permanent_to_the_follower(
    method: Any, raised: type[BaseException] | None, lasting: bool
) -> None:
    assert permanent(ExportFailure(method, "x", False, raised)) is lasting
    assert permanent(ExportFailure(method, "x", True, raised)) is True


class _BadPort:
    def open(self) -> None:
        int("notanumber")

    def write(self, records: Any) -> None: ...
    def flush(self) -> None: ...
    def close(self, *, dropped_batches: int = 0) -> None: ...


def test_the_worker_marks_no_value_error_permanent_as_traceml_does(tmp_path: Path) -> None:
    worker = ExportWorker(lambda context: _BadPort(), ExporterContext.create(tmp_path))
    worker.start()
    report = worker.shutdown(10)
    assert report.failure is not None
    assert (report.failure.method, report.failure.permanent) == ("open", False)
    assert report.failure.error_type is ValueError


def test_a_callback_that_raises_stops_the_follow_cleanly(tmp_path: Path) -> None:
    """The caller's error goes on, after the follow was stopped and drained: the run is
    not left locked by a thread still following."""

    def broken(snapshot: Mapping[str, Any]) -> None:
        if snapshot["state"] == "following":
            raise RuntimeError("the caller's bug")

    stop = threading.Event()
    with live_run(tmp_path / "logs" / "run1", 20) as root:
        with pytest.raises(RuntimeError, match="the caller's bug"):
            follow_run("jsonl", root, settings=FAST, stop=stop, on_status=broken)
        assert stop.is_set()
        assert not _locked(root)
