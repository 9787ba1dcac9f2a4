"""PostgreSQL connections whose every wait ends by a deadline, and errors that keep no secret.

``statement_timeout`` and ``lock_timeout`` run on the server: when packets stop
arriving (a stalled network, a proxy that stops forwarding but keeps the
connection open) neither can fire, and libpq waits forever. So every wait of a
``BoundedConnection`` ends by the call's deadline and by a stall bound a little
longer than ``statement_timeout`` (a live server answers within it), and then
raises ``StalledError`` (an ``OperationalError``, so the exporter may reconnect).
TCP keepalives and ``tcp_user_timeout`` also let the kernel drop a connection
whose peer has vanished; they cannot catch a peer that acknowledges and never
answers, which the deadline does.

libpq quotes a malformed conninfo or URL in its error ("... in URI:
\\"postgresql://user:password@[::1\\"") and a password may sit in
``PGPASSWORD``: ``connect`` raises errors with every such secret replaced by
``***``, so none reaches a log, ``finalization_warning.json`` or a message.

:func:`refused_for_good` tells the errors no wait can fix (``_contract`` rule 8), which
:func:`marking_permanent` marks ``permanent`` on their way out of the exporter.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import selectors
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote

import psycopg
from psycopg import pq
from psycopg.abc import PQGen

from ._contract import permanent
from ._delivery import Backoff, duration
from ._delivery import redact as _redact

__all__ = [
    "BACKOFF",
    "MAX_CALL_S",
    "MIN_CONNECT_S",
    "BoundedConnection",
    "StalledError",
    "Timeouts",
    "connect",
    "marking_permanent",
    "parse_timeouts",
    "redact",
    "refused_for_good",
    "server_address",
]

_T = TypeVar("_T")

_WAKE_S = 1.0
"""A wait wakes at least this often (so a signal handler runs)."""
MIN_CONNECT_S = 2
"""libpq takes a ``connect_timeout`` below 2 s as 2 s: no attempt starts with less time left."""
MAX_CALL_S = 600.0
"""The longest deadline ``parse_timeouts`` takes (the HTTP sinks' bound): the follower,
not one call, waits out a long outage."""
_MASK = "***"


@dataclass(frozen=True, slots=True)
class Timeouts:
    """The bounds of one exporter's waits, in seconds."""

    connect_s: int = 5
    """libpq's ``connect_timeout`` of one connection attempt (at least 2)."""
    statement_s: float = 5.0
    """``statement_timeout`` on the server; ``lock_timeout`` is four fifths of it."""
    call_s: float = 8.0
    """What one ``open``, ``flush`` or ``close`` may take in all, retries included."""
    stall_margin_s: float = 1.0
    """How long past ``statement_s`` a wait may last before the connection counts as stalled."""

    @property
    def stall_s(self) -> float:
        return self.statement_s + self.stall_margin_s

    @classmethod
    def within(cls, call_s: float) -> Timeouts:
        """The bounds of a ``call_s`` deadline: ``statement_timeout`` five eighths of it,
        each connection attempt at most 5 s (at least libpq's 2 s). ``within(8)`` is the
        default."""
        connect_s = max(MIN_CONNECT_S, min(cls().connect_s, int(call_s)))
        return cls(connect_s=connect_s, statement_s=call_s * 5 / 8, call_s=call_s)


def parse_timeouts(text: str, variable: str) -> Timeouts:
    """``Timeouts.within`` the duration ``text`` gives (``_delivery.duration``: a bare number
    is seconds; the default for an empty text); ``SettingsError`` naming ``variable`` for
    anything but 2 to 600 s (libpq bounds no connection attempt below 2 s)."""
    if not text.strip():
        return Timeouts()
    seconds = duration(
        text, variable, default_s=Timeouts().call_s, least_s=MIN_CONNECT_S, most_s=MAX_CALL_S
    )
    return Timeouts.within(seconds)


class StalledError(psycopg.OperationalError):
    """A wait on the server passed its bound: the connection was abandoned (closed)."""


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose waits end by ``deadline`` (monotonic) and ``stall_s``."""

    deadline: float = math.inf
    stall_s: float = math.inf

    def wait(self, gen: PQGen[_T], interval: float = _WAKE_S, timeout: float | None = None) -> _T:
        """Drive ``gen`` as psycopg's own wait does, but never past the bounds."""
        started = time.monotonic()
        limit = min(self.deadline, started + self.stall_s)
        if timeout is not None:
            limit = min(limit, started + timeout)
        fileno = self.pgconn.socket
        try:
            state = next(gen)
            with selectors.DefaultSelector() as selector:
                selector.register(fileno, state)
                while True:
                    left = limit - time.monotonic()
                    if left <= 0:
                        raise self._stalled(time.monotonic() - started)
                    ready = selector.select(min(left, interval, _WAKE_S))
                    if ready:
                        new = gen.send(ready[0][1])  # the events mask is psycopg's Ready
                        if new != state:
                            selector.modify(fileno, new)
                            state = new
        except StopIteration as done:
            result: _T = done.value
            return result

    def _stalled(self, waited: float) -> StalledError:
        where = f"{self.info.host}:{self.info.port}"
        why = (
            "the call's deadline passed"
            if time.monotonic() >= self.deadline
            else f"no answer for {self.stall_s:g} s, longer than statement_timeout"
        )
        self.pgconn.finish()  # the protocol is mid-message: this connection is done
        return StalledError(
            f"the server at {where} did not answer within {waited:.1f} s ({why}): the network "
            "or the server stalled; the connection was closed"
        )


def connect(conninfo: str, timeouts: Timeouts, deadline: float, **params: Any) -> BoundedConnection:
    """A connection in autocommit with bounded waits, or a psycopg error with no secret in it.

    ``params`` are libpq keywords (they win over ``conninfo``); the keepalive
    settings and ``connect_timeout`` (at most what is left of ``deadline``) are added.
    """
    left = deadline - time.monotonic()
    connect_s = max(MIN_CONNECT_S, min(timeouts.connect_s, int(left)))
    failure: psycopg.Error
    try:
        conn = BoundedConnection.connect(
            conninfo,
            autocommit=True,
            connect_timeout=connect_s,
            keepalives=1,
            keepalives_idle=max(1, int(timeouts.stall_s)),
            keepalives_interval=1,
            keepalives_count=3,
            tcp_user_timeout=int(timeouts.stall_s * 1000),
            **params,
        )
    except psycopg.errors.ConnectionTimeout:
        failure = psycopg.errors.ConnectionTimeout(
            f"connection to the server at {server_address(conninfo)} timed out after "
            f"{connect_s} s (connect_timeout): it accepted no connection, or did not answer"
        )
    except psycopg.Error as error:
        text = str(error)
        clean = redact(text, conninfo)
        if clean == text:
            raise
        failure = type(error)(clean)
    else:
        conn.deadline = deadline
        conn.stall_s = timeouts.stall_s
        return conn
    raise failure  # outside the except block: the unredacted error is not its context


def server_address(conninfo: str) -> str:
    """``host:port`` the settings name (conninfo, then libpq's environment and defaults).

    Never the password. A service, a Unix socket folder or a host list is shown as given.
    """
    given: dict[str, Any] = {}
    with contextlib.suppress(psycopg.Error):  # malformed: libpq's environment alone
        given = psycopg.conninfo.conninfo_to_dict(conninfo)
    defaults = {o.keyword.decode(): o.val.decode() for o in pq.Conninfo.get_defaults() if o.val}
    host = given.get("host") or given.get("hostaddr") or defaults.get("host")
    host = host or defaults.get("hostaddr") or "the default host (local socket)"
    port = given.get("port") or defaults.get("port") or "5432"
    service = given.get("service") or defaults.get("service")
    return f"{host}:{port}" + (f" (service {service})" if service else "")


_URL_PASSWORD = re.compile(r"(?i)(postgres(?:ql)?://[^:/?#@\s]*:)([^@]*)(@)")
_KEY_PASSWORD = re.compile(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)")


def _secrets(conninfo: str) -> Iterable[str]:
    """Every form a password of these settings may take in a message."""
    found = [os.environ.get("PGPASSWORD", "")]
    with contextlib.suppress(psycopg.Error):  # malformed: the patterns below find it
        found.append(str(psycopg.conninfo.conninfo_to_dict(conninfo).get("password") or ""))
    matches = (*_URL_PASSWORD.finditer(conninfo), *_KEY_PASSWORD.finditer(conninfo))
    found += [match.group(2).strip("'") for match in matches]
    found += [unquote(secret) for secret in found]
    return sorted({s for s in found if s}, key=len, reverse=True)


def redact(text: str, conninfo: str) -> str:
    """``text`` with any password of ``conninfo`` or ``PGPASSWORD`` replaced by ``***``."""
    text = _redact(text, _secrets(conninfo), _MASK)
    text = _URL_PASSWORD.sub(rf"\g<1>{_MASK}\g<3>", text)
    return _KEY_PASSWORD.sub(rf"\g<1>{_MASK}", text)


_PERMANENT_CLASSES = ("22", "23", "28", "3D", "42", "0A", "P0")
"""SQLSTATE classes no wait changes: a value or constraint that refuses the rows (22,
23), authorization (28), no such database (3D), permissions or a column type the sink
refuses (42), a feature the server lacks (0A), a trigger's ``RAISE EXCEPTION`` (P0)."""
_WAITABLE_STATES = frozenset({"42P01"})
"""undefined_table: dropped under a running exporter, made again by the next one's open()."""
_REFUSED_AT_CONNECT = re.compile(
    r'authentication failed|no pg_hba\.conf entry|role ".*" does not exist'
    r'|database ".*" does not exist|permission denied for database'
    r"|is not permitted to log in|no password supplied|invalid value for parameter"
    r"|unrecognized configuration parameter|server does not support SSL"
)
"""libpq's text for the connection refusals above: a refused connection carries the
server's message but no SQLSTATE (an English one: a server whose ``lc_messages`` is
another language is read as transient)."""


def refused_for_good(error: BaseException) -> bool:
    """Whether no wait fixes ``error`` (rule 8 of ``_contract``): a SQLSTATE class of
    :data:`_PERMANENT_CLASSES`, a connection refused for one of those causes, or a
    malformed conninfo (a ``ProgrammingError`` of psycopg's own, with no SQLSTATE)."""
    if not isinstance(error, psycopg.Error):
        return False
    state = error.sqlstate or ""
    if state:
        return state.startswith(_PERMANENT_CLASSES) and state not in _WAITABLE_STATES
    if isinstance(error, psycopg.ProgrammingError):
        return True
    return isinstance(error, psycopg.OperationalError) and bool(
        _REFUSED_AT_CONNECT.search(str(error))
    )


@contextlib.contextmanager
def marking_permanent() -> Iterator[None]:
    """Mark a psycopg error :func:`refused_for_good` ``permanent`` on its way out."""
    try:
        yield
    except psycopg.Error as error:
        if refused_for_good(error):
            permanent(error)
        raise


BACKOFF = Backoff(first_s=0.1, cap_s=1.0, jitter=0.2)
"""Between reconnections: 0.1 s doubling to 1 s, ±20%; shorter than the HTTP sinks' (a new
connection costs one round trip, and ``MIN_CONNECT_S`` is kept free for it)."""
