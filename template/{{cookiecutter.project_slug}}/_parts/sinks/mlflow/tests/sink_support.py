"""The MLflow sink's test interface: a real MLflow server, and reading back what it holds.

The peer is PyPI's ``mlflow server`` (``mlflow_server.py``), started once per test
process. The autouse ``mlflow_peer`` fixture points MLflow's variables at it for one
test, through a fault proxy of the test's own and with an experiment of its own, and
restores them after. ``break_sink`` stops the proxy listening (the server is gone: a
fault that passes, retried until the deadline and raised unmarked), ``repair_sink``
starts it again; ``break_sink_permanently`` deletes the experiment (no wait brings its
runs back). The suite's checks run with a deadline of ``CHECK_TIMEOUT_S``, so a broken
sink raises within the suite's ``failure_timeout``.

MLflow holds metric points and tags, not records, so the suite's record-level
data-fidelity checks cannot apply (``SKIP_CHECKS`` says why, and ``suite_read_back``
turns the suite's read-back off); ``read_export`` reads the points and tags back
through the server's REST API and ``expected_export`` computes, independently of the
package, what they must be for the records written: the shared and the sink's own
tests compare the two exactly.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import re
import statistics
import uuid
from collections.abc import Collection, Iterable, Iterator
from fractions import Fraction
from typing import Any

import pytest
from mlflow_server import MlflowServer, MlflowUnavailableError, free_port, require_mlflow
from suite_helpers import RECORD_LEVEL_CHECKS
from traceml_exporter_sdk import ExporterContext, ExportRecord
from traceml_exporter_sdk.testing import ReadBackNotImplementedError
from traceml_exporter_sdk.testing.fault_proxy import FaultProxy
from traceml_exporter_sdk.testing.keys import CHECK_MARKER

from traceml_exporter_example._measures import EVENT_MEASURES as _MEASURES
from traceml_exporter_example._measures import MEASURES as _FIELDS
from traceml_exporter_example.exporter import session_key

__all__ = [
    "MAX_EXAMPLES",
    "SKIP_CHECKS",
    "break_sink",
    "break_sink_permanently",
    "broken_context",
    "end_of_run",
    "expected_export",
    "mlflow_peer",
    "read_end_of_run",
    "read_export",
    "repair_sink",
    "server",
    "start_server",
    "suite_read_back",
    "summary_steps",
]

SKIP_CHECKS = {
    **dict.fromkeys(
        RECORD_LEVEL_CHECKS,
        (
            "MLflow keeps metric points and tags, not records "
            "(stdout_stderr is not exported, an identical point is stored once); "
            "tests/test_conformance.py and tests/test_exporter.py compare the points and tags "
            "read back from the server with the records written, exactly"
        ),
    ),
    "two_instances_in_sequence": (
        "its third instance runs on a new export folder for the same run key, and the "
        "session run found by that key already holds summaries of the steps the third "
        "instance also gets: a step is summarized once per export folder, from the ranks "
        "that folder's exporters received, so neither the third instance's records alone "
        "nor all three instances' records give its points; a restart on the same folder "
        "(the check's second instance, follow's restart) is tested exactly in "
        "tests/test_exporter.py (test_the_summary_is_what_the_readme_computes, "
        "test_reopening_the_session_finds_its_runs_again)"
    ),
    "special_floats": (
        "the tracking server does not give back every -0.0, NaN and infinity as written "
        "(a metric value is a SQL float it stores and serves as JSON); finite values are "
        "compared exactly by tests/test_conformance.py and tests/test_exporter.py"
    ),
    "records_per_second": (
        "bound by the MLflow server itself (a few thousand "
        "points/s on sqlite); tests/benchmarks/bench_mlflow.py measures the exporter "
        "against the server's own ceiling"
    ),
}
"""The suite's checks this sink cannot pass by design, and why (the shared class reads it)."""

MAX_EXAMPLES = 6
"""Examples of the shared property test: each makes runs and reads every metric's history
back, a request apiece (the server's speed, not the exporter's, sets the time)."""
TEST_TIMEOUT_S = "30"
"""The deadline of each call in the tests: a server on a loaded 2-core CI machine can take
a second per request (idle, tens of milliseconds); the fault tests set their own."""
CHECK_TIMEOUT_S = "8"
"""The deadline in the suite's checks: a sink broken by ``break_sink`` is retried until
it passes, and the suite waits ``failure_timeout`` (10 s) for the exporter to raise."""
_SERVER: list[MlflowServer] = []
_PROXY: list[FaultProxy] = []
_KEY = re.compile(r"[^A-Za-z0-9_/.\- :]")
_MAX_DOUBLE = 1.7976931348623157e308


