"""The template's postgres, prometheus and mlflow sinks as ``follow`` runs them, what
their real servers hold, read back the way each baked project's own tests read it, and
what any sink holds against the run's database (``assert_every_row_once_or_resent``).

``nox -s traceml_real`` bakes the three sinks (``project_name`` = the sink, so the
packages are ``traceml_exporter_<sink>``), installs their dependencies, puts their
``src`` on ``PYTHONPATH`` (as their READMEs say a user may) and names the projects in
``TRACEML_REAL_SINKS``. Each project's ``tests/sink_support.py`` is loaded from there,
under a name of its own, for its read-back and expected-value helpers. A missing bake
or server fails the test that needs it, saying how to get one; nothing skips.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import re
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from realrun import TABLE_BY_STREAM
from traceml_exporter_sdk import ExporterContext
from traceml_exporter_sdk.records import stream_key
from traceml_exporter_sdk.testing.postgres_server import PostgresServer
from traceml_exporter_sdk.testing.prometheus_server import MetricsServer

SINKS_ENV = "TRACEML_REAL_SINKS"
_LOADED: dict[str, ModuleType] = {}
_LOADING = threading.Lock()


def baked(sink: str) -> Path:
    """The baked project of ``sink`` (nox names them in ``TRACEML_REAL_SINKS``)."""
    try:
        project = Path(json.loads(os.environ[SINKS_ENV])[sink])
    except (KeyError, ValueError):
        raise AssertionError(
            f"{SINKS_ENV} does not name a baked {sink} sink: run these tests with "
            "`nox -s traceml_real`, which bakes the template's sinks and installs what they need"
        ) from None
    assert (project / "src").is_dir(), f"{SINKS_ENV}: {project} is not a baked project"
    return project


def spec(sink: str) -> str:
    """The baked sink's TraceML setting."""
    baked(sink)
    return f"traceml_exporter_{sink}.exporter:make_exporter"


def support(sink: str) -> ModuleType:
    """The baked project's ``tests/sink_support.py`` (its other test modules on the path)."""
    with _LOADING:
        if sink not in _LOADED:
            tests = baked(sink) / "tests"
            if str(tests) not in sys.path:
                sys.path.append(str(tests))  # sink_support's own imports (mlflow_server)
            name = f"{sink}_sink_support"
            found = importlib.util.spec_from_file_location(name, tests / "sink_support.py")
            assert found is not None
            assert found.loader is not None
            module = importlib.util.module_from_spec(found)
            sys.modules[name] = module
            found.loader.exec_module(module)
            _LOADED[sink] = module
        return _LOADED[sink]


# -- what a sink holds against the run's database ------------------------------------


def canonical(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True)


def assert_every_row_once_or_resent(
    rows: dict[str, list[tuple[int, dict[str, Any]]]],
    got: dict[str, list[dict[str, Any]]],
    *,
    acknowledged: dict[str, int] | None = None,
    resent: int | None = None,
    at_most: int | None = None,
) -> int:
    """What a sink holds against the run's database, stream by stream: every row is there,
    none is made up, and each key of the stream (``stream_key``) holds that row's values
    (so dedupe on the key gives the database back). Rows with an id up to
    ``acknowledged[table]`` (a bookmark) are there exactly once; the copies past one
    number at most ``resent`` (``status.json``'s ``resent_records``), and no row is there
    more than ``at_most`` times. Returns the number of copies past one."""
    assert set(got) <= set(rows), f"streams the database lacks: {set(got) - set(rows)}"
    repeats = 0
    for stream, stream_rows in rows.items():
        want = Counter(canonical(r) for _, r in stream_rows)
        have = Counter(canonical(r) for r in got.get(stream, []))
        lost = set(want) - set(have)
        assert not lost, f"{stream}: {len(lost)} of {len(want)} rows not in the sink"
        assert not set(have) - set(want), f"{stream}: rows the database does not hold"
        for key, count in want.items():
            assert have[key] >= count, f"{stream}: a duplicate row of the database is lost"
        repeats += sum(have.values()) - sum(want.values())
        if at_most is not None:
            assert max(have.values()) <= at_most, f"{stream}: a row exported more than {at_most}x"
        keys = {key_of(r): canonical(r) for _, r in stream_rows}
        if key_of(stream_rows[0][1]) is not None and len(keys) == len(stream_rows):
            deduped = {key_of(r): canonical(r) for r in got[stream]}
            assert deduped == keys, f"{stream}: deduped on its key, not the database"
        if acknowledged is not None:
            first = acknowledged.get(TABLE_BY_STREAM[stream], 0)
            for row_id, row in stream_rows:
                if row_id <= first:
                    assert have[canonical(row)] == want[canonical(row)], (
                        f"{stream} id {row_id}: acknowledged before, exported again"
                    )
    if resent is not None:
        assert repeats <= resent, f"{repeats} rows came twice, {resent} were resent"
    return repeats


