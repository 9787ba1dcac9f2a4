"""What a sink must give back for the records it was handed: for an exporter's own tests.

``expected_by_stream(records, include_hostname=...)`` is the contract's answer
to "what should my sink hold now?", in the shape ``read_back`` returns::

    written = read_my_sink(context)
    assert written == expected_by_stream(records, include_hostname=context.include_hostname)

It relies only on ``STREAM`` and ``to_dict()``, so TraceML's own record
classes work as well as the SDK's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..records import ExportRecord

__all__ = ["expected_by_stream"]


def expected_by_stream(
    records: Iterable[ExportRecord], *, include_hostname: bool = False
) -> dict[str, list[dict[str, Any]]]:
    """``to_dict()`` of each record grouped by ``STREAM``, in the order given.

    ``hostname`` is left out unless ``include_hostname`` (the context's
    ``include_hostname``, TraceML's ``exporter_hostname`` setting). Duplicates
    stay: an exporter passes every record through.
    """
    out: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        data = record.to_dict()
        if not include_hostname:
            data.pop("hostname", None)
        out.setdefault(record.STREAM, []).append(data)
    return out
