"""StepTimeRecord's ``events[name][device]`` as an Arrow MAP of MAPs of the five stats.

pyarrow converts the nested dicts itself (in C, faster than any flattening in
Python) but silently drops a stats key the struct has no field for. In
schema_version 1 a stats map has exactly the five keys (TraceML builds it so);
the stats maps of a record of any other version are checked first, and a key
outside the five is refused rather than dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain
from typing import Any

import pyarrow as pa

from ._contract import permanent

__all__ = ["CONTRACT_VERSION", "EVENTS_TYPE", "STATS_FIELDS", "STATS_TYPE", "check_stats_keys"]

STATS_FIELDS = ("is_gpu", "duration_ms", "cpu_ms", "gpu_ms", "n_calls")
STATS_TYPE = pa.struct(
    [
        ("is_gpu", pa.bool_()),
        ("duration_ms", pa.float64()),
        ("cpu_ms", pa.float64()),
        ("gpu_ms", pa.float64()),
        ("n_calls", pa.int64()),
    ]
)
EVENTS_TYPE = pa.map_(pa.string(), pa.map_(pa.string(), STATS_TYPE))
"""A Parquet MAP of MAPs of a struct: DuckDB ``events['name']['cuda:0'].cpu_ms``, polars Map."""

_KEYS = frozenset(STATS_FIELDS)

CONTRACT_VERSION = 1
"""The schema_version whose stats keys are exactly ``STATS_FIELDS`` (TraceML builds each
stats map with those five keys); records of any other version are checked."""


def check_stats_keys(values: Iterable[Any]) -> None:
    """Refuse a stats map with a key the struct has no field for (pyarrow would drop it),
    with a permanent ``ValueError`` (``_contract`` rule 8)."""
    values = list(values)
    try:
        by_device = chain.from_iterable(map(dict.values, values))
        stats = chain.from_iterable(map(dict.values, by_device))
        known = all(map(_KEYS.issuperset, stats))
    except TypeError:  # not all dicts: pyarrow's conversion says what is wrong
        return
    if known:
        return
    for by_name in values:
        for by_device in by_name.values():
            for stat in by_device.values():
                unknown = sorted(set(stat) - _KEYS)
                if unknown:
                    raise permanent(
                        ValueError(
                            f"stats keys {unknown} are not among {list(STATS_FIELDS)}, the keys "
                            "of schema_version 1; this exporter stores only those, so it "
                            "refuses them"
                        )
                    )