def key_of(row: dict[str, Any]) -> Any:
    """``stream_key`` of a record's ``to_dict()``."""
    fields = {k: v for k, v in row.items() if k != "stream"}
    return stream_key(SimpleNamespace(STREAM=row["stream"], **fields))  # type: ignore[arg-type]


def context_of(root: Path) -> ExporterContext:
    """The context ``follow --streams all --hostname`` gives the exporter of run ``root``."""
    return ExporterContext.create(root.resolve(), "all", exporter_hostname=True)


def as_records(rows: dict[str, list[tuple[int, dict[str, Any]]]]) -> list[Any]:
    """``database_rows``' dicts as records to the sinks' expected-value helpers (which call
    only ``to_dict()`` and read ``STREAM``), per stream in id order."""
    return [
        SimpleNamespace(STREAM=stream, to_dict=lambda row=row: dict(row))
        for stream, stream_rows in rows.items()
        for _, row in stream_rows
    ]


# -- PostgreSQL -------------------------------------------------------------------------


def postgres_env(server: PostgresServer, dbname: str) -> dict[str, str]:
    """libpq's variables that send the sink to ``dbname`` on ``server``."""
    return server.env(dbname)


def postgres_rows(server: PostgresServer, dbname: str, root: Path) -> dict[str, list[Any]]:
    """Every row the sink's exporters of run ``root`` committed, per stream, in arrival
    order, as the record's ``to_dict()`` (the baked tests' ``read_export``)."""
    conninfo = f"host={server.host} port={server.port} user={server.user} dbname={dbname}"
    got = support("postgres").read_export(context_of(root), conninfo=conninfo)
    return {stream: rows for stream, rows in got.items() if rows}


# -- Prometheus -------------------------------------------------------------------------

_SUMMED = ("_total", "_bucket", "_count", "_sum")


def prometheus_values(server: MetricsServer, root: Path) -> dict[str, float]:
    """What the server holds of run ``root``, as one exporter would have left it.

    Every exporter ``follow`` makes (a new one after each failure) starts series of its
    own (``instance``), from the bookmark on. So the series of all instances together
    are what the README's mapping makes of every record: counters, histogram buckets,
    counts and sums add up, a peak is the largest, ``traceml_runtime_info`` is there,
    and a gauge is the newest instance's last value.
    """
    sink = support("prometheus")
    match = sink.selector("", job="traceml", session_root=str(root.resolve()))
    series = server.samples(match)
    newest: dict[str, int] = {}
    for item in series:
        instance = item.labels["instance"]
        newest[instance] = max(newest.get(instance, 0), *item.timestamps_ms)
    values: dict[str, float] = {}
    for instance in sorted(newest, key=newest.__getitem__):  # oldest first
        own = [item for item in series if item.labels["instance"] == instance]
        for key, value in sink.last_values(own).items():
            name = key.partition("{")[0]
            if key in values and name.endswith(_SUMMED):
                values[key] += value
            elif key in values and "_peak_" in name:
                values[key] = max(values[key], value)
            else:
                values[key] = value
    return values


_SELECTOR = re.compile(r"\btraceml_[a-z_]+(?:\{[^}]*\})?")


