"""Real Prometheus and VictoriaMetrics servers for exporter tests (public path; the code is in ``peers/prometheus_server.py``).

Every name of the peer's ``__all__``, re-exported, so
``from traceml_exporter_sdk.testing.prometheus_server import ...`` keeps working.
"""

from __future__ import annotations

from .peers.prometheus_server import (
    BINARIES,
    CACHE_DIR,
    HOW_TO_GET_A_SERVER,
    MetricsServer,
    MetricsServerUnavailableError,
    Series,
    find_binary,
    prometheus_server,
    victoria_metrics_server,
    vmauth_proxy,
)

__all__ = [
    "BINARIES",
    "CACHE_DIR",
    "HOW_TO_GET_A_SERVER",
    "MetricsServer",
    "MetricsServerUnavailableError",
    "Series",
    "find_binary",
    "prometheus_server",
    "victoria_metrics_server",
    "vmauth_proxy",
]
