"""``ExporterContext``: what TraceML hands an exporter factory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .streams import parse_export_streams

__all__ = ["ExporterContext"]


@dataclass(frozen=True, slots=True)
class ExporterContext:
    """The four facts a factory gets, as TraceML's aggregator builds them.

    ``export_dir`` is ``session_root / "aggregator" / "export"``; nothing
    creates it for a factory (the jsonl exporter creates it in ``open``).
    ``streams`` holds the selected STREAM names in record-table order.
    """

    session_root: Path
    export_dir: Path
    include_hostname: bool
    streams: tuple[str, ...]

    @classmethod
    def create(
        cls,
        session_root: str | Path,
        export_streams: str | None = None,
        exporter_hostname: bool = False,
    ) -> ExporterContext:
        """Derive a context from the run folder and the two settings.

        Raises:
            ValueError: ``export_streams`` names an unknown stream or none.
        """
        root = Path(session_root)
        return cls(
            session_root=root,
            export_dir=root / "aggregator" / "export",
            include_hostname=bool(exporter_hostname),
            streams=parse_export_streams(export_streams),
        )
