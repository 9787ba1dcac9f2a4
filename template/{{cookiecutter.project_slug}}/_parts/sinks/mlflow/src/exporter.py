"""ExampleExporter: runs and metrics on an MLflow tracking server, over REST.

Select it in TraceML with ``traceml_exporter_example.exporter:make_exporter``; the
rules of TraceML's export contract it keeps are listed in ``_contract.py``.

MLflow's own settings, read by the factory (nothing is checked or sent before ``open()``):
``MLFLOW_TRACKING_URI`` (an ``http(s)://`` server), ``MLFLOW_EXPERIMENT_NAME`` (default
``traceml``), ``MLFLOW_TRACKING_TOKEN`` or ``MLFLOW_TRACKING_USERNAME``/``PASSWORD``,
``MLFLOW_TRACKING_SERVER_CERT_PATH``, and ``MLFLOW_RUN_ID`` to put the session's runs
under an existing run (the user's training run). ``TRACEML_MLFLOW_TIMEOUT_S`` bounds each
``open``, ``flush`` and ``close`` (default 5 s). ``TRACEML_MLFLOW_RANK_RUNS`` (``none``,
the default; ``all``; ranks such as ``0,3``; ``slowest``, alone or with ranks) picks the
ranks that get a child run of their own, and whether a "slowest rank" run follows each
step's slowest rank; ``TRACEML_MLFLOW_WAIT_STEPS`` how many steps may wait for late ranks
(64).

One run for the TraceML session (found again by its ``traceml.session`` tag when the
exporter is reopened on the same session, or the ``MLFLOW_RUN_ID`` run). It gets the
cross-rank summary of step_time and step_memory (``_mlflow_summary``: a set of points per
step, whatever the number of ranks, and an end-of-run summary at ``close()``), the system
snapshots and each rank's process snapshots. A chosen rank's child run gets every record
of that rank (``_mlflow_metrics`` is that mapping); the "slowest rank" run gets, per
step, the durations of the rank the summary found slowest. ``write`` buffers; ``flush`` sends the
points with ``log-batch``, keeps the steps still waiting for ranks in the export folder
(``_mlflow_summary.STATE_FILE``), and counts what was written delivered on the server's
200 only. The MLflow client is not used: it starts threads of its own, which TraceML's
contract forbids, and retries for minutes.

Permanent errors (``_contract`` rule 8: ``traceml-exporter follow`` ends at once rather
than wait): a bad setting (``SettingsError``), an answer 4xx other than 408 and 429
(a refused credential, an unknown ``MLFLOW_RUN_ID``, a deleted experiment), a deleted
experiment found by name, a 2xx that is not JSON. Connection errors, 408, 429, 5xx and
the deadline are transient. The session's key (rule 9) is its folder, absolute and
resolved: ``traceml.session`` is a hash of it, ``traceml.session_root`` the folder.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from ._contract import (
    ExporterContext,
    ExportRecord,
    SettingsError,
    record_data,
    run_key,
)
from ._delivery import duration, environment
from ._files import write_atomically
from ._http import HttpTransport, parse_endpoint
from ._lifecycle import Lifecycle
from ._mlflow_api import MAX_METRICS, RETRYABLE, MlflowApi, MlflowExportError, describe
from ._mlflow_metrics import MAX_TAG_VALUE, NOT_EXPORTED, metrics, rank_of, runtime_tags, wire_value
from ._mlflow_summary import DEFAULT_WAIT_STEPS, STATE_FILE, SUMMARIZED, Summary

__all__ = [
    "DEFAULT_EXPERIMENT",
    "DEFAULT_TIMEOUT_S",
    "RECEIPT_FILE",
    "ExampleExporter",
    "MlflowExportError",
    "MlflowSettings",
    "RankRuns",
    "make_exporter",
    "rank_selection",
    "session_key",
]

DEFAULT_EXPERIMENT: Final = "traceml"
DEFAULT_TIMEOUT_S: Final = 5.0
"""Deadline of each open, flush and close: well under TraceML's shutdown budget."""
RECEIPT_FILE: Final = "mlflow_export.json"
"""Written by ``close()`` in ``export_dir``: the experiment, the runs, the counts."""
SESSION_TAG: Final = "traceml.session"
RANK_TAG: Final = "traceml.rank"
MAX_BUFFERED_METRICS: Final = 100_000
"""A ``write`` that leaves more buffered sends them at once rather than hold more."""
POINTS_FILE: Final = "mlflow_points.jsonl"
"""In ``export_dir``: the rank runs' points kept (not yet sent) when a flush returned."""
POINTS_WAIT_S: Final = 30.0
"""A rank run's points wait for a full ``log-batch`` request (1,000 points) at most this
long: the next flush after it sends what the rank has."""
SUMMARY_TAG: Final = "traceml.summary"
"""The session run's tag holding the end-of-run summary as JSON."""
SLOWEST: Final = "slowest"
"""The "slowest rank" run's key among the rank runs, and its ``traceml.rank`` tag."""
RunKey = int | str | None
"""A run of the session: a rank's, ``SLOWEST``, or None (the session run)."""


