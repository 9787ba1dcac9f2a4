"""Data fidelity (needs ``read_back``): every record once, in order, values equal to to_dict()."""

from __future__ import annotations

import pytest

from .. import _compare as cmp
from .._harness import CallLog, Run
from ..corpus import corpus_batches, hostile_batches, non_finite_batches
from ..environment import NO_READ_BACK, Env
from ..registry import CheckGroup
from ._common import corpus, merged

GROUP = CheckGroup("data_fidelity")


def _fidelity_run(env: Env, *, include_hostname: bool = False) -> tuple[Run, cmp.ReadBack]:
    if not env.has_read_back:
        pytest.skip(NO_READ_BACK)
    context = env.context(include_hostname=include_hostname)
    run = env.worker(context, corpus())
    env.assert_clean(run)
    return run, env.require_read_back(context)


@GROUP.check(needs_read_back=True)
def check_every_record_once(env: Env) -> None:
    """Rule: every written record is read back once per write, under its own stream
    (per-stream counts; the values are values_equal_to_dict's business).

    Contract: "A custom exporter receives the same records as the built-in jsonl exporter,
    those of the selected streams."
    """
    run, actual = _fidelity_run(env)
    expected = cmp.expected_by_stream(run.log.written())
    problems = cmp.count_problems(expected, actual)
    assert not problems, "records per stream:\n" + "\n".join(problems)


@GROUP.check(needs_read_back=True)
def check_per_stream_order(env: Env) -> None:
    """Rule: within each stream, records read back in the order they were written.

    Contract: "Records preserve payload order and are not sorted by this mapper."
    """
    run, actual = _fidelity_run(env)
    problems = cmp.order_problems(cmp.expected_by_stream(run.log.written()), actual)
    assert not problems, "order within a stream changed:\n" + "\n".join(problems)


@GROUP.check(needs_read_back=True)
def check_duplicates_kept(env: Env) -> None:
    """Rule: duplicates are kept: a batch written twice, and a record twice in one batch,
    read back as often as written.

    Contract: "Duplicate rows are passed through, not removed, so a consumer that needs one
    row per key deduplicates on that key."
    """
    if not env.has_read_back:
        pytest.skip(NO_READ_BACK)
    batches = corpus()
    context = env.context()
    twice = [*batches[0], batches[0][0]]
    run = env.worker(context, [batches[0], batches[0], twice])
    env.assert_clean(run)
    actual = env.require_read_back(context)
    problems = cmp.count_problems(cmp.expected_by_stream(run.log.written()), actual)
    assert not problems, "duplicates were not kept:\n" + "\n".join(problems)


@GROUP.check(needs_read_back=True)
def check_values_equal_to_dict(env: Env) -> None:
    """Rule: each record reads back equal to its to_dict(): None stays null, a measured 0
    stays 0, unicode, \\n and U+2028 inside stdout lines survive, 19-digit nanosecond
    integers are exact, events maps are intact (hostname is checked separately; stream and
    schema_version are compared when read_back returns them).

    Contract: "An unavailable value remains None; a measured zero remains 0."
    """
    run, actual = _fidelity_run(env)
    expected = cmp.expected_by_stream(run.log.written())
    problems = cmp.meta_problems(actual) + cmp.multiset_problems(expected, actual)
    assert not problems, "values differ from to_dict():\n" + "\n".join(problems)


@GROUP.check(needs_read_back=True)
def check_hostname_dropped_by_default(env: Env) -> None:
    """Rule: with include_hostname False, no record keeps a hostname key.

    Contract: "The JSON Lines exporter omits hostname unless exporter_hostname is on."
    """
    _, actual = _fidelity_run(env, include_hostname=False)
    kept = {s: sum("hostname" in row for row in rows) for s, rows in actual.items()}
    kept = {s: n for s, n in kept.items() if n}
    assert not kept, f"hostname was kept although include_hostname is False: {kept} records"


@GROUP.check(needs_read_back=True)
def check_hostname_kept_when_enabled(env: Env) -> None:
    """Rule: with include_hostname True, every record that has a hostname field keeps it,
    as null when the rank sent none.

    Contract: "When enabled, records that have a hostname field keep it, with null when the
    rank sent no hostname."
    """
    run, actual = _fidelity_run(env, include_hostname=True)
    expected = cmp.expected_by_stream(run.log.written(), include_hostname=True)
    problems = []
    for stream, rows in expected.items():
        if "hostname" not in rows[0]:
            continue
        got = actual.get(stream, [])
        missing = sum("hostname" not in row for row in got)
        if missing:
            problems.append(f"{stream}: {missing} of {len(got)} records have no hostname key")
            continue
        want_values = sorted(map(repr, (row["hostname"] for row in rows)))
        got_values = sorted(map(repr, (row["hostname"] for row in got)))
        if want_values != got_values:
            problems.append(
                f"{stream}: hostname values differ: expected {sorted(set(want_values))}, "
                f"got {sorted(set(got_values))}"
            )
    assert not problems, "with include_hostname True:\n" + "\n".join(problems)


