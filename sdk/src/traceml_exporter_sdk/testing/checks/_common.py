"""Batches of the sample corpus and the value space, as the checks feed them to an exporter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...streams import parse_export_streams
from ..corpus import corpus_batches, value_space_batches

if TYPE_CHECKING:
    from ...context import ExporterContext
    from ..environment import Env

__all__ = ["corpus", "difference", "merged"]


def corpus(streams: str = "all") -> list[list[Any]]:
    """The sample corpus as record batches, one per payload, then the value space's
    generated records (every nullable None, every finite edge value), for an
    export_streams value."""
    selected = parse_export_streams(streams)
    return corpus_batches(selected) + value_space_batches(selected)


def merged(batches: Sequence[Sequence[Any]], per: int) -> list[list[Any]]:
    """Every ``per`` consecutive batches joined into one."""
    return [
        [r for batch in batches[i : i + per] for r in batch] for i in range(0, len(batches), per)
    ]


def difference(
    env: Env, records: Sequence[Any], context: ExporterContext, actual: Mapping[str, Any]
) -> str:
    """How ``actual`` differs from ``records`` delivered, in the reader's terms: records
    missing, or more than were written (another run's, or some twice)."""
    expected = env.expected(records, context)
    streams = set(expected) | set(actual)
    more = any(len(actual.get(s, ())) > len(expected.get(s, ())) for s in streams)
    fewer = any(len(actual.get(s, ())) < len(expected.get(s, ())) for s in streams)
    if more and not fewer:
        return (
            "more records came back than were written (records that are not this run's: "
            "another run's, from a store shared between instances or keyed by something "
            "other than the resolved session_root; or the same records twice)"
        )
    if fewer and not more:
        return "records written are missing"
    return "the records read back are not those written"
