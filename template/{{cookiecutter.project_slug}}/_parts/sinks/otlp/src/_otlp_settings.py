"""The standard ``OTEL_*`` settings of an OTLP/HTTP logs exporter, read and validated.

The factory only copies the variables (:func:`read_environment`, no I/O, never
raises); ``open()`` parses them (:func:`parse_settings`), so a bad value is a
``SettingsError`` (a ``ValueError``, marked permanent) naming the variable, raised
where TraceML records the loss.
A ``..._LOGS_...`` variable wins over its generic ``OTEL_EXPORTER_OTLP_...`` twin.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ._contract import SettingsError
from ._delivery import duration, environment, key_values
from ._http import Endpoint, check_header, parse_endpoint

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


@dataclass(frozen=True)
class OtlpSettings:
    """Everything ``open()`` needs to reach the collector."""

    endpoint: Endpoint
    """The full logs URL, ``scheme://host:port/path`` (credentials, if any, taken out)."""
    headers: dict[str, str] = field(default_factory=dict)
    headers_variable: str = "OTEL_EXPORTER_OTLP_HEADERS"
    """The variable ``headers`` came from, for messages."""
    timeout_variable: str = "OTEL_EXPORTER_OTLP_TIMEOUT"
    timeout_s: float = DEFAULT_TIMEOUT_MS / 1000
    gzip: bool = False
    service_name: str = DEFAULT_SERVICE_NAME
    resource_attributes: dict[str, str] = field(default_factory=dict)
    tls: dict[str, str] = field(default_factory=dict)
    """urllib3 pool arguments: ``ca_certs``, ``cert_file``, ``key_file`` (existing files)."""


def read_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The OpenTelemetry variables of ``environ`` (default ``os.environ``), copied."""
    return environment(_PREFIXES, environ)


def _pick(env: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """``(variable, value)`` of ``OTEL_EXPORTER_OTLP_LOGS_<name>`` or the generic one."""
    for variable in (f"OTEL_EXPORTER_OTLP_LOGS_{name}", f"OTEL_EXPORTER_OTLP_{name}"):
        value = env.get(variable, "").strip()
        if value:
            return variable, value
    return None


def _endpoint(env: Mapping[str, str]) -> Endpoint:
    logs = env.get("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "").strip()
    if logs:
        variable, url = "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", logs  # used as is
    else:
        variable = "OTEL_EXPORTER_OTLP_ENDPOINT"
        base = env.get(variable, "").strip() or DEFAULT_ENDPOINT
        parts = urlsplit(base)
        url = parts._replace(path=parts.path.rstrip("/") + LOGS_PATH).geturl()
    return parse_endpoint(url, variable)


def _pairs(variable: str, text: str) -> dict[str, str]:
    """``key=value,key=value`` with percent-encoded keys and values (the OTel format)."""
    return key_values(text, variable, "api-key=secret,tenant=ml")


def _headers(env: Mapping[str, str]) -> dict[str, str]:
    picked = _pick(env, "HEADERS")
    if picked is None:
        return {}
    variable, text = picked
    headers = _pairs(variable, text)
    for name, value in headers.items():
        check_header(name, value, variable)
    return headers


def _timeout(env: Mapping[str, str]) -> float:
    picked = _pick(env, "TIMEOUT")
    if picked is None:
        return DEFAULT_TIMEOUT_MS / 1000
    variable, text = picked  # a bare number is milliseconds: the OTLP specification's unit
    return duration(text, variable, default_s=DEFAULT_TIMEOUT_MS / 1000, bare="ms")


def _gzip(env: Mapping[str, str]) -> bool:
    picked = _pick(env, "COMPRESSION")
    if picked is None:
        return False
    variable, text = picked
    if text.lower() not in ("gzip", "none"):
        raise SettingsError(f"{variable}={text!r} is not supported; use gzip or none")
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
            raise SettingsError(
                f"{variable}={path!r} is not a readable file (a PEM file is expected)"
            )
        out[argument] = path
    return out


def parse_settings(env: Mapping[str, str]) -> OtlpSettings:
    """Validate the copied variables; raise ``SettingsError`` naming the first bad one."""
    attributes_text = env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    attributes = _pairs("OTEL_RESOURCE_ATTRIBUTES", attributes_text)
    service = env.get("OTEL_SERVICE_NAME", "").strip()
    headers_variable = (_pick(env, "HEADERS") or ("OTEL_EXPORTER_OTLP_HEADERS", ""))[0]
    timeout_variable = (_pick(env, "TIMEOUT") or ("OTEL_EXPORTER_OTLP_TIMEOUT", ""))[0]
    return OtlpSettings(
        endpoint=_endpoint(env),
        headers=_headers(env),
        headers_variable=headers_variable,
        timeout_variable=timeout_variable,
        timeout_s=_timeout(env),
        gzip=_gzip(env),
        service_name=service or attributes.get("service.name") or DEFAULT_SERVICE_NAME,
        resource_attributes=attributes,
        tls=_tls(env),
    )
