"""The Prometheus sink against real servers: the mapping, settings, and delivery under faults.

The servers (``sink_support``) are Debian's Prometheus and VictoriaMetrics binaries,
each its own process on 127.0.0.1; faults are played on the real server (stopped,
restarted, refusing an old sample, a bad token through vmauth) or by a proxy in
front of it (503s, a tarpit), never mocked in the exporter's client.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from exporter_calls import is_permanent, one_folder_named_two_ways, run
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from sink_support import (
    ENDPOINT_VARIABLE,
    expected_values,
    instances,
    metrics_server,
    read_values,
    selector,
)
from suite_helpers import closed_port_url
from traceml_exporter_sdk import (
    ExporterContext,
    ExportRecord,
    ExportWorker,
    RuntimeEnvironmentRecord,
    StepMemoryRecord,
    StepTimeRecord,
    SystemGpuRecord,
    SystemRecord,
)
from traceml_exporter_sdk.testing import corpus_records
from traceml_exporter_sdk.testing.fault_proxy import FaultProxy
from traceml_exporter_sdk.testing.prometheus_server import MetricsServer, vmauth_proxy
from traceml_exporter_sdk.testing.strategies import record_batches

from traceml_exporter_example._prometheus_series import CardinalityError
from traceml_exporter_example.exporter import (
    RECEIPT_FILE,
    ExampleExporter,
    PrometheusWriteError,
    make_exporter,
)

VM_DIGITS = 1e-11
"""VictoriaMetrics keeps about 12 significant digits: the relative tolerance there."""
VM_TINY = 1e-290
"""VictoriaMetrics stores a value of a few 1e-299 or less as 0 (its decimal exponent's
range; 2.4e-299 was seen read back as 0.0): the absolute tolerance."""


def exporter_for(context: ExporterContext, **options: Any) -> ExampleExporter:
    """The exporter with test-sized options, settings from the environment as the factory's."""
    options.setdefault("backoff_s", (0.05, 0.2))
    return ExampleExporter(
        {k: v for k, v in os.environ.items() if k.startswith("PROMETHEUS_REMOTE_WRITE_")},
        session_root=context.session_root,
        export_dir=context.export_dir,
        include_hostname=context.include_hostname,
        **options,
    )


@pytest.fixture
def victoria() -> MetricsServer:
    """VictoriaMetrics, with the write URL pointing at it for this test."""
    server = metrics_server("victoria-metrics")
    os.environ[ENDPOINT_VARIABLE] = server.write_url
    return server


@pytest.fixture
def proxy(prometheus_peer: MetricsServer) -> Iterator[FaultProxy]:
    """A fault proxy in front of Prometheus, with the write URL pointing at it."""
    fault = FaultProxy(prometheus_peer.port)
    os.environ[ENDPOINT_VARIABLE] = fault.url + "/api/v1/write"
    try:
        yield fault
    finally:
        fault.close()


def close_enough(
    got: dict[str, float], want: dict[str, float], rel: float = 0.0, tiny: float = 0.0
) -> list[str]:
    """Series missing, extra, or whose values differ beyond ``rel`` and ``tiny`` (NaN
    equals NaN); [] when all match."""
    bad = sorted(set(got) ^ set(want))
    for series in set(got) & set(want):
        a, b = got[series], want[series]
        same = a == b or (math.isnan(a) and math.isnan(b))
        if not (same or math.isclose(a, b, rel_tol=rel, abs_tol=tiny)):
            bad.append(f"{series}: {a!r} != {b!r}")
    return bad


# -- mapping -------------------------------------------------------------------------


def test_factory_only_copies_settings(
    context: ExporterContext, prometheus_peer: MetricsServer
) -> None:
    exporter = make_exporter(context)
    assert exporter.settings is None
    assert exporter.environment[ENDPOINT_VARIABLE] == prometheus_peer.write_url
    assert not context.session_root.exists()


