"""STREAM dispatch: interleaved streams, look-alike record classes, every export_streams value."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ...context import ExporterContext
from ...streams import EXPORT_STREAM_NAMES
from .. import _compare as cmp
from .._resources import tree
from ..corpus import as_foreign, as_mixed, load_corpus
from ..environment import Env
from ..registry import CheckFunction, CheckGroup
from ._common import corpus, merged

GROUP = CheckGroup("stream_dispatch")

MISFILED = (
    "records landed under another stream (one stream read back more than was written to "
    "it, another fewer): a batch was written as if it held one stream"
)
"""The evidence ``_causes`` needs before it blames a one-stream-per-batch mistake."""


def _misfiled(expected: cmp.ReadBack, actual: cmp.ReadBack) -> bool:
    """True when some stream gained records while another lost some."""
    streams = set(expected) | set(actual)
    diff = {s: len(actual.get(s, [])) - len(expected.get(s, [])) for s in streams}
    return any(d > 0 for d in diff.values()) and any(d < 0 for d in diff.values())


@GROUP.check
def check_interleaved_streams(env: Env) -> None:
    """Rule: one write batch may hold every selected stream, interleaved; each record goes
    to its own stream (with read_back: every stream reads back as many records as were
    written to it).

    Contract: "One write batch may hold several selected record types, interleaved in
    payload order."
    """
    context = env.context("all")
    batches = merged(corpus("all"), 6)
    run = env.worker(context, batches)
    env.assert_clean(run, "batches with interleaved streams")
    mixed = [
        c
        for c in run.log.calls
        if c.method == "write" and len({r.STREAM for r in c.records or ()}) > 1
    ]
    assert mixed, "no write batch held several streams (the suite's corpus should ensure it)"
    actual = env.read_back(context)
    if actual is not None:
        problems = env.delivery_problems(run.log.written(), context, actual)
        if not problems:
            return
        if not env.aggregating and _misfiled(env.expected(run.log.written(), context), actual):
            problems.insert(0, MISFILED)
        assert not problems, "records of interleaved batches, per stream:\n" + "\n".join(problems)


@GROUP.check
def check_foreign_record_classes(env: Env) -> None:
    """Rule: records of other classes with the same STREAM, SCHEMA_VERSION, COLUMNS, fields
    and to_dict() are handled exactly like the SDK's, whole batches of them or mixed with
    the SDK's within a batch (one stream in two classes); in production they are
    TraceML's own classes, so dispatching with isinstance on SDK classes loses them.

    The look-alike classes are built at runtime (``dataclasses.make_dataclass``);
    the output for them must equal the output for the SDK's classes (with
    read_back: record for record; without: byte for byte in size).

    Contract: "An exporter that treats streams differently dispatches on record.STREAM or
    type(record)."
    """
    batches = corpus("all")
    ours = env.context("all", name="sdk-classes")
    run_ours = env.worker(ours, batches)
    env.assert_clean(run_ours, "SDK record classes")
    mixed = [as_mixed(b) for b in batches]
    assert any(_two_classes_of_a_stream(b) for b in mixed), "no mixed batch (the corpus)"
    for name, converted, what in (
        ("foreign-classes", [as_foreign(b) for b in batches], "look-alike record classes"),
        ("mixed-classes", mixed, "batches mixing the SDK's and look-alike classes"),
    ):
        theirs = env.context("all", name=name)
        run_theirs = env.worker(theirs, converted)
        env.assert_clean(run_theirs, what)
        handed = Counter(map(type, run_theirs.log.written()))
        assert handed, run_theirs.log.describe()
        assert handed == Counter(type(r) for b in converted for r in b), (
            f"the worker did not hand over the {what} it was given"
        )
        _same_output(env, ours, theirs, what)


def _two_classes_of_a_stream(records: list[Any]) -> bool:
    classes: dict[str, set[type]] = {}
    for record in records:
        classes.setdefault(record.STREAM, set()).add(type(record))
    return any(len(kinds) > 1 for kinds in classes.values())


def _same_output(env: Env, ours: ExporterContext, theirs: ExporterContext, what: str) -> None:
    """The run of SDK classes (``ours``) and a run of look-alikes read back the same."""
    got_ours, got_theirs = env.read_back(ours), env.read_back(theirs)
    if got_ours is not None and got_theirs is not None:
        problems = cmp.multiset_problems(got_ours, got_theirs, drop=())
        reordered = cmp.order_problems(got_ours, got_theirs, drop=())
        if not problems and not reordered:
            return
        lost = cmp.count_problems(got_ours, got_theirs)
        why = (
            f"records of the {what} were lost or misfiled; dispatch on record.STREAM "
            "(or on type(record), every class a stream's records arrive in), not isinstance "
            "and not the first class seen"
            if lost
            else "the same records read back with other values in the two runs, record for "
            "record: the output must be a function of the records (a value taken from the "
            "clock or a counter, such as a re-stamped observed_timestamp_unix_ns, differs)"
            if problems
            else "a stream's records read back in another order: records of one stream keep "
            "their payload order whatever classes they arrive in (grouping a batch by class "
            "reorders a stream that has two)"
        )
        problems += reordered
        assert not problems, (
            f"{what} were not handled like the SDK's classes (left: the SDK's classes, "
            f"right: the {what}); {why}:\n" + "\n".join(problems)
        )
    else:
        size_ours = sum(tree(ours.session_root).values())
        size_theirs = sum(tree(theirs.session_root).values())
        assert size_ours == size_theirs, (
            f"the same records wrote {size_ours} bytes as SDK classes but {size_theirs} bytes as "
            f"{what}; dispatch on record.STREAM, not isinstance (implement read_back "
            "for a record-level comparison)"
        )


def _setting_check(setting: str) -> CheckFunction:
    def check(env: Env) -> None:
        context = env.context(setting)
        run = env.worker(context, payloads=load_corpus())
        env.assert_clean(run, f"export_streams={setting!r} (streams {', '.join(context.streams)})")
        seen = {r.STREAM for r in run.log.written()}
        assert seen, run.log.describe()
        assert seen <= set(context.streams), f"the worker handed over {sorted(seen)}"
        actual = env.read_back(context)
        if actual is not None:
            stray = {
                s: len(rows) for s, rows in actual.items() if rows and s not in context.streams
            }
            assert not stray, f"records of unselected streams were read back: {stray}"
            problems = env.delivery_problems(run.log.written(), context, actual)
            assert not problems, f"export_streams={setting!r}:\n" + "\n".join(problems)

    check.__name__ = f"check_setting_{setting}"
    check.__doc__ = f"""Rule: the exporter works with export_streams={setting!r}, whose streams
    reach it through the worker's selection, and writes exactly those (with read_back:
    nothing under another stream, per-stream counts equal).

    The whole corpus is sent as raw payloads; the worker maps and selects them.

    Contract: "The export_streams setting chooses which records reach the exporter."
    """
    return check


for _setting in EXPORT_STREAM_NAMES:
    GROUP.check(_setting_check(_setting))
