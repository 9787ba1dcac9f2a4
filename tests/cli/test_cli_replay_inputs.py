"""``replay`` inputs and outputs under faults: pipes and FIFOs, used or unusable session
roots, a warning file that cannot be written. Each ends with an exit code and one line."""

from __future__ import annotations

import os
import struct
import subprocess
import threading
import time
from pathlib import Path

import msgspec
import orjson
import pytest
from cli_helpers import (
    CLI,
    cli_env,
    error_lines,
    read_export,
    run_cli,
    step_time_payload,
    write_jsonl,
)
from traceml_exporter_sdk.cli import inputs
from traceml_exporter_sdk.cli.errors import CliError

WARNING = Path("aggregator") / "finalization_warning.json"

SPOILING = """
class Spoiling:
    '''Makes the warning file unwritable (aggregator/ becomes a file), then fails.'''
    def __init__(self, context):
        self.root = context.session_root
    def open(self):
        import shutil
        shutil.rmtree(self.root / "aggregator", ignore_errors=True)  # the replay claimed it
        (self.root / "aggregator").write_text("in the way")
        raise OSError("sink unreachable")
    def write(self, records):
        pass
    def flush(self):
        pass
    def close(self, *, dropped_batches=0):
        pass

def make(context):
    return Spoiling(context)
"""


def _lines(payloads: int) -> bytes:
    return b"".join(orjson.dumps(step_time_payload(0, s)) + b"\n" for s in range(payloads))


def _frames(payloads: int) -> bytes:
    out = b""
    for s in range(payloads):
        body = msgspec.msgpack.encode(step_time_payload(0, s))
        out += struct.pack("!I", len(body)) + body
    return out


# -- pipes, /dev/stdin and FIFOs (3) ------------------------------------------------


def _replay_stdin(tmp_path: Path, data: bytes, *extra: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*CLI, "replay", "jsonl", "--payloads", "/dev/stdin", "--session-root", "r", *extra],
        input=data,
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("fmt", ["jsonl", "msgpack"])
@pytest.mark.parametrize("flag", [[], ["--format", "auto"], ["--format", "x"]], ids=str)
def test_payloads_from_a_pipe_are_all_replayed(tmp_path: Path, fmt: str, flag: list[str]) -> None:
    data = _lines(300) if fmt == "jsonl" else _frames(300)
    if flag and flag[-1] == "x":
        flag = ["--format", fmt]
    result = _replay_stdin(tmp_path, data, *flag)
    assert result.returncode == 0, result.stderr.decode()
    records, closing = read_export(tmp_path / "r", "step_time")
    assert [r["step"] for r in records] == list(range(300))
    assert closing[0]["written_records"] == 300
    assert f"({fmt}, 300 payloads)" in result.stdout.decode()


@pytest.mark.parametrize("fmt", ["jsonl", "msgpack"])
def test_payloads_from_a_fifo_written_in_small_pieces_are_all_replayed(
    tmp_path: Path, fmt: str
) -> None:
    fifo = tmp_path / "payloads.fifo"
    os.mkfifo(fifo)
    data = _lines(50) if fmt == "jsonl" else _frames(50)

    def write() -> None:
        with fifo.open("wb", buffering=0) as fh:
            for i in range(0, len(data), 3):  # 3 bytes at a time: detection sees a short read
                fh.write(data[i : i + 3])

    writer = threading.Thread(target=write)
    writer.start()
    try:
        result = run_cli("replay", "jsonl", "--payloads", str(fifo), "--session-root", "r",
                         cwd=tmp_path, timeout=60)  # fmt: skip
    finally:
        writer.join(30)
    assert result.returncode == 0, result.stderr
    records, _closing = read_export(tmp_path / "r", "step_time")
    assert [r["step"] for r in records] == list(range(50))


# -- a second replay into the same session root (11) --------------------------------


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_second_replay_into_a_used_session_root_is_refused_and_touches_nothing(
    tmp_path: Path,
) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [step_time_payload(0, 1)])
    first = run_cli("replay", "jsonl", "--payloads", str(path), "--session-root", "r", cwd=tmp_path)
    assert first.returncode == 0
    before = _snapshot(tmp_path / "r")
    again = run_cli("replay", "jsonl", "--payloads", str(path), "--session-root", "r", cwd=tmp_path)
    assert again.returncode == 3
    assert error_lines(again) == [
        "traceml-exporter: error: --session-root r is not empty (an earlier run's folder?); "
        "give a new or empty folder, so that nothing of another run is overwritten"
    ]
    assert again.stdout == ""
    assert _snapshot(tmp_path / "r") == before
    assert not (tmp_path / "r" / WARNING).exists()


