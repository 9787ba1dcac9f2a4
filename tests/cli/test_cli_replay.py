"""``replay --payloads``: JSON Lines and msgpack payloads through ExportWorker into an exporter."""

from __future__ import annotations

import json
import os
import pty
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from cli_helpers import (
    CLI,
    all_stream_payloads,
    error_lines,
    read_export,
    run_cli,
    step_time_payload,
    write_jsonl,
    write_msgpack,
)
from traceml_exporter_sdk import records_from_payload
from traceml_exporter_sdk.streams import ALL_STREAMS


def _expected(payloads: list[Any], hostname: bool) -> dict[str, list[dict[str, Any]]]:
    """What the jsonl exporter must write per stream, from the SDK's own mapper."""
    out: dict[str, list[dict[str, Any]]] = {s: [] for s in ALL_STREAMS}
    for payload in payloads:
        for record in records_from_payload(payload, observed_timestamp_unix_ns=0).records:
            data = record.to_dict()
            if not hostname:
                data.pop("hostname", None)
            out[record.STREAM].append(data)
    return out


def _exported(
    root: Path, streams: tuple[str, ...] = ALL_STREAMS
) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for stream in streams:
        records, closing = read_export(root, stream)
        assert closing == [
            {
                "stream": stream,
                "closing": True,
                "written_records": len(records),
                "dropped_batches": 0,
            }
        ]
        for record in records:
            assert record["observed_timestamp_unix_ns"] > 1_600_000_000 * 10**9
            record["observed_timestamp_unix_ns"] = 0
        out[stream] = records
    return out


