"""The ``PROMETHEUS_REMOTE_WRITE_*`` settings, read by the factory and validated in ``open()``.

The factory only copies the variables (:func:`read_environment`: no I/O, never
raises); ``open()`` parses them (:func:`parse_settings`), so a bad value is a
``SettingsError`` (a ``ValueError``, marked permanent) naming the variable, raised
where TraceML records the loss.
Secrets (the token, the password, header values) are never put into a message.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from ._contract import SettingsError
from ._delivery import duration, environment, key_values
from ._http import Endpoint, check_header, parse_endpoint

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_URL",
    "PREFIX",
    "PrometheusSettings",
    "parse_settings",
    "read_environment",
]

PREFIX = "PROMETHEUS_REMOTE_WRITE_"
DEFAULT_URL = "http://localhost:9090/api/v1/write"
DEFAULT_TIMEOUT_S = 5.0
"""Per-call deadline: well under TraceML's shutdown budget, so flush and close both fit."""
SAMPLE_TIMES = ("flush", "observed")


@dataclass(frozen=True)
class PrometheusSettings:
    """Everything ``open()`` needs to reach the server."""

    endpoint: Endpoint
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    """User headers, ``Authorization`` from the token or username included."""
    secrets: list[str] = field(default_factory=list, repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S
    run: str | None = None
    sample_time: str = "flush"
    tls: dict[str, str] = field(default_factory=dict)


def read_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``PROMETHEUS_REMOTE_WRITE_*`` variables of ``environ`` (default ``os.environ``)."""
    return environment((PREFIX,), environ)


def _value(env: Mapping[str, str], name: str) -> str:
    return env.get(PREFIX + name, "").strip()


def _headers(env: Mapping[str, str]) -> dict[str, str]:
    """``key=value,key=value``, percent-encoded (the OpenTelemetry headers format)."""
    variable = PREFIX + "HEADERS"
    out = key_values(_value(env, "HEADERS"), variable, "X-Scope-OrgID=ml,api-key=secret")
    for key, value in out.items():
        check_header(key, value, variable)
    return out


def _timeout(env: Mapping[str, str]) -> float:
    return duration(_value(env, "TIMEOUT"), PREFIX + "TIMEOUT", default_s=DEFAULT_TIMEOUT_S)


def _auth(env: Mapping[str, str], endpoint: Endpoint, headers: dict[str, str]) -> list[str]:
    """Add ``Authorization`` from the token or username/password; return the secrets."""
    token, user = _value(env, "BEARER_TOKEN"), _value(env, "USERNAME")
    password = env.get(PREFIX + "PASSWORD", "")
    given = [
        name
        for name, present in (
            (f"{PREFIX}BEARER_TOKEN", token),
            (f"{PREFIX}USERNAME", user),
            ("credentials in the URL", endpoint.username is not None),
            (f"an Authorization header in {PREFIX}HEADERS",
             any(k.lower() == "authorization" for k in headers)),
        )
        if present
    ]  # fmt: skip
    if len(given) > 1:
        raise SettingsError(f"give one way to authenticate, not {' and '.join(given)}")
    if password and not user:
        raise SettingsError(f"{PREFIX}PASSWORD is set without {PREFIX}USERNAME")
    if token:
        check_header("Authorization", f"Bearer {token}", f"{PREFIX}BEARER_TOKEN")
        headers["Authorization"] = f"Bearer {token}"
        return [token]
    if user:
        basic = Endpoint(endpoint.url, endpoint.scheme, endpoint.path, user, password)
        auth = basic.authorization or ""
        headers["Authorization"] = auth
        return [s for s in (password, auth) if s]
    return []


def parse_settings(env: Mapping[str, str]) -> PrometheusSettings:
    """Validate the copied variables; raise ``SettingsError`` naming the first bad one."""
    endpoint = parse_endpoint(_value(env, "URL") or DEFAULT_URL, PREFIX + "URL")
    headers = _headers(env)
    secrets = _auth(env, endpoint, headers)
    sample_time = _value(env, "SAMPLE_TIME").lower() or "flush"
    if sample_time not in SAMPLE_TIMES:
        raise SettingsError(
            f"{PREFIX}SAMPLE_TIME={sample_time!r} is not one of {', '.join(SAMPLE_TIMES)}: "
            "flush stamps samples with the flush's wall-clock time (a live run), observed "
            "with the records' observed time (a replay of an old run)"
        )
    tls: dict[str, str] = {}
    ca = _value(env, "CA_FILE")
    if ca:
        if not os.path.isfile(ca):
            raise SettingsError(f"{PREFIX}CA_FILE={ca!r} is not a readable file (a PEM file)")
        tls["ca_certs"] = ca
    return PrometheusSettings(
        endpoint=endpoint,
        headers=headers,
        secrets=secrets,
        timeout_s=_timeout(env),
        run=_value(env, "RUN") or None,
        sample_time=sample_time,
        tls=tls,
    )
