"""``follow --logs-dir`` over a logs folder that other users write, tried as they would
attack it: any bytes in a run folder's name, control characters in a manifest, a manifest
too big to read, a secret in the exporter's error text (issue 41). Each run here is a
real ``follow`` process against ``writer050``'s 0.5.0 database; the units that escape,
bound and redact are tested on their own in ``tests/runtime/test_hostile_text.py``."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from child_env import child_env
from follow_files import status
from follow_helpers import FAILING, FAST, exported
from waiting import wait_for
from writer050 import Writer050, step_records

HOSTILE = b"evil\xff\xfe\n\x1b[2K\rfollow run1: done: forged\x07"
"""Not UTF-8, a newline, ANSI escapes and a bell: a name that forged lines and stopped
``--logs-dir`` (exit 70, ``str is not valid UTF-8``) before issue 41."""


def service(logs: Path, *args: str, spec: str = "jsonl", **env: str) -> subprocess.Popen[bytes]:
    """``follow --logs-dir logs``, its output kept as bytes (a name need not be UTF-8)."""
    command = [sys.executable, "-m", "traceml_exporter_sdk.cli", "follow", spec,
               "--logs-dir", str(logs), "--streams", "all", *FAST, "--runs-poll-interval",
               "0.2", *args]  # fmt: skip
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env([FAILING.parent], **env),
    )


def stop(process: subprocess.Popen[bytes]) -> tuple[int, bytes, bytes]:
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    return process.returncode, out, err


def read_until(process: subprocess.Popen[bytes], wanted: bytes, timeout: float = 30) -> bytes:
    """What ``process`` wrote on stderr up to and with a line starting ``wanted``."""
    assert process.stderr is not None
    got = b""
    deadline = time.monotonic() + timeout
    while not any(line.startswith(wanted) for line in got.split(b"\n")[:-1]):
        left = deadline - time.monotonic()
        assert left > 0, got
        assert process.poll() is None, got
        if select.select([process.stderr], [], [], min(left, 0.5))[0]:
            got += os.read(process.stderr.fileno(), 65536)
    return got


def steps(root: Path) -> Counter[int]:
    return Counter(line["step"] for line in exported(root).get("step_time", []))


def written(run: Writer050, count: int, *, end: bool = True) -> None:
    for start in range(0, count, 25):
        run.flush(step_records(start, 25, observed=start + 1))
    if end:
        run.close()


def assert_lines_are_plain(text: bytes) -> list[str]:
    """Each line is UTF-8 without a control character: nothing forged, nothing to stop a
    terminal or a log shipper."""
    lines = text.decode("utf-8").splitlines()
    for line in lines:
        assert line.isprintable(), repr(line)
    return lines


def test_a_run_folder_of_any_bytes_is_followed_and_shown_escaped(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    good = Writer050(logs / "run1", session_id="run1")
    bad = Writer050(Path(os.fsdecode(bytes(logs) + b"/" + HOSTILE)), session_id="run2")
    written(good, 100)
    written(bad, 50, end=False)  # still running at the stop: its warning file names it
    follower = service(logs, "--progress-interval", "0.3")
    wait_for(
        lambda: (
            follower.poll() is not None
            or (status(good.root).get("end") and status(bad.root).get("exported_total") == 50)
        )
    )
    assert follower.poll() is None, follower.communicate()
    time.sleep(0.5)  # a progress line or two more, each escaped
    code, out, err = stop(follower)
    bad.disconnect()
    assert code == 0, (out, err)
    assert set(steps(good.root)) == set(range(100))
    assert set(steps(bad.root)) == set(range(50)), "the hostile run was not exported"
    lines = assert_lines_are_plain(err) + assert_lines_are_plain(out)
    shown = "evil\\xff\\xfe\\n\\x1b[2K\\rfollow run1: done: forged\\x07"
    assert any(line.startswith(f"follow {shown}: ") for line in lines), lines
    assert not any(line.startswith("follow run1: done: forged") for line in lines)
    saved = json.loads((bad.root / "aggregator" / "follow" / "status.json").read_bytes())
    assert saved["run"].endswith("/" + shown)
    assert saved["end"] == "interrupted"
    warning = json.loads((bad.root / "aggregator/follow/finalization_warning.json").read_bytes())
    assert warning["follow"]["bookmark"].endswith(f"/{shown}/aggregator/follow/bookmark.json")


def test_manifest_values_cannot_forge_lines(tmp_path: Path) -> None:
    """A run that ended without a database is named with what its manifest says."""
    logs = tmp_path / "logs"
    root = logs / "run1"
    root.mkdir(parents=True)
    manifest = {
        "session_id": "s",
        "status": "failed\n\x1b[31mfollow run2: exported 1,000,000",
        "telemetry_status": "failed\r\x1b]0;title\x07",
        "aggregator_exit_code": 1,
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    follower = service(logs, "--progress-interval", "0.3")
    said = read_until(follower, b"follow run1: ")
    time.sleep(1)  # a look or two more: named once
    code, out, err = stop(follower)
    assert code == 0, (out, err)
    lines = assert_lines_are_plain(said + err)
    said = [line for line in lines if line.startswith("follow run1: ")]
    assert len(said) == 1, lines
    assert "failed\\n\\x1b[31mfollow run2" in said[0]
    assert not any(line.startswith("follow run2") for line in lines)


SECRET = "pa55-W0rd-in-the-url"
QUOTED = (
    f"could not connect to postgresql://trainer:{SECRET}@db.internal:5432/runs "
    f"(host=db.internal user=trainer password={SECRET} sslmode=require)"
)


def session(root: Path, *args: str, spec: str = "jsonl", **env: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "traceml_exporter_sdk.cli", "follow", spec,
               "--session-root", str(root), "--streams", "all", *FAST, *args]  # fmt: skip
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env([FAILING.parent], **env),
    )


def test_a_secret_in_the_exporters_error_is_kept_nowhere(tmp_path: Path) -> None:
    """The exporter's error quotes its URL and conninfo with the password: neither the
    status, the warning file, the summary, stderr nor the progress lines keep it. The run
    folder's name is hostile too: a failed follow's summary and warning file name it."""
    root = Path(os.fsdecode(bytes(tmp_path) + b"/" + HOSTILE))
    run = Writer050(root, session_id="run1")
    written(run, 50)
    follower = session(root, "--progress-interval", "0.2", "--max-outage", "1",
                       "--retry-max-interval", "0.2", spec="failing_exporter:make_exporter",
                       FAIL_MESSAGE=QUOTED)  # fmt: skip
    out, err = follower.communicate(timeout=60)
    assert follower.returncode == 4, (out, err)  # the sink stayed down past --max-outage
    state = root / "aggregator" / "follow"
    kept = {
        "stdout": out,
        "stderr": err,
        "status.json": (state / "status.json").read_bytes(),
        "finalization_warning.json": (state / "finalization_warning.json").read_bytes(),
    }
    for where, text in kept.items():
        assert SECRET.encode() not in text, where
    assert b"postgresql://trainer:***@db.internal:5432/runs" in kept["status.json"]
    assert b"password=***" in kept["finalization_warning.json"]
    assert b"SINK DOWN" in err
    assert b"trainer:***@" in err
    assert_lines_are_plain(out)
    assert_lines_are_plain(err)
    json.loads(kept["finalization_warning.json"])


def test_a_manifest_over_the_bound_is_refused_for_its_run_alone(tmp_path: Path) -> None:
    """A 100 MB manifest (sparse: it costs no disk) beside a run of its own: one line
    names it, once; the other run is exported whole."""
    logs = tmp_path / "logs"
    good = Writer050(logs / "run1", session_id="run1")
    big = Writer050(logs / "run2", session_id="run2")
    written(good, 50)
    written(big, 50)
    os.truncate(big.root / "manifest.json", 100 * 2**20)
    follower = service(logs, "--progress-interval", "0.3")
    wait_for(lambda: follower.poll() is not None or status(good.root).get("end") == "complete")
    time.sleep(2.5)  # a few looks more
    code, out, err = stop(follower)
    assert code == 0, (out, err)
    assert set(steps(good.root)) == set(range(50))
    said = [line for line in assert_lines_are_plain(err) if line.startswith("follow run2")]
    assert said == [
        "follow run2: not followed: its manifest.json is 104,857,600 bytes, over the bound "
        "of 1,048,576 (TraceML writes under 2 KiB)"
    ]
    assert not steps(big.root)


def test_one_run_with_a_manifest_over_the_bound_is_refused_at_once(tmp_path: Path) -> None:
    run = Writer050(tmp_path / "run1")
    written(run, 25)
    os.truncate(run.root / "manifest.json", 100 * 2**20)
    started = time.monotonic()
    follower = session(run.root, "--wait", "60")
    out, err = follower.communicate(timeout=60)
    assert follower.returncode == 3, (out, err)  # bad input
    assert time.monotonic() - started < 20, "it waited for a manifest it will not read"
    assert err.count(b"\n") == 1, err
    assert b"manifest.json is 104,857,600 bytes, over the bound" in err
