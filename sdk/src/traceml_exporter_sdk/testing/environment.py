"""``Env``: the one argument every conformance check gets, carrying every setting and hook.

A check reads the factory, the class's numbers (``Settings``) and the
overridable hooks (``Hooks``) from here and never from the test class, so a
check is a plain function of its environment.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..context import ExporterContext
from . import _compare as cmp
from ._harness import METHODS, Run, run_script, run_worker
from .errors import ReadBackNotImplementedError

__all__ = [
    "HOSTILE_HINT",
    "MOVED_BY_BREAK_SINK",
    "MOVE_TO_OPEN",
    "NO_PERMANENT_FAULT",
    "NO_READ_BACK",
    "Env",
    "ExpectedExport",
    "Factory",
    "Hooks",
    "Settings",
]

Factory = Callable[[ExporterContext], Any]

MOVE_TO_OPEN = (
    "Create connections, clients and files in open(), not in the factory: the factory runs "
    "on the main thread, and the four methods run on the worker thread, so a resource made "
    'in the factory belongs to the wrong thread (contract: "Create connections, clients '
    'and files in open, not in the factory, so they belong to the thread that uses them.").'
)

HOSTILE_HINT = (
    "a record's text may hold any str, lone surrogates and NUL included (the corpus's "
    "HOSTILE_TEXT); store what the sink cannot hold as it is escaped, e.g. as its JSON "
    "\\uXXXX escape, rather than fail the run on a valid record"
)

MOVED_BY_BREAK_SINK = ".moved-by-break-sink"
"""The suffix the default ``break_sink`` gives ``export_dir`` when it moves it aside."""

NO_PERMANENT_FAULT = (
    "break_sink_permanently is not defined for this exporter: define "
    "break_sink_permanently(self, context) to break its sink in a way waiting cannot fix "
    "(credentials refused, a schema the sink refuses), and the suite checks that the "
    "exporter marks that failure permanent"
)

NO_READ_BACK = (
    "read_back is not implemented for this exporter; implement read_back(self, context) "
    "returning {STREAM: [record dicts]} to turn the data-fidelity checks on"
)


@dataclass(frozen=True)
class Settings:
    """The numbers a conformance class sets, validated; their only defaults (the class
    attributes of ``ExporterConformance`` read them)."""

    throughput_floor: float = 20_000
    grace_period: float = 2.0
    settle_time: float = 0.3
    failure_timeout: float = 10.0


ExpectedExport = Callable[..., Mapping[str, list[dict[str, Any]]]]
"""``expected_export(records, *, include_hostname)``: what ``read_back`` must give for them."""


@dataclass(frozen=True)
class Hooks:
    """The class's overridable hooks, bound; ``read_back`` is None when there is none.

    ``expected_export`` is None unless the class overrides it (a sink that keeps
    something other than records, e.g. series): then every read-back comparison is
    ``read_back == expected_export(records)``, exactly, instead of per-record counts.
    """

    read_back: Callable[[ExporterContext], Mapping[str, list[dict[str, Any]]]] | None
    broken_context: Callable[[ExporterContext], ExporterContext]
    break_sink: Callable[[ExporterContext], None]
    expected_export: ExpectedExport | None = None
    repair_sink: Callable[[ExporterContext], None] | None = None
    """Undoes ``break_sink``; None where ``break_sink`` is overridden and it is not."""
    break_sink_permanently: Callable[[ExporterContext], None] | None = None
    """A fault waiting cannot fix; None where the class does not define one."""


class Env:
    """What one check gets: the factory, its settings and hooks, and a temporary folder."""

    def __init__(
        self,
        *,
        factory: Factory,
        spec: str | None,
        settings: Settings,
        hooks: Hooks,
        tmp_path: Path,
        record_property: Callable[[str, object], None],
    ) -> None:
        self.factory = factory
        self.spec = spec
        """The factory as ``module:factory`` (aliases expanded), or None when it has no name."""
        self.settings = settings
        self.hooks = hooks
        self.tmp_path = tmp_path
        self.record_property = record_property

    @property
    def grace(self) -> float:
        """Seconds threads and file descriptors get to go after close."""
        return float(self.settings.grace_period)

    def context(
        self,
        export_streams: str | None = "all",
        *,
        include_hostname: bool = False,
        name: str = "session",
    ) -> ExporterContext:
        """A fresh run folder (created, as TraceML's is) and its context."""
        root = self.tmp_path / name
        root.mkdir(parents=True, exist_ok=True)
        return ExporterContext.create(root, export_streams, include_hostname)

    def worker(
        self, context: ExporterContext, batches: Sequence[Sequence[Any]] = (), **kw: Any
    ) -> Run:
        """A whole run through the SDK's ``ExportWorker``, recorded."""
        return run_worker(self.factory, context, batches, **kw)

    def script(
        self,
        context: ExporterContext,
        steps: Sequence[tuple[str, Any]],
        at_pause: Callable[[], None] | None = None,
    ) -> Run:
        """A call sequence the worker never makes, on one dedicated thread, recorded."""
        return run_script(self.factory, context, steps, at_pause=at_pause)

    @property
    def has_read_back(self) -> bool:
        return self.hooks.read_back is not None

    def read_back(self, context: ExporterContext) -> cmp.ReadBack | None:
        """The suite's ``read_back`` output, validated; None when it is not implemented."""
        if self.hooks.read_back is None:
            return None
        try:
            value = self.hooks.read_back(context)
        except ReadBackNotImplementedError:
            return None
        try:
            return cmp.validate_read_back(value)
        except TypeError as exc:
            pytest.fail(f"read_back returned the wrong shape: {exc}", pytrace=False)

    def read_back_after_break(self, context: ExporterContext) -> cmp.ReadBack | None:
        """``read_back`` of what the sink holds after ``break_sink``: where the default hook
        moved ``export_dir`` aside, read there (what reached the files before the break)."""
        moved = context.export_dir.with_name(context.export_dir.name + MOVED_BY_BREAK_SINK)
        if moved.is_dir() and not context.export_dir.is_dir():
            context = dataclasses.replace(context, export_dir=moved)
        try:
            return self.read_back(context)
        except Exception:
            return {}

    @property
    def aggregating(self) -> bool:
        """True when the sink's read-back is compared with its own ``expected_export``."""
        return self.hooks.expected_export is not None

    def expected(self, records: Sequence[Any], context: ExporterContext) -> cmp.ReadBack:
        """What ``read_back(context)`` must give once ``records`` (snapshots) were delivered."""
        own = self.hooks.expected_export
        if own is None:
            return cmp.expected_by_stream(records, include_hostname=context.include_hostname)
        return cmp.validate_read_back(own(records, include_hostname=context.include_hostname))

    def delivery_problems(
        self, records: Sequence[Any], context: ExporterContext, actual: cmp.ReadBack
    ) -> list[str]:
        """How ``actual`` falls short of ``records`` delivered: per-stream counts, or for a
        sink with its own ``expected_export`` any difference from it."""
        expected = self.expected(records, context)
        if self.aggregating:
            return cmp.multiset_problems(expected, actual)
        return cmp.count_problems(expected, actual)

    def require_read_back(self, context: ExporterContext) -> cmp.ReadBack:
        """Like ``read_back``, but skips the check when there is none."""
        actual = self.read_back(context)
        if actual is None:
            pytest.skip(NO_READ_BACK)
        return actual

    def assert_clean(self, run: Run, what: str = "the run") -> None:
        """The run finished in time and no exporter call raised."""
        if run.timed_out:
            pytest.fail(
                f"{what}: the exporter did not finish within the time limit; calls so far: "
                f"{run.log.describe()}",
                pytrace=False,
            )
        failure = run.failure
        if failure is not None:
            pytest.fail(
                f"{what}: the exporter failed in {failure}{failure_hint(failure)}\n"
                f"calls: {run.log.describe()}",
                pytrace=False,
            )


def failure_hint(failure: str) -> str:
    """A line on the usual cause of a failure message, or nothing."""
    low = failure.lower()
    if "thread" in low:
        return "\n" + MOVE_TO_OPEN
    if "dropped_batches" in low:
        return (
            "\nclose must accept a keyword-only dropped_batches: "
            "def close(self, *, dropped_batches: int = 0) -> None"
        )
    if "has no attribute" in low and any(f"'{m}'" in low for m in METHODS):
        return "\nan exporter must have the four methods open, write, flush and close"
    if "surrogate" in low or "unicodeencodeerror" in low or "(0x00)" in low:
        return "\n" + HOSTILE_HINT
    return ""
