"""What every test module here does to the exporter: TraceML's calls, then a read-back;
and what ``traceml-exporter follow`` reads of it: a permanent error, a run's folder."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
import sink_support
from traceml_exporter_sdk import ExporterContext, ExportRecord
from traceml_exporter_sdk.testing import expected_by_stream

from traceml_exporter_example.exporter import ExampleExporter, make_exporter


def run(
    context: ExporterContext,
    *batches: Sequence[ExportRecord],
    dropped: int = 0,
    flush: bool = True,
) -> None:
    """open, write and flush each batch, close: the calls TraceML's export worker makes
    (without ``flush``, the batches are left for ``close`` to deliver)."""
    exporter = make_exporter(context)
    exporter.open()
    for batch in batches:
        exporter.write(batch)
        if flush:
            exporter.flush()
    exporter.close(dropped_batches=dropped)


def written(context: ExporterContext) -> dict[str, list[dict[str, Any]]]:
    """What ``sink_support.read_export`` finds, streams with no row left out."""
    return {s: rows for s, rows in sink_support.read_export(context).items() if rows}


def expected(
    records: Sequence[ExportRecord], *, include_hostname: bool = False
) -> dict[str, list[dict[str, Any]]]:
    """What ``written`` should find: the records' ``to_dict()``s, or for a sink that keeps
    aggregates rather than rows, its ``sink_support.expected_export`` of them."""
    own = getattr(sink_support, "expected_export", None)
    if own is not None:
        result: dict[str, list[dict[str, Any]]] = own(records, include_hostname=include_hostname)
        return result
    return expected_by_stream(records, include_hostname=include_hostname)


@dataclasses.dataclass(frozen=True)
class StrayRecord:
    """A look-alike record whose STREAM is no plain name: nothing may be named after it."""

    STREAM: ClassVar[str] = "../stray"
    SCHEMA_VERSION: ClassVar[int] = 1
    COLUMNS: ClassVar[tuple[str, ...]] = ("rank",)
    rank: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"stream": self.STREAM, "schema_version": self.SCHEMA_VERSION, "rank": self.rank}


def refusal(context: ExporterContext, *batch: ExportRecord) -> Exception:
    """What a new exporter raises when ``batch`` is written and flushed (it must raise)."""
    exporter = make_exporter(context)
    exporter.open()
    try:
        exporter.write(batch)
        exporter.flush()
    except Exception as error:  # noqa: BLE001 - whatever the sink raises is the answer
        return error
    exporter.close()
    raise AssertionError(f"the exporter took {batch!r}")


def is_permanent(error: BaseException) -> bool:
    """Whether ``error``, or an exception it was raised from or while handling, has a
    truthy ``permanent`` (``_contract`` rule 8): the follower then gives up at once."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if getattr(current, "permanent", False):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def one_folder_named_two_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[ExporterContext, ExporterContext, ExporterContext]:
    """Contexts of ``<tmp>/logs/run1`` named relatively (the working directory becomes
    ``<tmp>/logs``) and absolutely (through ``..``), and of another folder named ``run1``:
    a sink keys the first two as one run and the third as another (``_contract`` rule 9)."""
    logs, elsewhere = tmp_path / "logs", tmp_path / "elsewhere"
    (logs / "run1").mkdir(parents=True)
    (elsewhere / "run1").mkdir(parents=True)
    monkeypatch.chdir(logs)
    return (
        ExporterContext.create("run1", export_streams="all"),
        ExporterContext.create(elsewhere / ".." / "logs" / "run1", export_streams="all"),
        ExporterContext.create(elsewhere / "run1", export_streams="all"),
    )


def open_under(folder: Path) -> list[str]:
    """Paths under ``folder`` this process holds open (Linux ``/proc/self/fd``)."""
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        pytest.skip("needs /proc/self/fd")
    targets = []
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            targets.append(os.readlink(fd))
    return [t for t in targets if t.startswith(str(folder))]


def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The descriptors ``os.fsync`` is called with from now on (each call still syncs)."""
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def open_with(
    context: ExporterContext, records: Sequence[ExportRecord], *, flush: bool = False
) -> ExampleExporter:
    """A new exporter on ``context``, opened, ``records`` written (and flushed); still open."""
    exporter = make_exporter(context)
    exporter.open()
    exporter.write(records)
    if flush:
        exporter.flush()
    return exporter


def disk_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on every ``os.fsync`` fails as on a full disk (ENOSPC)."""

    def fsync(_fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)
