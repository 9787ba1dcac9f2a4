"""What every HTTP exporter shares, over the transport of ``_http``.

:class:`HttpExporter` is a :class:`~._lifecycle.Lifecycle` (TraceML's call order, the
client released when a method fails) that makes the client in ``open()`` and writes
the receipt. A sink supplies its settings, its client, what ``write``
keeps and what ``flush`` sends, as an OpenTelemetry Collector exporter supplies only
its push.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from ._contract import ExporterContext, ExportRecord
from ._files import append_line
from ._http import Endpoint, HttpTransport
from ._lifecycle import Lifecycle

__all__ = ["HttpExporter"]


class _Settings(Protocol):
    @property
    def endpoint(self) -> Endpoint: ...


_S = TypeVar("_S", bound=_Settings)
_E = TypeVar("_E", bound="HttpExporter[Any]")


class HttpExporter(Lifecycle, Generic[_S]):
    """The lifecycle of an HTTP sink's exporter: settings copied, client made in ``open()``.

    ``open()`` parses the settings (:meth:`_parse`), makes the client
    (:meth:`_connect`), sends the sink's first request (:meth:`_greet`) and
    appends the instance's line to ``RECEIPT_FILE``; ``write``, ``flush`` and
    ``close`` hand over to :meth:`_add` and :meth:`_deliver`. Any failure
    closes the client before it is raised (``Lifecycle``, ``_contract`` rule 6).
    """

    RECEIPT_FILE: ClassVar[str]
    """The JSON lines in ``export_dir``: one per ``open()``, one per ``close()``."""
    INSTANCE_KEY: ClassVar[str]
    """The receipt's name for ``instance_id``, as the sink's data names it."""

    def __init_subclass__(cls, *, receipt: tuple[str, str], **kwargs: Any) -> None:
        """``receipt``: the sink's ``RECEIPT_FILE`` and ``INSTANCE_KEY``."""
        super().__init_subclass__(**kwargs)
        cls.RECEIPT_FILE, cls.INSTANCE_KEY = receipt

    backoff_s: tuple[float, float] = (0.2, 2.0)
    """The first and the longest wait between retries, before jitter."""

    def __init__(
        self,
        environment: Mapping[str, str],
        *,
        session_root: Path,
        export_dir: Path,
        include_hostname: bool = False,
        **tunables: object,
    ) -> None:
        """Copy the settings (the client is made in ``open()``, on the export worker's thread).

        ``tunables`` replace class attributes such as ``backoff_s``; tests size them down.
        """
        self.environment = dict(environment)
        self.session_root = session_root
        self.export_dir = export_dir
        self.include_hostname = include_hostname
        for name, value in tunables.items():
            if not hasattr(type(self), name):
                raise TypeError(f"{type(self).__name__} has no tunable {name!r}")
            setattr(self, name, value)
        self.settings: _S | None = None
        self.instance_id = ""
        self._transport: HttpTransport | None = None
        self._delivered: Counter[str] = Counter()
        self._drop()

    @classmethod
    def for_context(  # noqa: PYI019 - typing.Self is 3.11+, typing_extensions no dependency
        cls: type[_E], context: ExporterContext, environment: Mapping[str, str]
    ) -> _E:
        """What the factory returns: ``environment`` and the context's facts, no I/O."""
        return cls(
            environment,
            session_root=context.session_root,
            export_dir=context.export_dir,
            include_hostname=context.include_hostname,
        )

    # -- what a sink supplies --------------------------------------------------------

    def _parse(self, environment: Mapping[str, str]) -> _S:
        raise NotImplementedError

    def _connect(self, settings: _S) -> HttpTransport:
        """Set the instance's identity and state, and make (not use) the client."""
        raise NotImplementedError

    def _greet(self) -> None:
        """The first request, so a wrong endpoint, path or credential fails in ``open()``."""
        raise NotImplementedError

    def _add(self, records: Sequence[ExportRecord]) -> None:
        raise NotImplementedError

    def _deliver(self) -> None:
        """Send what is pending; return once the server took all of it."""
        raise NotImplementedError

    def _drop(self) -> None:
        """Forget what is pending (the exporter failed: it is never called again)."""

    def _closing_facts(self) -> dict[str, object]:
        """The sink's own figures for the receipt's closing line."""
        return {}

    # -- the four methods ------------------------------------------------------------

    def open(self) -> None:
        """Validate the settings, make the HTTP client and send the first request."""
        with self._opening():
            settings = self.settings = self._parse(self.environment)
            self._transport = self._connect(settings)
            self._greet()
            self._append_receipt({"opened_unix_ns": time.time_ns()})

    def write(self, records: Sequence[ExportRecord]) -> None:
        """Keep the records for the next delivery (a sink may send some at once)."""
        with self._running("write"):
            self._add(records)

    def flush(self) -> None:
        """Send everything written; return once the server answered 2xx to all of it."""
        with self._running("flush"):
            self._deliver()

    def close(self, *, dropped_batches: int = 0) -> None:
        """Send what is left, add the closing line to the receipt, close the client.

        ``dropped_batches`` (batches TraceML's worker never handed to ``write``)
        goes into that line.
        """
        with self._closing():
            self._deliver()
            self._append_receipt(
                {
                    "closed_unix_ns": time.time_ns(),
                    "delivered_records": dict(self._delivered),
                    **self._closing_facts(),
                    "requests": self._client().requests,
                    "dropped_batches": dropped_batches,
                }
            )

    # -- state -----------------------------------------------------------------------

    def _release(self) -> None:
        """Drop what is pending and close the client (TraceML never calls again after a failure)."""
        self._drop()
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()

    def _client(self) -> HttpTransport:
        return self._held(self._transport)

    def _settings(self) -> _S:
        if self.settings is None:
            raise RuntimeError("the settings were not read; call open() first")
        return self.settings

    def _append_receipt(self, facts: dict[str, object]) -> None:
        line = {
            **facts,
            "endpoint": self._settings().endpoint.url,
            self.INSTANCE_KEY: self.instance_id,
        }
        append_line(self.export_dir / self.RECEIPT_FILE, json.dumps(line, sort_keys=True))
