"""The two errors the conformance suite raises about how it is used."""

from __future__ import annotations

__all__ = ["ConformanceConfigError", "ReadBackNotImplementedError"]


class ConformanceConfigError(ValueError):
    """A conformance test class is set up wrongly (factory, skip_checks, xfail_checks, ...)."""


class ReadBackNotImplementedError(NotImplementedError):
    """``read_back`` is not implemented for this exporter; data-fidelity checks are skipped."""
