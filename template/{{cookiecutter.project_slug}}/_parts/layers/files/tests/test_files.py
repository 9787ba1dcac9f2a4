"""Unit tests of ``_files``: files replaced atomically and receipt lines, each fsynced."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

import pytest

from traceml_exporter_example._files import (
    append_line,
    export_folder,
    open_append,
    refuse_link,
    replacing,
    write_atomically,
)


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The file descriptors ``os.fsync`` was called on."""
    calls: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_write_atomically_replaces_the_file_fsynced(tmp_path: Path, synced: list[int]) -> None:
    path = tmp_path / "new" / "summary.json"
    write_atomically(path, b"old")
    write_atomically(path, b"new")
    assert path.read_bytes() == b"new"
    assert len(synced) == 4  # each write: the file before its rename, the folder after
    assert sorted(p.name for p in path.parent.iterdir()) == ["summary.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "summary.json"
    write_atomically(path, b"old")

    def broken(fd: int) -> None:
        raise OSError(5, f"Input/output error on {fd}")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError, match="Input/output"):
        write_atomically(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_append_line_adds_one_fsynced_line(tmp_path: Path, synced: list[int]) -> None:
    path = tmp_path / "export" / "receipt.jsonl"
    append_line(path, '{"a": 1}')
    append_line(path, '{"a": 2}')
    assert path.read_text(encoding="utf-8") == '{"a": 1}\n{"a": 2}\n'
    assert len(synced) == 2


def _write_half(path: Path) -> None:
    with replacing(path) as tmp:
        tmp.write_bytes(b"ne")
        raise ValueError("half written")


def test_replacing_leaves_the_old_file_when_the_block_raises(tmp_path: Path) -> None:
    path = tmp_path / "part.parquet"
    path.write_bytes(b"old")
    with pytest.raises(ValueError, match="half written"):
        _write_half(path)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["part.parquet"]


def test_replacing_without_durable_renames_without_fsync(tmp_path: Path, synced: list[int]) -> None:
    path = tmp_path / "part.parquet"
    with replacing(path, durable=False) as tmp:
        tmp.write_bytes(b"new")
    assert path.read_bytes() == b"new"
    assert synced == []


# -- a run folder other users write: no planted link is followed ---------------------


def test_export_folder_refuses_a_link_where_a_folder_should_be(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "run" / "aggregator").mkdir(parents=True)
    (tmp_path / "run" / "aggregator" / "export").symlink_to(elsewhere)
    with pytest.raises(OSError, match="link"):
        export_folder(tmp_path / "run" / "aggregator" / "export")
    (tmp_path / "run2").mkdir()
    (tmp_path / "run2" / "aggregator").symlink_to(elsewhere)
    with pytest.raises(OSError, match="link"):
        export_folder(tmp_path / "run2" / "aggregator" / "export")
    assert list(elsewhere.iterdir()) == []
    made = export_folder(tmp_path / "run3" / "aggregator" / "export")
    assert made.is_dir()


def test_no_file_is_appended_or_replaced_through_a_planted_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    export = tmp_path / "export"
    export.mkdir()
    (export / "receipt.jsonl").symlink_to(victim)
    with pytest.raises(OSError, match="symbolic link"):
        append_line(export / "receipt.jsonl", "{}")
    with pytest.raises(OSError, match="symbolic link"):
        open_append(export / "receipt.jsonl")
    (export / ".summary.json.tmp").symlink_to(victim)  # the old, predictable temp name
    write_atomically(export / "summary.json", b"new")
    assert victim.read_bytes() == b"precious"
    assert (export / "summary.json").read_bytes() == b"new"
    with pytest.raises(OSError, match="link"):
        refuse_link(export / "receipt.jsonl")


def test_temporary_names_are_unpredictable(tmp_path: Path) -> None:
    names = set()
    for _ in range(2):
        with replacing(tmp_path / "part.parquet") as tmp:
            names.add(tmp.name)
            tmp.write_bytes(b"x")
    assert len(names) == 2


# -- modes, owners and failures: what a run folder other users share needs --------------

ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason="owners other than this process's can be set by root only"
)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o7777