def start_server(*, auth: bool = False) -> MlflowServer:
    """A new server, stopped at exit; a test that cannot have one fails where
    ``TRACEML_EXPORTER_REQUIRE_MLFLOW`` is set (CI), else skips."""
    try:
        peer = MlflowServer(auth=auth).start()
    except MlflowUnavailableError as exc:
        if require_mlflow():
            pytest.fail(f"no MLflow server (TRACEML_EXPORTER_REQUIRE_MLFLOW is set): {exc}")
        pytest.skip(f"no MLflow server: {exc}")
    atexit.register(peer.stop)
    return peer


def server() -> MlflowServer:
    """The server shared by every test of the process, started on first use."""
    if not _SERVER:
        _SERVER.append(start_server())
    return _SERVER[0]


@pytest.fixture(autouse=True)
def mlflow_peer(request: pytest.FixtureRequest) -> Iterator[MlflowServer]:
    """The server, with MLflow's variables pointing at it through a fault proxy (a new
    experiment) for this test only."""
    peer = server()
    names = ("MLFLOW_", "TRACEML_MLFLOW_")
    saved = {k: v for k, v in os.environ.items() if k.startswith(names)}
    for key in saved:
        del os.environ[key]
    proxy = FaultProxy(peer.port)
    _PROXY[:] = [proxy]
    check = request.node.get_closest_marker(CHECK_MARKER) is not None
    os.environ["MLFLOW_TRACKING_URI"] = proxy.url
    os.environ["MLFLOW_EXPERIMENT_NAME"] = f"test-{uuid.uuid4().hex[:12]}"
    os.environ["TRACEML_MLFLOW_TIMEOUT_S"] = CHECK_TIMEOUT_S if check else TEST_TIMEOUT_S
    try:
        yield peer
    finally:
        _PROXY.clear()
        proxy.close()
        for key in [k for k in os.environ if k.startswith(names)]:
            del os.environ[key]
        os.environ.update(saved)


def suite_read_back(context: ExporterContext) -> Any:  # noqa: ARG001 - the suite's signature
    """The suite's record-level read-back is off for this sink (see ``SKIP_CHECKS``)."""
    raise ReadBackNotImplementedError("MLflow holds metric points and tags, not records")


def broken_context(context: ExporterContext) -> ExporterContext:
    """The same context, with the server URL pointed at a closed port (until the test ends)."""
    os.environ["MLFLOW_TRACKING_URI"] = f"http://127.0.0.1:{free_port()}"
    os.environ["TRACEML_MLFLOW_TIMEOUT_S"] = "2"
    return context


def break_sink(context: ExporterContext) -> None:  # noqa: ARG001 - the suite's signature
    """The server is gone from the exporter's view: its proxy stops listening (every
    connection refused), a fault that passes once the server is back."""
    _PROXY[0].stop_listening()


def repair_sink(context: ExporterContext) -> None:  # noqa: ARG001 - the suite's signature
    """The server is back: the proxy listens again on its port."""
    _PROXY[0].listen()


def break_sink_permanently(context: ExporterContext) -> None:  # noqa: ARG001 - the suite's signature
    """Delete the test's experiment underneath the running exporter (its runs go with it):
    MLflow then refuses every write to its runs, and no wait brings them back."""
    peer = server()
    name = os.environ["MLFLOW_EXPERIMENT_NAME"]
    found = peer.call("GET", "experiments/get-by-name", {"experiment_name": name})
    experiment_id = found["experiment"]["experiment_id"]
    peer.call("POST", "experiments/delete", {"experiment_id": experiment_id})


def _runs(context: ExporterContext) -> list[dict[str, Any]]:
    peer = server()
    name = os.environ["MLFLOW_EXPERIMENT_NAME"]
    try:
        found = peer.call("GET", "experiments/get-by-name", {"experiment_name": name})
    except OSError:
        return []
    where = f"tags.`traceml.session` = '{session_key(context.session_root)}'"
    body = {"experiment_ids": [found["experiment"]["experiment_id"]], "filter": where}
    runs: list[dict[str, Any]] = peer.call("POST", "runs/search", body).get("runs", [])
    return runs


