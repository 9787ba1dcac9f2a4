"""One stream's folder: crash-safe parts, and compaction no glob reader can catch midway.

``<export_dir>/<stream>`` is a symbolic link to a *generation*, a folder
``<export_dir>/.<stream>/gNNNNNN`` holding that stream's Parquet files::

    <export_dir>/step_time -> .step_time/g000003
    <export_dir>/.step_time/g000003/part-<run>-<first>-<last>.parquet

A part is written under a hidden temporary name (``.part-....parquet.tmp``,
which ``*.parquet`` never matches), then renamed into place, so a reader never
meets a torn file and a killed process (even ``kill -9``) leaves every renamed
part whole: the page cache outlives the process. Surviving a power cut as well
takes ``durable=True``: each file is fsynced before its rename, and every folder
that gains an entry (a file, a generation, the link) after. A generation only
ever gains files.
Compaction builds the next generation beside it (the merged file, plus hard
links to every file it leaves alone), then swaps the link with one atomic
``rename``. The generation replaced stays whole for ``REPLACED_GRACE_S`` (at
close, ``CLOSE_GRACE_S``), so a reader still listing it lists all of it. A reader that lists
``<stream>/*.parquet`` therefore lists one generation, old or new, and sees
every record exactly once; only a reader that listed the old generation and
opens its files after the swap fails, loudly (file not found), and reads again.

File names sort in write order: ``<run>`` is the exporter's open time in
nanoseconds (19 digits), ``<first>``/``<last>`` the range of part numbers a
file holds (10 digits each; a part holds one number).

One writer at a time: ``ExportDirLock`` holds an exclusive ``flock`` on the
export folder from ``open()`` to the end of ``close()`` (or the failure), so a
second exporter on the same folder is refused rather than left to delete the
first one's generations and temporary files.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

from ._files import fsync_path, refuse_link, replacing
from ._parquet_arrow import dictionary_columns, statistics_columns

__all__ = ["PART_GLOB", "ExportDirLock", "SinkError", "StreamFolder", "list_parts"]

PART_GLOB = "*.parquet"
COMPRESSION: Final = "snappy"
ROW_GROUP_ROWS = 64 * 1024
"""Rows per row group of a compacted file, and the rows a compaction holds in memory at most."""
BIG_FILE_ROWS = 256 * 1024
"""A file with this many rows is left alone by compaction (so no file is rewritten forever)."""

REPLACED_GRACE_S = 5.0
"""A replaced generation is removed at the first flush this long after its swap."""
CLOSE_GRACE_S = 0.05
"""What ``close`` waits after its last swap before it removes every replaced generation."""

_GENERATION = re.compile(r"^g(\d{6,})$")
_PART = re.compile(r"^part-(\d{19})-(\d{10})-(\d{10})\.parquet$")


class SinkError(OSError):
    """A file of the export could not be written: the message names the path and the error."""


@contextlib.contextmanager
def _sink_errors(path: Path) -> Iterator[None]:
    """Re-raise a failure of the file system or of Arrow as ``SinkError`` naming ``path``."""
    try:
        yield
    except (OSError, pa.ArrowException) as error:
        raise SinkError(f"{path}: {type(error).__name__}: {error}") from error


class ExportDirLock:
    """An exclusive, non-blocking ``flock`` on the export folder itself (no lock file is left).

    The kernel drops it when the process dies, even by ``kill -9``, so a crashed
    run never blocks the next one. ``flock`` locks belong to the open folder, so
    two exporters of one process exclude each other too.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise ``SinkError`` saying another writer has the folder."""
        fd = os.open(self.folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise SinkError(
                f"{self.folder}: another exporter is writing in this folder (it holds its "
                "lock); two writers would delete each other's files, so this one stops. "
                "Give each run its own session root"
            ) from None
        self._fd = fd

    def release(self) -> None:
        """Let the next writer in (closing the folder drops the lock); safe to call twice."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def list_parts(folder: Path) -> list[Path]:
    """The Parquet files a glob reader of ``folder`` sees, in write order."""
    return sorted(folder.glob(PART_GLOB))


@dataclass(slots=True)
class _File:
    """A file this exporter wrote in the current generation."""

    name: str
    first: int
    last: int
    rows: int


