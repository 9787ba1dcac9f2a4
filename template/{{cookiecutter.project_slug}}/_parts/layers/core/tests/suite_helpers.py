"""Test helpers that know nothing of the sink: sink_support imports these, never
exporter_calls (which imports sink_support), so loading either one alone works."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

from traceml_exporter_sdk.testing.fault_proxy import unused_port


@contextlib.contextmanager
def only_variables(prefix: str, values: Mapping[str, str]) -> Iterator[None]:
    """For the block, of the variables named ``prefix...`` only ``values`` are set (whatever
    a test sets too); after it, all of them are as they were before."""
    saved = {k: v for k, v in os.environ.items() if k.startswith(prefix)}

    def clear() -> None:
        for key in [k for k in os.environ if k.startswith(prefix)]:
            del os.environ[key]

    clear()
    os.environ.update(values)
    try:
        yield
    finally:
        clear()
        os.environ.update(saved)


RECORD_LEVEL_CHECKS = (
    "every_record_once",
    "per_stream_order",
    "duplicates_kept",
    "values_equal_to_dict",
    "hostname_dropped_by_default",
    "hostname_kept_when_enabled",
)
"""The suite's checks that compare records one by one: a sink that keeps aggregates
(series, metric points) names them in its ``SKIP_CHECKS``, with its reason."""


def closed_port_url(path: str) -> str:
    """A URL of ``path`` on 127.0.0.1 where nothing listens (a peer that is down)."""
    return f"http://127.0.0.1:{unused_port()}{path}"
