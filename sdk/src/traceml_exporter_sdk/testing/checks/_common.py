"""Batches of the sample corpus, as the checks feed them to an exporter."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...streams import parse_export_streams
from ..corpus import corpus_batches

__all__ = ["corpus", "merged"]


def corpus(streams: str = "all") -> list[list[Any]]:
    """The sample corpus as record batches, one per payload, for an export_streams value."""
    return corpus_batches(parse_export_streams(streams))


def merged(batches: Sequence[Sequence[Any]], per: int) -> list[list[Any]]:
    """Every ``per`` consecutive batches joined into one."""
    return [
        [r for batch in batches[i : i + per] for r in batch] for i in range(0, len(batches), per)
    ]