class StreamFolder:
    """The files of one stream: new parts, compaction and the generation link."""

    def __init__(self, export_dir: Path, stream: str, run: int, *, durable: bool) -> None:
        self.stream = stream
        self.link = export_dir / stream
        self.store = export_dir / f".{stream}"
        self.run = run
        self.durable = durable
        self.written = 0
        self._generation = 0
        self._seq = 0
        self._files: list[_File] = []
        self._replaced: list[tuple[Path, float]] = []

    @property
    def current(self) -> Path:
        """The generation the link points at."""
        return self.store / f"g{self._generation:06d}"

    def prepare(self) -> None:
        """Adopt the stream's link (or make the first generation); drop what a crash left."""
        with _sink_errors(self.link):
            refuse_link(self.store)  # it is emptied below: never another folder
            if self.link.is_symlink():
                target = Path(os.readlink(self.link))
                match = _GENERATION.match(target.name)
                if target.parent.name != self.store.name or match is None:
                    raise SinkError(f"{self.link}: links to {target}, not to a generation of it")
                self._generation = int(match.group(1))
                refuse_link(self.current)
            elif self.link.exists():
                raise SinkError(
                    f"{self.link}: exists and is not this exporter's generation link; move it aside"
                )
            else:
                self._generation = 1
                self.current.mkdir(parents=True, exist_ok=True)
                if self.durable:
                    fsync_path(self.store)  # its new entry; the link's fsync covers .<stream>'s
                self._point_link()
            self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        """Generations no link points at and temporary files: what a killed run left."""
        for entry in self.store.iterdir():
            if entry.name == self.current.name:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        for entry in self.current.iterdir():
            if entry.name.startswith("."):
                entry.unlink()
        with contextlib.suppress(FileNotFoundError):
            self._link_temp().unlink()

    def _link_temp(self) -> Path:
        return self.link.with_name(f".{self.stream}.link.tmp")

    def _point_link(self) -> None:
        """Point the link at the current generation with one atomic rename."""
        temp = self._link_temp()
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        os.symlink(f"{self.store.name}/{self.current.name}", temp)
        os.replace(temp, self.link)
        if self.durable:
            fsync_path(self.link.parent)

    def write_part(self, batches: list[pa.RecordBatch], schema: pa.Schema) -> None:
        """Write ``batches`` as the stream's next part: temporary name, then rename."""
        self._seq += 1
        rows = sum(batch.num_rows for batch in batches)
        part = _File(self._name(self._seq, self._seq), self._seq, self._seq, rows)
        self._write(self.current, part.name, [pa.Table.from_batches(batches, schema)], schema)
        self._files.append(part)
        self.written += rows

    def _name(self, first: int, last: int) -> str:
        return f"part-{self.run:019d}-{first:010d}-{last:010d}.parquet"

    def _write(
        self, folder: Path, name: str, tables: Iterable[pa.Table], schema: pa.Schema
    ) -> None:
        """A complete Parquet file at ``folder/name``, or nothing (the temporary file removed)."""
        final = folder / name
        with (
            _sink_errors(final),
            replacing(final, durable=self.durable) as temp,
            pq.ParquetWriter(
                temp,
                schema,
                compression=COMPRESSION,
                use_dictionary=dictionary_columns(schema),  # type: ignore[arg-type]
                write_statistics=statistics_columns(schema),
            ) as writer,  # closed before replacing() fsyncs and renames it
        ):
            for table in tables:
                writer.write_table(table, row_group_size=ROW_GROUP_ROWS)

    def compact(self, limit: int | None, schema: pa.Schema) -> None:
        """Merge each run of consecutive small files of this run into one file.

        With ``limit``, only once this run has more than ``limit`` files here;
        with None (at close) whenever two small files are neighbours.
        """
        self.remove_replaced(REPLACED_GRACE_S)
        if limit is not None and len(self._files) <= limit:
            return
        groups: list[list[_File]] = [[]]
        for file in self._files:
            if file.rows < BIG_FILE_ROWS:
                groups[-1].append(file)
            elif groups[-1]:
                groups.append([])
        merges = [group for group in groups if len(group) > 1]
        if merges:
            self._next_generation(merges, schema)

    def _next_generation(self, merges: list[list[_File]], schema: pa.Schema) -> None:
        old = self.current
        new = self.store / f"g{self._generation + 1:06d}"
        merged = {file.name for group in merges for file in group}
        with _sink_errors(new):
            if new.exists():
                shutil.rmtree(new)
            new.mkdir()
            for entry in old.iterdir():
                if entry.name.endswith(".parquet") and entry.name not in merged:
                    os.link(entry, new / entry.name)
            if self.durable:
                fsync_path(self.store)  # the new generation's entry; its files sync as written
        files: list[_File] = []
        for group in merges:
            name = self._name(group[0].first, group[-1].last)
            paths = [old / file.name for file in group]
            self._write(new, name, _row_groups(paths), schema)
            files.append(_File(name, group[0].first, group[-1].last, sum(f.rows for f in group)))
        kept = [file for file in self._files if file.name not in merged]
        self._generation += 1
        with _sink_errors(self.link):
            self._point_link()
        self._files = sorted(kept + files, key=lambda file: file.first)
        self._replaced.append((old, time.monotonic()))

    def remove_replaced(self, grace: float) -> None:
        """Remove the generations replaced at least ``grace`` seconds ago.

        A reader that opened a generation just before its swap may still be
        listing it; removing it only later lets that listing finish whole.
        """
        now = time.monotonic()
        while self._replaced and now - self._replaced[0][1] >= grace:
            folder, _ = self._replaced.pop(0)
            shutil.rmtree(folder, ignore_errors=True)  # invisible; the next open() retries

    def last_swap_age(self) -> float | None:
        """Seconds since the last swap whose old generation is still there, or None."""
        return time.monotonic() - self._replaced[-1][1] if self._replaced else None


def _row_groups(paths: list[Path]) -> Iterator[pa.Table]:
    """The rows of ``paths`` in order, as tables of about ``ROW_GROUP_ROWS`` rows."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    for path in paths:
        with _sink_errors(path), pq.ParquetFile(path) as reader:
            for batch in reader.iter_batches(batch_size=ROW_GROUP_ROWS):
                pending.append(batch)
                rows += batch.num_rows
                if rows >= ROW_GROUP_ROWS:
                    yield pa.Table.from_batches(pending)
                    pending, rows = [], 0
    if pending:
        yield pa.Table.from_batches(pending)
