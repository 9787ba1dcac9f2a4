"""Every conformance check, one module per group, put together in suite order.

Each module declares ``GROUP`` (a :class:`~..registry.CheckGroup`) and its
checks; ``CHECKS`` is their concatenation in the order of ``GROUPS``. To add a
check, write a ``check_<name>(env)`` function with a ``Rule:`` and a
``Contract:`` docstring in its group's module, decorated with ``@GROUP.check``,
and a broken exporter that fails it in ``tests/conformance``.
"""

from __future__ import annotations

from types import MappingProxyType

from ..registry import GROUPS, Check
from . import (
    close_semantics,
    data_fidelity,
    failure_behaviour,
    importability,
    lifecycle,
    stream_dispatch,
    thread_confinement,
    throughput,
)

__all__ = ["CHECKS", "CHECKS_BY_NAME", "check_names"]

_MODULES = (
    lifecycle,
    thread_confinement,
    stream_dispatch,
    close_semantics,
    data_fidelity,
    failure_behaviour,
    throughput,
    importability,
)
assert tuple(m.GROUP.name for m in _MODULES) == GROUPS

CHECKS: tuple[Check, ...] = tuple(check for m in _MODULES for check in m.GROUP.checks)
"""Every check of this SDK release, in suite order."""

CHECKS_BY_NAME = MappingProxyType({check.name: check for check in CHECKS})
"""Each check by its name."""

assert len(CHECKS_BY_NAME) == len(CHECKS), "two checks share a name"


def check_names() -> tuple[str, ...]:
    """Every check name, in suite order (the keys ``skip_checks``/``xfail_checks`` accept)."""
    return tuple(CHECKS_BY_NAME)
