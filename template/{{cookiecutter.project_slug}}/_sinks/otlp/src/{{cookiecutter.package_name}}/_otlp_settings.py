"""The standard ``OTEL_*`` settings of an OTLP/HTTP logs exporter, read and validated.

The factory only copies the variables (:func:`read_environment`, no I/O, never
raises); ``open()`` parses them (:func:`parse_settings`), so a bad value is a
``ValueError`` naming the variable, raised where TraceML records the loss.
A ``..._LOGS_...`` variable wins over its generic ``OTEL_EXPORTER_OTLP_...`` twin.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

__all__ = [
    "DEFAULT_ENDPOINT",
    "DEFAULT_TIMEOUT_MS",
    "OtlpSettings",
    "parse_settings",
    "read_environment",
]

DEFAULT_ENDPOINT = "http://localhost:4318"
LOGS_PATH = "/v1/logs"
DEFAULT_TIMEOUT_MS = 5000.0
"""Per-call deadline: well under TraceML's shutdown budget, so flush and close both fit."""
DEFAULT_SERVICE_NAME = "traceml"
_PREFIXES = ("OTEL_EXPORTER_OTLP_", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES")
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


@dataclass(frozen=True)
class OtlpSettings:
    """Everything ``open()`` needs to reach the collector."""

    endpoint: str
    """The full logs URL, ``scheme://host:port/path``."""
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = DEFAULT_TIMEOUT_MS / 1000
    gzip: bool = False
    service_name: str = DEFAULT_SERVICE_NAME
    resource_attributes: dict[str, str] = field(default_factory=dict)
    tls: dict[str, str] = field(default_factory=dict)
    """urllib3 pool arguments: ``ca_certs``, ``cert_file``, ``key_file`` (existing files)."""


def read_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The OpenTelemetry variables of ``environ`` (default ``os.environ``), copied."""
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if k.startswith(_PREFIXES)}


def _pick(env: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """``(variable, value)`` of ``OTEL_EXPORTER_OTLP_LOGS_<name>`` or the generic one."""
    for variable in (f"OTEL_EXPORTER_OTLP_LOGS_{name}", f"OTEL_EXPORTER_OTLP_{name}"):
        value = env.get(variable, "").strip()
        if value:
            return variable, value
    return None


def _endpoint(env: Mapping[str, str]) -> str:
    logs = env.get("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "").strip()
    if logs:
        variable, url = "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", logs  # used as is
    else:
        variable = "OTEL_EXPORTER_OTLP_ENDPOINT"
        base = env.get(variable, "").strip() or DEFAULT_ENDPOINT
        url = base.rstrip("/") + LOGS_PATH
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
        raise ValueError(
            f"{variable}={url!r} is not an http:// or https:// URL with a host (and a valid "
            "port), such as http://localhost:4318"
        )
    return url


def _pairs(variable: str, text: str) -> dict[str, str]:
    """``key=value,key=value`` with percent-encoded keys and values (the OTel format)."""
    out: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key, value = unquote(key.strip()), unquote(value.strip())
        if not sep or not key:
            raise ValueError(
                f"{variable} has {item.strip()!r}, which is not key=value; expected a comma "
                "separated list such as 'api-key=secret,tenant=ml'"
            )
        out[key] = value
    return out


def _headers(env: Mapping[str, str]) -> dict[str, str]:
    picked = _pick(env, "HEADERS")
    if picked is None:
        return {}
    variable, text = picked
    headers = _pairs(variable, text)
    for name, value in headers.items():
        if not _TOKEN.match(name) or any(c in value for c in "\r\n\0"):
            raise ValueError(f"{variable} names the header {name!r}, which is not a valid header")
    return headers


def _timeout(env: Mapping[str, str]) -> float:
    picked = _pick(env, "TIMEOUT")
    if picked is None:
        return DEFAULT_TIMEOUT_MS / 1000
    variable, text = picked
    try:
        millis = float(text)
    except ValueError:
        millis = -1.0
    if not 0 < millis < float("inf"):
        raise ValueError(
            f"{variable}={text!r} is not a positive number of milliseconds "
            f"(the OTLP specification's unit; default {DEFAULT_TIMEOUT_MS:g})"
        )
    return millis / 1000


def _gzip(env: Mapping[str, str]) -> bool:
    picked = _pick(env, "COMPRESSION")
    if picked is None:
        return False
    variable, text = picked
    if text.lower() not in ("gzip", "none"):
        raise ValueError(f"{variable}={text!r} is not supported; use gzip or none")
    return text.lower() == "gzip"


_TLS_FILES = {
    "CERTIFICATE": "ca_certs",
    "CLIENT_CERTIFICATE": "cert_file",
    "CLIENT_KEY": "key_file",
}


def _tls(env: Mapping[str, str]) -> dict[str, str]:
    """PEM files for TLS: the CA to trust, and a client certificate and key (mTLS)."""
    out: dict[str, str] = {}
    for name, argument in _TLS_FILES.items():
        picked = _pick(env, name)
        if picked is None:
            continue
        variable, path = picked
        if not os.path.isfile(path):
            raise ValueError(f"{variable}={path!r} is not a readable file (a PEM file is expected)")
        out[argument] = path
    return out


def parse_settings(env: Mapping[str, str]) -> OtlpSettings:
    """Validate the copied variables; raise ``ValueError`` naming the first bad one."""
    attributes_text = env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    attributes = _pairs("OTEL_RESOURCE_ATTRIBUTES", attributes_text)
    service = env.get("OTEL_SERVICE_NAME", "").strip()
    return OtlpSettings(
        endpoint=_endpoint(env),
        headers=_headers(env),
        timeout_s=_timeout(env),
        gzip=_gzip(env),
        service_name=service or attributes.get("service.name") or DEFAULT_SERVICE_NAME,
        resource_attributes=attributes,
        tls=_tls(env),
    )
