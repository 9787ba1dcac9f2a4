"""One fault schedule of the chaos harness beside a real ``traceml run`` (``python -m chaos
--real``, docs/chaos.md): CI's real seed, its invariants judged against the sink.

It waits for this session's other scenarios first: the timing invariants are bounded for
a loaded machine, not for one training several real runs at once beside it.
"""

from __future__ import annotations

from concurrent.futures import Future, wait
from pathlib import Path
from typing import Any

from chaos.harness import run_seed
from chaos.schedule import generate

REAL_SEED = 7
"""``--logs-dir``: the sink down for 1.6 s, ``traceml run`` killed alone (its aggregator
and rank live on, orphaned), the sink down again: an outage ridden out, the orphaned run
followed to NOT FINISHED (exit 6), every row it wrote in the sink (509, in 57 s)."""


def test_the_real_seed_draws_an_outage_and_an_orphan() -> None:
    schedule = generate(REAL_SEED, real=True)
    assert schedule.real
    assert {"sink_down", "run_kill_launcher"} <= schedule.faults


def test_every_invariant_holds_beside_a_real_run(
    real_scenarios: dict[str, Future[Any]], tmp_path: Path
) -> None:
    wait(list(real_scenarios.values()), timeout=900)
    outcome = run_seed(REAL_SEED, tmp_path, real=True)
    assert not outcome.violations, outcome.report()