def _value(value: Any) -> Any:
    """A metric value compared exactly: NaN as text (NaN != NaN)."""
    return "nan" if isinstance(value, float) and math.isnan(value) else value


def read_export(
    context: ExporterContext, *, summary: bool = False
) -> dict[str, list[dict[str, Any]]]:
    """What the server holds for this context's session: each metric point (sorted, by the
    first part of its key; ``rank`` None in the session run) and, under
    runtime_environment, each run's ``traceml.runtime.*`` tags; with the steps the export
    folder keeps waiting for ranks (a flush's acknowledgement: durably kept) summarized
    as ``close()`` would write them. The end-of-run ``summary/`` points only with
    ``summary``."""
    peer = server()
    out: dict[str, list[dict[str, Any]]] = {}
    for run in _runs(context):
        run_id = run["info"]["run_id"]
        tags = {t["key"]: t["value"] for t in run["data"].get("tags", [])}
        rank = _rank(tags["traceml.rank"]) if "traceml.rank" in tags else None
        runtime = {k: v for k, v in tags.items() if k.startswith("traceml.runtime.")}
        if runtime:
            out.setdefault("runtime_environment", []).append({"rank": rank, "tags": runtime})
        for key in sorted({m["key"] for m in run["data"].get("metrics", [])}):
            if key.startswith("summary/") and not summary:
                continue
            history = peer.call(
                "GET",
                "metrics/get-history",
                {"run_id": run_id, "metric_key": key, "max_results": 100000},
            )
            for point in history.get("metrics", []):
                out.setdefault(key.split("/")[0], []).append(
                    {
                        "rank": rank,
                        "key": key,
                        "step": int(point.get("step", 0)),
                        "timestamp": int(point["timestamp"]),
                        "value": _value(float(point["value"])),
                    }
                )
    slowest = "slowest" in os.environ.get("TRACEML_MLFLOW_RANK_RUNS", "").lower()
    for stream, step, parts in _kept_waiting(context):
        for point in _step_points(stream, step, parts, slowest=slowest):
            out.setdefault(stream, []).append(point)
    for rank, point in _kept_points(context):
        row = {
            "rank": rank,
            "key": point["key"],
            "step": point["step"],
            "timestamp": point["timestamp"],
            "value": _expected_value(float(point["value"])),
        }
        out.setdefault(point["key"].split("/")[0], []).append(row)
    return {stream: _unique(rows) for stream, rows in out.items()}


