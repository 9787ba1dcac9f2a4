"""HTTP connections whose socket waits never outlast the current call's deadline.

urllib3's read timeout applies to each socket operation, so a collector that
drips its answer a byte at a time could stretch one request far past the
deadline. These connection classes give every read and write of their socket
only the time left before the deadline the exporter set for the call
(:func:`deadline`), and fail it once that has passed. No thread, no timer.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from urllib3.connection import HTTPConnection, HTTPSConnection

__all__ = ["DeadlineHTTPConnection", "DeadlineHTTPSConnection", "deadline"]

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
        raise TimeoutError("the call's deadline passed while waiting on the collector")
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
