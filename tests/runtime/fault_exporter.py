"""An exporter that misbehaves on a plan: per method, return, raise anything, block or be slow.

``make`` reads the module-level ``PLAN`` (set by the test), so the exporter can
also be named as ``fault_exporter:make`` to ``traceml-exporter replay``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

METHODS = ("open", "write", "flush", "close")

Kind = Literal["return", "raise", "block", "slow"]


class UnprintableError(Exception):
    """``str()`` and ``repr()`` of it raise."""

    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class UnprintableBaseError(BaseException):
    def __str__(self) -> str:
        raise KeyboardInterrupt


class CustomBaseError(BaseException):
    pass


ERRORS: dict[str, Callable[[], BaseException]] = {
    "RuntimeError": lambda: RuntimeError("sink refused"),
    "OSError": lambda: OSError(5, "I/O error"),
    "KeyboardInterrupt": KeyboardInterrupt,  # from a method: the worker's thread
    "SystemExit": lambda: SystemExit(2),
    "GeneratorExit": GeneratorExit,
    "CustomBaseError": CustomBaseError,
    "UnprintableError": UnprintableError,
    "UnprintableBaseError": UnprintableBaseError,
}


@dataclass(frozen=True)
class Behaviour:
    """What one method does: on its ``at_call``-th call it raises or blocks; slow is always."""

    kind: Kind = "return"
    at_call: int = 1
    error: str = "RuntimeError"
    delay_s: float = 0.0


@dataclass
class Plan:
    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    release: threading.Event = field(default_factory=threading.Event)
    calls: list[tuple[str, int]] = field(default_factory=list)
    """(method, thread ident) of every call, in order."""
    raised: str | None = None
    delivered: int = 0
    """Records of writes that a later flush or close returned normally after (the
    exporter's own view; the worker's count must never be more)."""
    overlaps: int = 0


PLAN = Plan()


class FaultExporter:
    def __init__(self, plan: Plan) -> None:
        self._plan = plan
        self._counts = dict.fromkeys(METHODS, 0)
        self._pending = 0
        self._busy = threading.Lock()

    def _enter(self, method: str) -> None:
        plan = self._plan
        if not self._busy.acquire(blocking=False):
            plan.overlaps += 1
            self._busy.acquire()
        try:
            plan.calls.append((method, threading.get_ident()))
            self._counts[method] += 1
            behaviour = plan.behaviours.get(method, Behaviour())
            if behaviour.kind == "slow":
                time.sleep(behaviour.delay_s)
            elif self._counts[method] == behaviour.at_call:
                if behaviour.kind == "raise":
                    plan.raised = method
                    raise ERRORS[behaviour.error]()
                if behaviour.kind == "block":
                    plan.release.wait(60)
        finally:
            self._busy.release()

    def open(self) -> None:
        self._enter("open")

    def write(self, records: Sequence[Any]) -> None:
        self._enter("write")
        self._pending += len(records)

    def flush(self) -> None:
        self._enter("flush")
        self._plan.delivered += self._pending
        self._pending = 0

    def close(self, *, dropped_batches: int = 0) -> None:
        self._enter("close")
        self._plan.delivered += self._pending
        self._pending = 0


def factory_for(plan: Plan) -> Callable[[object], FaultExporter]:
    """A factory that raises when the plan's ``factory`` behaviour says so."""

    def make_exporter(_context: object) -> FaultExporter:
        behaviour = plan.behaviours.get("factory", Behaviour())
        if behaviour.kind == "raise":
            plan.raised = "factory"
            raise ERRORS[behaviour.error]()
        return FaultExporter(plan)

    return make_exporter


def make(context: object) -> FaultExporter:
    return factory_for(PLAN)(context)