@dataclass(frozen=True)
class RankRuns:
    """The runs ``TRACEML_MLFLOW_RANK_RUNS`` asks for besides the session run."""

    ranks: frozenset[int] | None = frozenset()
    """The ranks that get a run of their own (None: every rank)."""
    slowest: bool = False
    """Whether a "slowest rank" run gets each step's slowest rank."""


@dataclass(frozen=True)
class MlflowSettings:
    """MLflow's environment, as the factory read it."""

    tracking_uri: str = ""
    experiment_name: str = DEFAULT_EXPERIMENT
    token: str = field(default="", repr=False)
    username: str = ""
    password: str = field(default="", repr=False)
    run_id: str = ""
    cert_path: str = ""
    timeout: str = ""
    rank_runs: str = ""
    wait_steps: str = ""

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> MlflowSettings:
        return cls(
            tracking_uri=env.get("MLFLOW_TRACKING_URI", "").strip(),
            experiment_name=env.get("MLFLOW_EXPERIMENT_NAME", "").strip() or DEFAULT_EXPERIMENT,
            token=env.get("MLFLOW_TRACKING_TOKEN", "").strip(),
            username=env.get("MLFLOW_TRACKING_USERNAME", ""),
            password=env.get("MLFLOW_TRACKING_PASSWORD", ""),
            run_id=env.get("MLFLOW_RUN_ID", "").strip(),
            cert_path=env.get("MLFLOW_TRACKING_SERVER_CERT_PATH", "").strip(),
            timeout=env.get("TRACEML_MLFLOW_TIMEOUT_S", "").strip(),
            rank_runs=env.get("TRACEML_MLFLOW_RANK_RUNS", "").strip(),
            wait_steps=env.get("TRACEML_MLFLOW_WAIT_STEPS", "").strip(),
        )

    def ranks(self) -> RankRuns:
        """The runs asked for besides the session run."""
        return rank_selection(self.rank_runs)

    def wait(self) -> int:
        """How many steps of a stream may wait for late ranks."""
        text = self.wait_steps or str(DEFAULT_WAIT_STEPS)
        if not text.isdigit() or not 1 <= int(text) <= 100_000:
            raise SettingsError(
                f"TRACEML_MLFLOW_WAIT_STEPS={self.wait_steps!r} is not a whole number from 1 to "
                f"100000 (the steps that may wait for late ranks; default {DEFAULT_WAIT_STEPS})"
            )
        return int(text)

    def timeout_s(self) -> float:
        """The deadline in seconds; ``SettingsError`` naming the variable when it is not one."""
        return duration(
            self.timeout, "TRACEML_MLFLOW_TIMEOUT_S", default_s=DEFAULT_TIMEOUT_S, most_s=600
        )

    def transport(self) -> HttpTransport:
        """The HTTP client for these settings (it does no I/O until a request)."""
        if not self.tracking_uri:
            raise SettingsError(
                "MLFLOW_TRACKING_URI is not set; expected the URL of an MLflow tracking "
                "server, such as http://127.0.0.1:5000 (this exporter does not write mlruns/)"
            )
        endpoint = parse_endpoint(self.tracking_uri, "MLFLOW_TRACKING_URI")
        headers: dict[str, str] = {}
        secrets: list[str] = []
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
            secrets.append(self.token)
        elif self.username:
            pair = f"{self.username}:{self.password}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
            secrets += [self.password] if self.password else []
        return HttpTransport(
            endpoint,
            peer="the MLflow server",
            timeout_s=self.timeout_s(),
            timeout_variable="TRACEML_MLFLOW_TIMEOUT_S",
            headers={"Content-Type": "application/json"},
            user_headers=headers,
            headers_variable="MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/PASSWORD",
            secrets=secrets,
            retryable=RETRYABLE,
            tls={"ca_certs": self.cert_path} if self.cert_path else None,
            error=MlflowExportError,
            describe=describe,
        )


