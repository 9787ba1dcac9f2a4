"""{{ cookiecutter.exporter_class }}: runs and metrics on an MLflow tracking server, over REST.

Select it in TraceML with ``{{ cookiecutter.package_name }}.exporter:make_exporter``; the
rules of TraceML's export contract it keeps are listed in ``_contract.py``.

MLflow's own settings, read by the factory (nothing is checked or sent before ``open()``):
``MLFLOW_TRACKING_URI`` (an ``http(s)://`` server), ``MLFLOW_EXPERIMENT_NAME`` (default
``traceml``), ``MLFLOW_TRACKING_TOKEN`` or ``MLFLOW_TRACKING_USERNAME``/``PASSWORD``,
``MLFLOW_TRACKING_SERVER_CERT_PATH``, and ``MLFLOW_RUN_ID`` to put the session's runs
under an existing run (the user's training run). ``TRACEML_MLFLOW_TIMEOUT_S`` bounds each
``open``, ``flush`` and ``close`` (default 5 s).

One run for the TraceML session (found again by its ``traceml.session`` tag when the
exporter is reopened on the same session, or the ``MLFLOW_RUN_ID`` run) and one child
run per rank. ``write`` buffers; ``flush`` sends each rank's metrics with ``log-batch``
(``_mlflow_metrics`` is the mapping) and counts them delivered on the server's 200
only. The MLflow client is not used: it starts threads of its own, which TraceML's
contract forbids, and retries for minutes.
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

from ._contract import ExporterContext, ExportRecord, releasing
from ._http import HttpTransport, parse_endpoint
from ._mlflow_api import RETRYABLE, MlflowApi, MlflowExportError, describe
from ._mlflow_metrics import NOT_EXPORTED, metrics, rank_of, runtime_tags

__all__ = [
    "DEFAULT_EXPERIMENT",
    "DEFAULT_TIMEOUT_S",
    "RECEIPT_FILE",
    "{{ cookiecutter.exporter_class }}",
    "MlflowExportError",
    "MlflowSettings",
    "make_exporter",
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
        )

    def timeout_s(self) -> float:
        """The deadline in seconds; ``ValueError`` naming the variable when it is not one."""
        if not self.timeout:
            return DEFAULT_TIMEOUT_S
        try:
            value = float(self.timeout)
        except ValueError:
            value = -1.0
        if not 0 < value <= 600:
            raise ValueError(
                f"TRACEML_MLFLOW_TIMEOUT_S={self.timeout!r} is not a number of seconds in "
                "(0, 600]; expected for example 5"
            )
        return value

    def transport(self) -> HttpTransport:
        """The HTTP client for these settings (it does no I/O until a request)."""
        if not self.tracking_uri:
            raise ValueError(
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


def session_key(session_root: Path) -> str:
    """The ``traceml.session`` tag of a session's runs: a hash of its folder's path."""
    return hashlib.sha256(str(session_root).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class _Pending:
    """What a rank's run still has to get: metrics in arrival order, and tags."""

    metrics: list[dict[str, Any]] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)


