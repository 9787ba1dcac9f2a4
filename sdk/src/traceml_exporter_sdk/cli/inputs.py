"""The checks on the values commands take: SPEC, ``--streams``, ``--session-root``, input files.

Each refusal is a ``CliError`` with the documented exit code (2 for a malformed
value, 3 for an input that cannot be used), raised before anything is touched.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from .._export.exit_codes import EXIT_INPUT, EXIT_USAGE
from ..factory import ExporterSettingError, validate_exporter_setting
from ..streams import DEFAULT_EXPORT_STREAMS, parse_export_streams
from .errors import CliError

__all__ = [
    "CLAIM",
    "check_input_file",
    "check_spec",
    "check_streams",
    "claim",
    "reason",
    "session_root",
]

CLAIM = "aggregator"
"""The folder whose ``mkdir`` claims a session root (TraceML's aggregator writes there too)."""


def check_spec(spec: str) -> str:
    """SPEC in its normal form, or exit 2; the module is not imported."""
    try:
        return validate_exporter_setting(spec)
    except ExporterSettingError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def check_streams(value: str | None) -> str:
    """An ``export_streams`` value (the default when None), or exit 2."""
    try:
        parse_export_streams(value)
    except ValueError as exc:
        raise CliError(f"--streams: {exc}", EXIT_USAGE) from None
    return value if value is not None else DEFAULT_EXPORT_STREAMS


def session_root(value: str | None) -> Path:
    """A new or empty folder the replay can write in, claimed for this run; else exit 3.

    Claiming it (``claim``) also proves the folder writable. A folder another run
    claimed between the check and the claim is exit 3 too, untouched.
    """
    if value is None:
        try:
            return Path(tempfile.mkdtemp(prefix="traceml-replay-", dir=Path.cwd()))
        except OSError as exc:
            raise CliError(
                f"cannot make a session root in {Path.cwd()}: {reason(exc)} (give --session-root)",
                EXIT_INPUT,
            ) from None
    root = Path(value)
    try:
        if root.is_symlink() and not root.exists():
            raise CliError(
                f"--session-root {root} is a symbolic link to nothing (dangling, or a loop)",
                EXIT_INPUT,
            )
        if root.exists() and not root.is_dir():
            raise CliError(f"--session-root {root} exists and is not a folder", EXIT_INPUT)
        if root.is_dir() and any(root.iterdir()):
            raise CliError(
                f"--session-root {root} is not empty (an earlier run's folder?); give a new "
                "or empty folder, so that nothing of another run is overwritten",
                EXIT_INPUT,
            )
    except OSError as exc:
        raise CliError(f"cannot use --session-root {root}: {reason(exc)}", EXIT_INPUT) from None
    made = not root.exists()
    try:
        root.mkdir(parents=True, exist_ok=True)
        claim(root)
    except OSError as exc:
        if made:
            with contextlib.suppress(OSError):
                root.rmdir()
        if isinstance(exc, FileExistsError):
            raise CliError(
                f"--session-root {root} was taken by another run while this one checked it "
                f"(its {CLAIM} folder appeared); give each replay a new or empty folder",
                EXIT_INPUT,
            ) from None
        raise CliError(
            f"cannot write in --session-root {root}: {reason(exc)}", EXIT_INPUT
        ) from None
    return root


def claim(root: Path) -> None:
    """Make ``root/aggregator`` with one ``mkdir``: of two runs that both found ``root`` empty,
    exactly one succeeds; the other gets ``FileExistsError`` (and writes nothing).

    The emptiness check alone is check-then-act: two replays started together both
    passed it and then wrote into the same export folder.
    """
    os.mkdir(root / CLAIM)


def check_input_file(path: Path, what: str) -> None:
    """Exit 3 unless ``path`` is there, is not a folder and can be read."""
    if not path.exists():
        raise CliError(f"{what} not found: {path}", EXIT_INPUT)
    if path.is_dir():
        raise CliError(f"{what} {path} is a directory", EXIT_INPUT)
    if not os.access(path, os.R_OK):
        raise CliError(f"cannot read {what} {path}: permission denied", EXIT_INPUT)


def reason(exc: OSError) -> str:
    """Why an OS call failed, without the errno prefix."""
    return exc.strerror or str(exc)