def test_two_replays_started_together_on_one_new_session_root_one_is_refused(
    tmp_path: Path,
) -> None:
    """Both found the folder empty; without an atomic claim both wrote into it (issue 20)."""
    fifo = tmp_path / "payloads.fifo"
    os.mkfifo(fifo)
    command = [*CLI, "replay", "jsonl", "--payloads", str(fifo), "--format", "jsonl",
               "--session-root", "r"]  # fmt: skip
    runs = [
        subprocess.Popen(
            command,
            cwd=tmp_path,
            env=cli_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        # Both wait in open() of the FIFO, before the session-root check; one writer's
        # open() lets both go on at the same moment.
        time.sleep(1.5)
        with fifo.open("wb") as fh:
            fh.write(_lines(20))
        outcomes = [(run.wait(timeout=60), *run.communicate(timeout=30)) for run in runs]
    finally:
        for run in runs:
            run.kill()
            run.wait(timeout=30)
            for pipe in (run.stdout, run.stderr):
                if pipe is not None:
                    pipe.close()
    codes = sorted(code for code, _out, _err in outcomes)
    assert codes == [0, 3], outcomes
    ((_code, _out, refused),) = [o for o in outcomes if o[0] == 3]
    assert "--session-root r " in refused
    assert "give a new or empty folder" in refused or "give each replay a new or empty" in refused
    records, _closing = read_export(tmp_path / "r", "step_time")
    assert [r["step"] for r in records] == list(range(20))  # the winner's, each once


def test_a_folder_claimed_between_the_check_and_the_claim_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = inputs.claim

    def claimed_by_another_run_first(root: Path) -> None:
        real(root)  # the other run's claim, just after this run found the folder empty
        real(root)

    monkeypatch.setattr(inputs, "claim", claimed_by_another_run_first)
    with pytest.raises(CliError) as refused:
        inputs.session_root(str(tmp_path / "r"))
    assert refused.value.code == 3
    assert str(refused.value) == (
        f"--session-root {tmp_path / 'r'} was taken by another run while this one checked it "
        "(its aggregator folder appeared); give each replay a new or empty folder"
    )


def test_an_existing_empty_session_root_is_used(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [step_time_payload(0, 1)])
    (tmp_path / "r").mkdir()
    result = run_cli(
        "replay", "jsonl", "--payloads", str(path), "--session-root", "r", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["aggregator"]


# -- an unusable session root (14) ---------------------------------------------------


def _unusable(tmp_path: Path, case: str) -> tuple[str, str]:
    if case == "dangling-symlink":
        (tmp_path / "r").symlink_to(tmp_path / "nowhere")
        return "r", "is a symbolic link to nothing (dangling, or a loop)"
    if case == "symlink-loop":
        (tmp_path / "r").symlink_to(tmp_path / "r")
        return "r", "is a symbolic link to nothing (dangling, or a loop)"
    if case == "under-a-file":
        (tmp_path / "f").write_text("")
        return "f/r", "Not a directory"
    if case == "aggregator-is-a-file":
        (tmp_path / "r").mkdir()
        (tmp_path / "r" / "aggregator").write_text("")
        return "r", "is not empty"
    assert case == "unwritable"
    return "/proc/self/traceml-root", "cannot write in --session-root /proc/self/traceml-root"


@pytest.mark.parametrize(
    "case",
    ["dangling-symlink", "symlink-loop", "under-a-file", "aggregator-is-a-file", "unwritable"],
)
def test_an_unusable_session_root_is_exit_3_before_the_exporter_runs(
    tmp_path: Path, case: str
) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [step_time_payload(0, 1)])
    before = sorted(p.name for p in tmp_path.iterdir())
    root, said = _unusable(tmp_path, case)
    made = sorted(p.name for p in tmp_path.iterdir())
    result = run_cli(
        "replay", "jsonl", "--payloads", str(path), "--session-root", root, cwd=tmp_path
    )
    assert result.returncode == 3, result.stdout + result.stderr
    [line] = error_lines(result)
    assert line.startswith("traceml-exporter: error: ")
    assert said in line
    assert sorted(p.name for p in tmp_path.iterdir()) == made
    assert before == [p for p in made if p in before]


def test_a_warning_file_that_cannot_be_written_is_reported(tmp_path: Path) -> None:
    (tmp_path / "spoiling.py").write_text(SPOILING)
    path = write_jsonl(tmp_path / "p.jsonl", [step_time_payload(0, s) for s in range(3)])
    result = run_cli(
        "replay",
        "spoiling:make",
        "--payloads",
        str(path),
        "--session-root",
        "r",
        cwd=tmp_path,
        pythonpath=[tmp_path],
    )
    assert result.returncode == 4
    [line] = error_lines(result)
    assert "failed in open: OSError: sink unreachable" in line
    assert (
        f"; and the loss could not be recorded: could not write {(tmp_path / 'r' / WARNING).resolve()}: "
        in line
    )
    assert (
        "finalization_warning.json  NOT WRITTEN: could not write "
        f"{(tmp_path / 'r' / WARNING).resolve()}: {(tmp_path / 'r' / 'aggregator').resolve()} "
        "is not a folder: refused"
    ) in result.stdout


def test_no_session_root_and_an_unwritable_working_directory_is_exit_3(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [step_time_payload(0, 1)])
    result = run_cli("replay", "jsonl", "--payloads", str(path), cwd=Path("/proc/self/fdinfo"))
    assert result.returncode == 3
    [line] = error_lines(result)
    assert line.startswith("traceml-exporter: error: cannot make a session root in /proc/")
    assert line.endswith("(give --session-root)")