@GROUP.check
def check_hostile_text(env: Env) -> None:
    """Rule: stdout lines holding text that breaks careless sinks are written without an
    error: a lone surrogate, NUL and other control characters, U+2028, U+2029, U+0085 and a
    128 KiB line (the corpus's hostile payload, ``HOSTILE_TEXT``); with read_back each reads
    back equal to its to_dict().

    A sink that cannot hold such a value as it is stores it escaped (the SDK's jsonl
    exporter writes a lone surrogate as its ``\\udXXX`` JSON escape); a crash on a valid
    record loses the whole run. This check runs without read_back too.

    Contract: "One record per captured stdout or stderr line of a rank."
    """
    context = env.context()
    run = env.worker(context, hostile_batches())
    env.assert_clean(run, "stdout lines with hostile text")
    actual = env.read_back(context)
    if actual is None:
        return
    expected = env.expected(run.log.written(), context)
    problems = cmp.meta_problems(actual) + cmp.multiset_problems(expected, actual)
    assert not problems, "hostile text did not read back as written:\n" + "\n".join(
        p.encode("utf-8", "backslashreplace").decode("utf-8") for p in problems
    )


@GROUP.check(needs_read_back=True)
def check_special_floats(env: Env) -> None:
    """Rule: -0.0, NaN, +inf and -inf in every float field (and in events stats) are
    written without an error and read back as they were, bit for bit; a sink that keeps
    NaN as null makes a measured NaN look unavailable.

    Kept apart from the other checks' records so that a sink whose format has none of
    them (JSON writes NaN as null; SQLite stores NaN as NULL; a JSON or SQL numeric has
    no -0.0) fails this check by name and can declare it in ``skip_checks`` with its
    reason.

    Contract: "An unavailable value remains None; a measured zero remains 0."
    """
    context = env.context()
    run = env.worker(context, non_finite_batches())
    env.assert_clean(run, "records with -0.0, NaN and infinities")
    actual = env.require_read_back(context)
    expected = env.expected(run.log.written(), context)
    problems = cmp.meta_problems(actual) + cmp.multiset_problems(expected, actual)
    assert not problems, "-0.0, NaN or an infinity did not read back as written:\n" + "\n".join(
        problems
    )


VOLUME = 20_000
"""Records in the one flush interval of ``large_flush_interval``."""


@GROUP.check(needs_read_back=True)
def check_large_flush_interval(env: Env) -> None:
    """Rule: one flush interval holding 20,000 records of every stream (the sample corpus
    repeated, each repeat distinct) reads back exactly: per-stream counts (or the sink's
    ``expected_export``). A busy run writes that many between two flushes; an internal
    buffer bounded below it must block or flush early, never drop.

    Driven by the worker with a flush interval longer than the run, so the only flush
    is the one before close.

    Contract: "A custom exporter receives the same records as the built-in jsonl exporter,
    those of the selected streams."
    """
    per_repeat = sum(map(len, corpus()))
    batches = corpus_batches(repeat=-(-VOLUME // per_repeat))
    context = env.context()
    # Counts need no snapshot (a sink's own expected_export needs the values).
    log = CallLog(snapshot=env.aggregating)
    run = env.worker(context, merged(batches, 8), timeout=120, log=log)
    env.assert_clean(run, f"{sum(map(len, batches)):,} records in one flush interval")
    flushes = [c for c in run.log.calls if c.method == "flush"]
    assert len(flushes) == 1, run.log.describe()
    actual = env.require_read_back(context)
    problems = env.delivery_problems(run.log.written(), context, actual)
    assert not problems, (
        f"{len(run.log.written()):,} records written between two flushes did not all read "
        "back:\n" + "\n".join(problems)
    )


@GROUP.check
def check_records_left_unchanged(env: Env) -> None:
    """Rule: records are read-only to the exporter: after a run every record it was handed
    still gives the to_dict() it gave before (no stats deleted from an events map, no
    field replaced). TraceML may hand the same objects to others; the suite computes its
    expected values from a snapshot taken before the exporter saw each record.

    Contract: "A custom exporter receives the same records as the built-in jsonl exporter,
    those of the selected streams."
    """
    context = env.context()
    run = env.worker(context, corpus())
    env.assert_clean(run)
    changed = []
    for record, before in run.log.handed():
        was, now = before.to_dict(), record.to_dict()
        if was != now:
            changed.append(f"{record.STREAM}: {cmp.field_diff(was, now)}")
    assert not changed, (
        f"the exporter changed {len(changed)} of the records it was handed (copy what you "
        "change, e.g. data = record.to_dict() and edit data):\n" + "\n".join(changed[:5])
    )
