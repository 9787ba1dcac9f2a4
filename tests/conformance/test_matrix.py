"""Prove the suite's power: each broken exporter fails exactly the checks of its rule.

Every exporter in ``broken_exporters.py`` breaks one rule. The suite runs on it
in-process (``pytester``), with the jsonl reader as ``read_back``, and the set of
failed test ids must equal the expected set: the checks of that rule, plus, for
a mistake that breaks every run (a sqlite connection made in the factory, a
close without the keyword), every check that needs a working run. The reference
exporters, which must pass everything, are in ``test_reference_exporters.py``.
"""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path

import pytest
from broken_exporters import LEAK_SECONDS
from traceml_exporter_sdk.testing import CHECKS
from traceml_exporter_sdk.testing._causes import FAULTS, report_message, root_cause

HERE = Path(__file__).parent

# The suite runs in this process, under this run's filterwarnings = error. Several
# broken exporters leak files on purpose (the suite finds that through /proc/self/fd),
# and the suite drops the exporters it made (twenty factory calls): the interpreter's
# ResourceWarning for such a file (or pytest's unraisable-exception warning for it) is
# not what these tests look at; failed_checks collects that garbage before it returns.
pytestmark = pytest.mark.filterwarnings(
    "ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning"
)
ALL = frozenset(check.test_id for check in CHECKS)


def ids(*names: str) -> frozenset[str]:
    """Test ids of the named checks, e.g. ``test_lifecycle[open_close]``."""
    by_name = {check.name: check.test_id for check in CHECKS}
    return frozenset(by_name.get(name, name) for name in names)


# What still passes when every run of the exporter fails: the checks that never
# run a whole lifecycle, or that are about a failure anyway.
SQLITE_SURVIVES = ids(
    "method_signatures",
    "permanent_fault_marked",  # skipped: no break_sink_permanently
    "open_failure_leaks_nothing",
    "fresh_subprocess",
    "import_has_no_side_effects",
)
CLOSE_SURVIVES = ids(
    "factory_is_inert",
    "open_failure_leaks_nothing",
    "sink_failure_raised",
    "no_non_daemon_thread_after_failure",
    "close_failure_raised",  # close raises: not a swallowed failure
    "failure_releases_resources",
    "transient_fault_not_permanent",  # its write fails unmarked on the broken sink
    "permanent_fault_marked",  # skipped: no break_sink_permanently
    "fresh_subprocess",
    "import_has_no_side_effects",
)

