"""The few calls of MLflow's REST API 2.0 this exporter makes, over the shared transport.

Experiments by name, runs (search, create, get, update) and ``runs/log-batch``,
within MLflow's request limits (1,000 metrics, 100 tags, 1 MB). Every call takes the
deadline ``until`` of the flush (or open) it belongs to. An error answer is raised as
:class:`MlflowExportError` with MLflow's ``error_code`` and message; the transport has
already retried what is transient (connection errors, 408, 429, 5xx).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlencode

import orjson

from ._http import Answer, HttpError, HttpTransport

__all__ = [
    "MAX_BATCH_BYTES",
    "MAX_METRICS",
    "MAX_TAGS",
    "RETRYABLE",
    "MlflowApi",
    "MlflowExportError",
    "describe",
]

MAX_METRICS: Final = 1000
MAX_TAGS: Final = 100
MAX_BATCH_BYTES: Final = 1_000_000
"""MLflow's ``log-batch`` limits: metrics, tags and bytes per request."""
RETRYABLE: Final = frozenset({408, 429, 500, 502, 503, 504})
"""Statuses MLflow's own client retries; any other answer is permanent."""


class MlflowExportError(HttpError):
    """The MLflow server did not take a request: an error answer, or the deadline passed;
    ``permanent`` says whether waiting could change that (a 4xx but 408 and 429)."""


def describe(answer: Answer) -> str:
    """MLflow's ``error_code: message`` from an error answer, else the body's text."""
    try:
        body = orjson.loads(answer.body)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict) and "error_code" in body:
        return f"{body['error_code']}: {str(body.get('message', ''))[:500]}"
    return answer.body.decode("utf-8", "replace").strip()[:500]


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class MlflowApi:
    """REST calls under ``<tracking URI>/api/2.0/mlflow/``; JSON in and out."""

    def __init__(self, transport: HttpTransport) -> None:
        self.transport = transport
        self._base = transport.endpoint.path.partition("?")[0].rstrip("/") + "/api/2.0/mlflow/"

    def get(self, call: str, params: Mapping[str, Any], until: float) -> dict[str, Any]:
        path = self._base + call + "?" + urlencode(params)
        return self._json(self.transport.request("GET", path=path, until=until))

    def post(self, call: str, body: Mapping[str, Any], until: float) -> dict[str, Any]:
        data = orjson.dumps(body)
        return self._json(self.transport.request("POST", data, path=self._base + call, until=until))

    def _json(self, answer: Answer) -> dict[str, Any]:
        try:
            data = orjson.loads(answer.body or b"{}")
        except orjson.JSONDecodeError as exc:
            raise MlflowExportError(
                f"the MLflow server answered {answer.status} with a body that is not JSON: {exc}",
                permanent=True,  # not MLflow's REST API: MLFLOW_TRACKING_URI names another server
            ) from None
        return data if isinstance(data, dict) else {}

    def experiment_id(self, name: str, until: float) -> str:
        """The id of the active experiment ``name``, created when there is none."""
        for _ in range(2):
            try:
                found = self.get("experiments/get-by-name", {"experiment_name": name}, until)
            except MlflowExportError as exc:
                if exc.status != 404:
                    raise
            else:
                experiment = found["experiment"]
                if experiment.get("lifecycle_stage") == "deleted":
                    raise MlflowExportError(
                        f"the MLflow experiment {name!r} ({experiment['experiment_id']}) is "
                        "deleted: restore it, or set MLFLOW_EXPERIMENT_NAME to another name",
                        permanent=True,
                    )
                return str(experiment["experiment_id"])
            try:
                return str(self.post("experiments/create", {"name": name}, until)["experiment_id"])
            except MlflowExportError as exc:
                if "RESOURCE_ALREADY_EXISTS" not in str(exc):  # another process made it first
                    raise
        raise MlflowExportError(f"the MLflow experiment {name!r} could not be found or created")

    def search_runs(self, experiment_id: str, where: str, until: float) -> list[dict[str, Any]]:
        """Every active run of the experiment matching the filter ``where``."""
        runs: list[dict[str, Any]] = []
        token = None
        while True:
            body: dict[str, Any] = {
                "experiment_ids": [experiment_id],
                "filter": where,
                "max_results": 1000,
            }
            if token:
                body["page_token"] = token
            page = self.post("runs/search", body, until)
            runs += page.get("runs", [])
            token = page.get("next_page_token")
            if not token:
                return runs

    def create_run(
        self, experiment_id: str, name: str, tags: Mapping[str, str], start_ms: int, until: float
    ) -> str:
        body = {
            "experiment_id": experiment_id,
            "run_name": name,
            "start_time": start_ms,
            "tags": [{"key": k, "value": v} for k, v in tags.items()],
        }
        return str(self.post("runs/create", body, until)["run"]["info"]["run_id"])

    def get_run(self, run_id: str, until: float) -> dict[str, Any]:
        run: dict[str, Any] = self.get("runs/get", {"run_id": run_id}, until)["run"]
        return run

    def update_run(self, run_id: str, status: str, end_ms: int | None, until: float) -> None:
        body: dict[str, Any] = {"run_id": run_id, "status": status}
        if end_ms is not None:
            body["end_time"] = end_ms
        self.post("runs/update", body, until)

    def log_batch(
        self,
        run_id: str,
        metrics: Sequence[Mapping[str, Any]],
        tags: Mapping[str, str],
        until: float,
    ) -> int:
        """Send ``metrics`` and ``tags`` in as many requests as MLflow's limits need; the
        number of requests. A request over 1 MB is split in two."""
        sent = 0
        pending = [
            {"run_id": run_id, "tags": [{"key": k, "value": v} for k, v in part.items()]}
            for part in (dict(items) for items in chunks(list(tags.items()), MAX_TAGS))
        ]
        pending += [
            {"run_id": run_id, "metrics": list(part)} for part in chunks(metrics, MAX_METRICS)
        ]
        while pending:
            body = pending.pop(0)
            data = orjson.dumps(body)
            items = body.get("metrics") or body.get("tags") or []
            if len(data) > MAX_BATCH_BYTES and len(items) > 1:
                field = "metrics" if "metrics" in body else "tags"
                half = len(items) // 2
                pending[:0] = [
                    {"run_id": run_id, field: items[:half]},
                    {"run_id": run_id, field: items[half:]},
                ]
                continue
            self.transport.request("POST", data, path=self._base + "runs/log-batch", until=until)
            sent += 1
        return sent
