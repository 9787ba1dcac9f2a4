"""A real PostgreSQL server for exporter tests: a throwaway cluster, or the one PGHOST names.

``postgres_server()`` yields a :class:`PostgresServer`. When ``PGHOST`` or
``PGSERVICE`` is set, that existing server is used as libpq's environment
describes it (nothing is started or stopped). Otherwise ``initdb`` and
``pg_ctl`` (found on ``PATH``, in ``pg_config --bindir`` or in
``/usr/lib/postgresql/*/bin``) make a cluster in a temporary folder that listens
on 127.0.0.1 at a free port (and on a Unix socket in that folder), with trust
authentication; run as root, the cluster belongs to an unprivileged user
(``postgres`` or ``nobody``), because ``initdb`` refuses root. Every wait is
bounded; the cluster and its folder are removed on exit.

Fault helpers: :meth:`PostgresServer.terminate` kills backends (by
``application_name``), :meth:`PostgresServer.stop` and :meth:`PostgresServer.start`
stop and restart a throwaway cluster. SQL goes through psycopg 3, imported on
first use (``pip install "psycopg[binary]"``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .fault_proxy import unused_port

if TYPE_CHECKING:
    from psycopg.sql import Composable

__all__ = [
    "HOW_TO_GET_A_SERVER",
    "PostgresServer",
    "PostgresUnavailableError",
    "find_bindir",
    "postgres_server",
]

HOW_TO_GET_A_SERVER = (
    "install PostgreSQL's server binaries (Debian/Ubuntu: apt-get install postgresql; "
    "macOS: brew install postgresql) so initdb and pg_ctl are on PATH or in "
    "`pg_config --bindir`, or point PGHOST/PGPORT/PGUSER/PGDATABASE (or PGSERVICE) at a "
    "server the tests may create databases on"
)
"""The hint every 'no server' message carries."""

_UNPRIVILEGED_USERS = ("postgres", "nobody")
_SUPERUSER = "postgres"


class PostgresUnavailableError(RuntimeError):
    """No server could be found or started; the message says why and how to get one."""


def find_bindir() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, or None when there is none."""
    candidates: list[Path] = []
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).resolve().parent)
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            )
            candidates.append(Path(out.stdout.strip()))
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates.extend(Path(p) for p in versions)
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    return None


