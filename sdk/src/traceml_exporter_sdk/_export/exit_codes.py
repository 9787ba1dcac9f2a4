"""The exit codes of ``traceml-exporter`` and of the follow library's results: one table,
shown in every ``--help`` and in docs/cli.md. Below ``cli`` so the library needs no CLI."""

from __future__ import annotations

__all__ = [
    "EXIT_CODES",
    "EXIT_DEPENDENCY",
    "EXIT_EXPORT",
    "EXIT_FAILED",
    "EXIT_INCOMPLETE",
    "EXIT_INPUT",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_LOCKED",
    "EXIT_OK",
    "EXIT_PERMANENT",
    "EXIT_USAGE",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_EXPORT = 4
EXIT_DEPENDENCY = 5
EXIT_INCOMPLETE = 6
EXIT_PERMANENT = 7
EXIT_LOCKED = 8
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_FAILED: "the answer is no: validate found an invalid setting, check had a failing "
    "check, new was refused by the template",
    EXIT_USAGE: "bad command line: unknown option, missing argument, malformed SPEC or "
    "--streams, a template answer that is not valid Jinja",
    EXIT_INPUT: "an input cannot be used: file or database missing, unreadable or of the "
    "wrong kind, traceml.yaml not valid, --session-root not empty or not writable, output "
    "folder already there, a run folder refused as unsafe (a link or another user's folder "
    "or file in it: docs/follow.md, Threat model)",
    EXIT_EXPORT: "replay, follow: the exporter failed or stalled, batches were dropped, or shutdown "
    "timed out; for follow, a sink still down after --max-outage, or a drain past "
    "--shutdown-timeout at the run's end or a signal (the summary is still printed and "
    "finalization_warning.json written)",
    EXIT_DEPENDENCY: "an optional dependency is missing (msgspec, cookiecutter, pytest); "
    "the message says what to install",
    EXIT_INCOMPLETE: "follow: everything read was exported, but the export is incomplete: the "
    "run ended without TraceML marking it complete (aggregator gone, or idle past "
    "--idle-timeout), the run folder was deleted, or rows were pruned by retention before "
    "they were read or fit no record",
    EXIT_PERMANENT: "follow: the exporter failed in a way waiting cannot fix (it marked the "
    "error permanent: bad credentials, a schema the sink refuses; or its factory cannot be "
    "imported or called): fix the sink or its settings, then start follow again (it resumes "
    "from its bookmark)",
    EXIT_LOCKED: "follow: the run is already being followed by another process (its lock in "
    "aggregator/follow/); a second follower would export every row twice",
    EXIT_INTERNAL: "internal error (a bug); TRACEML_EXPORTER_DEBUG=1 shows the traceback",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C, or SIGTERM for follow --session-root); replay and "
    "follow drain what they read and record the stop (follow saves its bookmark); follow "
    "--logs-dir stopped by SIGTERM exits 0 unless a run lost rows or failed (then its runs' "
    "worst code: 6 for rows pruned before they were read)",
}
