"""The HTTP sinks' one transport: urllib3, no thread, every wait inside the call's deadline.

:class:`HttpTransport` sends requests to one server over one keep-alive
connection. It retries what is transient (connection errors and the
``retryable`` statuses, 429/502/503/504 by default) with exponential backoff
and jitter, waiting at least ``Retry-After`` but never past the deadline: a
wait that would end past it gives up at once. Any other status is permanent
and raised at once with the server's message (a 3xx with its ``Location``:
redirects are not followed). Every socket read and write gets only the time
left before the deadline, so a server that drips its answer cannot stretch a
call either.

The retry loop, its backoff, the deadline and redaction are the network sinks'
shared ``_delivery``; this module adds what is HTTP's: URLs, headers, statuses,
``Retry-After`` and sockets that keep the deadline.

Retried and permanent are two questions. The first is answered here, within one
call's short deadline; the second is for ``traceml-exporter follow``, which waits out
a long outage itself (``_contract`` rule 8). An :class:`HttpError` is ``permanent``
when its status is a 4xx other than 408 and 429: a refused credential, payload or
path gets the same answer however long one waits. A 5xx, a connection error, a TLS
failure or a deadline that passed is transient. A bad URL or header setting is a
``SettingsError``, permanent too.

Secrets never reach a message: :func:`parse_endpoint` takes credentials out of
the URL (sent as basic auth), and every message the transport raises has the
credentials and user-supplied header values replaced by ``<redacted>``.
"""

from __future__ import annotations

import base64
import email.utils
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection

from ._contract import SettingsError
from ._delivery import REDACTED, Backoff, redact, retry, time_left
from ._delivery import until as deadline_in

__all__ = [
    "REDACTED",
    "RETRYABLE_STATUSES",
    "WAITABLE_STATUSES",
    "Answer",
    "DeadlineHTTPConnection",
    "DeadlineHTTPSConnection",
    "Endpoint",
    "HttpError",
    "HttpTransport",
    "check_header",
    "deadline",
    "parse_endpoint",
    "redact",
    "refused_for_good",
]

RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
"""Statuses retried by default (the OpenTelemetry Collector's rule); any other is raised."""
WAITABLE_STATUSES = frozenset({408, 429})
"""The 4xx that time can fix (a request timeout, too many requests): never ``permanent``."""
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_MIN_SECRET = 4
"""Shorter user-supplied header values are not redacted (they would blank out ordinary words)."""


class HttpError(RuntimeError):
    """The server did not take the request: an answer raised at once, or the deadline passed.

    ``permanent`` (rule 8 of ``_contract``) is true for a 4xx other than 408 and 429,
    unless the caller says otherwise.
    """

    def __init__(
        self, message: str, *, status: int | None = None, permanent: bool | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.permanent = refused_for_good(status) if permanent is None else permanent


def refused_for_good(status: int | None) -> bool:
    """Whether an answer of ``status`` is permanent: a 4xx other than 408 and 429."""
    return status is not None and 400 <= status < 500 and status not in WAITABLE_STATUSES


# -- settings: the URL and the headers --------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """A validated ``http(s)://`` URL, its credentials taken out."""

    url: str
    """The URL without userinfo: what is connected to and safe to show."""
    scheme: str
    path: str
    """Path and query, as sent in the request line (``/`` when the URL has none)."""
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def authorization(self) -> str | None:
        """The ``Authorization`` value for the URL's credentials (basic auth), if any."""
        if self.username is None:
            return None
        pair = f"{self.username}:{self.password or ''}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")

    @property
    def secrets(self) -> list[str]:
        """Texts that must never be shown: the password (raw and encoded) and the auth value."""
        if self.username is None:
            return []
        out = [self.authorization or ""]
        if self.password:
            out += [self.password, self.password.replace("@", "%40")]
        return [s for s in out if s]


