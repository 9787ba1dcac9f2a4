"""How a conformance class is configured: validation, skip/xfail reasons, factory resolution.

Everything here reads the class attributes of an ``ExporterConformance``
subclass (``factory``, ``throughput_floor``, ``skip_checks``, ...) and turns
them into the ``Settings`` and factory that the checks get through ``Env``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from functools import cache
from typing import Any

import pytest

from ..factory import (
    BUILTIN_ALIASES,
    ExporterSettingError,
    FactoryResolutionError,
    factory_target,
    resolve_factory,
    validate_exporter_setting,
)
from .checks import CHECKS_BY_NAME
from .environment import Factory, Settings
from .errors import ConformanceConfigError
from .registry import GROUPS, Check

__all__ = [
    "BUILTIN_JSONL_LIMITS",
    "BUILTIN_JSONL_SPECS",
    "class_attr",
    "declared_skips",
    "import_factory",
    "is_builtin_jsonl",
    "mark_reason",
    "resolved_factory",
    "settings_of",
    "spec_string",
    "validate",
]

BUILTIN_JSONL_SPECS = frozenset({"jsonl", BUILTIN_ALIASES["jsonl"]})
"""The ``factory`` values that name the SDK's own jsonl exporter."""

BUILTIN_JSONL_LIMITS: Mapping[str, str] = {
    "special_floats": "JSON has no NaN or infinity: the jsonl exporter writes a "
    "non-finite float as null (its documented format, docs/conformance.md)",
}
"""The SDK's jsonl exporter's declared limitations, skipped with their reason wherever
the suite runs on it (as ``skip_checks`` would declare them for any other exporter)."""


def class_attr(cls: type, name: str) -> Any:
    """A class attribute as written in the class body (a function stays a function)."""
    for klass in cls.__mro__:
        if name in vars(klass):
            value = vars(klass)[name]
            if isinstance(value, (staticmethod, classmethod)):
                return value.__func__
            return value
    return None


def validate(cls: type) -> None:
    """Raise ConformanceConfigError for a wrongly configured class, naming what is valid."""
    name = cls.__qualname__
    factory = class_attr(cls, "factory")
    if factory is not None and not isinstance(factory, str) and not callable(factory):
        raise ConformanceConfigError(
            f"{name}.factory must be a 'module:factory' string or a callable, "
            f"got {type(factory).__name__}"
        )
    if isinstance(factory, str):
        try:
            validate_exporter_setting(factory)
        except ExporterSettingError as exc:
            raise ConformanceConfigError(f"{name}.factory: {exc}") from None
    floor = getattr(cls, "throughput_floor", None)
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not floor > 0:
        raise ConformanceConfigError(
            f"{name}.throughput_floor must be a positive number of records/s, got {floor!r}"
        )
    for attr in ("grace_period", "settle_time", "failure_timeout"):
        value = getattr(cls, attr, None)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConformanceConfigError(f"{name}.{attr} must be a positive number of seconds")
    valid = (*CHECKS_BY_NAME, *GROUPS)
    declared: dict[str, str] = {}
    for attr in ("skip_checks", "xfail_checks"):
        value = getattr(cls, attr, None)
        if not isinstance(value, Mapping):
            raise ConformanceConfigError(
                f"{name}.{attr} must be a dict of {{check name: reason}}, got {type(value).__name__}"
            )
        for key, reason in value.items():
            if key not in valid:
                raise ConformanceConfigError(
                    f"{name}.{attr} names unknown check {key!r}; valid check names: "
                    f"{', '.join(CHECKS_BY_NAME)}; or a whole group: {', '.join(GROUPS)}"
                )
            if not isinstance(reason, str) or not reason.strip():
                raise ConformanceConfigError(
                    f"{name}.{attr}[{key!r}] needs a reason: a non-empty string saying why, "
                    f"got {reason!r}"
                )
            if key in declared:
                raise ConformanceConfigError(
                    f"{name}: {key!r} is in both skip_checks and xfail_checks; pick one"
                )
            declared[key] = attr


def mark_reason(declared: Mapping[str, str], check: Check) -> str | None:
    """The skip or xfail reason for ``check`` (by its name or its group's), or None."""
    reason = declared.get(check.name, declared.get(check.group))
    return None if reason is None else f"{check.name}: {reason}"


def declared_skips(cls: type) -> Mapping[str, str]:
    """The class's ``skip_checks``, with the built-in jsonl exporter's declared limitations
    added where the class declares nothing else about that check."""
    skips: Mapping[str, str] = cls.skip_checks  # type: ignore[attr-defined]
    if not is_builtin_jsonl(cls):
        return skips
    xfails: Mapping[str, str] = cls.xfail_checks  # type: ignore[attr-defined]
    limits = {k: v for k, v in BUILTIN_JSONL_LIMITS.items() if k not in xfails}
    return {**limits, **skips}


def settings_of(cls: type) -> Settings:
    """The class's validated numbers."""
    return Settings(
        throughput_floor=float(cls.throughput_floor),  # type: ignore[attr-defined]
        grace_period=float(cls.grace_period),  # type: ignore[attr-defined]
        settle_time=float(cls.settle_time),  # type: ignore[attr-defined]
        failure_timeout=float(cls.failure_timeout),  # type: ignore[attr-defined]
    )


@cache
def import_factory(spec: str) -> Factory:
    """The callable ``spec`` names, through the SDK's one resolver; never called here."""
    try:
        factory = resolve_factory(spec)
    except ExporterSettingError as exc:
        raise ConformanceConfigError(f"factory {spec!r}: {exc}") from None
    except FactoryResolutionError as exc:
        raise ConformanceConfigError(f"factory {spec!r}: {exc.error}") from None
    if not callable(factory):
        raise ConformanceConfigError(
            f"factory {spec!r} is a {type(factory).__name__}, not callable"
        )
    return factory


def resolved_factory(cls: type) -> Factory:
    """The class's factory as a callable; fails the test with a clear message otherwise."""
    factory = class_attr(cls, "factory")
    if factory is None:
        pytest.fail(
            f"{cls.__qualname__} has no factory: set factory = 'my_pkg.exporter:make_exporter' "
            "(or the factory callable) on the class",
            pytrace=False,
        )
    if isinstance(factory, str):
        try:
            return import_factory(factory)
        except ConformanceConfigError as exc:
            problem = str(exc)
        pytest.fail(problem, pytrace=False)
    return factory  # type: ignore[no-any-return]


def spec_string(cls: type) -> str | None:
    """The class's factory as ``module:factory``, or None for a callable with no such name."""
    factory = class_attr(cls, "factory")
    if isinstance(factory, str):
        return factory_target(factory)
    module = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", "")
    if not module or module == "__main__" or not qualname.isidentifier():
        return None
    try:
        resolved = getattr(importlib.import_module(module), qualname)
    except Exception:
        return None
    return f"{module}:{qualname}" if resolved is factory else None


def is_builtin_jsonl(cls: type) -> bool:
    """Whether the class tests the SDK's own jsonl exporter (its read_back is built in)."""
    factory = class_attr(cls, "factory")
    if isinstance(factory, str):
        return factory in BUILTIN_JSONL_SPECS
    from .. import jsonl

    return factory is jsonl.make_exporter or factory is jsonl.JsonlExporter