MATRIX: dict[str, frozenset[str]] = {
    # thread confinement
    "broken_exporters:make_resource_in_factory": ids("factory_is_inert"),
    "broken_exporters:make_sqlite_in_factory": ALL - SQLITE_SURVIVES,
    "broken_exporters:make_leaked_thread": ids(
        "resources_released_after_close",
        "nothing_written_after_close",
        "failure_releases_resources",
    ),
    "broken_exporters:make_leaked_fd": ids(
        "resources_released_after_close", "failure_releases_resources", "fault_at_every_io_call"
    ),
    # its metrics thread runs the exporter's code beside the worker, and raises there
    "broken_exporters:make_thread_raises": ids(
        "no_exception_in_exporter_threads", "only_worker_thread_runs_exporter"
    ),
    # lifecycle
    "broken_exporters:make_close_without_keyword": ALL - CLOSE_SURVIVES,
    # opening its files in the first write, flush and close fail when nothing was written
    "broken_exporters:make_lazy_open": ids("open_close", "open_flush_close"),
    "broken_exporters:make_flush_not_idempotent": ids("open_flush_close", "flush_twice"),
    # each flush empties what earlier flushes delivered: every delivery check sees it
    "broken_exporters:make_flush_truncates": ids(
        "writes_interleaved_with_flushes",
        "flush_is_acknowledgement",
        "unflushed_records_readable_after_close",
        "close_accepts_dropped_batches",
        "restart_after_failure",
        "instances_side_by_side",
        # and it refuses every restart (its files are made with exist_ok=False)
        "restart_after_kill",
        "new_instance_after_outage",
    ),
    # a restart in the same process is refused, after a close or a failure alike
    "broken_exporters:make_process_global_lock": ids(
        "two_instances_in_sequence", "new_instance_after_outage"
    ),
    # STREAM dispatch
    "broken_exporters:make_isinstance_dispatch": ids("foreign_record_classes"),
    "broken_exporters:make_one_class_per_stream": ids("foreign_record_classes"),
    "broken_exporters:make_grouped_by_class": ids("foreign_record_classes"),
    "broken_exporters:make_assumes_step_time": ids(
        "setting_step_memory", "setting_process", "setting_system"
    ),
    "broken_exporters:make_one_stream_per_batch": ids(
        "writes_interleaved_with_flushes",
        "two_instances_in_sequence",
        "interleaved_streams",
        "setting_system",
        "setting_all",
        "unflushed_records_readable_after_close",
        "close_accepts_dropped_batches",
        "every_record_once",
        "duplicates_kept",
        "values_equal_to_dict",
        "hostname_kept_when_enabled",
        "special_floats",
        "hostile_text",  # the hostile batches hold every stream
        "flush_is_acknowledgement",
        "large_flush_interval",
        "restart_after_failure",
        "instances_side_by_side",
        "restart_with_other_streams",
        "restart_after_kill",
        "new_instance_after_outage",
        "fault_at_every_io_call",  # its lifecycles that ran through are read back
    ),
    # close semantics
    "broken_exporters:make_no_flush_on_close": ids(
        "unflushed_records_readable_after_close",
        "close_accepts_dropped_batches",
        "close_failure_raised",  # after break_sink too, close returns with records lost
    ),
    "broken_exporters:make_rejects_dropped_batches": ids("close_accepts_dropped_batches"),
    "broken_exporters:make_writes_after_close": ids("nothing_written_after_close"),
    # data fidelity
    "broken_exporters:make_hostname_leaked": ids("hostname_dropped_by_default"),
    "broken_exporters:make_hostname_always_dropped": ids("hostname_kept_when_enabled"),
    "broken_exporters:make_records_reordered": ids("per_stream_order"),
    "broken_exporters:make_duplicates_dropped": ids("duplicates_kept"),
    "broken_exporters:make_lossy_values": ids(
        "values_equal_to_dict",
        "special_floats",
        "hostile_text",  # its records carry measured zeros too
        "hostname_kept_when_enabled",  # a hostname "" (the value space's) becomes null
    ),
    "broken_exporters:make_hostile_text_crash": ids("hostile_text"),
    # failure behaviour
    "broken_exporters:make_leaks_on_open_failure": ids(
        "open_failure_leaks_nothing", "fault_at_every_io_call"
    ),
    # an I/O call in open fails (EIO, EMFILE) where no break_sink reaches: a listing of
    # the export folder, the wrapping of a bare descriptor
    "broken_exporters:make_leaks_folder_when_listing_fails": ids("fault_at_every_io_call"),
    "broken_exporters:make_swallows_listing_failure": ids("fault_at_every_io_call"),
    "broken_exporters:make_leaks_descriptor_when_wrap_fails": ids("fault_at_every_io_call"),
    "broken_exporters:make_swallows_close_failure": ids("fault_at_every_io_call"),
    "broken_exporters:make_swallowed_sink_error": ids(
        "sink_failure_raised", "close_failure_raised", "fault_at_every_io_call"
    ),
    "broken_exporters:make_non_daemon_thread_after_failure": ids(
        "no_non_daemon_thread_after_failure", "failure_releases_resources"
    ),
    # delivery across flushes, closes, restarts and failures (broken_delivery.py)
    # what the first instance flushed before it failed was never written
    "broken_delivery:make_flush_not_durable": ids(
        "flush_is_acknowledgement",
        "restart_after_failure",
        "instances_side_by_side",  # run B's flushed records, lost when it failed
        "restart_after_kill",
        "new_instance_after_outage",
    ),
    "broken_delivery:make_dropped_batches_rollback": ids("close_accepts_dropped_batches"),
    "broken_delivery:make_bounded_buffer": ids("large_flush_interval"),
    "broken_delivery:make_truncates_on_restart": ids(
        "two_instances_in_sequence",
        "restart_after_failure",
        "restart_with_other_streams",
        "restart_after_kill",
        "new_instance_after_outage",
    ),
    "broken_delivery:make_close_swallows_failure": ids(
        "close_failure_raised", "fault_at_every_io_call"
    ),
    "broken_delivery:make_auto_flush_timer": ids("only_worker_thread_runs_exporter"),
    # its connection stays open after any failing write: break_sink's, or a journal
    # sqlite cannot open for want of a descriptor
    "broken_delivery:make_sqlite_left_open_on_failure": ids(
        "failure_releases_resources", "fault_at_every_io_call"
    ),
    "broken_delivery:make_mutates_records": ids(
        "records_left_unchanged", "values_equal_to_dict", "special_floats", "hostile_text"
    ),
    "broken_delivery:make_flattens_devices": ids(
        "values_equal_to_dict", "special_floats", "hostile_text"
    ),
    # the value space, compared type-strictly (broken_values.py)
    "broken_values:make_non_finite_as_null": ids("special_floats"),
    "broken_values:make_integral_floats_as_ints": ids("values_equal_to_dict", "special_floats"),
    "broken_values:make_negative_zero_lost": ids("special_floats"),
    "broken_values:make_bools_as_ints": ids(
        "values_equal_to_dict", "special_floats", "hostile_text"
    ),
    # causes: the explanation must be the one the evidence supports
    "broken_delivery:make_one_row_per_key": ids(
        "writes_interleaved_with_flushes",
        "two_instances_in_sequence",
        "restart_after_failure",
        "interleaved_streams",
        "setting_step_time",
        "setting_step_memory",
        "setting_system",
        "setting_all",
        "flush_is_acknowledgement",
        "unflushed_records_readable_after_close",
        "close_accepts_dropped_batches",
        "every_record_once",
        "duplicates_kept",
        "values_equal_to_dict",
        "hostname_kept_when_enabled",
        "large_flush_interval",
        "instances_side_by_side",
        "restart_with_other_streams",
        "restart_after_kill",
        "new_instance_after_outage",
        "fault_at_every_io_call",  # its lifecycles that ran through are read back
    ),
    "broken_delivery:make_clock_stamped": ids(
        "foreign_record_classes", "values_equal_to_dict", "hostile_text", "special_floats"
    ),
    # what the runners do (broken_runners.py): several runs at once (follow --logs-dir),
    # a new instance after an outage or a kill (follow), a restart with other streams,
    # a fault marked transient or permanent
    "broken_runners:make_class_attribute_store": ids("instances_side_by_side"),
    "broken_runners:make_module_client": ids("instances_side_by_side"),
    "broken_runners:make_keyed_by_folder_name": ids("instances_side_by_side"),
    "broken_runners:make_lock_left_on_failure": ids("new_instance_after_outage"),
    # a lock file that only a removal frees: a kill, or a failed removal in close, keeps it
    "broken_runners:make_lock_outlives_process": ids(
        "restart_after_kill", "new_instance_after_outage"
    ),
    "broken_runners:make_streams_fixed_at_first_open": ids("restart_with_other_streams"),
    "broken_runners:make_oserror_permanent": ids("transient_fault_not_permanent"),
    "broken_runners:make_credentials_unmarked": ids("permanent_fault_marked"),
    "broken_runners:make_credentials": frozenset(),  # marks the refusal: passes everything
    # every restart shows the first instance's records twice
    "broken_runners:make_replays_on_restart": ids(
        "two_instances_in_sequence",
        "restart_after_failure",
        "restart_with_other_streams",
        "new_instance_after_outage",
    ),
    # throughput, importability
    "broken_exporters:make_slow": ids("records_per_second"),
    "broken_path_dependent:make_exporter": ids("fresh_subprocess"),
    "broken_import_effects:make_exporter": ids("import_has_no_side_effects"),
}

