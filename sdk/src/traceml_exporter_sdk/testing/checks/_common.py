"""Batches of the sample corpus and the value space, as the checks feed them to an exporter."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...streams import parse_export_streams
from ..corpus import corpus_batches, value_space_batches

__all__ = ["corpus", "merged"]


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