def parse_endpoint(url: str, variable: str) -> Endpoint:
    """Validate ``url`` (from ``variable``); ``SettingsError`` naming it, credentials never shown."""
    scheme, sep, rest = url.strip().partition("://")
    authority, slash, tail = rest.partition("/")
    netloc = authority.rpartition("@")[2]
    shown = f"{scheme}{sep}{netloc}{slash}{tail}"
    expected = "an http:// or https:// URL with a host, such as http://localhost:9090/api/v1/write"

    def problem(what: str) -> SettingsError:
        return SettingsError(f"{variable}={shown!r} {what}; expected {expected}")

    if not sep or scheme.lower() not in ("http", "https"):
        raise problem(f"has the scheme {scheme!r}" if sep else "has no scheme")
    if any(c.isspace() for c in netloc):
        raise problem("has a space in its host name")
    if netloc.startswith("[") and "]" not in netloc:
        raise problem("opens an IPv6 address with '[' but never closes it with ']'")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
        host = parts.hostname
    except ValueError as exc:
        raise problem(f"is not a valid URL ({exc})") from None
    if not host:
        raise problem("has no host")
    if port == 0:
        raise problem("has port 0")
    if not netloc.isascii():
        try:
            netloc.encode("idna")
        except UnicodeError:
            raise problem("has a host name that is not a valid domain name") from None
    username = password = None
    if "@" in parts.netloc:
        userinfo = parts.netloc.rpartition("@")[0]
        user, _, secret = userinfo.partition(":")
        username, password = unquote(user), unquote(secret)
    return Endpoint(
        url=shown,
        scheme=parts.scheme.lower(),
        path=(parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
        username=username,
        password=password,
    )


def check_header(name: str, value: str, variable: str) -> None:
    """Refuse a header HTTP cannot carry; the message names ``variable``, never the value."""
    where = f"{variable} sets the header {name!r}"
    if not _TOKEN.match(name):
        shown = name if name.isprintable() else repr(name)
        raise SettingsError(
            f"{variable} names the header {shown!r}, which is not a valid header name "
            "(letters, digits and !#$%&'*+-.^_`|~ only)"
        )
    if "\r" in value or "\n" in value:
        raise SettingsError(f"{where} to a value with a line break (CR or LF), which HTTP forbids")
    if "\0" in value:
        raise SettingsError(f"{where} to a value with a NUL character, which HTTP forbids")
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        raise SettingsError(
            f"{where} to a value with a character outside Latin-1, which an HTTP header "
            "cannot carry; percent-encode it"
        ) from None


# -- deadline-bound sockets -------------------------------------------------------------

_CURRENT = threading.local()
"""The deadline (``time.monotonic()``) of the call running on this thread, if any."""


@contextmanager
def deadline(when: float) -> Iterator[None]:
    """Bound every socket wait of these connections, on this thread, by ``when``."""
    _CURRENT.value = when
    try:
        yield
    finally:
        _CURRENT.value = None


def _time_left(sock: socket.socket) -> None:
    when: float | None = getattr(_CURRENT, "value", None)
    if when is None:
        return
    left = when - time.monotonic()
    if left <= 0:
        raise TimeoutError("the call's deadline passed while waiting on the server")
    sock.settimeout(left)


# Typed as a socket for mypy; at run time a plain mixin, which keeps the layout of
# the socket class it is mixed into (so ``__class__`` can be switched in place).
if TYPE_CHECKING:
    _SocketBase = socket.socket
else:
    _SocketBase = object


class _DeadlineSocket(_SocketBase):
    """Mixed into a socket class: set the socket's timeout to the time left before each wait."""

    __slots__ = ()

    def recv(self, *args: Any) -> bytes:
        _time_left(self)
        return super().recv(*args)

    def recv_into(self, *args: Any) -> int:
        _time_left(self)
        return super().recv_into(*args)

    def sendall(self, *args: Any) -> None:
        _time_left(self)
        super().sendall(*args)


_CLASSES: dict[type, type] = {}


def _bind(sock: Any) -> None:
    """Turn a connected socket (plain or SSL) into its deadline-bound twin, in place."""
    if sock is None or isinstance(sock, _DeadlineSocket):
        return
    base = type(sock)
    twin = _CLASSES.get(base)
    if twin is None:
        name = f"Deadline{base.__name__}"
        twin = _CLASSES[base] = type(name, (_DeadlineSocket, base), {"__slots__": ()})
    sock.__class__ = twin


class DeadlineHTTPConnection(HTTPConnection):
    """urllib3's connection, its socket bound to the call's deadline once connected."""

    def connect(self) -> None:
        super().connect()
        _bind(self.sock)


class DeadlineHTTPSConnection(HTTPSConnection):
    """The same for TLS: the SSL socket is bound once the handshake is done."""

    def connect(self) -> None:
        super().connect()
        _bind(self.sock)


# -- the transport ----------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """A server's answer, read whole."""

    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes


def _text_message(answer: Answer) -> str:
    """The default reading of an error answer: its body as text, cut to 500 characters."""
    text = answer.body.decode("utf-8", "replace").strip()
    return text[:500]


class HttpTransport:
    """POSTs (or any method) to one server, retried and deadline-bound; raises ``error``.

    ``headers`` are the protocol's own (``Content-Type``, ...); ``user_headers``
    come from the user's settings (variable ``headers_variable``), are checked with
    :func:`check_header` and redacted from every message. A user header that
    repeats a protocol header with another value is refused; the URL's
    credentials become ``Authorization: Basic``, refused beside an explicit
    ``Authorization``. Made in the exporter's ``open()``: it does no I/O itself.
    """

    def __init__(  # noqa: PLR0913 - one endpoint's whole configuration, keyword-only
        self,
        endpoint: Endpoint,
        *,
        peer: str,
        timeout_s: float,
        timeout_variable: str,
        headers: Mapping[str, str] | None = None,
        user_headers: Mapping[str, str] | None = None,
        headers_variable: str = "the headers setting",
        secrets: Iterable[str] = (),
        retryable: frozenset[int] = RETRYABLE_STATUSES,
        backoff_s: tuple[float, float] = (0.2, 2.0),
        tls: Mapping[str, str] | None = None,
        error: type[HttpError] = HttpError,
        describe: Callable[[Answer], str] = _text_message,
    ) -> None:
        self.endpoint = endpoint
        self.peer = peer
        self.timeout_s = timeout_s
        self.timeout_variable = timeout_variable
        self.retryable = retryable
        self.backoff_s = backoff_s
        self._backoff = Backoff(*backoff_s, jitter=0.5)
        self.error = error
        self.describe = describe
        self.requests = 0
        """Answers received (any status), retries included."""
        user = dict(user_headers or {})
        self.secrets = [*endpoint.secrets, *secrets]
        self.secrets += [v for v in user.values() if len(v) >= _MIN_SECRET]
        self.secrets += [  # the credentials of "Bearer <token>", which a server may echo alone
            v.partition(" ")[2].strip()
            for k, v in user.items()
            if k.lower() in ("authorization", "proxy-authorization")
            and len(v.partition(" ")[2].strip()) >= _MIN_SECRET
        ]
        for name, value in user.items():
            check_header(name, value, headers_variable)
        self.headers = self._merge(dict(headers or {}), user, headers_variable)
        self._pool: urllib3.HTTPConnectionPool | None = urllib3.connection_from_url(
            endpoint.url,
            maxsize=1,
            block=False,
            retries=False,
            **(dict(tls or {}) if endpoint.scheme == "https" else {}),
        )
        https = endpoint.scheme == "https"
        self._pool.ConnectionCls = DeadlineHTTPSConnection if https else DeadlineHTTPConnection

    def _merge(
        self, protocol: dict[str, str], user: dict[str, str], variable: str
    ) -> dict[str, str]:
        merged = dict(protocol)
        lower = {name.lower(): name for name in protocol}
        auth = self.endpoint.authorization
        if auth is not None:
            if any(name.lower() == "authorization" for name in user):
                raise SettingsError(
                    f"{variable} sets Authorization and the URL {self.endpoint.url!r} carries "
                    "credentials too (user:password@); give only one of them"
                )
            merged["Authorization"] = auth
        for name, value in user.items():
            own = lower.get(name.lower())
            if own is None:
                merged[name] = value
            elif protocol[own].lower() != value.lower():
                raise SettingsError(
                    f"{variable} sets the header {name!r}, which this exporter sets itself to "
                    f"{protocol[own]!r} (the protocol requires it); remove it from {variable}"
                )
        return merged

    def redact(self, text: str) -> str:
        """``text`` with every secret this transport knows replaced by ``<redacted>``."""
        return redact(text, self.secrets)

    def until(self) -> float:
        """The deadline (``time.monotonic()``) of a call starting now."""
        return deadline_in(self.timeout_s)

    def request(
        self,
        method: str,
        body: bytes | None = None,
        *,
        until: float | None = None,
        path: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        """Send one request, retrying what is transient, all before ``until``; the 2xx answer.

        ``path`` defaults to the endpoint's; ``headers`` are added to this request only.
        """
        pool = self._pool
        if pool is None:
            raise RuntimeError("the HTTP client is closed")
        until = self.until() if until is None else until
        sent = {**self.headers, **(headers or {})}
        target = self.endpoint.path if path is None else path
        answered = ""  # the server's last answer, named when a later attempt got none

        def attempt() -> Answer:
            nonlocal answered
            remaining = time_left(until)
            if remaining <= 0:
                raise self._error(
                    f"{self.peer} at {self.endpoint.url} did not answer within the "
                    f"{self.timeout_s:g} s deadline ({self.timeout_variable}){answered}"
                )
            try:
                with deadline(until):  # every socket wait, not only each one, ends by then
                    response = pool.urlopen(
                        method,
                        target,
                        body=body,
                        headers=sent,
                        retries=False,
                        redirect=False,
                        assert_same_host=False,
                        timeout=urllib3.Timeout(connect=remaining, read=remaining),
                    )
                    answer = Answer(
                        response.status,
                        response.reason or "",
                        response.headers,
                        response.data or b"",
                    )
            except urllib3.exceptions.SSLError as exc:
                raise self._error(f"TLS with {self.endpoint.url} failed: {exc}") from None
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise _Again(f"{type(exc).__name__}: {exc}{answered}") from None
            self.requests += 1
            if 200 <= answer.status < 300:
                return answer
            last = self._summary(answer)
            answered = f" (its last answer: {last})"
            if answer.status not in self.retryable:
                raise self._error(
                    f"{self.peer} at {self.endpoint.url} answered {last}", answer.status
                )
            raise _Again(last, _retry_after(answer.headers.get("Retry-After")))

        def give_up(error: BaseException, _tries: int, wait: float) -> HttpError:
            return self._error(
                f"{self.peer} at {self.endpoint.url} did not take the request: {error}; "
                f"retrying in {wait:.2f} s would pass the {self.timeout_s:g} s deadline "
                f"({self.timeout_variable})"
            )

        try:
            return retry(
                attempt,
                deadline=until,
                backoff=self._backoff,
                transient=lambda error: isinstance(error, _Again),
                give_up=give_up,
                wait_at_least=lambda error: getattr(error, "retry_after_s", 0.0),
            )
        except HttpError as error:
            raise error from None  # the message names the last failure; no chain to show

    def post(self, body: bytes, *, until: float | None = None) -> Answer:
        """``request("POST", body)`` to the endpoint's path."""
        return self.request("POST", body, until=until)

    def close(self) -> None:
        """Close the connection; the transport cannot be used again."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def _summary(self, answer: Answer) -> str:
        """``status reason: message`` of an error answer; a redirect names its Location."""
        message = self.describe(answer) or "(no message in the body)"
        if 300 <= answer.status < 400:
            location = answer.headers.get("Location")
            where = f" to {location}" if location else " (no Location header)"
            message = f"a redirect{where}, which is not followed: set the URL it names; {message}"
        return f"{answer.status} {answer.reason}: {message}".replace("  ", " ")

    def _error(self, message: str, status: int | None = None) -> HttpError:
        return self.error(self.redact(message), status=status)


class _Again(Exception):
    """A transient outcome of one attempt (a connection error, a retryable status)."""

    def __init__(self, last: str, retry_after_s: float = 0.0) -> None:
        super().__init__(last)
        self.retry_after_s = retry_after_s


def _retry_after(value: str | None) -> float:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date); 0 if none."""
    if not value:
        return 0.0
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return 0.0
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, float((when - datetime.now(timezone.utc)).total_seconds()))
