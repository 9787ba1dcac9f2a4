"""The ``exporter`` setting: its form, the one factory resolver, and the loader.

``resolve_factory`` is the only place that turns a setting into a factory
callable (the ``jsonl`` alias, then ``module:factory`` imported, never called);
the loader below, the conformance suite and the CLI all go through it.
"""

from __future__ import annotations

import importlib
import keyword
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from .context import ExporterContext
from .exporter import Exporter

__all__ = [
    "BUILTIN_ALIASES",
    "BUILTIN_EXPORTERS",
    "ExporterSettingError",
    "FactoryFailure",
    "FactoryResolutionError",
    "call_factory",
    "factory_target",
    "load_exporter",
    "resolve_factory",
    "validate_exporter_setting",
]

BUILTIN_ALIASES: Mapping[str, str] = MappingProxyType(
    {"jsonl": "traceml_exporter_sdk.jsonl:make_exporter"}
)
"""Setting values that name a built-in exporter, and the ``module:factory`` each stands for."""

BUILTIN_EXPORTERS = tuple(BUILTIN_ALIASES)
"""Setting values that name a built-in exporter instead of ``module:factory``."""

ACCEPTED_FORM = (
    "accepted: 'jsonl', or 'module:factory' - a dotted module path, one colon and one "
    "identifier, e.g. 'my_exporters:make_exporter' or 'pkg.sub.mod:make_exporter'"
)

FailureKind = Literal["setting", "import", "attribute", "exception", "system_exit", "none"]


class ExporterSettingError(ValueError):
    """The exporter setting is not of an accepted form; the message shows the form."""


@dataclass(frozen=True, slots=True)
class FactoryFailure:
    """Why ``module:factory`` gave no exporter; TraceML treats it like a failed ``open``."""

    setting: str
    kind: FailureKind
    error: str

    @property
    def message(self) -> str:
        """The one log line TraceML writes for it, with the ``[TraceML]`` prefix."""
        return (
            f"[TraceML] exporter {self.setting!r} could not be loaded ({self.kind}): {self.error}"
        )


def _is_name(part: str) -> bool:
    return part.isidentifier() and not keyword.iskeyword(part)


def validate_exporter_setting(value: object) -> str:
    """Validate the setting's form without importing anything; return it unchanged.

    Raises:
        ExporterSettingError: empty parts, not exactly one colon, whitespace,
            slashes or a file path, a part that is not an identifier or is a
            keyword. The message names what was wrong and the accepted form.
    """
    if not isinstance(value, str):
        raise ExporterSettingError(
            f"exporter setting must be a string, got {type(value).__name__}; {ACCEPTED_FORM}"
        )
    if value in BUILTIN_EXPORTERS:
        return value
    problem = _form_problem(value)
    if problem:
        raise ExporterSettingError(f"exporter setting {value!r}: {problem}; {ACCEPTED_FORM}")
    return value


def _form_problem(value: str) -> str | None:
    if not value:
        return "it is empty"
    if value != value.strip() or any(ch.isspace() for ch in value):
        return "it contains whitespace"
    if "/" in value or "\\" in value or value.endswith(".py"):
        return "it looks like a file path; name the module by its import path instead"
    if value.count(":") != 1:
        return f"it needs exactly one colon, found {value.count(':')}"
    module, attribute = value.split(":")
    if not module:
        return "the module path before the colon is empty"
    if not attribute:
        return "the factory name after the colon is empty"
    if "." in attribute:
        return f"the factory {attribute!r} must be one identifier, not a dotted path"
    for part in module.split("."):
        if not part:
            return f"the module path {module!r} has an empty part"
        if not _is_name(part):
            return f"{part!r} in the module path is not an identifier (or is a keyword)"
    if not _is_name(attribute):
        return f"the factory {attribute!r} is not an identifier (or is a keyword)"
    return None


