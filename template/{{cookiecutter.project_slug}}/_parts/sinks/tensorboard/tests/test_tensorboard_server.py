"""The event files as a real ``tensorboard --logdir`` server shows them, over its HTTP API.

One server per loader, for the module: the Rust data server (``--load_fast=true``, what
TensorBoard uses by default when it is installed) and the Python one
(``--load_fast=false``), both started with ``--samples_per_plugin scalars=SAMPLES`` so
every point is kept (the default keeps 1,000 per tag; ``scalars=0``, "keep all", makes
TensorBoard 2.21's scalars API answer with no points at all, on either loader).
"""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from exporter_calls import run
from traceml_exporter_sdk import ExporterContext, ExportRecord, StepMemoryRecord, StepTimeRecord
from traceml_exporter_sdk.testing.fault_proxy import unused_port

from traceml_exporter_example.exporter import LOGDIR_ENV

NS = 1_712_345_678_901_234_567
STEPS = 2_500
"""More points per tag than the server keeps by default."""
START_TIMEOUT_S = 60.0
SHOW_TIMEOUT_S = 60.0
SAMPLES = 1_000_000


class TensorBoard:
    """A ``tensorboard`` process on 127.0.0.1 serving ``logdir``."""

    def __init__(self, logdir: Path, load_fast: str) -> None:
        self.logdir = logdir
        self.rust = load_fast == "true"
        self.port = unused_port()
        command = [
            *(sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir)),
            *("--host", "127.0.0.1", "--port", str(self.port), "--reload_interval", "1"),
            *("--samples_per_plugin", f"scalars={SAMPLES}", f"--load_fast={load_fast}"),
        ]
        self.log = (logdir.parent / f"tensorboard-{load_fast}.log").open("wb")
        self.process = subprocess.Popen(  # noqa: S603 - the test's own command line
            command, stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                log = (logdir.parent / f"tensorboard-{load_fast}.log").read_text("utf-8")
                pytest.fail(f"tensorboard did not start:\n{log[-3000:]}")
            time.sleep(0.2)

    def _answers(self) -> bool:
        try:
            self.get("/data/environment")
        except OSError:
            return False
        return True

    def get(self, path: str, **query: str) -> Any:
        url = f"http://127.0.0.1:{self.port}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - 127.0.0.1 only
            return json.loads(answer.read())

    def scalars(self, run_name: str, tag: str) -> list[list[float]]:
        points: list[list[float]] = self.get("/data/plugin/scalars/scalars", run=run_name, tag=tag)
        return points

    def wait_for(self, run_name: str, tag: str, count: int) -> list[list[float]]:
        """The tag's points once the server holds ``count`` of them (it reloads every second)."""
        deadline = time.monotonic() + SHOW_TIMEOUT_S
        points: list[list[float]] = []
        while time.monotonic() < deadline:
            tags = self.get("/data/plugin/scalars/tags")
            if tag in tags.get(run_name, {}):
                points = self.scalars(run_name, tag)
                if len(points) >= count:
                    return points
            time.sleep(0.5)
        pytest.fail(f"after {SHOW_TIMEOUT_S} s the server shows {len(points)} of {count} points")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=20)
        self.log.close()


@pytest.fixture(scope="module", params=["true", "false"], ids=["rust-loader", "python-loader"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TensorBoard]:
    logdir = tmp_path_factory.mktemp(f"tensorboard-{request.param}") / "logs"
    logdir.mkdir()
    tensorboard = TensorBoard(logdir, request.param)
    yield tensorboard
    tensorboard.stop()


def f32(value: float) -> float:
    rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return rounded


def _export(server: TensorBoard, name: str, *batches: list[ExportRecord]) -> ExporterContext:
    context = ExporterContext.create(server.logdir.parent / name, export_streams="all")
    saved = os.environ.get(LOGDIR_ENV)
    os.environ[LOGDIR_ENV] = str(server.logdir)
    try:
        run(context, *batches)
    finally:
        if saved is None:
            os.environ.pop(LOGDIR_ENV)
        else:
            os.environ[LOGDIR_ENV] = saved
    return context


def test_every_point_of_a_long_run_is_served_exactly(server: TensorBoard) -> None:
    records: list[ExportRecord] = []
    for step in range(STEPS):
        duration = 10 + step / 7
        events: Any = {"forward": {"cuda:0": {"is_gpu": True, "duration_ms": duration}}}
        records.append(StepTimeRecord(NS, 1, 1, 1, 2, 2, 0, None, NS + step, step, step, events))
        records.append(
            StepMemoryRecord(
                NS, 1, 1, 1, 2, 2, 0, None, None, step, "cuda:0", step, 3e9 + step, None
            )
        )
    _export(server, "long", records[:STEPS], records[STEPS:])
    points = server.wait_for("long/rank_1", "step_time/forward/cuda:0/duration_ms", STEPS)
    assert [int(step) for _, step, _ in points] == list(range(STEPS))
    assert [f32(value) for _, _, value in points] == [f32(10 + s / 7) for s in range(STEPS)]
    assert [wall for wall, _, _ in points] == [(NS + s) / 1e9 for s in range(STEPS)]
    memory = server.wait_for("long/rank_1", "step_memory/cuda:0/peak_alloc_bytes", STEPS)
    assert [f32(value) for _, _, value in memory] == [f32(3e9 + s) for s in range(STEPS)]
    assert all(wall == NS / 1e9 for wall, _, _ in memory)  # no source time: the observed stamp


def test_the_fixture_records_are_served_per_rank(
    server: TensorBoard, records: list[ExportRecord]
) -> None:
    """Rank 0 has its step 7 twice (a duplicate record): the Python loader shows both
    points, the Rust one the last (it keeps one point per step, as after a restart)."""
    _export(server, "fixture", records)
    tag = "step_time/_traceml_internal:forward_time/cuda:0/cpu_ms"
    for rank in (0, 1):
        count = 1 if server.rust or rank else 2
        points = server.wait_for(f"fixture/rank_{rank}", tag, count)
        assert [(int(step), f32(value)) for _, step, value in points] == [(7, 3.25)] * count
    gpu = server.wait_for("fixture/rank_0", "system_gpu/0/util", 1)
    assert [(int(step), f32(value)) for _, step, value in gpu] == [(1, 99.5)]
    tags = server.get("/data/plugin/scalars/tags")["fixture/rank_0"]
    assert "system_gpu/1/temperature_c" not in tags  # None is left out
    assert not [t for t in tags if t.startswith("traceml/")], "the record copies are no scalars"
    assert math.isfinite(gpu[0][0])