class {{ cookiecutter.exporter_class }}:
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
        self._runs: dict[int | None, str] = {}
        self._pending: dict[int | None, _Pending] = {}
        self._buffered = 0
        self._written: dict[str, int] = {}
        self._not_exported: dict[str, int] = {}
        self._requests = 0

    # -- the contract's four methods ------------------------------------------------

    def open(self) -> None:
        """Check the settings, find or create the experiment, the session's run and the
        runs of the ranks it already has."""
        with releasing(self._release):
            transport = self.settings.transport()
            self._api = MlflowApi(transport)
            until = transport.until()
            self._open_runs(self._api, until)

    def write(self, records: Sequence[ExportRecord]) -> None:
        """Turn each record into metrics (or tags) of its rank's run and buffer them."""
        with releasing(self._release):
            self._open_api()
            for record in records:
                stream = record.STREAM
                self._written[stream] = self._written.get(stream, 0) + 1
                if stream in NOT_EXPORTED:
                    self._not_exported[stream] = self._not_exported.get(stream, 0) + 1
                    continue
                data = record.to_dict()
                if not self.include_hostname:
                    data.pop("hostname", None)
                pending = self._pending.setdefault(rank_of(data), _Pending())
                if stream == "runtime_environment":
                    pending.tags.update(runtime_tags(data))
                    continue
                points = metrics(stream, data)
                pending.metrics += points
                self._buffered += len(points)
            if self._buffered > MAX_BUFFERED_METRICS:
                self._send()

    def flush(self) -> None:
        """Send everything buffered; it counts as delivered once every request got a 200."""
        with releasing(self._release):
            self._send()

    def close(self, *, dropped_batches: int = 0) -> None:
        """Send what is buffered, mark the runs this exporter made FINISHED, note the counts
        on the session's run, write ``RECEIPT_FILE``, close the connection."""
        with releasing(self._release):
            api = self._open_api()
            until = self._send()
            counts = {"traceml.dropped_batches": str(dropped_batches)}
            counts |= {f"traceml.not_exported.{s}": str(n) for s, n in self._not_exported.items()}
            self._requests += api.log_batch(self._parent, [], counts, until)
            end = _now_ms()
            for rank, run_id in self._runs.items():
                if rank is not None or self._owns_parent:
                    api.update_run(run_id, "FINISHED", end, until)
            self._write_receipt(dropped_batches)
        self._release()

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
                self._runs[int(tags[RANK_TAG])] = str(run["info"]["run_id"])
        if not self._parent:
            tags = {
                SESSION_TAG: key,
                "traceml.session_root": str(self.session_root)[:8000],
                "mlflow.runName": self.session_root.name[:250] or "traceml",
            }
            self._parent = api.create_run(
                self._experiment_id, tags["mlflow.runName"], tags, _now_ms(), until
            )
        self._owns_parent = not self.settings.run_id
        self._runs[None] = self._parent

    def _run_of(self, api: MlflowApi, rank: int | None, until: float) -> str:
        run_id = self._runs.get(rank)
        if run_id is None:
            tags = {
                SESSION_TAG: session_key(self.session_root),
                RANK_TAG: str(rank),
                "mlflow.parentRunId": self._parent,
            }
            run_id = api.create_run(self._experiment_id, f"rank {rank}", tags, _now_ms(), until)
            self._runs[rank] = run_id
        return run_id

    def _send(self) -> float:
        """Send every rank's pending metrics and tags before one deadline; the deadline."""
        api = self._open_api()
        until = api.transport.until()
        for rank, pending in list(self._pending.items()):
            run_id = self._run_of(api, rank, until)
            unique = list({_identity(m): m for m in pending.metrics}.values())
            self._requests += api.log_batch(run_id, unique, pending.tags, until)
            del self._pending[rank]
        self._buffered = 0
        return until

    # -- the rest ---------------------------------------------------------------------

    def _open_api(self) -> MlflowApi:
        if self._api is None:
            raise RuntimeError("the exporter is not open (open() not called, closed, or failed)")
        return self._api

    def _write_receipt(self, dropped_batches: int) -> None:
        receipt = {
            "tracking_uri": self._open_api().transport.endpoint.url,
            "experiment_id": self._experiment_id,
            "session_run_id": self._parent,
            "rank_run_ids": {str(r): i for r, i in self._runs.items() if r is not None},
            "written_records": self._written,
            "not_exported_records": self._not_exported,
            "dropped_batches": dropped_batches,
            "requests": self._requests,
        }
        self.export_dir.mkdir(parents=True, exist_ok=True)
        path = self.export_dir / RECEIPT_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(orjson.dumps(receipt))
        os.replace(tmp, path)

    def _release(self) -> None:
        """Close the connection, raising nothing: after a failure TraceML calls nothing more."""
        api, self._api = self._api, None
        if api is not None:
            api.transport.close()


def _identity(metric: Mapping[str, Any]) -> tuple[Any, ...]:
    """What MLflow stores a point by: an identical point is kept once."""
    return (metric["key"], metric["timestamp"], metric["step"], metric["value"])


def make_exporter(context: ExporterContext) -> {{ cookiecutter.exporter_class }}:
    """The factory TraceML calls as ``factory(context)`` on the aggregator's main thread."""
    return {{ cookiecutter.exporter_class }}(
        MlflowSettings.from_environment(os.environ),
        context.session_root,
        context.export_dir,
        include_hostname=context.include_hostname,
    )