# The exporters whose one mistake fails many checks, and the check that names it: the
# suite's summary and `traceml-exporter check` print it first (testing._causes).
CAUSES = {
    "broken_exporters:make_sqlite_in_factory": "factory_is_inert",
    "broken_exporters:make_close_without_keyword": "method_signatures",
    "broken_exporters:make_one_stream_per_batch": "interleaved_streams",
}

# Failures whose message must not blame a mistake the evidence does not show: a sink
# keeping one row per key misfiles nothing (no "one stream per batch"), and one that
# stamps its own clock loses no look-alike record (no "isinstance").
WRONG_CAUSES = {
    "broken_delivery:make_one_row_per_key": ("interleaved_streams", "landed under another"),
    "broken_delivery:make_clock_stamped": ("foreign_record_classes", "isinstance"),
    # more records came back than were written: nothing of the first instance was lost
    "broken_runners:make_replays_on_restart": ("two_instances_in_sequence", "lost what"),
}

# The broken exporters write JSON with the standard library, which a busy
# machine can push below the default floor; only make_slow is held to it.
FLOORS = {"broken_exporters:make_slow": 20_000}

# Test-file hooks some exporters need: a sink whose credentials the test can revoke.
REVOKE = """
    def break_sink_permanently(self, context):
        import broken_runners

        broken_runners.REVOKED.add(str(context.session_root))
"""
HOOKS = {
    "broken_runners:make_credentials": REVOKE,
    "broken_runners:make_credentials_unmarked": REVOKE,
}

