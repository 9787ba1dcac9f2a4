"""The fault harness of ``follow`` (issue 39): random schedules of sink, follower and run
faults, reproducible by seed, executed against synthetic TraceML 0.5.0 runs, and the
invariants of docs/follow.md judged against the sink's own store.

``schedule`` draws a schedule from a seed; ``driver`` executes it (``aggregator`` is the
synthetic run, ``sink`` the exporter with a fault switch); ``invariants`` names what
broke; ``python -m chaos`` (``nox -s chaos``) runs many. Nothing is imported here: the
follower imports ``chaos.sink`` and needs nothing else.
"""
