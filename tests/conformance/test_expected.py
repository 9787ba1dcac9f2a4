"""``expected_by_stream``: what a sink must give back for the records it was handed."""

from __future__ import annotations

from traceml_exporter_sdk import StdoutStderrRecord, SystemRecord
from traceml_exporter_sdk.testing import as_foreign, corpus_records, expected_by_stream

NS = 1_712_345_678_901_234_567


def test_groups_by_stream_in_order_and_keeps_duplicates() -> None:
    first = StdoutStderrRecord(NS, 0, NS, "one")
    system = SystemRecord(NS, 0, 0, 2, 2, 0, "node-a", NS, 1, 0.0, None, 64e9, 1, 2)
    second = StdoutStderrRecord(NS, 1, None, "two")
    got = expected_by_stream([first, system, second, first])
    assert list(got) == ["stdout_stderr", "system"]
    assert [row["line"] for row in got["stdout_stderr"]] == ["one", "two", "one"]
    assert got["system"] == [{k: v for k, v in system.to_dict().items() if k != "hostname"}]


def test_hostname_is_dropped_unless_kept() -> None:
    records = list(corpus_records())
    with_hostname = [r for r in records if "hostname" in r.COLUMNS]
    assert with_hostname
    dropped = expected_by_stream(records)
    kept = expected_by_stream(records, include_hostname=True)
    assert all("hostname" not in row for rows in dropped.values() for row in rows)
    assert sum("hostname" in row for rows in kept.values() for row in rows) == len(with_hostname)
    assert sum(map(len, kept.values())) == len(records)


def test_relies_only_on_stream_and_to_dict() -> None:
    records = list(corpus_records())
    assert expected_by_stream(as_foreign(records)) == expected_by_stream(records)
