"""Root causes: when many conformance checks fail from one mistake, name it once, first.

A sqlite3 connection made in the factory fails 28 checks, 27 with the same
``ProgrammingError``; the one whose rule names the mistake (``factory_is_inert``)
is lost among them. ``root_cause`` finds such a cascade in a list of failures,
for the suite's terminal summary and for ``traceml-exporter check``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .environment import failure_hint

__all__ = ["FAULTS", "Fault", "RootCause", "check_name", "report_message", "root_cause"]


@dataclass(frozen=True)
class Fault:
    """A mistake whose check names it and whose effect shows in many other checks.

    ``cascade`` says which other failures it explains: ``"error"``, those that
    fail with the error most of the failures share (the exporter raising the
    same exception everywhere); ``"output"``, those where the exporter raised
    nothing but wrote the wrong thing.
    """

    check: str
    what: str
    hint: str
    cascade: str
    evidence: str | tuple[str, ...] = ""
    """Text the check's own failure message must hold (one of them, for a tuple) for this fault to be named (the
    check can fail for other reasons: a sink that keeps one row per key fails
    ``interleaved_streams`` too, without misfiling anything)."""


FAULTS = (
    Fault(
        "method_signatures",
        "the exporter's methods do not have the Exporter signatures",
        "define open(), write(records), flush() and close(*, dropped_batches=0)",
        "error",
    ),
    Fault(
        "factory_is_inert",
        "the factory made a file, a connection or a thread",
        "create connections, clients and files in open(), not in the factory",
        "error",
    ),
    Fault(
        "interleaved_streams",
        "a batch that holds several streams is written as if it held one",
        "dispatch each record on its own STREAM: one batch may mix streams",
        "output",
        "records landed under another stream",
    ),
    Fault(
        "instances_side_by_side",
        "instances of the exporter share state (a class attribute, a module-level client, "
        "a store keyed by the run folder's name)",
        "keep every piece of state on the instance, and key a run by its resolved session_root",
        "error",
        ("'s records are in run", "(after run C's instance closed"),  # its own evidence
    ),
    Fault(
        "new_instance_after_outage",
        "a failed instance leaves a file behind that makes every later open refuse",
        "a failing method releases its lock and temporary files before it raises",
        "error",
        "left by the failed one",
    ),
)
"""Known cascading mistakes, the first that applies wins."""

MIN_SHARED = 3
"""Failures with one error and no known fault's check among them: a cause from this many."""

_EXPORTER_ERROR = re.compile(r"the exporter failed (?:in |before the sink was broken: )\w+: (.+)")
_CHECK_ID = re.compile(r"test_\w+\[(\w+)\]$")
_LEFT_BEHIND = re.compile(r"(?i)FileExistsError|already exists|\block(ed)?\b|\.lock\b|\bheld by\b")


@dataclass(frozen=True)
class RootCause:
    """One line naming the cause and its hint, and the failed checks it explains."""

    line: str
    explained: tuple[str, ...]
    """The ids of the checks it explains, as given to ``root_cause``, in their order."""


def check_name(test_id: str) -> str:
    """``factory_is_inert`` of ``...::test_thread_confinement[factory_is_inert]``."""
    match = _CHECK_ID.search(test_id)
    return match[1] if match else test_id


def report_message(report: object) -> str:
    """A failed pytest report's message, as its JUnit XML ``message`` has it."""
    longrepr = getattr(report, "longrepr", None)
    crash = getattr(longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    return message if isinstance(message, str) else str(longrepr or "")


def _first_line(message: str) -> str:
    """The first line, without the wrapping pytest adds to a setup error's message."""
    first = message.strip().split("\n", 1)[0].strip()
    for prefix in ('failed on setup with "', 'failed on teardown with "'):
        if first.startswith(prefix) and first.endswith('"'):
            first = first[len(prefix) : -1]
    return first.removeprefix("Failed: ")


def _error(message: str) -> str:
    """The exporter's own error in a failure message, else its first line."""
    found = _EXPORTER_ERROR.search(message)
    return _first_line(found[1] if found else message)


def _signature(text: str) -> str:
    """``text`` with numbers blanked: thread ids, fds and addresses differ per check."""
    return re.sub(r"\d+", "#", text)


def root_cause(failures: Sequence[tuple[str, str]]) -> RootCause | None:
    """The cause behind several of ``failures`` (``(check id, message)`` pairs), if any."""
    if len(failures) < 2:
        return None
    messages = dict(failures)
    errors = {test_id: _error(message) for test_id, message in failures}
    raised = {test_id: _EXPORTER_ERROR.search(message) is not None for test_id, message in failures}
    shared = Counter(_signature(error) for error in errors.values()).most_common(1)
    common = shared[0][0] if shared and shared[0][1] >= 2 else None
    failed = {check_name(test_id): test_id for test_id, _ in failures}
    for fault in FAULTS:
        cause = failed.get(fault.check)
        if cause is None or _signature(errors[cause]) == common:
            continue  # not failed, or failed like the others (the factory does not import)
        evidence = (fault.evidence,) if isinstance(fault.evidence, str) else fault.evidence
        if fault.evidence and not any(text in messages[cause] for text in evidence):
            continue  # failed, but not in the way this fault would fail it
        others = [test_id for test_id, _ in failures if test_id != cause]
        if fault.cascade == "error":
            explained = [t for t in others if _signature(errors[t]) == common]
        else:
            explained = [t for t in others if not raised[t]]
        if explained:
            return RootCause(
                f"{len(explained) + 1} checks failed from one cause: {fault.what} "
                f"({fault.check}): {fault.hint}",
                (cause, *explained),
            )
    if common is None or shared[0][1] < MIN_SHARED:
        return None
    explained = [test_id for test_id, _ in failures if _signature(errors[test_id]) == common]
    error = errors[explained[0]]
    if _LEFT_BEHIND.search(error):
        return RootCause(
            f"{len(explained)} checks failed with one error, {error}: a file or lock an "
            "earlier instance of the exporter left is the symptom, not the cause: find the "
            "instance that did not release it (one that failed, or a lock that outlives "
            "its process)",
            tuple(explained),
        )
    hint = failure_hint(error).strip()
    return RootCause(
        f"{len(explained)} checks failed from one cause: {error}" + (f"; {hint}" if hint else ""),
        tuple(explained),
    )
