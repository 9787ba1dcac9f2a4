"""Capture what TraceML 0.5.0's aggregator builds its SQLite rows from, for the differential test.

Active only when TRACEML_CAPTURE_ENVELOPES names a file (the ``traceml run`` of
``test_differential_real.py`` puts this folder on PYTHONPATH). When
``traceml_ai.aggregator.sqlite_writer`` is imported, its ``normalize_telemetry_envelope``
and each projection writer's ``build_rows`` are wrapped, so for every envelope the
aggregator projects, the raw envelope (pickled when it is normalised, before anything
can change it) and the ``recv_ts_ns`` it was projected with are appended to the file
as one pickle ``(recv_ts_ns, raw)``; ``recv_ts_ns`` is None for an envelope no writer
took. Nothing else changes.
"""

from __future__ import annotations

import os

_PATH = os.environ.get("TRACEML_CAPTURE_ENVELOPES")
_MODULE = "traceml_ai.aggregator.sqlite_writer"


def _patch(module):  # type: ignore[no-untyped-def]
    import pickle
    import threading

    lock = threading.Lock()
    out = open(_PATH, "ab")  # noqa: SIM115 - open for the aggregator's life
    pending = {}  # id(envelope) -> (envelope, pickled raw)
    normalize = module.normalize_telemetry_envelope

    def emit(recv_ts_ns, raw_pickled):  # type: ignore[no-untyped-def]
        with lock:
            out.write(pickle.dumps((recv_ts_ns, pickle.loads(raw_pickled))))
            out.flush()

    def capturing_normalize(raw):  # type: ignore[no-untyped-def]
        envelope = normalize(raw)
        if envelope is not None:
            pending[id(envelope)] = (envelope, pickle.dumps(raw))
        return envelope

    def wrap(build_rows):  # type: ignore[no-untyped-def]
        def capturing_build_rows(*, envelope, recv_ts_ns):  # type: ignore[no-untyped-def]
            entry = pending.get(id(envelope))
            if entry is not None and entry[0] is envelope:
                del pending[id(envelope)]
                emit(recv_ts_ns, entry[1])
            return build_rows(envelope=envelope, recv_ts_ns=recv_ts_ns)

        return capturing_build_rows

    collect = module.SQLiteWriterSimple._collect_projection_rows

    def capturing_collect(self, items):  # type: ignore[no-untyped-def]
        try:
            return collect(self, items)
        finally:
            for _envelope, raw in list(pending.values()):
                emit(None, raw)  # projected by no writer
            pending.clear()

    module.normalize_telemetry_envelope = capturing_normalize
    module.SQLiteWriterSimple._collect_projection_rows = capturing_collect
    for writer in module._PROJECTION_WRITERS:
        writer.build_rows = wrap(writer.build_rows)


if _PATH:
    import importlib.abc
    import importlib.machinery
    import sys

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
            if name != _MODULE:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None:
                return spec
            exec_module = spec.loader.exec_module

            def exec_and_patch(module):  # type: ignore[no-untyped-def]
                exec_module(module)
                _patch(module)

            spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
            return spec

    sys.meta_path.insert(0, _Finder())
