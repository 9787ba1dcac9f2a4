"""Secrets out of error text before it is kept: an exporter's error (a failed connect
often quotes its URL or conninfo) goes to ``status.json``, ``finalization_warning.json``,
stderr and ``/metrics``, which other users of the node may read.

``redacted`` replaces the password of a URL (``scheme://user:***@host``) and the value
of every ``password=``-style parameter (``password``, ``passwd``, ``pwd``, ``secret``,
``token``, ``api_key``, ``access_key``, ``private_key``, ``credential``,
``authorization`` and names holding them, such as ``db_password`` or
``client_secret``) in conninfo strings, query strings, JSON and Python reprs, and a
``Bearer`` token. It errs towards hiding too much: a value is cut at the first
separator (space, ``&``, ``;``, ``,``, a quote or bracket) unless quoted.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "redacted"]

MASK = "***"

_URL = re.compile(
    r"(?P<head>(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/?#@]*):(?P<secret>[^\s/]*)@"
)
_KEYWORDS = (
    r"password|passwd|pwd|secret|token|api[_\-]?key|access[_\-]?key|private[_\-]?key"
    r"|credential|authorization"
)
_PARAMETER = re.compile(
    rf"""(?P<head>(?P<quote>["']?)(?<![\w.\-])(?=[\w.\-]*?(?i:{_KEYWORDS}))"""
    r"""[\w.\-]+(?![\w.\-])(?P=quote)\s*[:=]\s*)"""
    r"""(?P<secret>"(?:[^"\\]|\\.)*"?|'(?:[^'\\]|\\.)*'?|[^\s&;,'"}\])]+)"""
)
"""``key = value`` where the key, a whole run of word characters (so that no input
makes the search backtrack), holds one of ``_KEYWORDS``."""
_BEARER = re.compile(r"(?P<head>\b(?:Bearer|Basic)\s+)(?P<secret>[^\s\"',;]+)")


def redacted(text: str) -> str:
    """``text`` with URL passwords, secret parameters and bearer tokens masked."""
    text = _URL.sub(lambda m: f"{m['head']}:{MASK}@", text)
    text = _BEARER.sub(lambda m: f"{m['head']}{MASK}", text)
    return _PARAMETER.sub(_masked_parameter, text)


def _masked_parameter(match: re.Match[str]) -> str:
    secret = match["secret"]
    if secret == MASK or (secret[:1] in "\"'" and secret[1:-1] == MASK):
        return match[0]
    quote = secret[0] if secret[:1] in "\"'" else ""
    return f"{match['head']}{quote}{MASK}{quote}"