TEST_FILE = """
from traceml_exporter_sdk.testing import ExporterConformance, read_jsonl


class TestBroken(ExporterConformance):
    factory = {spec!r}
    grace_period = 1.0
    throughput_floor = {floor}

    def read_back(self, context):
        return read_jsonl(context)
{hooks}"""


def failed_checks(pytester: pytest.Pytester, spec: str) -> dict[str, str]:
    """The failed checks' test ids, each with its failure message."""
    floor = FLOORS.get(spec, 5_000)
    source = TEST_FILE.format(spec=spec, floor=floor, hooks=HOOKS.get(spec, ""))
    pytester.makepyfile(test_broken=source)
    before = set(threading.enumerate())
    recorder = pytester.inline_run(
        "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestUnhandledThreadExceptionWarning"
    )
    reports = recorder.getreports("pytest_runtest_logreport")
    assert reports, "the suite collected nothing"
    failed = {r.nodeid.rpartition("::")[2]: report_message(r) for r in reports if r.failed}
    # Runs the suite gave up on (a slow exporter, a leaked heartbeat) end within seconds;
    # then the files they leaked go, under this module's filters rather than in a later
    # test, once nothing of the inner run (its reports keep tracebacks) holds them.
    del recorder, reports
    deadline = time.monotonic() + 2 * LEAK_SECONDS
    for thread in set(threading.enumerate()) - before:
        thread.join(max(0.0, deadline - time.monotonic()))
    gc.collect()
    return failed


def label(spec: str) -> str:
    module, _, factory = spec.partition(":")
    if module in ("broken_exporters", "broken_delivery", "broken_values", "broken_runners"):
        return factory.removeprefix("make_")
    return module


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE / "_inprocess_only"))
    monkeypatch.syspath_prepend(str(HERE))


def test_every_check_is_caught_by_some_broken_exporter() -> None:
    """Each check has at least one broken exporter that fails it ("add one per check")."""
    caught = frozenset().union(*MATRIX.values())
    assert sorted(ALL - caught) == []


@pytest.mark.usefixtures("on_path")
@pytest.mark.parametrize(("spec", "expected"), MATRIX.items(), ids=[label(s) for s in MATRIX])
def test_broken_exporter_fails_exactly_its_checks(
    pytester: pytest.Pytester, spec: str, expected: frozenset[str]
) -> None:
    messages = failed_checks(pytester, spec)
    failed = set(messages)
    assert sorted(failed - expected) == [], "failed checks outside the exporter's rule"
    assert sorted(expected - failed) == [], "checks of the exporter's rule that did not fail"
    cause = root_cause(sorted(messages.items()))
    if spec in CAUSES:
        assert cause is not None, "a cascade with no root cause named"
        assert f"({CAUSES[spec]}):" in cause.line, cause.line
        assert sorted(failed - set(cause.explained)) == [], "failures the cause leaves out"
    elif cause is not None:  # a shared error is named as it is, never as a known fault
        assert not any(f"({fault.check}):" in cause.line for fault in FAULTS), cause.line
    if spec in WRONG_CAUSES:
        check, wrong = WRONG_CAUSES[spec]
        (message,) = [m for test_id, m in messages.items() if test_id.endswith(f"[{check}]")]
        assert wrong not in message, message
