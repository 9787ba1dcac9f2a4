"""Pages of a run's database bounded in bytes as well as rows (issue 41): a row over the
row bound is skipped (counted, never loaded), a page stops at the page bound, and what a
well-behaved run writes is read as before. Small bounds through the settings keep the
tests fast; one test measures a child's peak RSS with the default-sized attack."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from child_env import child_env
from follow_files import status
from follow_helpers import EXIT_INCOMPLETE, exported, finish, follow
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from traceml_exporter_sdk._bridge.sqlite_connect import BackfillError
from traceml_exporter_sdk._bridge.sqlite_pages import PAGE_BYTES_ENV, ROW_BYTES_ENV
from traceml_exporter_sdk._bridge.sqlite_source import SqliteSource, open_database
from traceml_exporter_sdk.records import RECORD_TYPE_BY_STREAM
from writer050 import Writer050, create_table_sql

KIB = 1024
LINES = "stdout_stderr_samples"


@pytest.fixture
def bounds(monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """A row bound of 16 KiB and a page bound of 64 KiB."""
    monkeypatch.setenv(ROW_BYTES_ENV, str(16 * KIB))
    monkeypatch.setenv(PAGE_BYTES_ENV, str(64 * KIB))
    return 16 * KIB, 64 * KIB


def database(path: Path, rows: list[tuple[object, object]]) -> Path:
    """0.5.0's stdout_stderr table holding ``(rank, line)`` rows, ids from 1."""
    connection = sqlite3.connect(path)
    connection.execute(create_table_sql(RECORD_TYPE_BY_STREAM["stdout_stderr"]))
    connection.executemany(
        f"INSERT INTO {LINES} (recv_ts_ns, rank, sample_ts_s, line) VALUES (1, ?, 1.5, ?)",
        rows,
    )
    connection.commit()
    connection.close()
    return path


def pages(source: SqliteSource, size: int = 2000) -> Iterator[tuple[int, list[str], bool]]:
    """Each page of the lines table: (rows read, the lines exported, cut on bytes)."""
    (plan,) = source.tables
    while True:
        rows, records = source.read_page(plan, size)
        if not rows:
            return
        yield rows, [r.line for r in records], source.page_cut  # type: ignore[attr-defined]


def test_a_row_over_the_bound_is_skipped_and_never_loaded(
    tmp_path: Path, bounds: tuple[int, int]
) -> None:
    big = 8 * 2**20  # 8 MiB: 512x the row bound
    path = database(tmp_path / "db", [(0, "a"), (0, "x" * big), (0, "b"), ("r" * big, "c")])
    source = open_database(path, ("stdout_stderr",))
    tracemalloc.start()
    try:
        read = list(pages(source))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [line for _rows, lines, _cut in read for line in lines] == ["a", "b"]
    assert source.skipped == 2
    assert source.rows_read == 4
    assert not source.pruned, "a skipped row is not a pruned one"
    assert [(b.row_id, b.reason) for b in source.bad_rows] == [
        (2, f"{big:,} bytes, over the row bound of {16 * KIB:,}"),
        (4, f"{big + 1:,} bytes, over the row bound of {16 * KIB:,}"),  # text in rank
    ]
    assert peak < big / 4, f"{peak:,} bytes allocated: the row was loaded"


sizes = st.lists(
    st.one_of(st.integers(1, 4 * KIB), st.integers(4 * KIB, 40 * KIB)), min_size=1, max_size=60
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    line_sizes=sizes,
    numeric=st.sets(st.integers(0, 59), max_size=3),
    page_rows=st.sampled_from([1, 2, 7, 2000]),
)
@example(line_sizes=[10 * KIB] * 20, numeric=set(), page_rows=2000)
@example(line_sizes=[17 * KIB, 1, 17 * KIB], numeric={1}, page_rows=2000)
@example(line_sizes=[10 * KIB, 10 * KIB], numeric={0}, page_rows=1)
def test_every_row_is_exported_or_skipped_and_no_page_passes_its_bound(
    tmp_path_factory: pytest.TempPathFactory,
    bounds: tuple[int, int],
    line_sizes: list[int],
    numeric: set[int],
    page_rows: int,
) -> None:
    """Rows of random sizes (some over the row bound, some with text in a numeric
    column): each is exported whole or skipped, in id order; a page holds at most the
    page bound (or one row); nothing is counted pruned."""
    row_bound, page_bound = bounds
    rows = [
        (("r" * size if i in numeric else 0), f"{i:04}" + "y" * (size - 4))
        for i, size in enumerate(line_sizes)
    ]
    row_bytes = [len(line) + (len(rank) if isinstance(rank, str) else 0) for rank, line in rows]
    fitting = [line for (_r, line), n in zip(rows, row_bytes, strict=True) if n <= row_bound]
    path = database(tmp_path_factory.mktemp("db") / "db", rows)
    source = open_database(path, ("stdout_stderr",))
    taken: list[str] = []
    for _count, lines, _cut in pages(source, page_rows):
        assert sum(map(len, lines)) <= page_bound or len(lines) == 1
        taken += lines
    assert taken == fitting
    assert source.skipped == sum(n > row_bound for n in row_bytes)
    assert source.rows_read == len(rows)
    assert not source.pruned