def prometheus_monitoring(server: MetricsServer, root: Path) -> dict[str, Any]:
    """The baked sink's shipped dashboard and recording rules on what the server holds of
    run ``root``: ``problems`` (queries that error or answer nothing although each of
    their selectors, without Grafana's variables, has series of the run), ``unseen`` (the
    selectors the run never had: a CPU run has no GPU) and ``checked`` (how many ran)."""
    import yaml
    from traceml_exporter_sdk.testing.monitoring import dashboard_queries, rule_queries, unanswered

    folder = baked("prometheus") / "src" / "traceml_exporter_prometheus" / "monitoring"
    dashboard = json.loads((folder / "dashboard.json").read_text(encoding="utf-8"))
    rule_file = yaml.safe_load((folder / "rules.yml").read_text(encoding="utf-8"))
    recorded = {
        r["record"]: r["expr"] for g in rule_file["groups"] for r in g["rules"] if "record" in r
    }
    queries = dashboard_queries(dashboard) + [
        q for q in rule_queries(rule_file) if q.where.split("/")[1] in recorded
    ]
    had: dict[str, bool] = {}

    def present(selector: str) -> bool:
        name, _, matchers = selector.rstrip("}").partition("{")
        kept = [m for m in matchers.split(", ") if m and "$" not in m]
        key = name + "{" + ", ".join(sorted(kept)) + "}"
        if key not in had:
            chosen = ", ".join([*kept, f'run="{root.name}"'])
            had[key] = bool(server.query("count(" + name + "{" + chosen + "})"))
        return had[key]

    seen = [q for q in queries if all(present(sel) for sel in _SELECTOR.findall(q.expr))]
    variables = {"run": root.name, "node": ".*", "rank": ".*"}
    return {
        "problems": unanswered(server, seen, variables, recorded=recorded),
        "unseen": sorted(key for key, there in had.items() if not there),
        "checked": len(seen),
    }


def prometheus_expected(rows: dict[str, list[tuple[int, dict[str, Any]]]]) -> dict[str, float]:
    """The series the baked sink's ``expected_values`` makes of every row of the run."""
    expected: dict[str, float] = support("prometheus").expected_values(
        as_records(rows), include_hostname=True
    )
    return expected


def same_values(have: dict[str, float], want: dict[str, float]) -> list[str]:
    """The series whose values differ (sums of many floats added in another order:
    relative 1e-9), and those only one side has."""
    differ = [f"missing: {k} = {want[k]!r}" for k in sorted(set(want) - set(have))]
    differ += [f"not expected: {k} = {have[k]!r}" for k in sorted(set(have) - set(want))]
    differ += [
        f"{k}: {have[k]!r} != {want[k]!r}"
        for k in sorted(set(have) & set(want))
        if not math.isclose(have[k], want[k], rel_tol=1e-9, abs_tol=1e-12)
    ]
    return differ


# -- MLflow -----------------------------------------------------------------------------


class MlflowPeer:
    """The baked tests' ``mlflow server`` (sqlite in a temporary folder, 127.0.0.1), which a
    test can kill with SIGKILL and start again on the same port and database."""

    def __init__(self) -> None:
        self.server = support("mlflow").MlflowServer()

    @property
    def url(self) -> str:
        return str(self.server.url)

    def start(self) -> float:
        """Start (again) and wait until it answers; the seconds that took."""
        started = time.monotonic()
        self.server.start()
        return time.monotonic() - started

    def kill9(self) -> None:
        """SIGKILL its process group (gunicorn or uvicorn and the workers); the data stays."""
        process, self.server.process = self.server.process, None
        assert process is not None, "the mlflow server is not running"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        self.server.log.close()

    def stop(self) -> None:
        self.server.stop()


@contextlib.contextmanager
def mlflow_reader(peer: MlflowPeer, experiment: str) -> Iterator[ModuleType]:
    """The baked tests' ``sink_support`` reading ``peer``'s ``experiment``: its
    ``read_export(context)`` and ``expected_export(records, include_hostname=True)``."""
    sink = support("mlflow")
    saved = os.environ.get("MLFLOW_EXPERIMENT_NAME")
    sink._SERVER[:] = [peer.server]
    os.environ["MLFLOW_EXPERIMENT_NAME"] = experiment
    try:
        yield sink
    finally:
        sink._SERVER.clear()
        if saved is None:
            os.environ.pop("MLFLOW_EXPERIMENT_NAME", None)
        else:
            os.environ["MLFLOW_EXPERIMENT_NAME"] = saved
