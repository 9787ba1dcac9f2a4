"""Unit tests of ``_files``: files replaced atomically and receipt lines, each fsynced."""

from __future__ import annotations

import os
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
