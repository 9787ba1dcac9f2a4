"""Where this SDK was installed from, so install hints and next steps name what works there.

``pip install 'traceml-exporter-sdk[new]'`` cannot work while the SDK is not on
an index: installed from a checkout (``pip install ./sdk``) or a wheel file, the
install that works is that same folder or file with the extras. pip and uv record
the source in the distribution's ``direct_url.json`` (PEP 610).
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

__all__ = ["DISTRIBUTION", "install_hint", "local_source"]

DISTRIBUTION = "traceml-exporter-sdk"


def local_source() -> Path | None:
    """The folder or file this SDK was installed from, or None (an index, or unknown)."""
    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    try:
        url = urlparse(str(json.loads(text).get("url", "")))
    except (ValueError, AttributeError):
        return None
    if url.scheme != "file":
        return None
    path = Path(unquote(url.path))
    return path if path.exists() else None


def install_hint(extras: str) -> str:
    """``pip install '<where the SDK came from>[extras]'``."""
    source = local_source()
    target = str(source) if source is not None else DISTRIBUTION
    return f"pip install '{target}[{extras}]'"