def test_files_are_made_with_mode_644(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        open_append(tmp_path / "receipt.jsonl").close()
        with replacing(tmp_path / "part.parquet") as tmp:
            tmp.write_bytes(b"x")  # opens the made file: its mode stays
    finally:
        os.umask(old)
    assert _mode(tmp_path / "receipt.jsonl") == 0o644
    assert _mode(tmp_path / "part.parquet") == 0o644


def test_a_link_planted_at_the_temporary_name_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The temporary file is made exclusively, never through a link, even when another
    user guessed its name."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    monkeypatch.setattr("secrets.token_hex", lambda n: "0" * (2 * n))
    (tmp_path / f".part.parquet.{'0' * 16}.tmp").symlink_to(victim)
    with pytest.raises(FileExistsError), replacing(tmp_path / "part.parquet") as tmp:
        tmp.write_bytes(b"new")
    assert victim.read_bytes() == b"precious"


def _open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_failure_after_a_file_is_opened_closes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _open_fds()

    def broken(*_: object) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as patched:
        patched.setattr(os, "fdopen", broken)
        with pytest.raises(OSError, match="Input/output"):
            open_append(tmp_path / "receipt.jsonl")
    with monkeypatch.context() as patched:
        patched.setattr(os, "fsync", broken)
        with pytest.raises(OSError, match="Input/output"):
            write_atomically(tmp_path / "summary.json", b"x")
    assert _open_fds() <= before


@ROOT_ONLY
def test_only_a_regular_file_is_appended_to(tmp_path: Path) -> None:
    os.mknod(tmp_path / "receipt.jsonl", 0o600 | 0o020000, os.makedev(1, 3))  # /dev/null
    with pytest.raises(OSError, match="not a regular file"):
        open_append(tmp_path / "receipt.jsonl")


def test_export_folder_makes_what_is_missing(tmp_path: Path) -> None:
    made = export_folder(tmp_path / "logs" / "run" / "aggregator" / "export")
    assert made.is_dir()


@ROOT_ONLY
def test_folders_root_makes_belong_to_the_run_folders_owner(tmp_path: Path) -> None:
    """follow as root over a logs folder root owns (each run its user's): what it makes
    in a run goes to the run's owner, and the logs folder's owner is not asked."""
    run = tmp_path / "logs" / "run"
    run.mkdir(parents=True)
    os.chown(run, 1, 1)
    export_folder(run / "aggregator" / "export")
    for folder in (run / "aggregator", run / "aggregator" / "export"):
        assert (folder.stat().st_uid, folder.stat().st_gid) == (1, 1)


@ROOT_ONLY
def test_a_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "aggregator").mkdir(parents=True)
    os.chown(run, 1, 1)
    os.chown(run / "aggregator", 2, 2)
    with pytest.raises(OSError, match="belongs to uid 2"):
        export_folder(run / "aggregator" / "export")


@ROOT_ONLY
def test_a_user_who_is_not_root_gives_nothing_away() -> None:
    """Not root: the folders made are the process's own, whoever owns the run folder
    (giving them away would fail: only root may). A forked child drops to nobody."""
    # /tmp itself: pytest's folders are root's alone, and TMPDIR (nox sets it) may lie
    # under a folder nobody cannot enter
    base = Path(tempfile.mkdtemp(prefix="traceml-files-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)  # noqa: S103 - nobody must reach the run folder
        run = base / "run"
        run.mkdir()
        os.chmod(run, 0o777)  # noqa: S103 - and write in it, as its owner could
        os.chown(run, 1, 1)
        target = run / "aggregator" / "export"
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                os.setgid(65534)
                os.setuid(65534)
                export_folder(target)
                code = 0
            except BaseException:  # noqa: BLE001 - the child reports any failure, then exits
                traceback.print_exc()  # the parent's captured stderr shows why
                sys.stderr.flush()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert target.stat().st_uid == 65534
    finally:
        shutil.rmtree(base)
