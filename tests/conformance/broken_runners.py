"""Deliberately broken exporters that pass a suite driving one instance at a time, and fail
what the SDK's runners do: several runs at once (``follow --logs-dir``), a new instance
after an outage or a kill (``follow``), a restart with other streams, a fault marked
transient or permanent.

Each is ``broken_exporters.Good`` changed in one place; ``test_matrix.py`` asserts that
each fails exactly the check of its rule.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from typing import Any, ClassVar

from broken_exporters import Good, next_part

# -- several instances at once -------------------------------------------------------------


class ClassAttributeStore(Good):
    """Keeps its open files in a class attribute (a dict default shared by every instance):
    the instance opened last gets every instance's records."""

    files: ClassVar[dict[str, Any]] = {}  # type: ignore[misc]

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        del self.files  # the class's dict, "initialised once"

    def close_files(self) -> None:
        shared = type(self).files
        error: OSError | None = None
        for stream in self.streams:
            handle = shared.get(stream)
            if handle is not None and os.path.dirname(handle.name) == str(self.dir):
                del shared[stream]
                try:
                    handle.close()
                except OSError as exc:
                    error = error or exc
        if error is not None:
            raise error

    def release(self) -> None:
        with contextlib.suppress(OSError):  # every file is closed before it raises
            self.close_files()


def make_class_attribute_store(context: Any) -> ClassAttributeStore:
    return ClassAttributeStore(context)


class _Client:
    """A client shared by the module: one per process, "to save connections"."""

    def __init__(self) -> None:
        self.closed = False

    def send(self, handle: Any, line: str) -> None:
        if self.closed:
            raise RuntimeError("the client is shut down")
        handle.write(line)


_CLIENT: _Client | None = None


class ModuleClient(Good):
    """Writes through a module-level client that its close() shuts down, under the other
    instances still using it."""

    def open(self) -> None:
        global _CLIENT
        super().open()
        if _CLIENT is None:
            _CLIENT = _Client()
        self.client = _CLIENT

    def put(self, records: Any) -> None:
        for record in records:
            self.client.send(self.files[record.STREAM], self.line(record))

    def close(self, *, dropped_batches: int = 0) -> None:
        global _CLIENT
        super().close()
        self.client.closed = True
        _CLIENT = None


def make_module_client(context: Any) -> ModuleClient:
    return ModuleClient(context)


_BY_NAME: dict[str, tuple[int, dict[str, Any]]] = {}


class KeyedByFolderName(Good):
    """Shares open files between instances of one run, keyed by the run folder's name: two
    runs named alike under two logs folders write into one."""

    def open(self) -> None:
        key = self.context.session_root.name
        users, files = _BY_NAME.get(key, (0, {}))
        if not files:
            super().open()
            files = self.files
        self.files = files
        _BY_NAME[key] = (users + 1, files)

    def close_files(self) -> None:
        self._leave(Good.close_files)

    def release(self) -> None:
        self._leave(Good.release)

    def _leave(self, closing: Any) -> None:
        key = self.context.session_root.name
        users, files = _BY_NAME.pop(key, (1, {}))
        if users > 1:
            _BY_NAME[key] = (users - 1, files)
            self.files = {}
        else:
            closing(self)


def make_keyed_by_folder_name(context: Any) -> KeyedByFolderName:
    return KeyedByFolderName(context)


# -- a new instance after an outage or a kill ------------------------------------------------


class LockLeftOnFailure(Good):
    """Takes a lock file holding its process id in open and removes it in close; a stale
    lock (its process gone, as after a kill) is taken over. A failing method forgets the
    lock, so in the same process every later open refuses."""

    LOCK = "writer.lock"

    def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        lock = self.dir / self.LOCK
        if lock.exists():
            holder = int(lock.read_text("ascii") or 0)
            with contextlib.suppress(ProcessLookupError):
                os.kill(holder, 0)
                raise RuntimeError(f"{lock} is held by process {holder}: another writer")
        lock.write_text(str(os.getpid()), "ascii")
        super().open()

    def close(self, *, dropped_batches: int = 0) -> None:
        super().close()
        (self.dir / self.LOCK).unlink()


def make_lock_left_on_failure(context: Any) -> LockLeftOnFailure:
    return LockLeftOnFailure(context)


