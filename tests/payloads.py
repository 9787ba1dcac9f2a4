"""The tests' one builder of TraceML envelopes (wire-format.md): a rank's ``meta`` and its envelope.

Every argument is keyword-only, so a rank is never taken for a sampler nor a tick for a
rank. The defaults describe a small cluster, two nodes of two ranks; a suite with
another shape states it once, as ``functools.partial(envelope, ...)`` in its helpers.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

T0: Final = 1_700_000_000_000_000_000
"""The default ``meta.timestamp``: 19-digit Unix nanoseconds, as 0.5.1+ ranks send."""


class _NodeHostname:
    def __repr__(self) -> str:
        return "NODE_HOSTNAME"


NODE_HOSTNAME: Final = _NodeHostname()
"""The default hostname: ``node-<node_rank>``."""


def meta(
    *,
    sampler: str,
    rank: int = 0,
    timestamp: Any = T0,
    ranks_per_node: int = 2,
    world_size: int = 4,
    hostname: Any = NODE_HOSTNAME,
    pid: Any = None,
    omit: Collection[str] = (),
    **extra: Any,
) -> dict[str, Any]:
    """The meta ``rank`` sends, keys in the order a real run sends them (wire-format.md §4).

    ``local_rank`` and ``node_rank`` follow from ``ranks_per_node``; ``pid`` defaults to
    ``1000 + rank``. ``extra`` replaces a key in place or appends one (the run stamp
    ``session_id``, ``run_nonce``, ``session_source``); ``omit`` drops keys, as from a
    rank that never sent them (a key it does not hold is a KeyError, not a no-op).
    """
    node = rank // ranks_per_node
    out: dict[str, Any] = {
        "rank": rank,
        "global_rank": rank,
        "local_rank": rank % ranks_per_node,
        "world_size": world_size,
        "local_world_size": ranks_per_node,
        "node_rank": node,
        "hostname": f"node-{node}" if hostname is NODE_HOSTNAME else hostname,
        "pid": 1000 + rank if pid is None else pid,
        "sampler": sampler,
        "timestamp": timestamp,
    }
    out.update(extra)
    for key in omit:
        del out[key]
    return out


def envelope(*, rows: list[Any], table: str = "T", **meta_kw: Any) -> dict[str, Any]:
    """The canonical envelope of one table: ``{"meta": meta(**meta_kw), "body": ...}``."""
    return {"meta": meta(**meta_kw), "body": {"tables": {table: rows}}}