class FactoryResolutionError(Exception):
    """``module:factory`` could not be resolved: the module or its attribute failed."""

    def __init__(self, setting: str, kind: FailureKind, error: str) -> None:
        super().__init__(error)
        self.setting = setting
        self.kind: FailureKind = kind
        self.error = error

    @property
    def failure(self) -> FactoryFailure:
        """The same problem as the loader reports it."""
        return FactoryFailure(self.setting, self.kind, self.error)


def factory_target(setting: str) -> str:
    """The ``module:factory`` a valid setting stands for (a built-in alias expanded)."""
    return BUILTIN_ALIASES.get(setting, setting)


def resolve_factory(setting: str) -> Callable[..., object]:
    """Validate the setting, expand a built-in alias, import the module, read the factory.

    The factory is returned, never called, and may not even be callable
    (callers decide what that means).

    Raises:
        ExporterSettingError: the setting is not of an accepted form.
        FactoryResolutionError: importing the module or reading the attribute
            failed (``kind`` is ``import``, ``attribute``, ``exception`` or
            ``system_exit``), including a ``SystemExit`` raised while doing so.
    """
    validate_exporter_setting(setting)
    module_name, attribute = factory_target(setting).split(":")
    try:
        module = importlib.import_module(module_name)
    except SystemExit as exc:
        raise FactoryResolutionError(
            setting, "system_exit", f"importing {module_name!r}: {_repr(exc)}"
        ) from None
    except ImportError as exc:
        raise FactoryResolutionError(
            setting, "import", f"cannot import {module_name!r}: {_str(exc)}"
        ) from None
    except KeyboardInterrupt:  # a real Ctrl-C on this (the main) thread
        raise
    except BaseException as exc:
        raise FactoryResolutionError(
            setting, "exception", f"importing {module_name!r} raised {_repr(exc)}"
        ) from None
    try:
        return getattr(module, attribute)  # type: ignore[no-any-return]
    except AttributeError:
        raise FactoryResolutionError(
            setting, "attribute", f"module {module_name!r} has no attribute {attribute!r}"
        ) from None
    except SystemExit as exc:  # a module-level __getattr__ may do anything
        raise FactoryResolutionError(
            setting, "system_exit", f"reading {attribute!r}: {_repr(exc)}"
        ) from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        raise FactoryResolutionError(
            setting, "exception", f"reading {attribute!r} raised {_repr(exc)}"
        ) from None


def load_exporter(setting: str, context: ExporterContext) -> Exporter | FactoryFailure:
    """Resolve the setting to an exporter on the calling thread, as TraceML's aggregator does.

    ``jsonl`` gives the built-in exporter. ``module:factory`` imports the module,
    reads the attribute and calls ``factory(context)``. Every failure (a bad
    form, an import error, a missing attribute, any exception or ``SystemExit``
    from the module or the factory, a factory that returns None) comes back as
    a ``FactoryFailure``; nothing escapes to the caller.
    """
    try:
        factory = resolve_factory(setting)
    except ExporterSettingError as exc:
        return FactoryFailure(str(setting), "setting", str(exc))
    except FactoryResolutionError as exc:
        return exc.failure
    return call_factory(factory, context, setting)


def call_factory(
    factory: Callable[..., object], context: ExporterContext, label: str
) -> Exporter | FactoryFailure:
    """Call ``factory(context)``; any exception (but a Ctrl-C on this thread) or None
    becomes a failure, also an exception whose ``repr()`` raises."""
    try:
        exporter = factory(context)
    except SystemExit as exc:
        return FactoryFailure(label, "system_exit", f"the factory raised {_repr(exc)}")
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        return FactoryFailure(label, "exception", f"the factory raised {_repr(exc)}")
    if exporter is None:
        return FactoryFailure(label, "none", "the factory returned None, not an exporter")
    return exporter  # type: ignore[return-value]


def _repr(exc: BaseException) -> str:
    try:
        return repr(exc)
    except BaseException:
        return f"<unprintable {type(exc).__name__}>"


def _str(exc: BaseException) -> str:
    try:
        return str(exc)
    except BaseException:
        return f"<unprintable {type(exc).__name__}>"
