"""One pool for the scenarios of the modules here that list them in ``REAL_SCENARIOS``.

A scenario is real ``traceml run`` jobs with followers beside them, mostly waiting (on a
sink outage, a pause, the run's end), so those of every selected test start together
at the session's first test (``real_scenarios``, autouse), each in its own thread,
beside the runs of ``test_follow_real.py``, and each test waits for its own
(``REAL_NEEDS``: test name -> scenario names). Only the scenarios of the selected tests
run. Runs start one at a time (``realrun.STARTING``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from realrun import Outcome, reap, traceml_binary

Scenarios = dict[str, "Future[Outcome]"]


@pytest.fixture(scope="session", autouse=True)
def real_scenarios(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scenarios]:
    traceml_binary()  # fails every test at once when TraceML is not installed
    wanted: dict[str, Callable[[Path], Outcome]] = {}
    for item in request.session.items:
        module = getattr(item, "module", None)
        needs = getattr(module, "REAL_NEEDS", {}).get(getattr(item, "originalname", ""), ())
        for name in needs:
            wanted[name] = module.REAL_SCENARIOS[name]  # type: ignore[union-attr]
    pool = ThreadPoolExecutor(max(1, len(wanted)), thread_name_prefix="real")
    futures = {
        name: pool.submit(make, tmp_path_factory.mktemp(name)) for name, make in wanted.items()
    }
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)
    reap()
