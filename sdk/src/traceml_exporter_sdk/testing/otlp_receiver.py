"""A strict OTLP/HTTP logs receiver for exporter tests (public path; the code is in ``peers/otlp_receiver.py``).

Every name of the peer's ``__all__``, re-exported, so
``from traceml_exporter_sdk.testing.otlp_receiver import ...`` keeps working.
"""

from __future__ import annotations

from .peers.otlp_receiver import (
    DEFAULT_MAX_BODY,
    LOGS_PATH,
    Fault,
    OtlpReceiver,
    any_value,
    decode_request,
)

__all__ = [
    "DEFAULT_MAX_BODY",
    "LOGS_PATH",
    "Fault",
    "OtlpReceiver",
    "any_value",
    "decode_request",
]