class LockOutlivesProcess(Good):
    """Takes a lock file beside its export folder in open (``O_EXCL``) and removes it in
    close and when a method fails; a killed process removes nothing, and every later open
    refuses."""

    def open(self) -> None:
        self.lock = self.dir.with_name("export.lock")
        self.lock.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(self.lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            raise RuntimeError(f"{self.lock} exists: another writer has the export") from None
        try:
            super().open()
        except BaseException:
            self.lock.unlink()
            raise

    def close(self, *, dropped_batches: int = 0) -> None:
        try:
            super().close()
        finally:
            self.lock.unlink()

    def release(self) -> None:
        super().release()
        with contextlib.suppress(OSError):
            self.lock.unlink()


def make_lock_outlives_process(context: Any) -> LockOutlivesProcess:
    return LockOutlivesProcess(context)


class StreamsFixedAtFirstOpen(Good):
    """Records the run's streams at its first open and, on a restart, writes those only:
    records of a stream selected later are dropped."""

    def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        manifest = self.dir / "streams.json"
        if manifest.exists():
            self.streams = tuple(json.loads(manifest.read_text("utf-8")))
        else:  # whole or not at all: a failed first open leaves no torn manifest
            temp = manifest.with_suffix(".tmp")
            temp.write_text(json.dumps(list(self.streams)), "utf-8")
            os.replace(temp, manifest)
        self.open_files(next_part(self.dir))

    def put(self, records: Any) -> None:
        for record in records:
            handle = self.files.get(record.STREAM)
            if handle is not None:
                handle.write(self.line(record))


def make_streams_fixed_at_first_open(context: Any) -> StreamsFixedAtFirstOpen:
    return StreamsFixedAtFirstOpen(context)


# -- transient or permanent ----------------------------------------------------------------


def _marked(error: BaseException) -> BaseException:
    error.permanent = True  # type: ignore[attr-defined]
    return error


class OsErrorPermanent(Good):
    """Marks every OSError permanent ("the disk is broken"): a full disk or a folder moved
    away ends ``follow`` at once."""

    def write(self, records: Any) -> None:
        try:
            super().write(records)
        except OSError as exc:
            raise _marked(exc) from None

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as exc:
            raise _marked(exc) from None


def make_oserror_permanent(context: Any) -> OsErrorPermanent:
    return OsErrorPermanent(context)


REVOKED: set[str] = set()
"""Run folders whose (pretend) credentials the sink refuses from now on: the test file's
``break_sink_permanently`` adds to it, as a test server would revoke a token."""


class Credentials(Good):
    """Good, with a sink that can refuse its credentials; a refusal is marked permanent."""

    def check_credentials(self) -> None:
        if str(self.context.session_root) in REVOKED:
            self.release()
            raise _marked(PermissionError(errno.EACCES, "the sink refused the credentials"))

    def write(self, records: Any) -> None:
        self.check_credentials()
        super().write(records)

    def flush(self) -> None:
        self.check_credentials()
        super().flush()


def make_credentials(context: Any) -> Credentials:
    return Credentials(context)


class CredentialsUnmarked(Credentials):
    """Raises a refusal of its credentials like any error: ``follow`` waits for ever."""

    def check_credentials(self) -> None:
        if str(self.context.session_root) in REVOKED:
            self.release()
            raise PermissionError(errno.EACCES, "the sink refused the credentials")


def make_credentials_unmarked(context: Any) -> CredentialsUnmarked:
    return CredentialsUnmarked(context)


# -- causes: a restart whose read-back holds more than was written ---------------------------

_SEEN: dict[str, list[tuple[str, str]]] = {}


class ReplaysOnRestart(Good):
    """Keeps every line it wrote in a module-level cache keyed by the run folder, and writes
    the cache again when it opens on that folder ("to make each part whole"): a restart
    shows the first instance's records twice."""

    def open(self) -> None:
        super().open()
        self.cache = _SEEN.setdefault(str(self.context.session_root), [])
        for stream, line in self.cache:
            if stream in self.files:
                self.files[stream].write(line)

    def put(self, records: Any) -> None:
        for record in records:
            line = self.line(record)
            self.cache.append((record.STREAM, line))
            self.files[record.STREAM].write(line)


def make_replays_on_restart(context: Any) -> ReplaysOnRestart:
    return ReplaysOnRestart(context)
