"""Shared helpers of the CLI tests: run the CLI as a subprocess, build payloads and databases."""

from __future__ import annotations

import dataclasses
import functools
import os
import sqlite3
import subprocess
import sys
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from payloads import envelope as build_envelope
from traceml_exporter_sdk import RECORD_TYPES
from traceml_exporter_sdk._bridge.sqlite_source import TABLE_BY_STREAM

CLI = [sys.executable, "-m", "traceml_exporter_sdk.cli"]

# Environment variables the CLI reads; cleared so the developer's shell cannot leak in.
_CLEARED = ("TRACEML_EXPORTER", "TRACEML_EXPORT_STREAMS", "TRACEML_EXPORTER_HOSTNAME")


def cli_env() -> dict[str, str]:
    """This environment without the TraceML settings and PYTHONPATH, for a CLI started
    by hand (``subprocess.Popen``, to signal it mid-run); ``run_cli`` clears the same."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TRACEML_")}
    environ.pop("PYTHONPATH", None)
    return environ


def run_cli(
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    pythonpath: Sequence[Path] = (),
    prelude: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``traceml-exporter ARGS`` in ``cwd``; ``prelude`` runs first (to hide a module)."""
    environ = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    environ.pop("TRACEML_EXPORTER_DEBUG", None)
    environ.update(env or {})
    if pythonpath:
        environ["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    else:
        environ.pop("PYTHONPATH", None)
    if prelude is None:
        command = [*CLI, *args]
    else:
        code = (
            f"{prelude}\nimport sys\nfrom traceml_exporter_sdk.cli import main\n"
            "sys.exit(main(sys.argv[1:]))"
        )
        command = [sys.executable, "-c", code, *args]
    return subprocess.run(
        command,
        cwd=cwd,
        env=environ,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


# -- payloads (wire-format.md) -------------------------------------------------


envelope = functools.partial(build_envelope, hostname="node-a", timestamp=1_760_000_000_123_456_789)
"""An envelope of this suite's cluster: the builder's two nodes of two ranks, every one on
host ``node-a``."""


EVENTS = {
    "_traceml_internal:dataloader_next": {
        "cpu": {"is_gpu": False, "duration_ms": 0.5, "cpu_ms": 0.5, "gpu_ms": None, "n_calls": 2}
    },
    "_traceml_internal:forward_time": {
        "cpu": {"is_gpu": False, "duration_ms": 3.25, "cpu_ms": 3.25, "gpu_ms": None, "n_calls": 1},
        "cuda:0": {"is_gpu": True, "duration_ms": 2.0, "cpu_ms": 0.0, "gpu_ms": 0.0, "n_calls": 1},
    },
    "_traceml_internal:step_time": {
        "cpu": {"is_gpu": None, "duration_ms": None, "cpu_ms": 9.0, "gpu_ms": None, "n_calls": None}
    },
}


def step_time_payload(rank: int, step: int) -> list[dict[str, Any]]:
    row = {
        "seq": step,
        "timestamp": 1_760_000_000_000_000_000 + step,
        "step": step,
        "events": EVENTS,
    }
    return [envelope(sampler="StepTimeSampler", rank=rank, table="StepTimeTable", rows=[row])]


def all_stream_payloads() -> list[Any]:
    """Payloads that give records of all seven streams, with edge values (None, 0, unicode)."""
    payloads: list[Any] = []
    for rank in (0, 1):
        payloads.append(
            [
                envelope(
                    sampler="RuntimeEnvironmentSampler",
                    rank=rank,
                    table="RuntimeEnvironmentTable",
                    rows=[
                        {
                            "ts": 1_760_000_000_000_000_001,
                            "seq": 0,
                            "topology": "single_node_multi_process",
                            "distributed_initialized": True,
                            "distributed_backend": "gloo",
                            "training_strategy": "ddp",
                            "strategy_source": "runtime_model",
                            "strategy_confidence": None,
                        }
                    ],
                )
            ]
        )
        payloads.append(
            [
                envelope(
                    sampler="SystemSampler",
                    rank=rank,
                    table="SystemTable",
                    rows=[
                        {
                            "seq": 3,
                            "ts": 1_760_000_000_000_000_002,
                            "cpu": 12.5,
                            "ram_used": 1024,
                            "ram_total": 4096.0,
                            "gpu_available": True,
                            "gpu_count": 2,
                            "gpus": [
                                [50.0, 1.0, 2.0, 60.0, 100.0, 300.0],
                                [0, 0, 0, 0, 0, 0],
                            ],
                        }
                    ],
                )
            ]
        )
        payloads.append(
            [
                envelope(
                    sampler="ProcessSampler",
                    rank=rank,
                    table="ProcessTable",
                    rows=[
                        {
                            "seq": 4,
                            "ts": 1.5,  # float seconds: an older rank, no integer time
                            "cpu": 150.0,
                            "cpu_cores": 8,
                            "ram_used": 10.0,
                            "ram_total": None,
                            "gpu_available": None,
                            "gpu_count": None,
                            "gpu": {
                                "device": 0,
                                "mem_used": 1.0,
                                "mem_reserved": 2.0,
                                "mem_total": 3.0,
                            },
                        }
                    ],
                    hostname=None,
                )
            ]
        )
        for step in range(3):
            payloads.append(step_time_payload(rank, step))
        payloads.append(
            [
                envelope(
                    sampler="StepMemorySampler",
                    rank=rank,
                    table="step_memory",
                    rows=[
                        {
                            "seq": 5,
                            "ts": 7,
                            "device": "cpu",
                            "step": 1,
                            "peak_alloc": None,
                            "peak_resv": 0,
                        }
                    ],
                )
            ]
        )
        payloads.append(
            [
                envelope(
                    sampler="Stdout/Stderr",
                    rank=rank,
                    table="stdout_stderr",
                    rows=[{"line": "héllo \u2028 wörld\n"}, {"line": ""}, {"line": "loss=0.1"}],
                )
            ]
        )
    return payloads


def write_jsonl(path: Path, payloads: Iterable[Any]) -> Path:
    with path.open("wb") as fh:
        for payload in payloads:
            fh.write(orjson.dumps(payload) + b"\n")
    return path


def write_msgpack(path: Path, payloads: Iterable[Any], trailing: bytes = b"") -> Path:
    import struct

    import msgspec

    with path.open("wb") as fh:
        for payload in payloads:
            body = msgspec.msgpack.encode(payload)
            fh.write(struct.pack("!I", len(body)) + body)
        fh.write(trailing)
    return path


def read_export(
    session_root: Path, stream: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(record lines, closing lines) of one stream's jsonl file."""
    path = session_root / "aggregator" / "export" / f"{stream}.jsonl"
    records, closing = [], []
    for line in path.read_bytes().splitlines():
        data = orjson.loads(line)
        (closing if data.get("closing") is True else records).append(data)
    return records, closing


# -- SQLite databases in the contract's layout ----------------------------------

_SQL_TYPES = {int: "INTEGER", float: "REAL", str: "TEXT"}


def _sql_type(hint: Any) -> str:
    for member in typing.get_args(hint) or (hint,):
        if member in _SQL_TYPES:
            return _SQL_TYPES[member]
    return "TEXT"


def create_tables(db: Path, streams: Iterable[str]) -> None:
    """Create the projection tables of ``streams``: ``id`` autoincrement, then each field."""
    by_stream = {t.STREAM: t for t in RECORD_TYPES}
    with sqlite3.connect(db) as conn:
        for stream in streams:
            record_type = by_stream[stream]
            hints = typing.get_type_hints(record_type)
            columns = ["id INTEGER PRIMARY KEY AUTOINCREMENT"]
            for f in dataclasses.fields(record_type):
                if f.name == "events":
                    columns.append("events_json TEXT NOT NULL")
                else:
                    columns.append(f"{f.name} {_sql_type(hints[f.name])}")
            conn.execute(f"CREATE TABLE {TABLE_BY_STREAM[stream]} ({', '.join(columns)})")
    conn.close()


def insert_rows(db: Path, stream: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert rows given as record dicts (``events`` is stored as ``events_json`` text)."""
    table = TABLE_BY_STREAM[stream]
    with sqlite3.connect(db) as conn:
        for row in rows:
            values = dict(row)
            if "events" in values:
                values["events_json"] = orjson.dumps(
                    values.pop("events"), option=orjson.OPT_SORT_KEYS
                ).decode()
            names = ", ".join(values)
            marks = ", ".join("?" for _ in values)
            conn.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", list(values.values()))
    conn.close()
