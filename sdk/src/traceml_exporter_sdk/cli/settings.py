"""Resolve and validate the three export settings as TraceML's launcher would, before a run.

Each of ``exporter``, ``export_streams`` and ``exporter_hostname`` comes from
the first place that sets it: the command-line flag, then the environment,
then ``traceml.yaml``, then the built-in default. The exporter value's form is
validated without importing anything.

Environment names: the contract names ``TRACEML_EXPORTER``. The other two,
``TRACEML_EXPORT_STREAMS`` and ``TRACEML_EXPORTER_HOSTNAME``, are this tool's
assumption, following TraceML's ``TRACEML_<KEY>`` pattern; the contract does
not name them. An environment variable set to the empty string counts as unset.

``traceml.yaml`` is read with PyYAML when it is installed (the SDK's ``cli``
extra). Without it, a reader of the flat subset is used: one ``key: value``
per line at the top level, ``#`` comments, quoted or plain scalars,
``true``/``false``; nested blocks under other keys are passed over, and a
value of ours that is not a flat scalar is an error that says to install PyYAML.

A hostile file cannot make the check hang or balloon: at most ``MAX_CONFIG_BYTES``
are read, nesting too deep for the parser is a ``ConfigError``, and each of the
three settings must be one plain value (string, number, boolean, null): a list
or mapping there (an alias bomb included) is a ``ConfigError`` that never walks
or prints it. Other keys are TraceML's and are not looked into.
"""

from __future__ import annotations

import datetime
import importlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..factory import ExporterSettingError, validate_exporter_setting
from ..streams import DEFAULT_EXPORT_STREAMS, parse_export_streams

__all__ = [
    "CONFIG_FILENAME",
    "ENV_VARS",
    "SETTING_NAMES",
    "ConfigError",
    "Resolution",
    "ResolvedSetting",
    "clip",
    "find_config",
    "load_config",
    "parse_flat_yaml",
    "resolve_settings",
]

CONFIG_FILENAME = "traceml.yaml"
MAX_CONFIG_BYTES = 1 << 20
"""The most of traceml.yaml that is read; a larger file is a ConfigError."""
_PLAIN = (str, int, float, bool, type(None), datetime.date)
MAX_WALK_LEVELS = 10
"""Parent folders searched upward for traceml.yaml, as TraceML's launcher does."""

SETTING_NAMES = ("exporter", "export_streams", "exporter_hostname")

ENV_VARS: dict[str, str] = {
    "exporter": "TRACEML_EXPORTER",
    "export_streams": "TRACEML_EXPORT_STREAMS",
    "exporter_hostname": "TRACEML_EXPORTER_HOSTNAME",
}
"""Setting -> environment variable (only TRACEML_EXPORTER is named by the contract)."""

FLAGS: dict[str, str] = {
    "exporter": "--exporter",
    "export_streams": "--streams",
    "exporter_hostname": "--hostname/--no-hostname",
}

DEFAULTS: dict[str, object] = {
    "exporter": None,
    "export_streams": DEFAULT_EXPORT_STREAMS,
    "exporter_hostname": False,
}

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class ConfigError(Exception):
    """traceml.yaml cannot be read or is not a mapping; the message names the file."""


@dataclass(frozen=True, slots=True)
class ResolvedSetting:
    """One setting: its raw value, where it came from, and what it means or what is wrong."""

    name: str
    raw: object
    source: str
    value: object = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class Resolution:
    """The three resolved settings and the config file that was read, if any."""

    exporter: ResolvedSetting
    export_streams: ResolvedSetting
    exporter_hostname: ResolvedSetting
    config_path: Path | None

    @property
    def settings(self) -> tuple[ResolvedSetting, ResolvedSetting, ResolvedSetting]:
        return (self.exporter, self.export_streams, self.exporter_hostname)

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.settings)


def find_config(start: Path) -> Path | None:
    """Walk up from ``start`` (at most 10 folders) for traceml.yaml, as TraceML does."""
    current = start.resolve()
    for _ in range(MAX_WALK_LEVELS):
        candidate = current / CONFIG_FILENAME
        if candidate.is_file():
            return candidate
        if current.parent == current:
            break
        current = current.parent
    return None


def load_config(path: Path) -> dict[str, Any]:
    """Read traceml.yaml into a dict (PyYAML if installed, else the flat subset).

    Raises:
        ConfigError: the file cannot be read, is larger than ``MAX_CONFIG_BYTES``,
            is not valid (flat) YAML or nests too deeply, its top level is not a
            mapping, or one of the three settings is not one plain value.
    """
    text = _read_bounded(path)
    try:
        yaml = importlib.import_module("yaml")
    except ImportError:
        return parse_flat_yaml(text, path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = " ".join(str(exc).split())
        raise ConfigError(f"{path}: YAML syntax error: {_clip(first)}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a settings file") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a mapping of settings at the top level, got {type(data).__name__}"
        )
    for name in SETTING_NAMES:
        value = data.get(name)
        if not isinstance(value, _PLAIN):
            kind = _KINDS.get(type(value), type(value).__name__)
            raise ConfigError(
                f"{path}: {name} must be one plain value (a string, number or boolean), "
                f"not a {kind}"
            )
    return data


_KINDS: dict[type, str] = {list: "list", dict: "mapping", set: "set", bytes: "bytes", tuple: "list"}