def rank_selection(text: str) -> RankRuns:
    """``TRACEML_MLFLOW_RANK_RUNS``: ``none`` or empty (no rank run), or items separated by
    commas: ``all``, ``slowest``, ranks (``0,3``, ``0,slowest``); ``SettingsError`` naming
    the variable otherwise."""
    given = text.strip().lower()
    if given in ("", "none"):
        return RankRuns()
    items = {item.strip() for item in given.split(",") if item.strip()}
    ranks = {int(item) for item in items if item.isdigit()}
    if not items or items - {"all", SLOWEST} - {str(rank) for rank in ranks} != set():
        raise SettingsError(
            f"TRACEML_MLFLOW_RANK_RUNS={text!r} is not 'none', or 'all', 'slowest' and ranks "
            "separated by commas such as '0,3' or '0,slowest' (the ranks that get a child "
            "run of their own; 'slowest': a run of each step's slowest rank)"
        )
    return RankRuns(None if "all" in items else frozenset(ranks), SLOWEST in items)


def session_key(session_root: Path) -> str:
    """The ``traceml.session`` tag of a session's runs: a hash of its folder, absolute and
    resolved (``_contract.run_key``), so any name of one folder finds the same runs."""
    key = run_key(session_root).encode("utf-8", "surrogatepass")
    return hashlib.sha256(key).hexdigest()[:32]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class _Pending:
    """What a run (None: the session's) still has to get: metrics in arrival order, and tags; the first
    ``kept`` metrics are in ``POINTS_FILE``, the first came at ``since``."""

    metrics: list[dict[str, Any]] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    kept: int = 0
    since: float = 0.0

    def add(self, points: list[dict[str, Any]]) -> None:
        if not self.metrics:
            self.since = time.monotonic()
        self.metrics += points


