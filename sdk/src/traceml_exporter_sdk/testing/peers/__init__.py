"""The real peers a sink's tests run against, each started and stopped by the test.

``fault_proxy`` (an HTTP proxy driven into faults), ``otlp_receiver`` (a strict
OTLP/HTTP logs receiver; ``otlp_server`` is its own
process), ``postgres_server`` (a throwaway PostgreSQL cluster, or the one ``PGHOST``
names) and ``prometheus_server`` (Prometheus, VictoriaMetrics and vmauth). Their
public paths are ``traceml_exporter_sdk.testing.<name>``, which re-export each one's
``__all__``; import from there.
"""
