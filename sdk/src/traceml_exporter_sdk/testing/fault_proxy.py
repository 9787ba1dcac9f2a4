"""A fault proxy in front of a real server, for sinks' tests (public path; the code is in ``peers/fault_proxy.py``).

Every name of the peer's ``__all__``, re-exported, so
``from traceml_exporter_sdk.testing.fault_proxy import FaultProxy`` is the import to use.
"""

from __future__ import annotations

from .peers.fault_proxy import FaultProxy, TcpFaultProxy, unused_port

__all__ = ["FaultProxy", "TcpFaultProxy", "unused_port"]