class ExampleExporter(Lifecycle):
    """Send every record's metrics to its rank's run of the session's MLflow run."""

    def __init__(
        self,
        settings: MlflowSettings,
        session_root: Path,
        export_dir: Path,
        *,
        include_hostname: bool = False,
    ) -> None:
        # Settings only: open() checks them and talks to the server, on the worker's thread.
        self.settings = settings
        self.session_root = session_root
        self.export_dir = export_dir
        self.include_hostname = include_hostname
        self._api: MlflowApi | None = None  # None unless open
        self._experiment_id = ""
        self._parent = ""
        self._owns_parent = False
        self._runs: dict[RunKey, str] = {}
        self._pending: dict[RunKey, _Pending] = {}
        self._buffered = 0
        self._written: dict[str, int] = {}
        self._not_exported: dict[str, int] = {}
        self._requests = 0
        self._ranks: frozenset[int] | None = frozenset()
        self._slowest = False
        self._summary = Summary()
        self._summary_changed = False
        self._kept_lines: list[bytes] = []  # POINTS_FILE lines to append
        self._kept_points = 0  # points in POINTS_FILE (sent ones included)

    # -- the contract's four methods ------------------------------------------------

    def open(self) -> None:
        """Check the settings, find or create the experiment, the session's run and the
        runs of the ranks it already has."""
        with self._opening():
            self.export_dir.mkdir(parents=True, exist_ok=True)  # a folder in the way fails here
            transport = self.settings.transport()
            selection = self.settings.ranks()
            self._ranks, self._slowest = selection.ranks, selection.slowest
            self._summary = self._load_summary(self.settings.wait())
            self._load_points()
            self._api = MlflowApi(transport)
            until = transport.until()
            self._open_runs(self._api, until)

    def write(self, records: Sequence[ExportRecord]) -> None:
        """Place each record in the summary (or the session run's points and tags), and in
        its rank's run when that rank has one; buffer the points."""
        with self._running("write"):
            session = self._pending.setdefault(None, _Pending())
            ranks, summary = self._ranks, self._summary
            for record in records:
                stream = record.STREAM
                self._written[stream] = self._written.get(stream, 0) + 1
                if stream in NOT_EXPORTED:
                    self._not_exported[stream] = self._not_exported.get(stream, 0) + 1
                    continue
                data = record_data(record, self.include_hostname)
                rank = rank_of(data)
                own = rank is not None and (ranks is None or rank in ranks)
                if own:
                    pending = self._pending.setdefault(rank, _Pending())
                    if stream == "runtime_environment":
                        pending.tags.update(runtime_tags(data))
                    else:
                        points = metrics(stream, data)
                        pending.add(points)
                        self._buffered += len(points)
                if stream in SUMMARIZED:
                    summary.place(stream, data)
                    self._summary_changed = True
                elif stream == "runtime_environment":
                    if rank in (0, None):
                        session.tags.update(runtime_tags(data))
                    elif not own:
                        self._not_exported[stream] = self._not_exported.get(stream, 0) + 1
                else:
                    under = "" if stream != "process" else str(rank).lower()
                    points = metrics(stream, data, under=under)
                    session.add(points)
                    self._buffered += len(points)
            self._take_summary()
            if self._buffered > MAX_BUFFERED_METRICS:
                self._send()
                if self._buffered > MAX_BUFFERED_METRICS:
                    self._send(everything=True)

    def flush(self) -> None:
        """Send the session run's points, the runs' tags and the rank runs' points in full
        requests; keep the rest of the rank runs' points and the steps still waiting for
        ranks in the export folder: what was written then counts as delivered."""
        with self._running("flush"):
            self._send()
            self._keep_points()
            self._save_summary()

    def close(self, *, dropped_batches: int = 0) -> None:
        """Send what is buffered, mark the runs this exporter made FINISHED, note the counts
        on the session's run, write ``RECEIPT_FILE``, close the connection."""
        with self._closing():
            api = self._held(self._api)
            self._summary.finish()
            self._take_summary()
            until = self._send(everything=True)
            counts = {"traceml.dropped_batches": str(dropped_batches)}
            counts |= {f"traceml.not_exported.{s}": str(n) for s, n in self._not_exported.items()}
            end_of_run = self._summary.end_of_run()
            for stream, state in self._summary.streams.items():
                counts[f"traceml.late.{stream}"] = str(state.late)
                counts[f"traceml.unplaced.{stream}"] = str(state.unplaced)
            counts[SUMMARY_TAG] = _summary_text(end_of_run)
            end = _now_ms()
            figures = [
                {"key": k, "value": wire_value(v), "timestamp": end, "step": 0}
                for k, v in end_of_run.items()
            ]
            self._requests += api.log_batch(self._parent, figures, counts, until)
            self._summary_changed = True
            self._save_summary()
            for rank, run_id in self._runs.items():
                if rank is not None or self._owns_parent:
                    api.update_run(run_id, "FINISHED", end, until)
            (self.export_dir / POINTS_FILE).unlink(missing_ok=True)  # all sent
            self._write_receipt(dropped_batches)

    # -- the runs ---------------------------------------------------------------------

    def _open_runs(self, api: MlflowApi, until: float) -> None:
        key = session_key(self.session_root)
        if self.settings.run_id:
            parent = api.get_run(self.settings.run_id, until)
            self._parent = self.settings.run_id
            self._experiment_id = str(parent["info"]["experiment_id"])
        else:
            self._experiment_id = api.experiment_id(self.settings.experiment_name, until)
        where = f"tags.`{SESSION_TAG}` = '{key}'"
        found = api.search_runs(self._experiment_id, where, until)
        tagged = [({t["key"]: t["value"] for t in r["data"].get("tags", [])}, r) for r in found]
        if not self.settings.run_id:
            parents = [r for tags, r in tagged if RANK_TAG not in tags]
            if parents:
                self._parent = str(parents[0]["info"]["run_id"])
        for tags, run in tagged:
            if RANK_TAG in tags and tags.get("mlflow.parentRunId") == self._parent:
                self._runs[_run_key(tags[RANK_TAG])] = str(run["info"]["run_id"])
        if not self._parent:
            tags = {
                SESSION_TAG: key,
                "traceml.session_root": run_key(self.session_root)[:8000],
                "mlflow.runName": self.session_root.name[:250] or "traceml",
            }
            self._parent = api.create_run(
                self._experiment_id, tags["mlflow.runName"], tags, _now_ms(), until
            )
        self._owns_parent = not self.settings.run_id
        self._runs[None] = self._parent

    def _run_of(self, api: MlflowApi, rank: RunKey, until: float) -> str:
        run_id = self._runs.get(rank)
        if run_id is None:
            tags = {
                SESSION_TAG: session_key(self.session_root),
                RANK_TAG: str(rank),
                "mlflow.parentRunId": self._parent,
            }
            name = "slowest rank" if rank == SLOWEST else f"rank {rank}"
            run_id = api.create_run(self._experiment_id, name, tags, _now_ms(), until)
            self._runs[rank] = run_id
        return run_id

    def _send(self, *, everything: bool = False) -> float:
        """Send before one deadline the session run's points, the runs' tags and the rank
        runs' points in full requests (all of them with ``everything``, or for a rank whose
        first point waited ``POINTS_WAIT_S``); the deadline."""
        api = self._held(self._api)
        until = api.transport.until()
        old = time.monotonic() - POINTS_WAIT_S
        for rank, pending in list(self._pending.items()):
            count = len(pending.metrics)
            if rank is not None and not everything and pending.since > old:
                count -= count % MAX_METRICS  # full requests only
            if not count and not pending.tags:
                continue
            run_id = self._run_of(api, rank, until)
            sent = pending.metrics[:count]
            unique = list({_identity(m): m for m in sent}.values())
            self._requests += api.log_batch(run_id, unique, pending.tags, until)
            pending.tags = {}
            del pending.metrics[:count]
            self._buffered -= count
            if pending.kept:
                pending.kept = max(0, pending.kept - count)
                self._kept_lines.append(orjson.dumps({"rank": rank, "keep": pending.kept}))
            if pending.metrics:
                pending.since = time.monotonic()
            else:
                del self._pending[rank]
        return until

    # -- the points kept between flushes ----------------------------------------------

    def _keep_points(self) -> None:
        """Append the points not yet sent nor kept to ``POINTS_FILE`` (fsynced), with what
        was sent since; rewrite it when it is mostly sent points."""
        live = 0
        for rank, pending in self._pending.items():
            fresh = pending.metrics[pending.kept :]
            if fresh:
                self._kept_lines.append(orjson.dumps({"rank": rank, "points": fresh}))
                self._kept_points += len(fresh)
                pending.kept = len(pending.metrics)
            live += pending.kept
        if not self._kept_lines:
            return
        path = self.export_dir / POINTS_FILE
        if self._kept_points > 4 * live + 100_000:  # rewrite: only what is not sent yet
            lines = [
                orjson.dumps({"rank": rank, "points": pending.metrics})
                for rank, pending in self._pending.items()
                if pending.metrics
            ]
            write_atomically(path, b"".join(line + b"\n" for line in lines))
            self._kept_points = live
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "ab") as handle:
                handle.write(b"".join(line + b"\n" for line in self._kept_lines))
                handle.flush()
                os.fsync(handle.fileno())
        self._kept_lines = []

    def _load_points(self) -> None:
        """Take over the points an earlier exporter kept (a torn last line,
        from a crash while appending, is one that flush never acknowledged)."""
        path = self.export_dir / POINTS_FILE
        if not path.is_file():
            return
        for line in path.read_bytes().splitlines():
            try:
                item = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            rank = item["rank"]
            pending = self._pending.setdefault(None if rank is None else _run_key(rank), _Pending())
            if "points" in item:
                pending.add(item["points"])
                self._kept_points += len(item["points"])
            else:
                keep = int(item["keep"])
                del pending.metrics[: len(pending.metrics) - keep]
        for pending in self._pending.values():
            pending.kept = len(pending.metrics)
            self._buffered += pending.kept

    # -- the rest ---------------------------------------------------------------------

    def _take_summary(self) -> None:
        """Buffer the points of the steps the summary wrote: the session run's, and the
        "slowest rank" run's."""
        summary = self._summary
        for key, points in ((None, summary.points()), (SLOWEST, summary.slowest_points())):
            if points:
                self._pending.setdefault(key, _Pending()).add(points)
                self._buffered += len(points)

    def _load_summary(self, wait_steps: int) -> Summary:
        """The summary, with what an earlier exporter on this export folder kept."""
        summary = Summary(wait_steps, slowest=self._slowest)
        path = self.export_dir / STATE_FILE
        if path.is_file():
            try:
                summary.load(orjson.loads(path.read_bytes()))
            except (ValueError, KeyError, TypeError) as exc:
                raise MlflowExportError(
                    f"{path} cannot be read ({exc}); it keeps the steps still waiting for "
                    "ranks: move it aside to start the summary afresh",
                    permanent=True,
                ) from None
        return summary

    def _save_summary(self) -> None:
        if self._summary_changed:
            write_atomically(self.export_dir / STATE_FILE, orjson.dumps(self._summary.state()))
            self._summary_changed = False

    def _write_receipt(self, dropped_batches: int) -> None:
        receipt = {
            "tracking_uri": self._held(self._api).transport.endpoint.url,
            "experiment_id": self._experiment_id,
            "session_run_id": self._parent,
            "rank_run_ids": {str(r): i for r, i in self._runs.items() if r is not None},
            "written_records": self._written,
            "not_exported_records": self._not_exported,
            "dropped_batches": dropped_batches,
            "requests": self._requests,
            "summary_steps": {n: s.steps for n, s in self._summary.streams.items()},
            "summary_steps_incomplete": {n: s.incomplete for n, s in self._summary.streams.items()},
            "late_records": {n: s.late for n, s in self._summary.streams.items()},
            "unplaced_records": {n: s.unplaced for n, s in self._summary.streams.items()},
        }
        write_atomically(self.export_dir / RECEIPT_FILE, orjson.dumps(receipt))

    def _release(self) -> None:
        """Close the connection, raising nothing: after a failure TraceML calls nothing more."""
        api, self._api = self._api, None
        if api is not None:
            api.transport.close()