@dataclass
class PostgresServer:
    """Where a server listens, how to reach it as its superuser, and fault helpers."""

    host: str | None
    port: int | None
    user: str | None
    dbname: str | None
    owned: bool
    """True for a throwaway cluster this module started (then stop/start work)."""
    _bindir: Path | None = None
    _data: Path | None = None
    _run_as: str | None = None
    _log: Path | None = None
    _extra: Sequence[str] = field(default_factory=tuple)

    def conninfo_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments for ``psycopg.connect``; unset ones come from libpq's env."""
        kwargs: dict[str, Any] = {"connect_timeout": 10}
        for key in ("host", "port", "user", "dbname"):
            value = getattr(self, key)
            if value is not None:
                kwargs[key] = value
        kwargs.update(overrides)
        return kwargs

    def env(self, dbname: str | None = None) -> dict[str, str]:
        """libpq environment variables (``PGHOST`` ...) that reach this server."""
        values = {"PGHOST": self.host, "PGPORT": self.port, "PGUSER": self.user}
        values["PGDATABASE"] = dbname or self.dbname
        return {key: str(value) for key, value in values.items() if value is not None}

    def execute(
        self, query: str | Composable, params: Sequence[Any] = (), *, dbname: str | None = None
    ) -> list[tuple[Any, ...]] | None:
        """Run one statement in autocommit as the superuser; return its rows (or None)."""
        import psycopg

        overrides = {"dbname": dbname} if dbname else {}
        with psycopg.connect(**self.conninfo_kwargs(autocommit=True, **overrides)) as conn:
            cursor = conn.execute(query, params)  # type: ignore[arg-type]  # a str, not LiteralString
            return cursor.fetchall() if cursor.description else None

    def terminate(self, application_name: str, *, timeout: float = 10.0) -> int:
        """Kill every backend whose ``application_name`` is this; wait until they are gone."""
        killed = self._count(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            application_name,
        )
        deadline = time.monotonic() + timeout
        query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        while self._count(query, application_name) and time.monotonic() < deadline:
            time.sleep(0.05)
        return killed

    def _count(self, query: str, *params: Any) -> int:
        rows = self.execute(query, params)
        return int(rows[0][0]) if rows else 0

    def stop(self, *, timeout: float = 30.0) -> None:
        """Stop a throwaway cluster (fast shutdown, then immediate); bounded by ``timeout``."""
        self._require_owned("stop")
        for mode in ("fast", "immediate"):
            result = self._pg_ctl("stop", "-m", mode, "-t", str(int(timeout)), timeout=timeout + 5)
            if result.returncode == 0 or not self._running():
                return
        raise PostgresUnavailableError(f"pg_ctl stop failed: {result.stderr.strip()}")

    def start(self, *, timeout: float = 30.0) -> None:
        """Start a stopped throwaway cluster again, on the same port."""
        self._require_owned("start")
        options = " ".join(
            (
                "-c listen_addresses=127.0.0.1",
                f"-p {self.port}",
                f"-k {self._data.parent if self._data else ''}",
                *self._extra,
            )
        )
        result = self._pg_ctl(
            "start", "-w", "-t", str(int(timeout)), "-l", str(self._log), "-o", options,
            timeout=timeout + 5,
        )  # fmt: skip
        if result.returncode != 0:
            log = self._log.read_text(errors="replace")[-2000:] if self._log else ""
            raise PostgresUnavailableError(
                f"pg_ctl start failed ({result.returncode}): {result.stderr.strip()}\n{log}"
            )

    def _require_owned(self, what: str) -> None:
        if not self.owned:
            raise PostgresUnavailableError(
                f"cannot {what} the server PGHOST/PGSERVICE names: only a throwaway cluster "
                "started by postgres_server() can be stopped and started"
            )

    def _running(self) -> bool:
        return self._pg_ctl("status", timeout=10).returncode == 0

    def _pg_ctl(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        if self._bindir is None or self._data is None:
            raise PostgresUnavailableError("this server has no cluster of its own to control")
        return _run([str(self._bindir / "pg_ctl"), "-D", str(self._data), *args],
                    user=self._run_as, timeout=timeout)  # fmt: skip


def _run(
    args: Sequence[str], *, user: str | None, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run a server binary, as ``user`` when given (we are root then); never hangs."""
    kwargs: dict[str, Any] = {}
    if user is not None:
        import pwd  # POSIX only, like dropping root

        record = pwd.getpwnam(user)
        kwargs = {"user": record.pw_uid, "group": record.pw_gid, "extra_groups": []}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    try:
        return subprocess.run(
            list(args), capture_output=True, text=True, timeout=timeout, check=False,
            env=env, cwd="/", stdin=subprocess.DEVNULL, **kwargs,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(list(args), 124, "", f"timed out after {exc.timeout}s")


def _is_root() -> bool:
    return getattr(os, "geteuid", lambda: -1)() == 0


def _unprivileged_user() -> str | None:
    """Who runs the cluster: None (ourselves) unless we are root."""
    if not _is_root():
        return None
    import pwd

    for name in _UNPRIVILEGED_USERS:
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise PostgresUnavailableError(
        "running as root and no unprivileged user (postgres or nobody) exists to own the "
        f"cluster (initdb refuses root); {HOW_TO_GET_A_SERVER}"
    )


def _start_cluster(bindir: Path, folder: Path, *, fsync: bool, timeout: float) -> PostgresServer:
    run_as = _unprivileged_user()
    if run_as is not None:
        import pwd

        record = pwd.getpwnam(run_as)
        os.chown(folder, record.pw_uid, record.pw_gid)
    data = folder / "data"
    initdb = _run(
        [str(bindir / "initdb"), "-D", str(data), "-U", _SUPERUSER, "-A", "trust",
         "-E", "UTF8", "--locale=C", "--no-sync"],
        user=run_as, timeout=timeout * 4,
    )  # fmt: skip
    if initdb.returncode != 0:
        raise PostgresUnavailableError(
            f"initdb failed ({initdb.returncode}): {initdb.stderr.strip()[-2000:]}"
        )
    extra = ["-c fsync=off", "-c synchronous_commit=off"] if not fsync else []
    errors: list[str] = []
    for _attempt in range(3):  # a free port can be taken between probe and bind
        server = PostgresServer(
            host="127.0.0.1", port=unused_port(), user=_SUPERUSER, dbname="postgres", owned=True,
            _bindir=bindir, _data=data, _run_as=run_as, _log=folder / "server.log", _extra=extra,
        )  # fmt: skip
        try:
            server.start(timeout=timeout)
        except PostgresUnavailableError as exc:
            errors.append(str(exc))
            continue
        return server
    raise PostgresUnavailableError("could not start the cluster: " + "\n".join(errors))


def _parent_folder() -> str | None:
    """Where the cluster folder goes: the temp dir, or /tmp when that will not do.

    The Unix socket path must stay under about 100 bytes, and as root the
    unprivileged user must be able to reach the folder through every parent.
    """
    base = Path(tempfile.gettempdir()).resolve()
    too_long = len(str(base)) > 60
    hidden = _is_root() and any(
        not os.stat(parent).st_mode & 0o001 for parent in (base, *base.parents)
    )
    return "/tmp" if (too_long or hidden) and Path("/tmp").is_dir() else None  # noqa: S108


@contextlib.contextmanager
def postgres_server(*, fsync: bool = False, timeout: float = 30.0) -> Iterator[PostgresServer]:
    """A server for the duration of the ``with`` block (see the module docstring).

    ``fsync=False`` (the default) turns off ``fsync`` and ``synchronous_commit``
    on a throwaway cluster: tests do not need durability across power loss.

    Raises:
        PostgresUnavailableError: no existing server is named and none can be
            started; the message says why and how to get one.
    """
    if os.environ.get("PGHOST") or os.environ.get("PGSERVICE"):
        yield PostgresServer(host=None, port=None, user=None, dbname=None, owned=False)
        return
    bindir = find_bindir()
    if bindir is None:
        raise PostgresUnavailableError(
            f"no PostgreSQL server binaries (initdb, pg_ctl) found; {HOW_TO_GET_A_SERVER}"
        )
    folder = Path(tempfile.mkdtemp(prefix="traceml-pg-", dir=_parent_folder()))
    try:
        server = _start_cluster(bindir, folder, fsync=fsync, timeout=timeout)
        try:
            yield server
        finally:
            with contextlib.suppress(PostgresUnavailableError):
                server.stop(timeout=timeout)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
