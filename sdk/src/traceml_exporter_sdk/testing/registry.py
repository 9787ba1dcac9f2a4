"""What a conformance check is: its group, its name, its rule, and how groups collect them.

The groups are listed once, in ``GROUP_RULES``. Each module of :mod:`.checks`
(named as its group) declares one ``CheckGroup`` and registers its checks on it with
``@GROUP.check``; :mod:`.checks` puts the groups together in suite order. A check is a function of one argument, the :class:`~.environment.Env`
that carries every setting and hook it may use.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    from .environment import Env

__all__ = ["GROUPS", "GROUP_RULES", "Check", "CheckFunction", "CheckGroup"]

GROUP_RULES: Mapping[str, str] = MappingProxyType(
    {
        "lifecycle": "Lifecycle order: open once, write/flush zero or more times, close once.",
        "thread_confinement": (
            "Thread confinement: an inert factory on the main thread, methods on the worker's."
        ),
        "stream_dispatch": (
            "STREAM dispatch: interleaved streams, foreign record classes, every setting."
        ),
        "close_semantics": (
            "Close semantics: close flushes, accepts dropped_batches, and ends all writing."
        ),
        "data_fidelity": "Data fidelity (needs read_back): every record once, in order, values exact.",
        "failure_behaviour": "Failure behaviour: failures are raised, and leave nothing behind.",
        "throughput": "Throughput: at least throughput_floor records/s on the sample corpus.",
        "importability": (
            "Importability: the spec loads in a fresh interpreter, as the aggregator loads it."
        ),
    }
)
"""The one list of check groups, in suite order, each with its rule. A group is a module of
:mod:`.checks` of the same name and one test function, ``test_<group>[<check>]``."""

GROUPS = tuple(GROUP_RULES)
"""The check groups' names, in suite order."""

CheckFunction = Callable[["Env"], None]
"""A check's code: it gets the environment and fails the test (assert, ``pytest.fail``)."""


@dataclass(frozen=True)
class Check:
    """One conformance check: its group, its name, the rule and the code that enforces it."""

    group: str
    name: str
    func: CheckFunction
    needs_read_back: bool = False

    @property
    def test_id(self) -> str:
        """The pytest id, e.g. ``test_lifecycle[open_close]``."""
        return f"test_{self.group}[{self.name}]"

    @property
    def doc(self) -> str:
        """The rule and the contract sentence it enforces (the check's docstring)."""
        return inspect.cleandoc(self.func.__doc__ or "")


@dataclass
class CheckGroup:
    """The checks of one group, in the order they were registered."""

    name: str
    checks: list[Check] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.name not in GROUPS:
            raise ValueError(f"unknown check group {self.name!r}; groups: {', '.join(GROUPS)}")

    @overload
    def check(self, func: CheckFunction, /) -> CheckFunction: ...

    @overload
    def check(
        self, func: None = None, /, *, needs_read_back: bool = ...
    ) -> Callable[[CheckFunction], CheckFunction]: ...

    def check(
        self, func: CheckFunction | None = None, /, *, needs_read_back: bool = False
    ) -> Callable[[CheckFunction], CheckFunction] | CheckFunction:
        """Register ``func`` (named ``check_<name>``) as a check of this group."""

        def register(func: CheckFunction) -> CheckFunction:
            name = func.__name__.removeprefix("check_")
            if name in GROUPS or any(c.name == name for c in self.checks):
                raise ValueError(f"check name {name!r} is taken")
            self.checks.append(Check(self.name, name, func, needs_read_back))
            return func

        return register if func is None else register(func)