def _unique(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The points sorted, an identical one once (as MLflow stores them)."""
    return sorted({repr(row): row for row in rows}.values(), key=repr)


def _rank(tag: str) -> int | str:
    """A child run's ``traceml.rank`` tag: a rank, or ``slowest``."""
    return tag if tag == "slowest" else int(tag)


def _kept_points(context: ExporterContext) -> Iterator[tuple[int | str | None, dict[str, Any]]]:
    """The points ``mlflow_points.jsonl`` keeps (rank None: the session run), not yet sent (its
    documented layout: ``{"rank", "points"}`` lines add points, ``{"rank", "keep"}`` lines
    say all but the rank's last ``keep`` points were sent)."""
    path = context.export_dir / "mlflow_points.jsonl"
    if not path.is_file():
        return
    kept: dict[int | str | None, list[dict[str, Any]]] = {}
    for line in path.read_text("utf-8").splitlines():
        item = json.loads(line)
        points = kept.setdefault(item["rank"], [])
        if "points" in item:
            points += item["points"]
        else:
            del points[: len(points) - item["keep"]]
    for rank, points in kept.items():
        for point in points:
            yield rank, point


def _kept_waiting(context: ExporterContext) -> Iterator[tuple[str, int, list[_Part]]]:
    """The steps ``mlflow_summary_state.json`` keeps waiting (its documented layout; names
    are their UTF-8 bytes, lone surrogates passed, read as Latin-1)."""

    def name(text: str) -> str:
        return text.encode("latin-1").decode("utf-8", "surrogatepass")

    path = context.export_dir / "mlflow_summary_state.json"
    if not path.is_file():
        return
    state = json.loads(path.read_text("utf-8"))
    for stream, kept in state["streams"].items():
        for step, _world, parts in kept["waiting"]:
            yield (
                stream,
                step,
                [
                    (r, when, {(name(a), name(b)): float(v) for a, b, v in values})
                    for r, _, when, values in parts
                ],
            )


def _key(key: str) -> str:
    parts = _KEY.sub("_", key).split("/")
    key = "/".join("_" if part in ("", ".", "..") else part for part in parts)
    for size in (250, 249):
        parts = key[:size].split("/")
        cut = "/".join("_" if part in ("", ".", "..") else part for part in parts)
        if len(cut) <= 250:
            return cut
    return cut


def _expected_value(value: float) -> Any:
    try:
        number = float(value)
    except OverflowError:
        number = math.copysign(math.inf, value)
    if math.isinf(number):  # MLflow stores ±inf as the largest double
        number = math.copysign(_MAX_DOUBLE, number)
    return _value(number)


def _int64(value: int) -> int:
    return max(-(2**63), min(value, 2**63 - 1))


_Part = tuple[int, int, dict[tuple[str, str], float]]
"""One record's share of a step: its rank, its time (ms), its values by series."""


def _clamp(value: int) -> int:
    return max(-(2**63), min(value, 2**63 - 1))


def _float_or_none(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        number = math.copysign(math.inf, value)
    return None if math.isnan(number) else number


def _step_points(
    stream: str, step: int, parts: list[_Part], *, slowest: bool = False
) -> list[dict[str, Any]]:
    """The README's points of one written step: ranks; per series the median, max and
    slowest rank of step_time's duration_ms, the max of step_memory's peaks; with
    ``slowest``, the "slowest rank" run's points of a step_time step."""
    stamp = max(when for _, when, _ in parts)
    series: dict[tuple[str, str], dict[int, float]] = {}
    for rank, _, values in parts:
        for name, value in values.items():
            series.setdefault(name, {})[rank] = value
    rows = [(f"{stream}/ranks", float(len({rank for rank, _, _ in parts})))]
    for (first, second), by_rank in series.items():
        top = max(by_rank.values())
        if stream == "step_time":
            base = f"step_time/{first}/{second}/duration_ms"
            rows.append((f"{base}/median", statistics.median(by_rank.values())))
            rows.append((f"{base}/max", top))
            lowest = min(rank for rank, value in by_rank.items() if value == top)
            rows.append((f"{base}/slowest_rank", float(lowest)))
        else:
            rows.append((f"step_memory/{first}/{second}/max", top))
    out = [
        {
            "rank": None,
            "key": _key(k),
            "step": step,
            "timestamp": stamp,
            "value": _expected_value(v),
        }
        for k, v in rows
    ]
    if slowest and stream == "step_time":
        out += _slowest_points(step, parts)
    return out


def _slowest_points(step: int, parts: list[_Part]) -> list[dict[str, Any]]:
    """The README's "slowest rank" points of a step_time step: the rank whose durations
    add up to the most (NaN as -inf; ties: the lowest rank), and its durations."""
    totals: dict[int, tuple[float, int, int, dict[tuple[str, str], float]]] = {}
    for rank, when, values in parts:
        total = sum(values.values())
        totals[rank] = (-math.inf if math.isnan(total) else total, -rank, when, values)
    total, minus_rank, when, values = max(totals.values(), key=lambda t: t[:2])
    rows = [("step_time/rank", float(-minus_rank))]
    rows += [(f"step_time/{e}/{d}/duration_ms", v) for (e, d), v in values.items()]
    return [
        {
            "rank": "slowest",
            "key": _key(k),
            "step": step,
            "timestamp": when,
            "value": _expected_value(v),
        }
        for k, v in rows
    ]


def _share(stream: str, data: dict[str, Any]) -> tuple[str, dict[tuple[str, str], float]]:
    """The part of its step a record fills ("" or its device) and its values by series."""
    values: dict[tuple[str, str], float] = {}
    if stream == "step_time":
        for event, devices in data["events"].items():
            for device, stats in devices.items():
                number = _float_or_none(stats.get("duration_ms"))
                if number is not None:
                    values[(str(event), str(device))] = number
        return "", values
    part = str(data.get("device"))
    for name in ("peak_alloc_bytes", "peak_reserved_bytes"):
        number = _float_or_none(data.get(name))
        if number is not None:
            values[(part, name)] = number
    return part, values


Steps = dict[str, list[tuple[int, list[_Part], bool]]]
"""Per stream, the steps written in order: (step, its parts, complete)."""


def summary_steps(
    records: Iterable[ExportRecord], wait_steps: int = 64, counts: dict[str, int] | None = None
) -> Steps:
    """The steps the README says are written, in order, with their parts and whether each
    was complete: a rank's last record (per device) counts; a step is written when it has
    as many ranks as its largest world_size, when more than ``wait_steps`` wait (the
    lowest), or at the end (the rest, as they are); a record of a written step is late.
    ``counts`` gets ``<stream>/late_records`` and ``<stream>/unplaced_records``."""
    counts = {} if counts is None else counts
    for name in ("step_time", "step_memory"):
        counts[f"{name}/late_records"] = counts[f"{name}/unplaced_records"] = 0
    out: dict[str, list[tuple[int, list[_Part], bool]]] = {"step_time": [], "step_memory": []}
    waiting: dict[str, dict[int, tuple[list[int], dict[tuple[int, str], tuple[int, Any]]]]] = {
        "step_time": {},
        "step_memory": {},
    }
    done: dict[str, set[int]] = {"step_time": set(), "step_memory": set()}

    def write(stream: str, step: int, complete: bool) -> None:
        _, parts = waiting[stream].pop(step)
        done[stream].add(step)
        out[stream].append(
            (step, [(rank, when, values) for (rank, _), (when, values) in parts.items()], complete)
        )

    for record in records:
        stream = record.STREAM
        if stream not in out:
            continue
        data = record.to_dict()
        rank = data.get("rank")
        rank = data.get("global_rank") if rank is None else rank
        step = data.get("step")
        if not isinstance(rank, int) or isinstance(rank, bool) or not isinstance(step, int):
            counts[f"{stream}/unplaced_records"] += 1
            continue
        step = _clamp(step)
        if step in done[stream]:
            counts[f"{stream}/late_records"] += 1
            continue
        stamp = data.get("timestamp_unix_ns")
        stamp = data["observed_timestamp_unix_ns"] if stamp is None else stamp
        when = max(0, _clamp(stamp // 1_000_000))
        part, values = _share(stream, data)
        worlds, parts = waiting[stream].setdefault(step, ([], {}))
        world = data.get("world_size")
        if isinstance(world, int) and not isinstance(world, bool):
            worlds.append(_clamp(world))
        parts[(_clamp(rank), part)] = (when, values)
        if worlds and len({r for r, _ in parts}) >= max(worlds):
            write(stream, step, True)
        while len(waiting[stream]) > wait_steps:
            write(stream, min(waiting[stream]), False)
    for stream, steps in waiting.items():
        for step in sorted(steps):
            write(stream, step, False)
    return out


def expected_export(
    records: Iterable[ExportRecord],
    *,
    include_hostname: bool = False,
    rank_runs: Collection[int] | None = (),
    wait_steps: int = 64,
    slowest: bool = False,
) -> dict[str, list[dict[str, Any]]]:
    """What ``read_export`` must find for these records, computed from the README: the
    session run's summary and snapshots, every record of a rank of ``rank_runs`` (None:
    every rank) in that rank's run, and with ``slowest`` the "slowest rank" run."""
    records = list(records)
    points: dict[str, list[tuple[Any, ...]]] = {}
    runtime: dict[int | None, dict[str, str]] = {}
    for record in records:
        data = record.to_dict()
        if not include_hostname:
            data.pop("hostname", None)
        stream = record.STREAM
        rank = data.get("rank")
        rank = data.get("global_rank") if rank is None else rank
        own = rank is not None and (rank_runs is None or rank in rank_runs)
        if stream == "runtime_environment":
            tags = _runtime_tags(data)
            if own:
                runtime.setdefault(rank, {}).update(tags)
            if rank in (0, None):
                runtime.setdefault(None, {}).update(tags)
            continue
        runs = [(rank, "")] if own else []
        if stream not in ("step_time", "step_memory", "stdout_stderr"):  # summarized below
            runs.append((None, str(rank).lower() if stream == "process" else ""))
        for run, under in runs:
            for point in _record_points(stream, data, under):
                points.setdefault(stream, []).append((run, *point))
    sets: dict[str, set[tuple[Any, ...]]] = {s: set(found) for s, found in points.items()}
    out: dict[str, list[dict[str, Any]]] = {
        stream: sorted(
            (
                {"rank": r, "key": k, "step": s, "timestamp": t, "value": v}
                for r, k, s, t, v in found
            ),
            key=repr,
        )
        for stream, found in sets.items()
    }
    for stream, steps in summary_steps(records, wait_steps).items():
        for step, parts, _ in steps:
            out.setdefault(stream, []).extend(_step_points(stream, step, parts, slowest=slowest))
    out = {stream: _unique(rows) for stream, rows in out.items() if rows}
    if runtime:
        out["runtime_environment"] = sorted(
            ({"rank": rank, "tags": tags} for rank, tags in runtime.items() if tags), key=repr
        )
    return out


def _runtime_tags(data: dict[str, Any]) -> dict[str, str]:
    skip = ("stream", "schema_version", "observed_timestamp_unix_ns", "timestamp_unix_ns")
    return {
        _key(f"traceml.runtime.{name}"): str(value)
        .encode("utf-8", "backslashreplace")
        .decode()[:8000]
        for name, value in data.items()
        if name not in skip and value is not None
    }


def _record_points(
    stream: str, data: dict[str, Any], under: str | None
) -> Iterator[tuple[str, int, int, Any]]:
    """One record's points (key, step, timestamp, value) by the README's per-record mapping."""
    stamp = data.get("timestamp_unix_ns")
    stamp = data["observed_timestamp_unix_ns"] if stamp is None else stamp
    step = data.get("step") if stream in ("step_time", "step_memory") else None
    step = data.get("seq") if step is None else step
    step = 0 if step is None else _int64(step)
    measures: list[tuple[str, Any]] = []
    if stream == "step_time":
        for event, devices in data["events"].items():
            for device, stats in devices.items():
                measures += [(f"step_time/{event}/{device}/{m}", stats.get(m)) for m in _MEASURES]
    elif stream in _FIELDS:
        part = {"step_memory": "device", "system_gpu": "gpu_idx"}.get(stream)
        base = stream if part is None else f"{stream}/{data[part]}"
        base = f"{base}/{under}" if under else base
        measures += [(f"{base}/{name}", data[name]) for name in _FIELDS[stream]]
    for key, value in measures:
        if value is None or isinstance(value, bool):
            continue
        yield (_key(key), step, max(0, _int64(stamp // 1_000_000)), _expected_value(value))


def end_of_run(records: Iterable[ExportRecord], wait_steps: int = 64) -> dict[str, Any]:
    """The README's end-of-run summary of these records: steps written (and incomplete),
    late and unplaced records, per series the largest max and the exact mean of the
    finite medians (step_time), the largest max (step_memory)."""
    counts: dict[str, int] = {}
    steps = summary_steps(records, wait_steps, counts)
    out: dict[str, Any] = {f"summary/{k}": float(v) for k, v in counts.items()}
    for stream, written in steps.items():
        out[f"summary/{stream}/steps"] = float(len(written))
        out[f"summary/{stream}/steps_incomplete"] = float(sum(not c for _, _, c in written))
        tops: dict[tuple[str, str], float] = {}
        medians: dict[tuple[str, str], list[float]] = {}
        for _, parts, _ in written:
            series: dict[tuple[str, str], dict[int, float]] = {}
            for rank, _, values in parts:
                for name, value in values.items():
                    series.setdefault(name, {})[rank] = value
            for name, by_rank in series.items():
                top = max(by_rank.values())
                tops[name] = max(tops.get(name, top), top)
                middle = statistics.median(by_rank.values())
                if math.isfinite(middle):
                    medians.setdefault(name, []).append(middle)
        for (first, second), top in tops.items():
            if stream == "step_time":
                base = f"summary/step_time/{first}/{second}/duration_ms"
                out[_key(f"{base}/max")] = _expected_value(top)
                if medians.get((first, second)):
                    found = medians[(first, second)]
                    mean = float(sum(map(Fraction, found), Fraction(0)) / len(found))
                    out[_key(f"{base}/median_mean")] = _expected_value(mean)
            else:
                out[_key(f"summary/step_memory/{first}/{second}/max")] = _expected_value(top)
    return out


def read_end_of_run(context: ExporterContext) -> dict[str, Any]:
    """The session run's ``summary/`` metrics as the server has them (their latest value)."""
    (session,) = [
        r
        for r in _runs(context)
        if "traceml.rank" not in {t["key"] for t in r["data"].get("tags", [])}
    ]
    return {
        m["key"]: _value(float(m["value"]))
        for m in session["data"].get("metrics", [])
        if m["key"].startswith("summary/")
    }