def _read_bounded(path: Path) -> str:
    """The file's text, reading at most ``MAX_CONFIG_BYTES`` + 1 bytes of a regular file."""
    try:
        if path.exists() and not path.is_file():  # a FIFO would block, a device never end
            raise ConfigError(f"{path}: not a regular file; give a traceml.yaml file")
        with path.open("rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than 1 MiB; a traceml.yaml of settings is a few lines")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None


def clip(text: str, limit: int = 200) -> str:
    """``text``, or its first ``limit`` characters and how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


_clip = clip


_KEY_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_\-]*)\s*:(?:\s+(.*))?\s*$")
_NEEDS_PYYAML = "install PyYAML (pip install 'traceml-exporter-sdk[cli]') to read it"


def parse_flat_yaml(text: str, path: Path | str = CONFIG_FILENAME) -> dict[str, Any]:
    """Parse the flat ``key: value`` subset of YAML that a traceml.yaml of settings uses.

    Top-level keys only; an indented or list line belongs to the previous key's
    nested block and is recorded as ``NESTED`` for it. Scalars: quoted strings,
    ``true``/``false``, ``null``/``~``, integers, floats, plain text.

    Raises:
        ConfigError: a top-level line that is not ``key: value``.
    """
    out: dict[str, Any] = {}
    last_key: str | None = None
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = _strip_comment(raw_line).rstrip()
        if not line.strip() or line.strip() in ("---", "..."):
            continue
        if line[0] in " \t" or line.startswith("- "):
            if last_key is None:
                raise ConfigError(f"{path}: line {number}: indented line with no key above it")
            out[last_key] = NESTED
            continue
        match = _KEY_LINE.match(line)
        if not match:
            raise ConfigError(
                f"{path}: line {number}: not a 'key: value' line ({line.strip()!r}); the "
                f"built-in reader takes only flat YAML; {_NEEDS_PYYAML}"
            )
        key, value = match.group(1), match.group(2)
        out[key] = _scalar(value.strip()) if value else None
        last_key = key
    return out


class _Nested:
    """Marks a key whose value is a nested block the flat reader did not parse."""

    def __repr__(self) -> str:
        return "<nested YAML block>"


NESTED: Any = _Nested()


def _strip_comment(line: str) -> str:
    quote: str | None = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def _scalar(value: str) -> Any:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        inner = value[1:-1]
        return inner.replace("''", "'") if value[0] == "'" else inner
    lowered = value.lower()
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off"):
        return False
    if lowered in ("null", "~"):
        return None
    if value.startswith(("[", "{", "&", "*", "!", "|", ">")):
        return NESTED
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value


def resolve_settings(
    flags: Mapping[str, object],
    environ: Mapping[str, str],
    config: Mapping[str, Any],
    config_path: Path | None,
) -> Resolution:
    """Pick each setting from flag > environment > traceml.yaml > default, then validate it.

    ``flags`` holds the values given on the command line (``None`` = not given).
    """
    resolved: dict[str, ResolvedSetting] = {}
    for name in SETTING_NAMES:
        flag_value = flags.get(name)
        env_value = environ.get(ENV_VARS[name], "")
        if flag_value is not None:
            raw, source, origin = flag_value, FLAGS[name], "flag"
            if name == "exporter_hostname":
                source = "--hostname" if flag_value else "--no-hostname"
        elif env_value != "":
            raw, source, origin = env_value, f"environment {ENV_VARS[name]}", "env"
        elif name in config:
            raw, source, origin = config[name], f"config {config_path}", "config"
        else:
            raw, source, origin = DEFAULTS[name], "default", "default"
        resolved[name] = _bounded(_validate(name, raw, source, origin))
    return Resolution(
        exporter=resolved["exporter"],
        export_streams=resolved["export_streams"],
        exporter_hostname=resolved["exporter_hostname"],
        config_path=config_path,
    )


def _bounded(setting: ResolvedSetting) -> ResolvedSetting:
    """Clip a long raw value inside the error message, so one line stays one short line."""
    if setting.error is None:
        return setting
    error = setting.error
    if isinstance(setting.raw, str) and len(setting.raw) > 100:
        error = error.replace(repr(setting.raw), clip(repr(setting.raw), 100))
    return replace(setting, error=clip(error, 400))


def _validate(name: str, raw: object, source: str, origin: str) -> ResolvedSetting:
    if raw is NESTED:
        return ResolvedSetting(
            name,
            raw,
            source,
            error=f"is not a flat value the built-in reader takes; {_NEEDS_PYYAML}",
        )
    if name == "exporter":
        if raw is None:
            return ResolvedSetting(name, raw, source, value=None)
        try:
            return ResolvedSetting(name, raw, source, value=validate_exporter_setting(raw))
        except ExporterSettingError as exc:
            return ResolvedSetting(name, raw, source, error=str(exc))
    if name == "export_streams":
        try:
            return ResolvedSetting(name, raw, source, value=parse_export_streams(raw))  # type: ignore[arg-type]
        except ValueError as exc:
            return ResolvedSetting(name, raw, source, error=str(exc))
    value = _boolean(raw, origin)
    if value is None:
        accepted = (
            "true or false (also 1/0)"
            if origin == "config"
            else ", ".join(sorted(_TRUE)) + " or " + ", ".join(sorted(_FALSE))
        )
        return ResolvedSetting(
            name, raw, source, error=f"exporter_hostname {raw!r} is not a boolean; use {accepted}"
        )
    return ResolvedSetting(name, raw, source, value=value)


def _boolean(raw: object, origin: str) -> bool | None:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str) and origin != "config":
        lowered = raw.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
    return None


def environment() -> Mapping[str, str]:
    """The process environment (a seam for tests)."""
    return os.environ
