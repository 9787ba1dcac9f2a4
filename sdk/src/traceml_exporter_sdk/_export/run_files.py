"""Files under a run folder, opened so that no link another user planted is followed.

A run folder is untrusted input: other users write it and ``follow`` may run as root.
So every path under it is opened relative to a folder descriptor, one name at a time,
without following links (``O_NOFOLLOW``); a folder or file there that is a link, not
of its kind, or owned by someone other than the run folder's owner (this process and
root are trusted) is refused. Only the run folder's parent, the operator's path, is
followed.

What is written is written whole or not at all: a temp file created exclusively under
an unpredictable name, fsynced, renamed over the final name, and the folder fsynced.
When this process is root, what it creates belongs to the run folder's owner.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

__all__ = [
    "PRIVATE",
    "Folder",
    "UnsafePathError",
    "open_folder",
    "read_file",
    "remove_file",
    "write_json",
]

PRIVATE = 0o600
"""The mode of status, bookmark and warning files: they may hold error text."""
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_REFUSED = "only real folders and files of the run folder's owner are used (docs/follow.md)"


class UnsafePathError(OSError):
    """A path under a run folder is a link, not what it should be, or another user's."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass
class Folder:
    """An open folder under (or being) a run folder: its descriptor, its path for
    messages, and the run folder's owner that everything under it must belong to."""

    fd: int
    path: Path
    uid: int
    gid: int
    mode: int
    """The run folder's permission bits: export files get its read and write bits."""

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check(self, st: os.stat_result, name: str, *, file: bool = False) -> None:
        """Refuse ``name`` unless it belongs to the run's owner (or to this process, or to
        root: no other user can make a file root's, and an older follower as root did) and,
        for a file, has one name only (a hard link is another's file under a new name).

        Raises:
            UnsafePathError: it does not.
        """
        if st.st_uid not in (self.uid, os.geteuid(), 0):
            raise UnsafePathError(
                f"{self.path / name} belongs to uid {st.st_uid}, not to the run folder's "
                f"owner (uid {self.uid}): refused; {_REFUSED}"
            )
        if file and st.st_nlink > 1:
            raise UnsafePathError(
                f"{self.path / name} has {st.st_nlink} names (a hard link): refused; {_REFUSED}"
            )

    def own(self, fd: int) -> None:
        """Give what this process made to the run's owner, when this process is root."""
        if os.geteuid() == 0 and (self.uid, self.gid) != (0, 0):
            os.fchown(fd, self.uid, self.gid)

    def sub(self, name: str, *, create: bool = False) -> Folder:
        """The folder ``name`` in this one, opened without following a link; made (the
        run owner's, mode 0755 less the umask) when missing and ``create``.

        Raises:
            UnsafePathError: it is a link, not a folder, or another user's.
            FileNotFoundError: it is missing (and not ``create``).
        """
        try:
            fd = _open_dir(self.fd, name, self.path / name)
        except FileNotFoundError:
            if not create:
                raise
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=self.fd)
            fd = _open_dir(self.fd, name, self.path / name)
            try:
                st = os.fstat(fd)
                if st.st_uid == os.geteuid():
                    self.own(fd)
            except BaseException:
                os.close(fd)
                raise
        folder = Folder(fd, self.path / name, self.uid, self.gid, self.mode)
        try:
            self.check(os.fstat(fd), name)
        except BaseException:
            folder.close()
            raise
        return folder

    def open_file(self, name: str, flags: int = os.O_RDONLY, mode: int = PRIVATE) -> int:
        """A descriptor of the regular file ``name`` (``flags`` may add ``O_CREAT``,
        ``O_RDWR``...), never through a link; a file it creates is the run owner's.

        Raises:
            UnsafePathError: it is a link, not a regular file, or another user's.
            OSError: it cannot be opened.
        """
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode,
                         dir_fd=self.fd)  # fmt: skip
        except OSError as exc:
            raise self._why(name, exc) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePathError(f"{self.path / name} is not a regular file: refused")
            if flags & os.O_CREAT and st.st_uid == os.geteuid() and st.st_size == 0:
                self.own(fd)  # made now (or left empty by this process before)
            self.check(st, name, file=True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read(self, name: str, limit: int = -1) -> bytes:
        """The bytes of the regular file ``name`` (at most ``limit``, when not -1), never
        through a link.

        Raises:
            UnsafePathError, OSError: as ``open_file``.
        """
        fd = self.open_file(name)
        with os.fdopen(fd, "rb") as fh:
            return fh.read(limit)

    def lstat(self, name: str) -> os.stat_result | None:
        """``name``'s own status (a link's, not its target's); None when missing."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def create(self, name: str, mode: int) -> int:
        """A new file ``name``, created exclusively (never an existing file or a link),
        the run owner's, with ``mode`` whatever the umask.

        Raises:
            FileExistsError: ``name`` is there (a file or a link).
        """
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, mode, dir_fd=self.fd)
        try:
            os.fchmod(fd, mode)
            self.own(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=self.fd)
            raise
        return fd

    def write_bytes(self, name: str, data: bytes, mode: int = PRIVATE) -> None:
        """Replace ``name`` with ``data`` atomically: an exclusive temp under an
        unpredictable name, fsynced, renamed over ``name``, the folder fsynced. A reader
        or a crash sees the old file or the new one whole; a link at ``name`` is replaced,
        never followed.

        Raises:
            OSError: it could not be written (nothing is left behind).
        """
        tmp = f".{name}.{secrets.token_hex(8)}.tmp"
        fd = self.create(tmp, mode)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)
            raise
        os.fsync(self.fd)

    def _why(self, name: str, exc: OSError) -> OSError:
        """The error to raise for ``name`` that could not be opened: a link is named so."""
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO):
            st = self.lstat(name)
            if st is not None and stat.S_ISLNK(st.st_mode):
                return UnsafePathError(
                    f"{self.path / name} is a symbolic link: refused; {_REFUSED}"
                )
            if st is not None and not stat.S_ISREG(st.st_mode):
                return UnsafePathError(f"{self.path / name} is not a regular file: refused")
        return exc


def _open_dir(dir_fd: int, name: str, shown: Path) -> int:
    try:
        return os.open(name, _DIR, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        try:
            link = stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        except OSError:
            link = False
        what = "a symbolic link" if link else "not a folder"
        raise UnsafePathError(f"{shown} is {what}: refused; {_REFUSED}") from None


def open_folder(root: Path, parts: Sequence[str] = (), *, create: bool = False) -> Folder:
    """The folder ``root/parts...``: ``root`` (a run folder) opened without following a
    link from its parent, then each part; a missing part made when ``create``.

    Raises:
        UnsafePathError: ``root`` or a part is a link, not a folder, or another user's.
        OSError: one is missing (without ``create``), or cannot be opened.
    """
    parent = os.open(root.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = _open_dir(parent, root.name, root)
    finally:
        os.close(parent)
    st = os.fstat(fd)
    folder = Folder(fd, root, st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))
    try:
        for part in parts:
            inner = folder.sub(part, create=create)
            folder.close()
            folder = inner
    except BaseException:
        folder.close()
        raise
    return folder


def _under(path: Path, root: Path | None) -> tuple[Path, tuple[str, ...]]:
    """(the folder to open no-follow from, the parts below it) for ``path``'s folder."""
    if root is not None:
        with contextlib.suppress(ValueError):
            return root, path.parent.relative_to(root).parts
    return path.parent, ()


@contextlib.contextmanager
def _folder_of(path: Path, root: Path | None, create: bool) -> Iterator[Folder]:
    base, parts = _under(path, root)
    with open_folder(base, parts, create=create) as folder:
        yield folder


def read_file(path: Path, *, root: Path | None = None, limit: int = -1) -> bytes:
    """The bytes of ``path``, a file under the run folder ``root`` (or directly in a
    folder of the caller's), read without following any link below ``root``; at most
    ``limit`` bytes when it is not -1.

    Raises:
        UnsafePathError, OSError: as ``Folder.read``.
    """
    with _folder_of(path, root, create=False) as folder:
        return folder.read(path.name, limit)


def remove_file(path: Path, *, root: Path | None = None) -> None:
    """Remove ``path`` (a file under the run folder ``root``) if it is there, its folders
    opened without following links: a planted link is removed, never what it names.

    Raises:
        UnsafePathError, OSError: a folder on the way is refused or cannot be opened.
    """
    with contextlib.suppress(FileNotFoundError), _folder_of(path, root, create=False) as folder:
        os.unlink(path.name, dir_fd=folder.fd)


def write_json(
    path: Path,
    data: Mapping[str, Any],
    *,
    root: Path | None = None,
    mode: int = PRIVATE,
    create: bool = True,
) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically (``Folder.write_bytes``).

    ``root`` is the run folder ``path`` is under: it and every folder below it are
    opened without following links, those missing made when ``create`` (a run folder
    itself is never made: one deleted under a follower stays deleted). Without
    ``root`` (or ``path`` outside it) only the file's own folder is used.

    Raises:
        UnsafePathError, OSError: it could not be written.
    """
    blob = orjson.dumps(data, option=orjson.OPT_INDENT_2)
    with _folder_of(path, root, create) as folder:
        folder.write_bytes(path.name, blob, mode)
