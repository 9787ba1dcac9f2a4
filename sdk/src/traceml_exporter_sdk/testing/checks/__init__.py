"""Every conformance check, one module per group, put together in suite order.

Each module, named as its group in ``registry.GROUP_RULES`` (the one list of groups),
declares ``GROUP`` (a :class:`~..registry.CheckGroup`) and its checks; ``CHECKS`` is
their concatenation in the order of ``GROUPS``. To add a
check, write a ``check_<name>(env)`` function with a ``Rule:`` and a
``Contract:`` docstring in its group's module, decorated with ``@GROUP.check``,
and a broken exporter that fails it in ``tests/conformance``.
"""

from __future__ import annotations

import importlib
from types import MappingProxyType

from ..registry import GROUPS, Check, CheckGroup

__all__ = ["CHECKS", "CHECKS_BY_NAME", "check_names"]

_GROUPS: tuple[CheckGroup, ...] = tuple(
    importlib.import_module(f"{__name__}.{group}").GROUP for group in GROUPS
)
"""Each group's checks, from the module of :mod:`.checks` named as the group."""

CHECKS: tuple[Check, ...] = tuple(check for group in _GROUPS for check in group.checks)
"""Every check of this SDK release, in suite order."""

CHECKS_BY_NAME = MappingProxyType({check.name: check for check in CHECKS})
"""Each check by its name."""

assert len(CHECKS_BY_NAME) == len(CHECKS), "two checks share a name"


def check_names() -> tuple[str, ...]:
    """Every check name, in suite order (the keys ``skip_checks``/``xfail_checks`` accept)."""
    return tuple(CHECKS_BY_NAME)