def test_the_series_follow_the_mapping(
    hostname_context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(hostname_context, records)
    values = read_values(hostname_context)
    step = 'traceml_steps_total{hostname="node-a",node="0",rank="0"}'
    assert values[step] == 2.0  # the duplicate record is a second step seen
    assert values['traceml_steps_total{node="0",rank="1"}'] == 1.0  # no hostname: no label
    phase = 'phase="_traceml_internal:forward_time",rank="0"'
    labels = f'device="cuda:0",hostname="node-a",le="0.025",node="0",{phase}'
    bucket = "traceml_step_phase_seconds_bucket{" + labels + "}"
    assert values[bucket] == 2.0  # 12.5 ms, twice
    gpu = 'traceml_gpu_temperature_celsius{gpu="1",hostname="node-a",node="0"}'
    assert gpu not in values  # None: no value, not 0
    assert values['traceml_gpu_temperature_celsius{gpu="0",hostname="node-a",node="0"}'] == 61.0
    assert values == expected_values(records, include_hostname=True)


def test_hostname_is_a_label_only_when_enabled(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    run(context, records)
    values = read_values(context)
    assert values
    assert not [series for series in values if "hostname=" in series]


def test_counters_grow_across_flushes_and_timestamps_increase(
    context: ExporterContext, records: list[ExportRecord], prometheus_peer: MetricsServer
) -> None:
    step = records[0]
    run(context, [step], [step, step], [step])
    (instance,) = instances(context)
    (series,) = prometheus_peer.samples(selector("traceml_steps_total", instance=instance))
    assert series.values == [1.0, 3.0, 4.0]
    assert series.timestamps_ms == sorted(set(series.timestamps_ms))


def test_a_reopened_exporter_starts_new_series(
    context: ExporterContext, records: list[ExportRecord], prometheus_peer: MetricsServer
) -> None:
    run(context, records[:1])
    run(context, records[:1])
    first, second = instances(context)
    assert first != second
    found = prometheus_peer.samples(selector("traceml_steps_total", instance=[first, second]))
    assert sorted(s.values[-1] for s in found) == [1.0, 1.0]
    assert {s.labels["run"] for s in found} == {context.session_root.name}
    assert {s.labels["session_root"] for s in found} == {str(context.session_root.resolve())}


def test_the_run_is_keyed_by_its_resolved_folder(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    records: list[ExportRecord],
    prometheus_peer: MetricsServer,
) -> None:
    """``session_root`` is the run's key, ``run`` its short name: ``run1`` named relatively
    or absolutely is one key; another folder named run1 has the same name, another key."""
    relative, absolute, other = one_folder_named_two_ways(tmp_path, monkeypatch)
    for context in (relative, absolute, other):
        run(context, records[:1])
    ids = instances(relative) + instances(other)
    found = prometheus_peer.samples(selector("traceml_steps_total", instance=ids))
    labels = {s.labels["instance"]: (s.labels["session_root"], s.labels["run"]) for s in found}
    folders = [str((tmp_path / name / "run1").resolve()) for name in ("logs", "elsewhere")]
    assert [labels[i] for i in ids] == [(folders[0], "run1")] * 2 + [(folders[1], "run1")]


# Two batches hypothesis found (seeds 1 and 11): a rank's environment replaced within one
# flush, both times on the rank-less identity (rank and node None), the likeliest repeat.
# VictoriaMetrics' raw export returned the replaced series' staleness marker as a NaN
# sample at the flush's timestamp, so the read-back took it for a live series.
_REPLACED_IN_ONE_FLUSH = [
    RuntimeEnvironmentRecord(observed_timestamp_unix_ns=1054137496678330240, rank=None, global_rank=None, local_rank=None, world_size=561, local_world_size=280, node_rank=None, hostname="node-a", pid=None, timestamp_unix_ns=1000000000000000001, seq=None, topology=None, distributed_initialized=None, distributed_backend="gloo", training_strategy="ddp", strategy_source="env", strategy_confidence="high"),
    SystemGpuRecord(observed_timestamp_unix_ns=2410983010693964288, global_rank=1, local_rank=4, world_size=None, local_world_size=None, node_rank=0, hostname="v\xb42\x18\xda", timestamp_unix_ns=None, seq=898, gpu_idx=2, util=0.0, mem_used_bytes=2.2250738585072014e-308, mem_total_bytes=0.0, temperature_c=None, power_usage_w=-6.226745302917673e16, power_limit_w=None),
    SystemGpuRecord(observed_timestamp_unix_ns=2410983010693964288, global_rank=1, local_rank=4, world_size=None, local_world_size=None, node_rank=0, hostname="v\xb42\x18\xda", timestamp_unix_ns=None, seq=898, gpu_idx=2, util=0.0, mem_used_bytes=2.2250738585072014e-308, mem_total_bytes=0.0, temperature_c=None, power_usage_w=-6.226745302917673e16, power_limit_w=None),
    RuntimeEnvironmentRecord(observed_timestamp_unix_ns=6870723421657534464, rank=None, global_rank=None, local_rank=5, world_size=132, local_world_size=66, node_rank=None, hostname="node-a", pid=1234, timestamp_unix_ns=1700895646035687680, seq=1023, topology="single_process", distributed_initialized=0, distributed_backend=None, training_strategy="ddp", strategy_source=None, strategy_confidence="high"),
]  # fmt: skip
_REPLACED_TWICE = [
    StepMemoryRecord(observed_timestamp_unix_ns=7705132577961326592, rank=None, global_rank=None, local_rank=4, world_size=None, local_world_size=None, node_rank=None, hostname="+I\U000c5aba", timestamp_unix_ns=6859366612270577664, seq=1365, device="cuda:0", step=None, peak_alloc_bytes=None, peak_reserved_bytes=0.0),
    RuntimeEnvironmentRecord(observed_timestamp_unix_ns=7035118027752693760, rank=None, global_rank=None, local_rank=None, world_size=None, local_world_size=None, node_rank=None, hostname="\xbby[", pid=None, timestamp_unix_ns=3830789477607976448, seq=None, topology="multi_node_multi_process", distributed_initialized=1, distributed_backend="gloo", training_strategy="ddp", strategy_source=None, strategy_confidence=None),
    StepTimeRecord(observed_timestamp_unix_ns=1341168423861504000, rank=None, global_rank=None, local_rank=0, world_size=None, local_world_size=None, node_rank=None, hostname="\x9c", timestamp_unix_ns=2586010933086024704, seq=1542, step=872, events={}),
    StepTimeRecord(observed_timestamp_unix_ns=1499143229787083264, rank=None, global_rank=None, local_rank=None, world_size=None, local_world_size=None, node_rank=None, hostname="node-a", timestamp_unix_ns=None, seq=None, step=2963, events={"_traceml_internal:backward_time": {"NUL \x00 inside": {"is_gpu": True, "duration_ms": 0.0, "cpu_ms": None, "gpu_ms": 0.0, "n_calls": None}, "cpu": {"is_gpu": None, "duration_ms": 0.0, "cpu_ms": 0.0, "gpu_ms": 3.48762250899464e16, "n_calls": 1143}}, "null": {"cuda:0": {"is_gpu": True, "duration_ms": 1.9166991165099466e-227, "cpu_ms": -4.0889210454529117e-100, "gpu_ms": 0.0, "n_calls": None}, "\xc38@\xcf\x86K\U0004aac4&\xd0\xed": {"is_gpu": None, "duration_ms": 0.0, "cpu_ms": 0.0, "gpu_ms": 0.0, "n_calls": None}}, "\x9c": {"cpu": {"is_gpu": True, "duration_ms": 2.760515041910343e16, "cpu_ms": -8.295813412272107e56, "gpu_ms": None, "n_calls": None}, 'quote " backslash \\ slash / and a \\u escape written out': {"is_gpu": None, "duration_ms": 1.1125369292536007e-308, "cpu_ms": 0.0, "gpu_ms": None, "n_calls": None}}, "_traceml_internal:forward_time": {"N\xb5": {"is_gpu": False, "duration_ms": 0.0, "cpu_ms": 2.533358143260211e278, "gpu_ms": 5.355271084254713e16, "n_calls": 1116}, "para\u2028sep": {"is_gpu": True, "duration_ms": -6.266963401794984e16, "cpu_ms": None, "gpu_ms": 0.0, "n_calls": 4096}}}),
    RuntimeEnvironmentRecord(observed_timestamp_unix_ns=9223372036854775807, rank=None, global_rank=None, local_rank=None, world_size=600, local_world_size=300, node_rank=None, hostname="\U000b8b07@\x01!\xe1x\xffJ\\\xfe\x86", pid=None, timestamp_unix_ns=2475056038948550656, seq=951, topology=None, distributed_initialized=0, distributed_backend=None, training_strategy="single", strategy_source="runtime_model", strategy_confidence="high"),
    SystemRecord(observed_timestamp_unix_ns=1107616762199386112, global_rank=None, local_rank=1, world_size=761, local_world_size=380, node_rank=None, hostname=None, timestamp_unix_ns=None, seq=488, cpu_percent=0.0, ram_used_bytes=0.0, ram_total_bytes=0.0, gpu_available=None, gpu_count=12),
    RuntimeEnvironmentRecord(observed_timestamp_unix_ns=3030243746968733184, rank=151, global_rank=151, local_rank=4, world_size=None, local_world_size=None, node_rank=75, hostname=None, pid=5558, timestamp_unix_ns=None, seq=None, topology=None, distributed_initialized=0, distributed_backend="nccl", training_strategy="fsdp", strategy_source="runtime_model", strategy_confidence="low"),
    SystemGpuRecord(observed_timestamp_unix_ns=2726158258066673664, global_rank=182, local_rank=7, world_size=None, local_world_size=None, node_rank=91, hostname="\x81\U000a6377", timestamp_unix_ns=3880967182752053248, seq=None, gpu_idx=4, util=-4.92351674740205e-67, mem_used_bytes=None, mem_total_bytes=0.0, temperature_c=0.0, power_usage_w=None, power_limit_w=0.0),
    RuntimeEnvironmentRecord(observed_timestamp_unix_ns=7035118027752693760, rank=None, global_rank=None, local_rank=None, world_size=None, local_world_size=None, node_rank=None, hostname="\xbby[", pid=None, timestamp_unix_ns=3830789477607976448, seq=None, topology="multi_node_multi_process", distributed_initialized=1, distributed_backend="gloo", training_strategy="ddp", strategy_source=None, strategy_confidence=None),
]  # fmt: skip


@pytest.mark.parametrize("kind", ["prometheus", "victoria-metrics"])
@settings(
    max_examples=6,
    deadline=None,
    phases=[
        Phase.explicit,
        Phase.reuse,
        Phase.generate,
    ],  # a server round trip is too slow to shrink
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(batch=record_batches(max_size=8), include_hostname=st.booleans())
@example(batch=_REPLACED_IN_ONE_FLUSH, include_hostname=True)
@example(batch=_REPLACED_TWICE, include_hostname=False)
def test_series_read_back_equal_the_aggregates_of_the_records(
    kind: str, batch: list[ExportRecord], include_hostname: bool
) -> None:
    """Counts, sums and last values read over each server's HTTP API; exact on Prometheus."""
    server = metrics_server(kind)
    os.environ[ENDPOINT_VARIABLE] = server.write_url
    with tempfile.TemporaryDirectory() as folder:
        context = ExporterContext.create(folder, "all", exporter_hostname=include_hostname)
        if kind == "prometheus":
            run(context, batch[: len(batch) // 2], batch[len(batch) // 2 :])
        else:  # one flush: VictoriaMetrics stores a series' block of samples with one
            run(context, batch)  # decimal exponent, so a later tiny value next to a big one reads 0
        got = read_values(context, kind)
    want = expected_values(batch, include_hostname=include_hostname)
    if kind == "prometheus":
        assert close_enough(got, want) == []
    else:  # VictoriaMetrics drops NaN samples and keeps about 12 significant digits
        want = {k: v for k, v in want.items() if not math.isnan(v)}
        assert close_enough(got, want, VM_DIGITS, VM_TINY) == []


def _environment(rank: int | None, world_size: int) -> RuntimeEnvironmentRecord:
    return RuntimeEnvironmentRecord(
        observed_timestamp_unix_ns=1, rank=rank, global_rank=rank, local_rank=None,
        world_size=world_size, local_world_size=None, node_rank=None if rank is None else 0,
        hostname="node-a", pid=None, timestamp_unix_ns=None, seq=None, topology=None,
        distributed_initialized=1, distributed_backend="gloo", training_strategy="ddp",
        strategy_source="env", strategy_confidence="high",
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["prometheus", "victoria-metrics"])
@pytest.mark.parametrize("flushes", [1, 2])
def test_a_query_shows_each_ranks_latest_environment(kind: str, flushes: int) -> None:
    """What the README says a ``traceml_runtime_info`` query shows: one series per rank,
    its latest record; the records without a rank count as one rank of their own."""
    server = metrics_server(kind)
    os.environ[ENDPOINT_VARIABLE] = server.write_url
    batch = [_environment(None, 8), _environment(3, 8), _environment(None, 16)]
    batch += [_environment(3, 16), _environment(None, 32)]
    with tempfile.TemporaryDirectory() as folder:
        context = ExporterContext.create(folder, "all")
        run(context, *([batch] if flushes == 1 else [batch[:2], batch[2:]]))
        (instance,) = instances(context)

    def latest(answer: dict[frozenset[tuple[str, str]], float]) -> list[tuple[str, str, float]]:
        return sorted(
            (dict(k).get("rank", "none"), dict(k)["world_size"], v) for k, v in answer.items()
        )

    want = [("3", "16", 1.0), ("none", "32", 1.0)]
    query = f'traceml_runtime_info{{instance="{instance}"}}'
    # VictoriaMetrics answers from data about a second old: until it shows the last flush
    assert latest(server.query(query, until=lambda found: latest(found) == want)) == want


@pytest.mark.usefixtures("victoria")
def test_victoria_metrics_takes_the_corpus(context: ExporterContext) -> None:
    records = corpus_records()
    run(context, records)
    assert (
        close_enough(
            read_values(context, "victoria-metrics"), expected_values(records), VM_DIGITS, VM_TINY
        )
        == []
    )


def closing_receipt(context: ExporterContext) -> dict[str, Any]:
    """The receipt's last line: the one the last ``close()`` appended."""
    *_, line = (context.export_dir / RECEIPT_FILE).read_text("utf-8").splitlines()
    return dict(json.loads(line))


def test_requests_stay_within_their_bound(context: ExporterContext) -> None:
    records = corpus_records()
    exporter = exporter_for(context, max_series_per_request=7)
    exporter.open()
    exporter.write(records)
    exporter.close()
    receipt = closing_receipt(context)
    assert receipt["requests"] >= 1 + receipt["samples"] // 7
    assert read_values(context) == expected_values(records)


# -- settings and secrets ------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (ENDPOINT_VARIABLE, "ftp://host/api/v1/write", "scheme"),
        (ENDPOINT_VARIABLE, "http://[::1:9090/api/v1/write", "IPv6"),
        (ENDPOINT_VARIABLE, "http://my host:9090/api/v1/write", "space"),
        ("PROMETHEUS_REMOTE_WRITE_TIMEOUT", "soon", "is not a duration"),
        ("PROMETHEUS_REMOTE_WRITE_SAMPLE_TIME", "source", "flush, observed"),
        ("PROMETHEUS_REMOTE_WRITE_HEADERS", "x-unit=%E2%82%AC", "outside Latin-1"),
        ("PROMETHEUS_REMOTE_WRITE_HEADERS", "x-a=1%0Ax-b: 2", "line break"),
        ("PROMETHEUS_REMOTE_WRITE_HEADERS", "Content-Encoding=gzip", "sets itself"),
        ("PROMETHEUS_REMOTE_WRITE_PASSWORD", "pw-only", "without PROMETHEUS_REMOTE_WRITE_USERNAME"),
        ("PROMETHEUS_REMOTE_WRITE_CA_FILE", "/no/such/ca.pem", "readable file"),
    ],
)
def test_a_bad_setting_fails_open_naming_the_variable(
    context: ExporterContext, variable: str, value: str, message: str
) -> None:
    os.environ[variable] = value
    exporter = make_exporter(context)  # the factory never raises
    with pytest.raises(ValueError, match=message) as raised:
        exporter.open()
    assert variable in str(raised.value)
    assert is_permanent(raised.value)  # no wait fixes a setting: follow ends at once
    assert "pw-only" not in str(raised.value)


def test_two_ways_to_authenticate_are_refused(context: ExporterContext) -> None:
    os.environ["PROMETHEUS_REMOTE_WRITE_BEARER_TOKEN"] = "tok-2c1f88"  # noqa: S105 - a test's
    os.environ["PROMETHEUS_REMOTE_WRITE_USERNAME"] = "trainer"
    with pytest.raises(ValueError, match="one way to authenticate") as raised:
        make_exporter(context).open()
    assert "tok-2c1f88" not in str(raised.value)


def files_holding(root: Path, secret: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_a_bad_token_is_refused_and_no_secret_is_written(
    tmp_path: Path,
    records: list[ExportRecord],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """vmauth in front of VictoriaMetrics: the right token gets through, a wrong one is
    raised at open(), and neither is in any file, log line or message of the run."""
    good, bad = "tok-good-93a1c7", "tok-bad-5e0d24"
    with vmauth_proxy(metrics_server("victoria-metrics"), good) as auth:
        os.environ[ENDPOINT_VARIABLE] = auth.write_url
        os.environ["PROMETHEUS_REMOTE_WRITE_BEARER_TOKEN"] = good
        context = ExporterContext.create(tmp_path / "good", "all")
        run(context, records)
        assert closing_receipt(context)["samples"]
        os.environ["PROMETHEUS_REMOTE_WRITE_BEARER_TOKEN"] = bad
        context = ExporterContext.create(tmp_path / "bad", "all")
        with pytest.raises(PrometheusWriteError, match="auth token") as raised:
            make_exporter(context).open()
        assert "<redacted>" in str(raised.value)  # vmauth echoes the token it refused
        assert is_permanent(raised.value)
        worker = ExportWorker(make_exporter, context).start()
        worker.submit_records(records)
        report = worker.shutdown(10)
    assert report.failure is not None
    assert report.failure.method == "open"
    assert report.warning_path is not None
    shown = caplog.text + "".join(capfd.readouterr()) + report.failure.error + str(raised.value)
    for secret in (good, bad):
        assert files_holding(tmp_path, secret) == []
        assert secret not in shown


# -- faults ------------------------------------------------------------------------


def test_a_restart_within_the_deadline_loses_nothing(
    context: ExporterContext, records: list[ExportRecord], prometheus_peer: MetricsServer
) -> None:
    # Prometheus answers 503 until its storage is ready: over 2 s on a loaded machine,
    # so this test's deadline is long enough for any restart (the fixture sets it back)
    os.environ["PROMETHEUS_REMOTE_WRITE_TIMEOUT"] = "30"
    exporter = exporter_for(context)
    exporter.open()
    exporter.write(records)
    exporter.flush()
    prometheus_peer.stop()
    restart = threading.Timer(0.5, prometheus_peer.start)
    restart.start()
    exporter.write(records)
    exporter.flush()  # connection refused, retried until the server is back
    restart.join()
    exporter.close()
    assert read_values(context) == expected_values([*records, *records])


def test_a_server_stopped_mid_run_ends_in_a_recorded_loss(
    context: ExporterContext, records: list[ExportRecord], prometheus_peer: MetricsServer
) -> None:
    run_label = os.environ["PROMETHEUS_REMOTE_WRITE_RUN"] = f"stopped-{time.time_ns()}"
    worker = ExportWorker(make_exporter, context, flush_interval_s=0.1).start()
    worker.submit_records(records)
    until = time.monotonic() + 5
    match = selector("traceml_steps_total", run=run_label)
    while not prometheus_peer.samples(match) and time.monotonic() < until:
        time.sleep(0.05)  # until the first flush has reached the server
    assert prometheus_peer.samples(match)
    prometheus_peer.stop()
    worker.submit_records(records)
    start = time.monotonic()
    report = worker.shutdown(30)
    assert time.monotonic() - start < 4  # the 2 s deadline, plus slack
    assert report.failure is not None
    assert "did not take the request" in report.failure.error or "deadline" in report.failure.error
    assert report.failed_records == len(records)
    assert report.warning_path is not None


def test_503s_are_retried_and_counted_once(
    context: ExporterContext, records: list[ExportRecord], proxy: FaultProxy
) -> None:
    exporter = exporter_for(context)
    exporter.open()
    proxy.fail(3, retry_after="0")
    exporter.write(records)
    exporter.flush()
    exporter.close()
    assert proxy.statuses[1:5] == [503, 503, 503, 204]
    assert read_values(context) == expected_values(records)


def test_503_for_ever_raises_within_the_deadline(
    context: ExporterContext, records: list[ExportRecord], proxy: FaultProxy
) -> None:
    exporter = exporter_for(context)
    exporter.open()
    proxy.fail(10_000)
    exporter.write(records)
    start = time.monotonic()
    with pytest.raises(PrometheusWriteError, match="503") as raised:
        exporter.flush()
    assert time.monotonic() - start < 2.5
    assert not is_permanent(raised.value)  # the follower tries again later


def test_a_deadline_passing_after_a_503_names_the_last_answer(
    context: ExporterContext, records: list[ExportRecord], proxy: FaultProxy
) -> None:
    """The loss says what the server last answered, not only that the last try got nothing."""
    exporter = exporter_for(context)
    exporter.open()
    proxy.fail(1)
    proxy.tarpit()
    exporter.write(records)
    with pytest.raises(PrometheusWriteError, match=r"its last answer: 503.*deadline"):
        exporter.flush()


def test_a_retry_after_past_the_deadline_gives_up_at_once(
    context: ExporterContext, records: list[ExportRecord], proxy: FaultProxy
) -> None:
    exporter = exporter_for(context)
    exporter.open()
    proxy.fail(1, retry_after="30")
    exporter.write(records)
    start = time.monotonic()
    with pytest.raises(PrometheusWriteError, match="would pass the 2 s deadline"):
        exporter.flush()
    assert time.monotonic() - start < 1.0


@pytest.mark.parametrize("method", ["flush", "close"])
def test_a_tarpit_cannot_hang_flush_or_close(
    context: ExporterContext, records: list[ExportRecord], proxy: FaultProxy, method: str
) -> None:
    exporter = exporter_for(context)
    exporter.open()
    proxy.tarpit()
    exporter.write(records)
    start = time.monotonic()
    with pytest.raises(PrometheusWriteError, match="2 s deadline") as raised:
        getattr(exporter, method)()
    assert 1.9 <= time.monotonic() - start < 3.0
    assert not is_permanent(raised.value)


def _old(records: Sequence[ExportRecord], hours: float) -> list[ExportRecord]:
    """Step records observed ``hours`` ago."""
    when = time.time_ns() - int(hours * 3600e9)
    out: list[ExportRecord] = []
    for record in records:
        if isinstance(record, StepTimeRecord):
            data = record.to_dict()
            del data["stream"], data["schema_version"]
            out.append(StepTimeRecord(**{**data, "observed_timestamp_unix_ns": when}))
    return out


def test_an_out_of_order_replay_refused_by_prometheus_is_a_recorded_loss(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    """Samples older than Prometheus' head: 400 out of bounds, raised with what it needs."""
    os.environ["PROMETHEUS_REMOTE_WRITE_SAMPLE_TIME"] = "observed"
    run(context, _old(records, 0))  # the newest sample: now
    old = _old(records, 3)
    worker = ExportWorker(make_exporter, context).start()
    worker.submit_records(old)
    report = worker.shutdown(10)
    assert report.failure is not None
    assert "400" in report.failure.error
    assert "out of bounds" in report.failure.error
    assert "out_of_order_time_window" in report.failure.error
    assert report.failed_records == len(old)
    assert report.warning_path is not None
    exporter = exporter_for(context)
    exporter.open()
    exporter.write(old)
    with pytest.raises(PrometheusWriteError, match="out of bounds") as raised:
        exporter.flush()
    assert is_permanent(raised.value)  # sent again later, it is refused again


def test_more_series_than_the_bound_is_permanent(
    context: ExporterContext, records: list[ExportRecord]
) -> None:
    exporter = exporter_for(context, max_series=3)
    exporter.open()
    with pytest.raises(CardinalityError, match="more than 3 series") as raised:
        exporter.write(records)
    assert is_permanent(raised.value)


def test_victoria_metrics_takes_the_same_replay(
    context: ExporterContext, records: list[ExportRecord], victoria: MetricsServer
) -> None:
    os.environ["PROMETHEUS_REMOTE_WRITE_SAMPLE_TIME"] = "observed"
    run(context, _old(records, 0))
    old = _old(records, 3)
    run(context, old)
    (_, second) = instances(context)
    found = victoria.samples(selector("traceml_steps_total", instance=second))
    assert found
    stamp = found[0].timestamps_ms[-1]
    assert abs(stamp - old[0].to_dict()["observed_timestamp_unix_ns"] // 1_000_000) <= 1


# -- lifecycle -----------------------------------------------------------------------


def test_open_against_a_closed_port_fails_within_the_deadline(context: ExporterContext) -> None:
    os.environ[ENDPOINT_VARIABLE] = closed_port_url("/api/v1/write")
    start = time.monotonic()
    with pytest.raises(
        PrometheusWriteError, match=r"Connection refused|NewConnectionError"
    ) as raised:
        exporter_for(context).open()
    assert time.monotonic() - start < 2.5
    assert not is_permanent(raised.value)  # a server stopped: the follower waits for it


def test_a_failed_method_closes_the_client(
    context: ExporterContext, records: list[ExportRecord], prometheus_peer: MetricsServer
) -> None:
    exporter = exporter_for(context)
    exporter.open()
    prometheus_peer.stop()
    exporter.write(records)
    with pytest.raises(PrometheusWriteError):
        exporter.flush()
    with pytest.raises(RuntimeError, match="failed exporter"):
        exporter.write(records)


def test_open_and_close_note_the_run_in_the_receipt(
    context: ExporterContext, records: list[ExportRecord], prometheus_peer: MetricsServer
) -> None:
    """Open notes the instance (so a failed one's series can be found), close what it sent."""
    run(context, records, dropped=3)
    lines = (context.export_dir / RECEIPT_FILE).read_text("utf-8").splitlines()
    opened, receipt = map(json.loads, lines)
    assert set(opened) == {"opened_unix_ns", "endpoint", "instance"}
    assert opened["instance"] == receipt["instance"]
    assert receipt["dropped_batches"] == 3
    assert receipt["endpoint"] == prometheus_peer.write_url
    assert sum(receipt["delivered_records"].values()) == len(records)
    assert receipt["delivered_records"]["step_time"] == 3
    assert receipt["samples"] == len(expected_values(records))
