"""The built-in jsonl exporter, timing each record from its row's commit to the flush that
saw it out (``bench_follow.py``).

The benchmark's writer stamps ``recv_ts_ns`` (the record's ``observed_timestamp_unix_ns``)
with the time of the flush that commits the row; after each ``flush`` this exporter
notes the wall clock against the stamps it wrote since the last one, and on ``close``
writes (flush time - stamp, rows) pairs as JSON to ``$BENCH_LAG_FILE``.
"""

from __future__ import annotations

import collections
import json
import os
import time
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from traceml_exporter_sdk.jsonl import JsonlExporter

_STAMP = attrgetter("observed_timestamp_unix_ns")


class LagJsonlExporter(JsonlExporter):
    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self._unflushed: collections.Counter[int] = collections.Counter()
        self._lags: collections.Counter[int] = collections.Counter()

    def write(self, records: Sequence[Any]) -> None:
        super().write(records)
        self._unflushed.update(map(_STAMP, records))

    def flush(self) -> None:
        super().flush()
        now = time.time_ns()
        for stamp, rows in self._unflushed.items():
            self._lags[(now - stamp) // 1_000_000] += rows
        self._unflushed.clear()

    def close(self, *, dropped_batches: int = 0) -> None:
        super().close(dropped_batches=dropped_batches)
        path = os.environ.get("BENCH_LAG_FILE")
        if path:
            with open(path, "w", encoding="utf-8") as fh:
                json.dump(sorted(self._lags.items()), fh)


def make_exporter(context: Any) -> LagJsonlExporter:
    return LagJsonlExporter(context)