def _run_key(text: str | int) -> RunKey:
    """A rank run's key from its ``traceml.rank`` tag (or ``POINTS_FILE``)."""
    return SLOWEST if text == SLOWEST else int(text)


def _identity(metric: Mapping[str, Any]) -> tuple[Any, ...]:
    """What MLflow stores a point by: an identical point is kept once."""
    return (metric["key"], metric["timestamp"], metric["step"], metric["value"])


def _summary_text(figures: Mapping[str, float]) -> str:
    """The end-of-run summary as JSON for a tag (non-finite values as null); past MLflow's
    8,000 characters the last figures are left out and ``"omitted"`` counts them."""
    items = list(figures.items())
    for keep in range(len(items), -1, -1):
        shown: dict[str, Any] = dict(items[:keep])
        if keep < len(items):
            shown["omitted"] = len(items) - keep
        text = orjson.dumps(shown).decode()
        if len(text) <= MAX_TAG_VALUE:
            return text
    return "{}"


def make_exporter(context: ExporterContext) -> ExampleExporter:
    """The factory TraceML calls as ``factory(context)`` on the aggregator's main thread."""
    return ExampleExporter(
        MlflowSettings.from_environment(environment(("MLFLOW_", "TRACEML_MLFLOW_"))),
        context.session_root,
        context.export_dir,
        include_hostname=context.include_hostname,
    )