def _summary(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        if line.startswith(" "):
            key, _, value = line.strip().partition(" ")
            out[f"  {key}"] = value.strip()
        else:
            out[line[:26].strip()] = line[26:].strip()
    return out


@pytest.mark.parametrize("fmt", ["jsonl", "msgpack"])
@pytest.mark.parametrize("hostname", [False, True], ids=["no-hostname", "hostname"])
def test_replay_exports_every_record_in_order(fmt: str, hostname: bool, tmp_path: Path) -> None:
    payloads = all_stream_payloads()
    writer = write_jsonl if fmt == "jsonl" else write_msgpack
    path = writer(tmp_path / f"payloads.{fmt}", payloads)
    root = tmp_path / "run"
    args = [
        "replay",
        "jsonl",
        "--payloads",
        str(path),
        "--streams",
        "all",
        "--session-root",
        str(root),
    ]
    result = run_cli(*args, *(["--hostname"] if hostname else []), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""  # no progress bar when stderr is not a terminal
    expected = _expected(payloads, hostname)
    assert _exported(root) == expected
    summary = _summary(result.stdout)
    assert summary[f"replay of {path} ({fmt}, {len(payloads)} payloads) into jsonl"[:26]]
    for stream in ALL_STREAMS:
        assert summary[f"  {stream}"] == str(len(expected[stream]))
    unit = "frames" if fmt == "msgpack" else "lines"
    assert summary["skipped units"] == "0"
    assert summary[f"malformed {unit}"] == "0"
    assert summary["dropped batches"] == "0"
    total = sum(map(len, expected.values()))
    assert summary["exporter"] == f"ok (delivered {total} of {total} records)"
    assert "finalization_warning.json" not in result.stdout
    assert not (root / "aggregator" / "finalization_warning.json").exists()


def test_stream_selection_and_default(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", all_stream_payloads())
    result = run_cli(
        "replay", "jsonl", "--payloads", str(path), "--session-root", "r1", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    export = tmp_path / "r1" / "aggregator" / "export"
    assert sorted(p.name for p in export.iterdir()) == ["step_time.jsonl"]
    result = run_cli(
        "replay",
        "jsonl",
        "--payloads",
        str(path),
        "--streams",
        "system",
        "--session-root",
        "r2",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    export = tmp_path / "r2" / "aggregator" / "export"
    assert sorted(p.name for p in export.iterdir()) == ["system.jsonl", "system_gpu.jsonl"]
    summary = _summary(result.stdout)
    assert summary["  system"] == "2"
    assert summary["  system_gpu"] == "4"
    assert "  step_time" not in summary


def test_default_session_root_is_a_new_folder_here(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [step_time_payload(0, 1)])
    result = run_cli("replay", "jsonl", "--payloads", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    [root] = tmp_path.glob("traceml-replay-*")
    assert _summary(result.stdout)["session root"] == str(root)
    assert (root / "aggregator" / "export" / "step_time.jsonl").is_file()


def test_malformed_lines_are_counted_with_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    good = [orjson.dumps(step_time_payload(0, step)).decode() for step in range(4)]
    path.write_text(
        "\n".join([good[0], "{not json", good[1], "", '[{"meta": 1', good[2], "nul\x00", good[3]])
        + "\n"
    )
    result = run_cli(
        "replay", "jsonl", "--payloads", str(path), "--session-root", "r", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "malformed lines            3" in lines
    bad = [line for line in lines if line.startswith("  line ")]
    assert [line.split(":")[0] for line in bad] == ["  line 2", "  line 5", "  line 7"]
    assert all(": not valid JSON: " in line for line in bad)
    assert _summary(result.stdout)["  step_time"] == "4"
    records, _ = read_export(tmp_path / "r", "step_time")
    assert [r["step"] for r in records] == [0, 1, 2, 3]


def test_big_integers_and_non_envelopes(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    payload = step_time_payload(0, 1)
    payload[0]["body"]["tables"]["StepTimeTable"][0]["seq"] = 2**70 + 1  # past 64 bits
    lines = [json.dumps(payload), "5", json.dumps([{"no": "envelope"}, step_time_payload(1, 2)[0]])]
    path.write_text("\n".join(lines) + "\n")
    result = run_cli(
        "replay", "jsonl", "--payloads", str(path), "--session-root", "r", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    summary = _summary(result.stdout)
    assert summary["malformed lines"] == "0"
    assert summary["skipped units"] == "2"
    assert summary["  step_time"] == "2"
    export = tmp_path / "r" / "aggregator" / "export" / "step_time.jsonl"
    first = json.loads(export.read_text().splitlines()[0])
    assert first["seq"] == 2**70 + 1


def test_msgpack_bad_and_truncated_frames(tmp_path: Path) -> None:
    payloads = [step_time_payload(0, step) for step in range(3)]
    trailing = struct.pack("!I", 3) + b"\xc1\xc1\xc1" + struct.pack("!I", 500) + b"short"
    path = write_msgpack(tmp_path / "p.bin", payloads, trailing)
    result = run_cli(
        "replay", "jsonl", "--payloads", str(path), "--session-root", "r", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "(msgpack, 3 payloads)" in result.stdout
    bad = [line for line in result.stdout.splitlines() if line.startswith("  frame ")]
    assert len(bad) == 2
    assert bad[0].startswith("  frame 4 (byte ")
    assert "not valid MessagePack" in bad[0]
    assert bad[1].startswith("  frame 5 (byte ")
    assert bad[1].endswith(
        "truncated frame: the header says 500 bytes, 5 remain; nothing after it can be read"
    )
    assert _summary(result.stdout)["malformed frames"] == "2"
    assert _summary(result.stdout)["  step_time"] == "3"


def test_format_flag_overrides_detection(tmp_path: Path) -> None:
    path = write_msgpack(tmp_path / "p.bin", [step_time_payload(0, 1)])
    as_jsonl = run_cli(
        "replay",
        "jsonl",
        "--payloads",
        str(path),
        "--format",
        "jsonl",
        "--session-root",
        "a",
        cwd=tmp_path,
    )
    assert as_jsonl.returncode == 0
    assert "(jsonl, 0 payloads)" in as_jsonl.stdout
    assert "  line 1: not valid JSON: " in as_jsonl.stdout
    as_msgpack = run_cli(
        "replay",
        "jsonl",
        "--payloads",
        str(path),
        "--format",
        "msgpack",
        "--session-root",
        "b",
        cwd=tmp_path,
    )
    assert as_msgpack.returncode == 0
    assert _summary(as_msgpack.stdout)["  step_time"] == "1"


def test_msgpack_without_msgspec_exit_5(tmp_path: Path) -> None:
    path = write_msgpack(tmp_path / "p.bin", [step_time_payload(0, 1)])
    result = run_cli(
        "replay",
        "jsonl",
        "--payloads",
        str(path),
        cwd=tmp_path,
        prelude="import sys\nsys.modules['msgspec'] = None",
    )
    assert result.returncode == 5
    assert error_lines(result) == [
        "traceml-exporter: error: reading msgpack payloads needs msgspec; install it with "
        "pip install 'traceml-exporter-sdk[msgpack]'"
    ]
    assert not list(tmp_path.glob("traceml-replay-*"))


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["--payloads", "missing.jsonl"],
            3,
            "traceml-exporter: error: payload file not found: missing.jsonl",
        ),
        (["--payloads", "."], 3, "traceml-exporter: error: payload file . is a directory"),
        (
            ["--payloads", "p.jsonl", "--streams", "gpu"],
            2,
            "traceml-exporter: error: --streams: export_streams 'gpu': unknown name 'gpu'; "
            "supported names: step_time, step_memory, process, system, all (comma separated)",
        ),
        (
            ["--sqlite", "x.db", "--format", "jsonl"],
            2,
            "traceml-exporter: error: --format applies to --payloads, not --sqlite",
        ),
        (
            ["--payloads", "p.jsonl", "--sqlite", "x.db"],
            2,
            "traceml-exporter replay: error: argument --sqlite: not allowed with argument "
            "--payloads (see traceml-exporter replay --help)",
        ),
        (
            ["--payloads", "p.jsonl", "--session-root", "p.jsonl"],
            3,
            "traceml-exporter: error: --session-root p.jsonl exists and is not a folder",
        ),
    ],
)
def test_replay_user_errors(args: list[str], code: int, message: str, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "p.jsonl", [step_time_payload(0, 1)])
    result = run_cli("replay", "jsonl", *args, cwd=tmp_path)
    assert result.returncode == code
    assert error_lines(result) == [message]
    assert "Traceback" not in result.stderr


def test_malformed_spec_is_a_usage_error(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "p.jsonl", [step_time_payload(0, 1)])
    result = run_cli("replay", "my_exporters.py", "--payloads", "p.jsonl", cwd=tmp_path)
    assert result.returncode == 2
    [line] = error_lines(result)
    assert line.startswith(
        "traceml-exporter: error: exporter setting 'my_exporters.py': it looks like a file path"
    )


FAILING = """
class Failing:
    def open(self):
        pass
    def write(self, records):
        raise OSError("disk on fire")
    def flush(self):
        pass
    def close(self, *, dropped_batches=0):
        pass

def make(context):
    return Failing()
"""

ONE_FILE = (Path(__file__).resolve().parents[1] / "one_file_exporter.py").read_text(
    encoding="utf-8"
)


def test_custom_exporter_gets_the_selected_records(tmp_path: Path) -> None:
    pkg = tmp_path / "src"
    pkg.mkdir()
    (pkg / "one_file.py").write_text(ONE_FILE)
    payloads = all_stream_payloads()
    path = write_jsonl(tmp_path / "p.jsonl", payloads)
    result = run_cli(
        "replay",
        "one_file:make_exporter",
        "--payloads",
        str(path),
        "--streams",
        "process,step_memory",
        "--session-root",
        "r",
        cwd=tmp_path,
        pythonpath=[pkg],
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = (tmp_path / "r" / "aggregator" / "export" / "records.jsonl").read_text().splitlines()
    got = [json.loads(line) for line in lines]
    for record in got:
        record["observed_timestamp_unix_ns"] = 0
    expected = _expected(payloads, hostname=False)
    want = [r for r in _in_payload_order(payloads) if r["stream"] in ("process", "step_memory")]
    assert got == want
    assert len(got) == len(expected["process"]) + len(expected["step_memory"])


def _in_payload_order(payloads: list[Any]) -> list[dict[str, Any]]:
    out = []
    for payload in payloads:
        for record in records_from_payload(payload, observed_timestamp_unix_ns=0).records:
            data = record.to_dict()
            data.pop("hostname", None)
            out.append(data)
    return out


def test_exporter_failure_exit_4_with_warning_file(tmp_path: Path) -> None:
    (tmp_path / "failing.py").write_text(FAILING)
    path = write_jsonl(tmp_path / "p.jsonl", [step_time_payload(0, s) for s in range(5)])
    result = run_cli(
        "replay",
        "failing:make",
        "--payloads",
        str(path),
        "--session-root",
        "r",
        cwd=tmp_path,
        pythonpath=[tmp_path],
    )
    assert result.returncode == 4
    warning = tmp_path / "r" / "aggregator" / "finalization_warning.json"
    assert error_lines(result) == [
        "traceml-exporter: error: exporter 'failing:make' failed in write: OSError: disk on fire; "
        f"the loss is recorded in {warning.resolve()}"
    ]
    summary = _summary(result.stdout)
    assert (
        summary["exporter"] == "FAILED in write: OSError: disk on fire (delivered 0 of 5 records)"
    )
    assert summary["finalization_warning.json"] == str(warning.resolve())
    block = json.loads(warning.read_text())["export"]
    assert block["exporter_failed"] is True
    assert block["failed_records"] == 5


def test_unimportable_exporter_says_how_to_fix_it(tmp_path: Path) -> None:
    (tmp_path / "here_mod.py").write_text(FAILING)
    path = write_jsonl(tmp_path / "p.jsonl", [step_time_payload(0, 1)])
    # The console script does not put the working directory on the import path,
    # just as TraceML's aggregator does not.
    script = Path(sys.executable).parent / "traceml-exporter"
    result = subprocess.run(
        [str(script), "replay", "here_mod:make", "--payloads", str(path), "--session-root", "r"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert result.returncode == 4
    [line] = error_lines(result)
    assert line.startswith("traceml-exporter: error: exporter 'here_mod:make' failed in factory: ")
    assert "it is in the working directory, which is not on the import path" in line
    assert f"PYTHONPATH={tmp_path}" in line


def test_progress_bar_only_on_a_terminal(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [step_time_payload(0, s) for s in range(300)])
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.run(
            [*CLI, "replay", "jsonl", "--payloads", str(path), "--session-root", "r"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=terminal,
            check=False,
            timeout=60,
        )
        os.close(terminal)
        seen = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(controller)
    assert proc.returncode == 0
    text = seen.decode()
    assert "\rreplay p.jsonl: [" in text
    assert "100.0% 300 payloads" in text
    assert b"\r" not in proc.stdout