def test_a_bound_that_is_not_a_number_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ROW_BYTES_ENV, "lots")
    path = database(tmp_path / "db", [(0, "a")])
    with pytest.raises(BackfillError, match=f"{ROW_BYTES_ENV} must be a whole number of bytes"):
        open_database(path, ("stdout_stderr",))


def test_a_followed_run_counts_a_row_over_the_bound_as_skipped(tmp_path: Path) -> None:
    """End to end: the status, the summary and the exit code say a row was not exported."""
    run = Writer050(tmp_path / "run1", tables=["stdout_stderr"])
    assert run.connection is not None
    run.connection.executemany(
        f"INSERT INTO {LINES} (recv_ts_ns, rank, sample_ts_s, line) VALUES (1, 0, 1.5, ?)",
        [("first",), ("z" * (64 * KIB),), ("last",)],
    )
    run.close()
    code, out, err = finish(follow(run.root, **{ROW_BYTES_ENV: str(16 * KIB)}))
    assert code == EXIT_INCOMPLETE, (out, err)
    assert status(run.root)["lost"] == {"skipped": 1}
    assert "1 skipped" in out
    warning = json.loads((run.root / "aggregator/follow/finalization_warning.json").read_text())
    assert warning["follow"]["lost"] == {"skipped": 1}
    assert [r["line"] for r in exported(run.root)["stdout_stderr"]] == ["first", "last"]


PEAK = """
import sys
from pathlib import Path
from traceml_exporter_sdk._bridge.sqlite_source import open_database

def peak_kib():  # VmHWM: this process's own (ru_maxrss outlives an exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

source = open_database(Path(sys.argv[1]), ("stdout_stderr",))
before = peak_kib()
for batch in source.batches():
    del batch
print(before, peak_kib(), source.rows_read, source.skipped)
"""


def test_peak_memory_stays_bounded_by_the_page_not_the_rows(tmp_path: Path) -> None:
    """The issue's attack: one 100 MB row took 225 MB, a page of 25 MB rows 543 MB. With
    the row bound at 32 MiB and the page at 64 MiB, the 100 MB row is skipped and the
    25 MB rows come two a page: the reader's peak grows by a few pages, not the table."""
    mb = 2**20
    rows = [(0, "a" * 100 * mb), *[(0, chr(98 + i) * 25 * mb) for i in range(8)]]
    path = database(tmp_path / "db", rows)
    env = child_env(**{ROW_BYTES_ENV: str(32 * mb), PAGE_BYTES_ENV: str(64 * mb)})
    done = subprocess.run(
        [sys.executable, "-c", PEAK, str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    before, after, read, skipped = map(int, done.stdout.split())
    assert (read, skipped) == (9, 1)
    grown_mb = (after - before) / 1024
    assert grown_mb < 3 * 64, f"peak grew by {grown_mb:.0f} MiB reading pages of 64 MiB"
    os.unlink(path)


def test_the_connections_value_limit_is_as_it_was_after_a_page(
    tmp_path: Path, bounds: tuple[int, int]
) -> None:
    """A page's limit (a few bytes a value here) is lifted after it: the table plans
    and the lag's statements read longer names on the same connection."""
    import apsw
    from traceml_exporter_sdk._bridge.sqlite_source import plan_tables

    path = database(tmp_path / "db", [(0, "a" * 100), (0, "b")])
    source = open_database(path, ("stdout_stderr",))
    assert isinstance(source.connection, apsw.Connection)
    before = source.connection.limit(apsw.SQLITE_LIMIT_LENGTH, -1)
    assert [lines for _rows, lines, _cut in pages(source)] == [["a" * 100, "b"]]
    assert source.connection.limit(apsw.SQLITE_LIMIT_LENGTH, -1) == before
    source.missing.append("step_time_samples")
    plan_tables(source, ("stdout_stderr", "step_time"))  # PRAGMA table_info: long names


def test_a_callers_sqlite3_connection_reads_the_same_within_the_same_bounds(
    tmp_path: Path, bounds: tuple[int, int]
) -> None:
    """``open_database`` with the caller's own ``sqlite3`` connection (an SQLite that may
    lack ``octet_length``, and whose values cannot be limited on Python 3.10): the same
    records, the same rows skipped, as through apsw."""
    from writer050 import corpus_records_050

    run = Writer050(tmp_path / "run1")
    for batch in corpus_records_050():
        run.flush(batch)
    assert run.connection is not None
    run.connection.executemany(
        f"INSERT INTO {LINES} (recv_ts_ns, rank, sample_ts_s, line) VALUES (1, ?, 1.5, ?)",
        [(0, "z" * (64 * KIB)), ("r" * (20 * KIB), "x"), (0, "fits")],
    )
    run.close()
    streams = tuple(RECORD_TYPE_BY_STREAM)

    def read(source: SqliteSource) -> tuple[list[dict[str, object]], int]:
        try:
            return [r.to_dict() for b in source.batches() for r in b], source.skipped
        finally:
            source.close()

    through_apsw = read(open_database(run.database, streams))
    own = sqlite3.connect(f"{run.database.as_uri()}?mode=ro", uri=True, isolation_level=None)
    through_sqlite3 = read(open_database(run.database, streams, own))
    assert through_sqlite3 == through_apsw
    assert through_apsw[1] == 2
    assert through_apsw[0][-1]["line"] == "fits"
