"""``follow`` as root over run folders another user made hostile (issue 41).

Each test builds the folder AS ANOTHER USER (``nobody`` plants the links with
``runuser``; the victim's files belong to ``daemon``) and runs the follower as root,
as CI does. Run as root, a test that cannot switch user fails; only a local run
that is not root skips them (nothing here can be attempted without root).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import select
import shutil
import signal
import sqlite3
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from follow_files import status
from follow_helpers import EXIT_INCOMPLETE, EXIT_INPUT, catches, exported, finish, follow
from traceml_exporter_sdk._bridge.sqlite_source import TABLE_BY_STREAM
from waiting import wait_for
from writer050 import Writer050, step_records

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the attacks need root to run the follower (CI runs as root)"
)

NOBODY = 65534
VICTIM = 1  # daemon
PRECIOUS = b"root's precious file\n"


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder every user can reach, with ``logs/`` writable by all (sticky, like /tmp)."""
    base = Path(tempfile.mkdtemp(prefix="hostile-", dir="/tmp"))
    try:
        base.chmod(0o755)
        (base / "logs").mkdir(mode=0o1777)
        (base / "logs").chmod(0o1777)
        (base / "precious").write_bytes(PRECIOUS)
        (base / "target").mkdir(mode=0o755)  # a folder of root's (/etc/cron.d, say)
        victim = base / "victim"
        victim.mkdir(mode=0o700)
        os.chown(victim, VICTIM, VICTIM)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def as_nobody(script: str, cwd: Path) -> None:
    """Run ``script`` in ``sh`` as ``nobody``; fail the test when it cannot be."""
    done = subprocess.run(
        ["runuser", "-u", "nobody", "--", "sh", "-euc", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, f"could not act as nobody: {done.stderr}"
    assert "nobody" in subprocess.run(
        ["runuser", "-u", "nobody", "--", "id", "-un"], capture_output=True, text=True,
        timeout=30, check=True,
    ).stdout  # fmt: skip


def chown_tree(root: Path, uid: int) -> None:
    for path in [root, *root.rglob("*")]:
        os.lchown(path, uid, uid)


def finished_run(root: Path, uid: int, first: int = 0, count: int = 50) -> Writer050:
    """A complete 0.5.0 run of ``count`` step_time rows, every file of it ``uid``'s."""
    writer = Writer050(root, session_id=root.name)
    writer.flush(step_records(first, count, observed=1))
    writer.close()
    chown_tree(root, uid)
    return writer


def nobody_run(logs: Path, name: str, count: int = 50) -> Path:
    """A run folder of nobody's (made by nobody, filled as its aggregator would)."""
    as_nobody(f"mkdir -m 755 {name}", logs)
    finished_run(logs / name, NOBODY, count=count)
    return logs / name


def prune(run: Path, upto: int) -> None:
    """Delete the first step_time rows, as the aggregator's retention would."""
    connection = sqlite3.connect(run / "aggregator" / "telemetry", isolation_level=None)
    try:
        table = TABLE_BY_STREAM["step_time"]
        connection.execute(f"DELETE FROM {table} WHERE id <= ?", (upto,))
    finally:
        connection.close()
    chown_tree(run, NOBODY)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def owners(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.lstat().st_uid for p in [root, *root.rglob("*")]}


def follow_logs_until(logs: Path, done: Path) -> tuple[int, str, str]:
    """``follow --logs-dir`` as root until the run ``done`` is exported; then SIGTERM."""
    follower = follow(logs, "--runs-poll-interval", "0.2", where="--logs-dir")
    try:
        wait_for(lambda: status(done).get("end") == "complete", f"{done.name} exported")
        wait_for(lambda: catches(follower, signal.SIGTERM))
    finally:
        follower.send_signal(signal.SIGTERM)
    return finish(follower)


# -- root writes through links the attacker planted -------------------------------


def test_a_lock_that_is_a_link_truncates_nothing(shared: Path) -> None:
    run = nobody_run(shared / "logs", "evil")
    as_nobody("mkdir aggregator/follow && ln -s ../../../../precious aggregator/follow/lock", run)
    code, out, err = finish(follow(run))
    assert (shared / "precious").read_bytes() == PRECIOUS, "root truncated a file through lock"
    assert code == EXIT_INPUT, (out, err)
    assert "lock" in err, err
    assert "link" in err, err


def test_a_warning_temp_that_is_a_link_overwrites_nothing(shared: Path) -> None:
    run = nobody_run(shared / "logs", "evil")
    prune(run, 10)
    as_nobody(
        "mkdir aggregator/follow && "
        "ln -s ../../../../precious aggregator/follow/finalization_warning.json.tmp",
        run,
    )
    code, out, err = finish(follow(run))
    assert (shared / "precious").read_bytes() == PRECIOUS, "root wrote JSON through the link"
    assert code == EXIT_INCOMPLETE, (out, err)
    warning = run / "aggregator" / "follow" / "finalization_warning.json"
    assert not warning.is_symlink()
    assert b'"pruned_rows"' in warning.read_bytes()


def _created_names(watch: Path, timeout: float) -> Iterator[str]:
    """Names created in ``watch`` (inotify, IN_CREATE), as they come, for ``timeout`` s."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert fd >= 0, os.strerror(ctypes.get_errno())
    try:
        assert libc.inotify_add_watch(fd, os.fsencode(watch), 0x100) >= 0  # IN_CREATE
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([fd], [], [], left)[0]:
                continue
            data = os.read(fd, 65536)
            while data:
                _, _, _, size = struct.unpack("iIII", data[:16])
                yield data[16 : 16 + size].rstrip(b"\0").decode()
                data = data[16 + size :]
    finally:
        os.close(fd)


def test_a_status_temp_name_seen_once_cannot_be_planted(shared: Path) -> None:
    logs = shared / "logs"
    run = nobody_run(logs, "evil")
    as_nobody("mkdir aggregator/follow", run)
    follow_dir = run / "aggregator" / "follow"
    follower = follow(logs, "--runs-poll-interval", "0.2", where="--logs-dir")
    try:
        seen = next(
            name
            for name in _created_names(follow_dir, 30)
            if "status.json" in name and name.endswith(".tmp")
        )
        as_nobody(f"ln -s ../../../../precious 'aggregator/follow/{seen}'", run)
        for _ in range(2):  # the status of a finished run is rewritten every 5 s
            before = status(run).get("updated")
            wait_for(lambda b=before: status(run).get("updated", b) != b, timeout=30)
    finally:
        follower.send_signal(signal.SIGTERM)
        finish(follower)
    assert (shared / "precious").read_bytes() == PRECIOUS, "root wrote through a planted temp"
    assert not (follow_dir / "status.json").is_symlink()


@pytest.mark.parametrize("where", ["follow", "export"])
def test_a_state_or_export_folder_that_is_a_link_is_refused(shared: Path, where: str) -> None:
    run = nobody_run(shared / "logs", "evil")
    as_nobody(f"ln -s ../../../target aggregator/{where}", run)
    code, out, err = finish(follow(run))
    assert list((shared / "target").iterdir()) == [], "root made files through the link"
    assert code == EXIT_INPUT, (out, err)
    assert f"aggregator/{where}" in err, err
    assert "link" in err, err


# -- root reads for the attacker ------------------------------------------------------


def test_a_run_folder_linked_into_another_users_folder_is_refused_and_others_go_on(
    shared: Path,
) -> None:
    logs = shared / "logs"
    secret = shared / "victim" / "secret"
    finished_run(secret, VICTIM, first=1000)
    chown_tree(shared / "victim", VICTIM)
    before = owners(secret)
    as_nobody("ln -s ../victim/secret evil", logs)
    mine = nobody_run(logs, "mine")
    code, out, err = follow_logs_until(logs, mine)
    assert owners(secret) == before, "root made files in another user's run folder"
    assert "evil" in err, err
    assert "link" in err, err
    assert len(exported(mine)["step_time"]) == 50
    assert code == 0, (out, err)


def _victim_database_with_wal(folder: Path) -> Path:
    """Another user's 0600 database whose last rows are only in its ``-wal``."""
    live = Writer050(folder / "live", session_id="victim")
    live.flush(step_records(1000, 40, observed=1))
    assert live.connection is not None
    live.connection.execute("PRAGMA wal_autocheckpoint=0")
    live.flush(step_records(2000, 10, observed=1))
    database = folder / "telemetry"
    shutil.copyfile(live.database, database)
    shutil.copyfile(f"{live.database}-wal", f"{database}-wal")
    live.disconnect()
    shutil.rmtree(folder / "live")
    for path in (database, Path(f"{database}-wal")):
        path.chmod(0o600)
        os.chown(path, VICTIM, VICTIM)
    assert Path(f"{database}-wal").stat().st_size > 0
    return database


def test_a_telemetry_link_to_another_users_database_reads_and_checkpoints_nothing(
    shared: Path,
) -> None:
    logs = shared / "logs"
    database = _victim_database_with_wal(shared / "victim")
    wal = Path(f"{database}-wal")
    before = digest(database), digest(wal)
    evil = nobody_run(logs, "evil")
    as_nobody(
        "rm aggregator/telemetry && ln -s ../../../victim/telemetry aggregator/telemetry && "
        ": > aggregator/telemetry-wal",
        evil,
    )
    mine = nobody_run(logs, "mine")
    code, out, err = follow_logs_until(logs, mine)
    leaked = [row for row in exported(evil).get("step_time", []) if row["step"] >= 1000]
    assert not leaked, f"{len(leaked)} rows of another user's database exported"
    assert wal.exists(), "the victim's -wal was checkpointed into its database and removed"
    assert (digest(database), digest(wal)) == before
    assert "evil" in err, err
    assert "telemetry" in err, err
    assert len(exported(mine)["step_time"]) == 50
    assert code == 0, (out, err)


def test_an_aggregator_folder_of_another_user_is_refused(shared: Path) -> None:
    logs = shared / "logs"
    theirs = shared / "victim" / "run"
    finished_run(theirs, VICTIM, first=1000)
    as_nobody("mkdir -m 755 evil", logs)
    (theirs / "aggregator").rename(logs / "evil" / "aggregator")  # nobody could mv theirs
    shutil.copyfile(theirs / "manifest.json", logs / "evil" / "manifest.json")
    os.chown(logs / "evil" / "manifest.json", NOBODY, NOBODY)
    before = owners(logs / "evil" / "aggregator")
    code, out, err = finish(follow(logs / "evil"))
    assert owners(logs / "evil" / "aggregator") == before, "root wrote in another user's folder"
    assert code == EXIT_INPUT, (out, err)
    assert "aggregator" in err, err
    assert "uid" in err, err


# -- what root leaves in a run folder ---------------------------------------------------


def test_what_root_creates_in_a_run_folder_belongs_to_the_runs_owner(shared: Path) -> None:
    run = nobody_run(shared / "logs", "mine")
    code, out, err = finish(follow(run))
    assert code == 0, (out, err)
    made = owners(run)
    assert "aggregator/follow/status.json" in made
    assert "aggregator/export" in made
    assert {name: uid for name, uid in made.items() if uid != NOBODY} == {}


def test_status_warning_and_exports_are_not_readable_by_others(shared: Path) -> None:
    run = nobody_run(shared / "logs", "mine")
    run.chmod(0o700)  # the run's own permissions: its owner's only
    prune(run, 5)
    code, out, err = finish(follow(run))
    assert code == EXIT_INCOMPLETE, (out, err)
    state = run / "aggregator" / "follow"
    for path in [
        state / "status.json",
        state / "bookmark.json",
        state / "finalization_warning.json",
        *(run / "aggregator" / "export").iterdir(),
    ]:
        assert path.stat().st_mode & 0o077 == 0, f"{path} is {oct(path.stat().st_mode)}"
