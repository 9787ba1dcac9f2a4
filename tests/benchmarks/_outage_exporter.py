"""``_lag_exporter.py``'s jsonl exporter behind a sink that goes down on demand, and that
logs each flush it saw out (``bench_follow_service.py``).

While the file named by ``$BENCH_OUTAGE_FLAG`` exists, ``open``, ``write`` and ``flush``
raise ``SinkDownError``, a transient error (no ``permanent`` marker): the follower
uses that instance no more, waits, and makes a new one. A failing call closes the
jsonl files first, as the jsonl exporter does when its own ``write`` fails.

After each ``flush`` that returned, one line goes to
``<session_root>/aggregator/bench-flushes.jsonl`` (``FLUSH_LOG``): the wall clock of
the flush (``t``, ns), the records it saw out by stamp (``stamps``: ``recv_ts_ns``,
which the benchmark's writer sets to the time of the commit that wrote the row) and
by stream (``streams``). A line per flush, not a file at ``close``: an exporter that
failed is never closed, and its acknowledged records count too. The lag of each row
(flush time - stamp), the lag per time window and how often each commit's rows were
acknowledged all come from these lines.
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import orjson
from _lag_exporter import LagJsonlExporter

FLUSH_LOG = Path("aggregator") / "bench-flushes.jsonl"


class SinkDownError(OSError):
    """The sink is down (the flag file exists): waiting fixes it."""


class OutageJsonlExporter(LagJsonlExporter):
    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self._bench_flag = os.environ.get("BENCH_OUTAGE_FLAG")
        self._bench_log_path = Path(context.session_root) / FLUSH_LOG
        self._bench_log: IO[bytes] | None = None
        self._bench_streams: collections.Counter[str] = collections.Counter()

    def _sink_up(self) -> None:
        if self._bench_flag is not None and os.path.exists(self._bench_flag):
            self._release()
            if self._bench_log is not None:
                self._bench_log.close()
                self._bench_log = None
            raise SinkDownError(f"the sink is down ({self._bench_flag} exists)")

    def open(self) -> None:
        self._sink_up()
        super().open()
        self._bench_log = open(self._bench_log_path, "ab")  # noqa: SIM115 - closed in close() or on failure

    def write(self, records: Sequence[Any]) -> None:
        self._sink_up()
        super().write(records)
        if not records:
            return
        first = records[0].STREAM
        if first == records[-1].STREAM:  # a page of one table: the usual case
            self._bench_streams[first] += len(records)
        else:
            self._bench_streams.update(record.STREAM for record in records)

    def flush(self) -> None:
        self._sink_up()
        stamps = list(self._unflushed.items())  # the parent's flush clears them
        super().flush()
        now = time.time_ns()
        if stamps and self._bench_log is not None:
            line = {"t": now, "stamps": stamps, "streams": dict(self._bench_streams)}
            self._bench_log.write(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE))
            self._bench_log.flush()
        self._bench_streams.clear()

    def close(self, *, dropped_batches: int = 0) -> None:
        try:
            super().close(dropped_batches=dropped_batches)
        finally:
            if self._bench_log is not None:
                self._bench_log.close()
                self._bench_log = None


def make_exporter(context: Any) -> OutageJsonlExporter:
    return OutageJsonlExporter(context)
