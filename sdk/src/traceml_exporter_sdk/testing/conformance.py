"""``ExporterConformance``: the pytest base class that proves an exporter keeps the contract.

Subclass it in a test file and name the factory; every check of this SDK
release runs against it, each as its own test with a readable id such as
``test_thread_confinement[factory_is_inert]``::

    from traceml_exporter_sdk.testing import ExporterConformance

    class TestMyExporter(ExporterConformance):
        factory = "my_pkg.exporter:make_exporter"
        throughput_floor = 20_000                  # records/s, optional
        skip_checks = {"records_per_second": "CI machines are too slow"}
        xfail_checks = {}

        def read_back(self, context):              # optional: data-fidelity checks
            ...                                    # {STREAM: [dict, ...]}

Checks drive the exporter through the SDK's ``ExportWorker`` (a dedicated
thread, like TraceML's export worker), or for the call sequences the worker
never produces, through a scripted driver on one dedicated thread; a
recording proxy between them and the exporter logs every call, so call order
and thread identity are observed. The suite relies only on ``STREAM``,
``COLUMNS``, the fields and ``to_dict()`` of records, never on their classes.

The checks themselves live in :mod:`.checks` (one module per group); this
module holds only the base class that runs them as tests.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..context import ExporterContext
from ..factory import ExporterSettingError, validate_exporter_setting
from . import configuration as config
from ._resources import open_fds
from .checks import CHECKS, CHECKS_BY_NAME, check_names
from .environment import MOVED_BY_BREAK_SINK, NO_PERMANENT_FAULT, NO_READ_BACK, Env, Hooks, Settings
from .errors import ConformanceConfigError, ReadBackNotImplementedError
from .expected import expected_by_stream
from .keys import CHECK_MARKER
from .readback import read_jsonl
from .registry import GROUP_RULES, GROUPS, Check

__all__ = [
    "CHECKS",
    "GROUPS",
    "Check",
    "ConformanceConfigError",
    "Env",
    "ExporterConformance",
    "ReadBackNotImplementedError",
    "check_names",
    "spec_test_class",
]


class ExporterConformance:
    """Subclass in a test file and set ``factory``; every check runs as its own test.

    Class attributes (the numbers' defaults are ``environment.Settings``'):
        factory: ``"module:factory"`` (or ``"jsonl"``), or the factory callable.
        throughput_floor: records/s the exporter must sustain (default 20,000).
        skip_checks / xfail_checks: ``{check or group name: reason}``; a reason is required.
        grace_period: seconds for threads and fds to go after close (default 2).
        settle_time: seconds the sink must stay unchanged after close (default 0.3).
        failure_timeout: seconds a broken sink may be retried before it must raise (default 10).

    Hooks to override: ``read_back(context)``, ``expected_export(records, *,
    include_hostname)``, ``broken_context(context)``, ``break_sink(context)``,
    ``repair_sink(context)`` and ``break_sink_permanently(context)``.

    Each group of ``GROUP_RULES`` is one test, ``test_<group>``, made below the class.
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [getattr(pytest.mark, CHECK_MARKER)]

    factory: ClassVar[Any] = None
    throughput_floor: ClassVar[float] = Settings.throughput_floor
    skip_checks: ClassVar[Mapping[str, str]] = {}
    xfail_checks: ClassVar[Mapping[str, str]] = {}
    grace_period: ClassVar[float] = Settings.grace_period
    settle_time: ClassVar[float] = Settings.settle_time
    failure_timeout: ClassVar[float] = Settings.failure_timeout

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        config.validate(cls)

    # -- hooks ---------------------------------------------------------------------

    def read_back(self, context: ExporterContext) -> Mapping[str, list[dict[str, Any]]]:
        """Return what the exporter wrote for ``context``: ``{STREAM: [record dicts]}``.

        Override it to turn the data-fidelity checks on. Each dict is one
        record's ``to_dict()`` as the sink kept it (``stream`` and
        ``schema_version`` may be left out; ``hostname`` only when kept), in
        the sink's order. The built-in jsonl exporter's is built in
        (``read_jsonl``). Raise ``ReadBackNotImplementedError`` to switch it off.
        """
        if config.is_builtin_jsonl(type(self)):
            return read_jsonl(context)
        raise ReadBackNotImplementedError(NO_READ_BACK)

    def expected_export(
        self, records: Sequence[Any], *, include_hostname: bool = False
    ) -> Mapping[str, list[dict[str, Any]]]:
        """Return what ``read_back`` must give once ``records`` were delivered.

        Default: each record's ``to_dict()`` per STREAM (``expected_by_stream``),
        and the checks that count deliveries compare per-stream counts. Override
        it for a sink that keeps something other than records (series, metric
        points), in ``read_back``'s shape: every read-back comparison is then
        ``read_back(context) == expected_export(records)``, exactly (the
        record-level data-fidelity checks still need ``skip_checks``).
        """
        return expected_by_stream(records, include_hostname=include_hostname)

    def broken_context(self, context: ExporterContext) -> ExporterContext:
        """Return a context this exporter's ``open`` must fail with.

        Default: a regular file is put where ``export_dir`` should be, so
        creating the folder or anything in it fails (for root as well).
        Override it for a sink that does not live in ``export_dir``.
        """
        context.export_dir.parent.mkdir(parents=True, exist_ok=True)
        context.export_dir.write_text("a regular file where the export folder should be\n")
        return context

    def break_sink(self, context: ExporterContext) -> None:
        """Break the exporter's sink for good, mid-run (called on the main thread).

        Default: every file descriptor open on a file under ``session_root``
        is pointed at /dev/full (each write fails with ENOSPC), and
        ``export_dir`` is renamed and replaced by a regular file, so reopening
        fails too; neither needs permissions, so it works as root. Override it
        for a sink that is not a file under ``session_root`` (stop a test
        server, revoke a token, fill a quota, ...).
        """
        root = str(context.session_root.resolve()) + os.sep
        if os.path.exists("/dev/full"):
            full = os.open("/dev/full", os.O_RDWR)
            try:
                for fd in open_fds():
                    try:
                        target = os.readlink(f"/proc/self/fd/{fd}")
                    except OSError:
                        continue
                    if target.startswith(root):
                        os.dup2(full, fd)
            finally:
                os.close(full)
        export_dir = context.export_dir
        if export_dir.is_dir():
            export_dir.rename(export_dir.with_name(export_dir.name + MOVED_BY_BREAK_SINK))
        export_dir.parent.mkdir(parents=True, exist_ok=True)
        export_dir.write_text("a regular file where the export folder was\n")

    def repair_sink(self, context: ExporterContext) -> None:
        """Undo ``break_sink``: the outage is over, a new instance must deliver again.

        Default: undoes the default ``break_sink`` (the regular file goes and the
        moved ``export_dir`` comes back). Override it together with ``break_sink``
        (start the test server again, restore the token); where ``break_sink`` is
        overridden and this is not, the outage check is skipped and says so.
        """
        export_dir = context.export_dir
        moved = export_dir.with_name(export_dir.name + MOVED_BY_BREAK_SINK)
        if export_dir.is_file() or export_dir.is_symlink():
            export_dir.unlink()
        if moved.is_dir() and not export_dir.exists():
            moved.rename(export_dir)

    def break_sink_permanently(self, context: ExporterContext) -> None:
        """Break the sink mid-run in a way waiting cannot fix (called on the main thread).

        Examples: the credentials are refused from now on, the table's schema was
        changed to one the exporter's rows do not fit. The exporter must then raise an
        error marked permanent (a truthy ``permanent`` attribute, on it or on an
        exception in its ``__cause__``/``__context__`` chain), so ``follow`` ends at
        once (exit 7) instead of waiting for ever. Not defined by default: a sink
        whose every fault may pass (a file system) has no such fault, and the check
        is skipped with that reason.
        """
        raise NotImplementedError(NO_PERMANENT_FAULT)

    # -- pytest wiring -------------------------------------------------------------

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize each ``test_<group>`` with its checks, marked per skip/xfail_checks."""
        group = metafunc.function.__name__.removeprefix("test_")
        if group not in GROUPS or "check" not in metafunc.fixturenames:
            return
        cls = metafunc.cls if metafunc.cls is not None else type(self)
        config.validate(cls)
        params = []
        for check in CHECKS:
            if check.group != group:
                continue
            marks: list[pytest.MarkDecorator] = []
            reason = config.mark_reason(config.declared_skips(cls), check)
            if reason is not None:
                marks.append(pytest.mark.skip(reason=reason))
            reason = config.mark_reason(cls.xfail_checks, check)
            if reason is not None:
                marks.append(pytest.mark.xfail(reason=reason, strict=False))
            params.append(pytest.param(check.name, id=check.name, marks=marks))
        metafunc.parametrize("check", params)

    @pytest.fixture
    def conformance_env(self, tmp_path: Path, request: pytest.FixtureRequest) -> Env:
        """The per-check environment: the resolved factory, the class's settings and bound
        hooks, and a temporary folder; the checks read nothing else of the class.

        Figures go to ``user_properties`` directly rather than through the
        ``record_property`` fixture, which warns under ``--junitxml`` (xunit2)
        and so breaks projects that turn warnings into errors.
        """
        properties = request.node.user_properties

        def record(name: str, value: object) -> None:
            properties.append((name, value))

        cls = type(self)
        return Env(
            factory=config.resolved_factory(cls),
            spec=config.spec_string(cls),
            settings=config.settings_of(cls),
            hooks=Hooks(
                read_back=self.read_back if _has_read_back(cls) else None,
                broken_context=self.broken_context,
                break_sink=self.break_sink,
                expected_export=self.expected_export
                if _overrides(cls, "expected_export")
                else None,
                repair_sink=self.repair_sink
                if _overrides(cls, "repair_sink") or not _overrides(cls, "break_sink")
                else None,
                break_sink_permanently=self.break_sink_permanently
                if _overrides(cls, "break_sink_permanently")
                else None,
            ),
            tmp_path=tmp_path,
            record_property=record,
        )


def _group_test(group: str) -> Callable[[ExporterConformance, str, Env], None]:
    """The test function of one group, ``test_<group>``, parametrized by its checks."""

    def test(self: ExporterConformance, check: str, conformance_env: Env) -> None:
        _run(group, check, conformance_env)

    test.__name__ = f"test_{group}"
    test.__qualname__ = f"{ExporterConformance.__qualname__}.{test.__name__}"
    test.__doc__ = GROUP_RULES[group]
    return test


for _group in GROUPS:
    setattr(ExporterConformance, f"test_{_group}", _group_test(_group))


def _overrides(cls: type, hook: str) -> bool:
    return config.class_attr(cls, hook) is not ExporterConformance.__dict__[hook]


def _has_read_back(cls: type) -> bool:
    overridden = (
        config.class_attr(cls, "read_back") is not ExporterConformance.__dict__["read_back"]
    )
    return overridden or config.is_builtin_jsonl(cls)


def _run(group: str, name: str, env: Env) -> None:
    check = CHECKS_BY_NAME[name]
    assert check.group == group, (group, name)
    if check.needs_read_back and not env.has_read_back:
        pytest.skip(NO_READ_BACK)
    check.func(env)


def spec_test_class(spec: Any, *, read_back: str | None = None) -> type[ExporterConformance]:
    """The suite for ``spec`` as a test class, as ``--traceml-exporter SPEC`` collects it.

    ``read_back`` optionally names a ``module:function`` taking the context.
    """
    namespace: dict[str, Any] = {"factory": spec, "__doc__": f"Conformance suite for {spec}."}
    if read_back is not None:
        try:
            validate_exporter_setting(read_back)
        except ExporterSettingError as exc:
            raise ConformanceConfigError(f"--traceml-read-back: {exc}") from None
        reader = config.import_factory(read_back)

        def read_back_hook(self: ExporterConformance, context: ExporterContext) -> Any:
            return reader(context)

        namespace["read_back"] = read_back_hook
    return type("TestExporter", (ExporterConformance,), namespace)
