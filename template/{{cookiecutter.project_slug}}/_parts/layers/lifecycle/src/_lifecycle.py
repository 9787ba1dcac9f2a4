"""The lifecycle every exporter shares: TraceML's call order and rule 6, written once.

TraceML's export worker calls ``open()`` once, then ``write`` and ``flush`` any number of
times, then ``close()`` once; after a method raised it calls nothing more, not even
``close()``. :class:`Lifecycle` keeps that state (new, open, failed, closed), refuses a
call out of order with one message, and when a method fails marks the exporter failed
and runs the sink's :meth:`~Lifecycle._release` before the error goes on (``_contract``
rule 6). A sink's four methods wrap their bodies in :meth:`~Lifecycle._opening`,
:meth:`~Lifecycle._running` and :meth:`~Lifecycle._closing`, and its ``_release`` lets go
of whatever it holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, TypeVar

from ._contract import releasing

__all__ = ["Lifecycle"]

_T = TypeVar("_T")
State = Literal["new", "open", "failed", "closed"]


class Lifecycle:
    """The state of an exporter and the guard of its four methods."""

    _state: State = "new"

    def _release(self) -> None:
        """Let go of every file, connection and client, raising nothing (the sink's own)."""
        raise NotImplementedError

    @contextmanager
    def _opening(self) -> Iterator[None]:
        """``open()``'s body: only on a new exporter; a failure releases what it made."""
        if self._state != "new":
            raise RuntimeError(f"open() called on a {self._state} exporter")
        self._state = "failed"  # until the body is done
        with releasing(self._release):
            yield
        self._state = "open"

    @contextmanager
    def _running(self, method: str) -> Iterator[None]:
        """``write``'s or ``flush``'s body: only when open; a failure releases the sink."""
        self._require(method)
        with releasing(self._fail):
            yield

    @contextmanager
    def _closing(self) -> Iterator[None]:
        """``close()``'s body: only when open; the sink is released after it, or on a failure."""
        self._require("close")
        with releasing(self._fail):
            yield
        self._state = "closed"
        self._release()

    def _require(self, method: str) -> None:
        if self._state != "open":
            hint = "; call open() first" if self._state == "new" else ""
            raise RuntimeError(f"{method}() called on a {self._state} exporter, not open{hint}")

    def _held(self, resource: _T | None) -> _T:
        """``resource`` (a file map, a connection, a client), which only an open exporter has."""
        if resource is None:
            raise RuntimeError(f"the exporter is {self._state}, not open")
        return resource

    def _fail(self) -> None:
        self._state = "failed"
        self._release()
