"""``traceml-exporter``: scaffold, check, validate, replay and describe TraceML exporters.

Every user error is one line on stderr, ``traceml-exporter: error: ...`` (or
``traceml-exporter COMMAND: error: ...`` for a bad command line), with one of
the exit codes in ``EXIT_CODES``; never a traceback. Set
``TRACEML_EXPORTER_DEBUG=1`` to see the traceback of an internal error.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import logging
import os
import shutil
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

import orjson

from . import __version__
from .context import ExporterContext
from .factory import (
    BUILTIN_ALIASES,
    ExporterSettingError,
    factory_target,
    validate_exporter_setting,
)
from .feeding import Stop, feed, record_stop, shut_down
from .streams import ALL_STREAMS, DEFAULT_EXPORT_STREAMS, EXPORT_STREAM_NAMES, parse_export_streams
from .worker import ExportReport, ExportWorker

__all__ = ["EXIT_CODES", "CliError", "main"]

PROG = "traceml-exporter"

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_EXPORT = 4
EXIT_DEPENDENCY = 5
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
    "folder already there",
    EXIT_EXPORT: "replay: the exporter failed or stalled, batches were dropped, or shutdown "
    "timed out (the summary is still printed and finalization_warning.json written)",
    EXIT_DEPENDENCY: "an optional dependency is missing (msgspec, cookiecutter, pytest); "
    "the message says what to install",
    EXIT_INTERNAL: "internal error (a bug); TRACEML_EXPORTER_DEBUG=1 shows the traceback",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C); replay drains what it read and records the stop",
}

EXIT_EPILOG = "exit codes:\n" + "\n".join(
    textwrap.fill(text, width=96, initial_indent=f"  {code:<4}", subsequent_indent=" " * 6)
    for code, text in EXIT_CODES.items()
)

REPLAY_QUEUE_SIZE = 16
"""Batches the replay keeps queued in the worker; it waits for room, so nothing is dropped."""

REPLAY_QUEUE_LIMIT = 1_000_000
"""The worker's own queue bound during a replay: never reached while the wait works."""


class CliError(Exception):
    """A user error: one line for stderr, and the exit code."""

    def __init__(self, message: str, code: int, prog: str = PROG) -> None:
        super().__init__(message)
        self.code = code
        self.prog = prog


# -- argument parsing ------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``PROG CMD: error: ... (see --help)``), exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see {self.prog} --help)", EXIT_USAGE, self.prog)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=30, width=100)


def _add(
    commands: Any, name: str, summary: str, description: str, example: str
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=f"{summary}\n\n{description}".rstrip(),
        epilog=f"example:\n{example}\n\n{EXIT_EPILOG}",
        formatter_class=_Formatter,
    )
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Scaffold, check, validate, replay and describe TraceML exporters.",
        epilog=(
            "examples:\n"
            "  traceml-exporter new --no-input package_name=my_exporter\n"
            "  traceml-exporter check my_exporter.exporter:make_exporter\n"
            "  traceml-exporter validate --exporter my_exporter.exporter:make_exporter\n"
            "  traceml-exporter replay jsonl --payloads payloads.jsonl --streams all\n"
            "  traceml-exporter schema --stream step_time --format markdown\n\n"
            f"{EXIT_EPILOG}\n\ndocs: docs/cli.md in the traceml-exporter-sdk repository"
        ),
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    new = _add(
        commands,
        "new",
        "Scaffold a new exporter project from the template shipped in the SDK.",
        "Runs cookiecutter (the SDK's 'new' extra) on the template inside the installed\n"
        "package, so no clone of the SDK repository is needed. KEY=VALUE pairs set\n"
        "template variables; with --no-input every other variable keeps its default.",
        "  traceml-exporter new --no-input -o ~/src package_name=my_exporter sink=sqlite",
    )
    new.add_argument("extra_context", nargs="*", metavar="KEY=VALUE", help="template variable")
    new.add_argument("--no-input", action="store_true", help="do not prompt; use defaults")
    new.add_argument(
        "-o", "--output-dir", default=".", metavar="DIR", help="where to create it (default: .)"
    )
    new.add_argument(
        "-f", "--overwrite-if-exists", action="store_true", help="write into an existing folder"
    )
    new.add_argument(
        "-s",
        "--skip-if-file-exists",
        action="store_true",
        help="with -f, keep files that are already there",
    )
    new.add_argument("--config-file", metavar="FILE", help="cookiecutter user config file")
    new.add_argument(
        "--default-config", action="store_true", help="ignore the cookiecutter user config"
    )
    new.add_argument(
        "--keep-project-on-failure", action="store_true", help="keep a half-made project"
    )
    new.set_defaults(handler=cmd_new)

    check = _add(
        commands,
        "check",
        "Run the conformance suite against an exporter factory.",
        "SPEC is 'module:factory' (importable from here: install the package or set\n"
        "PYTHONPATH) or 'jsonl'. Arguments after '--' go to pytest unchanged.\n"
        "Prints how many checks passed, failed and were skipped, with the reasons, and\n"
        "the throughput figure. --read-back names a read_back(context) function that\n"
        "returns what the exporter wrote ({STREAM: [record dicts]}), which turns the\n"
        "data-fidelity checks on.",
        "  traceml-exporter check my_exporter.exporter:make_exporter -- -x -k lifecycle",
    )
    check.add_argument("spec", metavar="SPEC", help="module:factory (or jsonl)")
    check.add_argument(
        "--read-back",
        metavar="MODULE:FUNCTION",
        help="a read_back(context) function; turns the data-fidelity checks on",
    )
    check.add_argument(
        "-v", "--verbose", action="store_true", help="show pytest's own output as it runs"
    )
    check.set_defaults(handler=cmd_check)

    validate = _add(
        commands,
        "validate",
        "Check the exporter settings as TraceML's launcher would, before a run.",
        "Resolves exporter, export_streams and exporter_hostname from the flag, then the\n"
        "environment (TRACEML_EXPORTER, TRACEML_EXPORT_STREAMS, TRACEML_EXPORTER_HOSTNAME;\n"
        "the last two names are this tool's assumption), then traceml.yaml (--config, or\n"
        "the nearest one found walking up from here), then the default. Prints each value\n"
        "and where it came from. The exporter module is never imported: only the form of\n"
        "the value is checked. Exit 0 when every value is valid, 1 otherwise.",
        "  traceml-exporter validate --exporter my_exporter.exporter:make_exporter \\\n"
        "      --config traceml.yaml\n"
        "  TRACEML_EXPORT_STREAMS=step_time,system traceml-exporter validate --no-hostname",
    )
    validate.add_argument("--exporter", metavar="VALUE", help="jsonl or module:factory")
    validate.add_argument(
        "--streams",
        metavar="VALUE",
        help=f"export_streams: comma-separated {', '.join(EXPORT_STREAM_NAMES)}",
    )
    validate.add_argument(
        "--hostname",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="exporter_hostname: keep the records' hostname field",
    )
    config = validate.add_mutually_exclusive_group()
    config.add_argument("--config", metavar="FILE", help="traceml.yaml to read")
    config.add_argument("--no-config", action="store_true", help="read no traceml.yaml")
    validate.set_defaults(handler=cmd_validate)

    replay = _add(
        commands,
        "replay",
        "Drive an exporter through ExportWorker with recorded payloads or a finished run.",
        "--payloads reads telemetry payloads: JSON Lines (one payload per line) or\n"
        "TraceML's transport stream of length-prefixed msgpack messages (the 'msgpack'\n"
        "extra); the format is detected unless --format says it. Malformed lines are\n"
        "counted and listed with their numbers, and never stop the replay.\n"
        "--sqlite reads a finished run's TraceML SQLite database: each projection table\n"
        "of the selected streams in id order; a missing table is reported, not fatal.\n"
        "Prints records per stream, skipped units, dropped batches, the exporter's\n"
        "failure and the finalization_warning.json path if one was written.",
        "  traceml-exporter replay my_exporter.exporter:make_exporter \\\n"
        "      --payloads payloads.jsonl --streams all --session-root /tmp/run1\n"
        "  traceml-exporter replay jsonl --sqlite logs/run1/aggregator/telemetry.sqlite \\\n"
        "      --streams step_time,system",
    )
    replay.add_argument("spec", metavar="SPEC", help="jsonl or module:factory")
    source = replay.add_mutually_exclusive_group(required=True)
    source.add_argument("--payloads", metavar="FILE", help="recorded payloads (jsonl or msgpack)")
    source.add_argument("--sqlite", metavar="DB", help="a finished run's TraceML SQLite database")
    replay.add_argument(
        "--streams",
        metavar="VALUE",
        default=None,
        help=f"export_streams (default {DEFAULT_EXPORT_STREAMS}): comma-separated "
        f"{', '.join(EXPORT_STREAM_NAMES)}",
    )
    replay.add_argument(
        "--session-root",
        metavar="DIR",
        help="the run folder the exporter gets (default: a new ./traceml-replay-* folder)",
    )
    replay.add_argument(
        "--hostname", action="store_true", help="exporter_hostname: keep the hostname field"
    )
    replay.add_argument(
        "--format",
        choices=("auto", "jsonl", "msgpack"),
        default="auto",
        help="format of --payloads (default: auto)",
    )
    replay.add_argument(
        "--shutdown-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for the exporter to finish at the end (default: 60)",
    )
    replay.set_defaults(handler=cmd_replay)

    schema = _add(
        commands,
        "schema",
        "Print the JSON Schema (draft 2020-12) or markdown table of the records' to_dict().",
        "Without --stream, the JSON Schema accepts any record (a oneOf over the seven,\n"
        "told apart by their 'stream' field) and the markdown has every record's table.\n"
        "hostname is the one field not required, since exporters drop it unless\n"
        "exporter_hostname is on.",
        "  traceml-exporter schema --stream step_time > step_time.schema.json\n"
        "  traceml-exporter schema --format markdown",
    )
    schema.add_argument("--stream", choices=ALL_STREAMS, help="one record STREAM")
    schema.add_argument(
        "--format",
        choices=("json-schema", "markdown"),
        default="json-schema",
        help="output format (default: json-schema)",
    )
    schema.set_defaults(handler=cmd_schema)
    return parser


# -- schema ------------------------------------------------------------------------


def cmd_schema(args: argparse.Namespace, out: TextIO) -> int:
    from .schema import json_schema, markdown

    if args.format == "markdown":
        out.write(markdown(args.stream))
    else:
        out.write(orjson.dumps(json_schema(args.stream), option=orjson.OPT_INDENT_2).decode())
        out.write("\n")
    return EXIT_OK


# -- validate ----------------------------------------------------------------------


def cmd_validate(args: argparse.Namespace, out: TextIO) -> int:
    from .settings import ConfigError, clip, find_config, load_config, resolve_settings

    config_path: Path | None = None
    if args.config:
        config_path = Path(args.config)
    elif not args.no_config:
        config_path = find_config(Path.cwd())
    config: dict[str, Any] = {}
    if config_path is not None:
        try:
            config = load_config(config_path)
        except ConfigError as exc:
            raise CliError(str(exc), EXIT_INPUT) from None
    flags = {
        "exporter": args.exporter,
        "export_streams": args.streams,
        "exporter_hostname": args.hostname,
    }
    resolution = resolve_settings(flags, os.environ, config, config_path)

    if args.no_config:
        where = "not read (--no-config)"
    elif config_path is None:
        where = "none found (no traceml.yaml here or in a parent folder)"
    else:
        where = str(config_path)
    out.write(f"{'traceml.yaml':<18} {where}\n")
    for setting in resolution.settings:
        if not setting.ok:
            shown = f"{clip(repr(setting.raw), 100)}  INVALID"
        elif setting.name == "exporter":
            shown = str(setting.value) if setting.value is not None else "(none: export is off)"
        elif setting.name == "export_streams":
            streams = ", ".join(setting.value)  # type: ignore[arg-type]
            shown = f"{setting.raw}  -> streams {streams}"
        else:
            shown = "true" if setting.value else "false"
        out.write(f"{setting.name:<18} {shown}  [from {setting.source}]\n")
    if resolution.ok:
        out.write("valid (the exporter module was not imported; its form was checked)\n")
        return EXIT_OK
    out.flush()
    for setting in resolution.settings:
        if setting.error is not None:
            _error_line(f"{setting.error} (from {setting.source})")
    return EXIT_FAILED


# -- replay ------------------------------------------------------------------------


def _check_spec(spec: str) -> str:
    try:
        return validate_exporter_setting(spec)
    except ExporterSettingError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _streams(value: str | None) -> str:
    try:
        parse_export_streams(value)
    except ValueError as exc:
        raise CliError(f"--streams: {exc}", EXIT_USAGE) from None
    return value if value is not None else DEFAULT_EXPORT_STREAMS


def _session_root(value: str | None) -> Path:
    """A new or empty folder the replay can write in; anything else is exit 3, untouched."""
    if value is None:
        try:
            return Path(tempfile.mkdtemp(prefix="traceml-replay-", dir=Path.cwd()))
        except OSError as exc:
            raise CliError(
                f"cannot make a session root in {Path.cwd()}: {_reason(exc)} (give --session-root)",
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
        raise CliError(f"cannot use --session-root {root}: {_reason(exc)}", EXIT_INPUT) from None
    made = not root.exists()
    try:
        root.mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=".traceml-probe-", dir=root))
    except OSError as exc:
        if made:
            with contextlib.suppress(OSError):
                root.rmdir()
        raise CliError(
            f"cannot write in --session-root {root}: {_reason(exc)}", EXIT_INPUT
        ) from None
    return root


class _Progress:
    """A one-line progress display on stderr, only when stderr is a terminal."""

    def __init__(self, label: str, total: int, unit: str) -> None:
        self.enabled = sys.stderr.isatty()
        self.label = label
        self.total = total
        self.unit = unit
        self._last = 0.0
        self._shown = False

    def update(self, done: int, count: int, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.2:
            return
        self._last = now
        pct = f"{100 * done / self.total:5.1f}% " if self.total else ""
        width = 30
        filled = int(width * done / self.total) if self.total else 0
        bar = f"[{'#' * filled}{'.' * (width - filled)}] " if self.total else ""
        sys.stderr.write(f"\r{self.label}: {bar}{pct}{count:,} {self.unit}")
        sys.stderr.flush()
        self._shown = True

    def finish(self) -> None:
        if self._shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    spec = _check_spec(args.spec)
    streams_value = _streams(args.streams)
    if args.sqlite is not None and args.format != "auto":
        raise CliError("--format applies to --payloads, not --sqlite", EXIT_USAGE)
    if not args.shutdown_timeout > 0:  # NaN too
        raise CliError(
            "--shutdown-timeout must be a positive number of seconds "
            "(inf: wait as long as the exporter takes)",
            EXIT_USAGE,
        )
    if args.payloads is not None:
        return _replay_payloads(args, spec, streams_value, out)
    return _replay_sqlite(args, spec, streams_value, out)


def _tune_gc() -> None:
    """Make the cyclic GC cheaper for a replay, which allocates millions of short-lived
    containers (decoded payloads, records) while a few hundred are queued at a time.

    With the default thresholds those queued payloads are promoted into the oldest
    generation over and over, and each full collection walks every object the
    process holds; freezing what is alive now (modules, the exporter's code) and
    collecting the young generation less often takes about a fifth off a replay's
    CPU time. Cycles are still collected.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 50)


def _make_worker(args: argparse.Namespace, spec: str, streams_value: str) -> ExportWorker:
    root = _session_root(args.session_root)
    context = ExporterContext.create(root, streams_value, bool(args.hostname))
    return ExportWorker(spec, context, queue_size=REPLAY_QUEUE_LIMIT)


def _replay_payloads(args: argparse.Namespace, spec: str, streams_value: str, out: TextIO) -> int:
    from .replay import MISSING_MSGSPEC, PayloadReader, open_payloads

    path = Path(args.payloads)
    _check_input_file(path, "payload file")
    try:
        # Opened once: detection must not eat the first bytes of a pipe or FIFO.
        fmt, stream = open_payloads(path, None if args.format == "auto" else args.format)
    except OSError as exc:
        raise CliError(f"cannot read payload file {path}: {_reason(exc)}", EXIT_INPUT) from None
    try:
        if fmt == "msgpack":
            try:
                importlib.import_module("msgspec")
            except ImportError:
                raise CliError(MISSING_MSGSPEC, EXIT_DEPENDENCY) from None
        size = path.stat().st_size if path.is_file() else 0
        worker = _make_worker(args, spec, streams_value)
    except BaseException:
        stream.close()
        raise
    reader = PayloadReader(path, fmt, source=stream)
    progress = _Progress(f"replay {path.name}", size, "payloads")
    worker.start()
    _tune_gc()
    # JSON Lines are decoded on the worker thread (submit_deferred): decoding here,
    # beside the worker's mapping, cost more CPU than the decoding itself.
    if fmt == "jsonl":
        items: Iterator[Any] = reader.deferred_records(worker.context.streams)
        submit: Callable[[Any], bool] = worker.submit_deferred
    else:
        items, submit = iter(reader), worker.submit

    submitted = 0  # items handed to the worker: the progress figure while decoding is deferred

    def show(count: int) -> None:
        nonlocal submitted
        submitted = count
        if progress.enabled and not count % 256:
            progress.update(reader.position, count)

    stop = None
    try:
        stop = feed(
            worker,
            items,
            submit,
            limit=REPLAY_QUEUE_SIZE,
            timeout=args.shutdown_timeout,
            progress=show if progress.enabled else None,
        )
    except OSError as exc:
        worker.shutdown(args.shutdown_timeout)
        raise CliError(f"cannot read payload file {path}: {_reason(exc)}", EXIT_INPUT) from None
    finally:
        progress.update(reader.position, submitted, force=True)
        progress.finish()
        stream.close()
    report, stop = _end(worker, stop, args.shutdown_timeout, f"at byte {reader.position:,}")
    unit = "frame" if fmt == "msgpack" else "line"
    lines = [f"replay of {path} ({fmt}, {reader.payloads:,} payloads) into {spec}"]
    lines += _where(worker)
    lines += _per_stream(report, worker.context.streams)
    lines.append(f"{'skipped units':<26} {report.skipped_units:,}")
    lines.append(f"{f'malformed {unit}s':<26} {reader.malformed_count:,}")
    for bad in reader.malformed:
        where = f" (byte {bad.offset})" if fmt == "msgpack" else ""
        lines.append(f"  {unit} {bad.number}{where}: {bad.reason}")
    if reader.malformed_count > len(reader.malformed):
        lines.append(f"  ... and {reader.malformed_count - len(reader.malformed):,} more")
    return _finish(report, lines, out, spec, stop, f"at byte {reader.position:,}")


def _replay_sqlite(args: argparse.Namespace, spec: str, streams_value: str, out: TextIO) -> int:
    from .backfill import BackfillError, mark_partial, open_database

    path = Path(args.sqlite)
    streams = parse_export_streams(streams_value)
    try:
        source = open_database(path, streams)
    except BackfillError as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
    try:
        if not source.tables:
            problems = source.missing + [
                f"{table} (lacks columns {', '.join(cols)})"
                for table, cols in source.unreadable.items()
            ]
            raise CliError(
                f"{path} has no readable table of the selected streams ({', '.join(streams)}): "
                f"{', '.join(problems)}",
                EXIT_INPUT,
            )
        worker = _make_worker(args, spec, streams_value)
        progress = _Progress(f"backfill {path.name}", source.total_rows, "rows")
        worker.start()
        _tune_gc()
        try:
            stop = feed(
                worker,
                (batch for batch in source.batches() if batch),
                worker.submit_records,
                limit=REPLAY_QUEUE_SIZE,
                timeout=args.shutdown_timeout,
                progress=lambda _n: progress.update(source.rows_read, source.rows_read),
            )
        except BackfillError as exc:
            worker.shutdown(args.shutdown_timeout)
            root = worker.context.session_root
            marked = mark_partial(root, str(exc), source.rows_read, source.total_rows)
            where = f"recorded in {marked}" if marked else f"could not be recorded in {root}"
            raise CliError(f"{exc}; the export is partial ({where})", EXIT_INPUT) from None
        finally:
            progress.update(source.rows_read, source.rows_read, force=True)
            progress.finish()
        where = f"at row {source.rows_read:,} of {source.total_rows:,}"
        report, stop = _end(worker, stop, args.shutdown_timeout, where)
    finally:
        source.close()
    lines = [f"backfill of {path} ({source.rows_read:,} rows) into {spec}"]
    lines += _where(worker)
    read = ", ".join(f"{plan.table} ({plan.rows:,} rows)" for plan in source.tables)
    lines.append(f"{'tables read':<26} {read}")
    if source.missing:
        lines.append(f"{'missing tables':<26} {', '.join(source.missing)}")
    for table, cols in source.unreadable.items():
        lines.append(f"{'unreadable table':<26} {table} (lacks columns {', '.join(cols)})")
    lines += _per_stream(report, worker.context.streams)
    lines.append(f"{'skipped units':<26} {report.skipped_units + source.skipped:,}")
    for bad in source.bad_rows:
        lines.append(f"  {bad.table} id {bad.row_id}: {bad.reason}")
    if source.skipped > len(source.bad_rows):
        lines.append(f"  ... and {source.skipped - len(source.bad_rows):,} more")
    return _finish(report, lines, out, spec, stop, where)


def _end(
    worker: ExportWorker, stop: Stop | None, timeout: float, where: str
) -> tuple[ExportReport, Stop | None]:
    """Drain and close the worker; after an early stop, record it in the warning file.

    After a stall the exporter has already had ``timeout`` seconds: shut down at once.
    """
    report, pressed = shut_down(worker, 0.0 if stop and stop.kind == "stalled" else timeout)
    if pressed and stop is None:
        stop = Stop("interrupted", None)
    if stop is not None:
        report = record_stop(worker, report, stop, where)
    return report, stop


def _where(worker: ExportWorker) -> list[str]:
    return [
        f"{'session root':<26} {worker.context.session_root}",
        f"{'export dir':<26} {worker.context.export_dir}",
    ]


def _per_stream(report: ExportReport, streams: Iterable[str]) -> list[str]:
    lines = ["records per stream"]
    for stream in streams:
        lines.append(f"  {stream:<24} {report.admitted_by_stream.get(stream, 0):,}")
    return lines


def _finish(
    report: ExportReport,
    lines: list[str],
    out: TextIO,
    spec: str,
    stop: Stop | None = None,
    where: str = "",
) -> int:
    lines.append(f"{'dropped batches':<26} {report.dropped_batches:,}")
    if report.failure is not None:
        status = f"FAILED in {report.failure.method}: {report.failure.error}"
    elif report.timed_out:
        status = "TIMED OUT at shutdown"
    else:
        status = "ok"
    lines.append(
        f"{'exporter':<26} {status} (delivered {report.delivered_records:,} of "
        f"{report.admitted_records:,} records)"
    )
    if stop is not None:
        lines.append(f"{'stopped early':<26} {stop.describe(where)}")
    if report.warning_path is not None:
        lines.append(f"{'finalization_warning.json':<26} {report.warning_path}")
    elif report.warning_error is not None:
        lines.append(f"{'finalization_warning.json':<26} NOT WRITTEN: {report.warning_error}")
    out.write("\n".join(lines) + "\n")
    out.flush()
    lost = report.failure is not None or report.timed_out or report.dropped_batches
    if not lost and stop is None and report.warning_error is None:
        return EXIT_OK
    if report.warning_path is not None:
        recorded = f"; the loss is recorded in {report.warning_path}"
    elif report.warning_error is not None:
        recorded = f"; and the loss could not be recorded: {report.warning_error}"
    else:
        recorded = ""
    if stop is not None and stop.kind == "interrupted":
        _error_line(f"{stop.describe(where)}{recorded.replace('the loss', 'this')}")
        return EXIT_INTERRUPTED
    if stop is not None:
        message = f"exporter {spec!r} stalled: {stop.describe(where)}"
    elif report.failure is not None:
        message = f"exporter {spec!r} failed in {report.failure.method}: {report.failure.error}"
        message += _import_hint(report, spec)
    elif report.timed_out:
        message = f"exporter {spec!r} did not finish within --shutdown-timeout"
    else:
        message = f"{report.dropped_batches} batches were dropped"
    _error_line(message + recorded)
    return EXIT_EXPORT


def _import_hint(report: ExportReport, spec: str) -> str:
    """When the module was not importable but sits in the working directory, say so."""
    if report.failure is None or report.failure.method != "factory" or spec in BUILTIN_ALIASES:
        return ""
    top = factory_target(spec).split(":")[0].split(".")[0]
    if "No module named" not in report.failure.error:
        return ""
    here = Path.cwd()
    if (here / f"{top}.py").is_file() or (here / top).is_dir():
        return (
            f" (it is in the working directory, which is not on the import path, as in "
            f"TraceML's aggregator: install it or set PYTHONPATH={here})"
        )
    return " (install the package or put its folder on PYTHONPATH)"


def _check_input_file(path: Path, what: str) -> None:
    if not path.exists():
        raise CliError(f"{what} not found: {path}", EXIT_INPUT)
    if path.is_dir():
        raise CliError(f"{what} {path} is a directory", EXIT_INPUT)
    if not os.access(path, os.R_OK):
        raise CliError(f"cannot read {what} {path}: permission denied", EXIT_INPUT)


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


# -- check -------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace, out: TextIO) -> int:
    spec = _check_spec(args.spec)
    if args.read_back is not None:
        _check_spec(args.read_back)
    try:
        importlib.import_module("pytest")
    except ImportError:
        raise CliError(
            "check needs pytest; install it with pip install 'traceml-exporter-sdk[testing]'",
            EXIT_DEPENDENCY,
        ) from None
    import subprocess

    with tempfile.TemporaryDirectory(prefix="traceml-check-") as tmp:
        report_path = Path(tmp) / "report.xml"
        command = [
            sys.executable,
            "-m",
            "pytest",
            "--traceml-exporter",
            spec,
            *(["--traceml-read-back", args.read_back] if args.read_back else []),
            f"--junitxml={report_path}",
            "-o",
            "junit_family=legacy",
            "-p",
            "no:cacheprovider",
            *(["-v"] if args.verbose else ["-q"]),
            *args.pytest_args,
        ]
        stdout = None if args.verbose else subprocess.PIPE
        result = subprocess.run(command, stdout=stdout, stderr=subprocess.STDOUT, check=False)
        captured = result.stdout.decode(errors="replace") if result.stdout else ""
        if not report_path.exists():
            lines = [ln.strip() for ln in captured.splitlines() if ln.strip()]
            errors = [ln for ln in lines if ln.startswith("ERROR") or "error:" in ln]
            said = (errors or lines or [""])[-1]
            raise CliError(
                f"pytest did not run the suite (exit {result.returncode})"
                + (f": {said}" if said else ""),
                EXIT_USAGE if result.returncode == PYTEST_USAGE_ERROR else EXIT_INPUT,
            )
        cases, throughput = _junit_report(report_path)
    return _check_summary(spec, cases, throughput, result.returncode, out)


PYTEST_USAGE_ERROR = 4

CheckCase = tuple[str, str, str]
"""``(check id, outcome, message)``; outcome is passed, failed, skipped or xfailed."""

_THROUGHPUT = "traceml_exporter_records_per_second"
_FLOOR = "traceml_exporter_throughput_floor"


def _junit_report(path: Path) -> tuple[list[CheckCase], str | None]:
    """The checks of a JUnit XML report, and the throughput figure if one was recorded."""
    cases: list[CheckCase] = []
    throughput: str | None = None
    root = ET.parse(path).getroot()  # noqa: S314 - pytest's own report, written just now
    for case in root.iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                message = child.get("message") or (child.text or "").strip()
                break
            if child.tag == "skipped":
                outcome = "xfailed" if "xfail" in child.get("type", "") else "skipped"
                message = child.get("message") or (child.text or "").strip()
            if child.tag == "properties":
                props = {p.get("name"): p.get("value") for p in child.iter("property")}
                if props.get(_THROUGHPUT):
                    figure = f"{float(props[_THROUGHPUT] or 0):,.0f} records/s"
                    if props.get(_FLOOR):
                        figure += f" (floor {float(props[_FLOOR] or 0):,.0f})"
                    throughput = figure
        cases.append((case.get("name", "?"), outcome, _clean_message(message)))
    return cases, throughput


def _clean_message(message: str) -> str:
    first = message.strip().split("\n", 1)[0]
    for prefix in ('failed on setup with "', 'failed on teardown with "'):
        if first.startswith(prefix) and first.endswith('"'):
            first = first[len(prefix) : -1]
    first = first.removeprefix("Failed: ").removeprefix("Skipped: ")
    first = " ".join(first.split())
    return first if len(first) <= 400 else first[:397] + "..."


def _names(ids: Sequence[str]) -> str:
    """``test_x[a, b], test_y[c]`` for a few checks, ``N checks`` for many."""
    by_function: dict[str, list[str]] = {}
    for check_id in ids:
        function, _, param = check_id.partition("[")
        by_function.setdefault(function, []).append(param.rstrip("]"))
    if len(by_function) > 4:
        return f"{len(ids)} checks"
    parts = []
    for function, params in by_function.items():
        shown = [p for p in params if p]
        parts.append(f"{function}[{', '.join(shown)}]" if shown else function)
    return ", ".join(parts)


def _check_summary(
    spec: str,
    cases: Sequence[CheckCase],
    throughput: str | None,
    code: int,
    out: TextIO,
) -> int:
    counts = {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0}
    groups: dict[tuple[str, str], list[str]] = {}
    for check_id, outcome, message in cases:
        counts[outcome] = counts.get(outcome, 0) + 1
        if outcome != "passed":
            groups.setdefault((outcome, message), []).append(check_id)
    lines = [f"conformance suite for {spec}"]
    order = {"failed": 0, "xfailed": 1, "skipped": 2}
    for (outcome, message), ids in sorted(groups.items(), key=lambda g: order[g[0][0]]):
        tag = {"failed": "FAILED", "xfailed": "xfail", "skipped": "skipped"}[outcome]
        lines.append(f"  {tag:<8} {_names(ids)}: {message or 'no reason given'}")
    if throughput is not None:
        lines.append(f"  throughput {throughput}")
    skipped = counts["skipped"] + counts["xfailed"]
    lines.append(f"{counts['passed']} passed, {counts['failed']} failed, {skipped} skipped")
    out.write("\n".join(lines) + "\n")
    out.flush()
    if counts["failed"]:
        _error_line(
            f"{counts['failed']} of {len(cases)} conformance checks failed for {spec} "
            "(--verbose shows pytest's report)"
        )
        return EXIT_FAILED
    if not cases:
        raise CliError(
            f"no conformance check ran for {spec} (pytest exit {code}); "
            "check the pytest arguments after '--'",
            EXIT_USAGE,
        )
    if code not in (0, 1):
        raise CliError(f"pytest exited with {code} for {spec} (--verbose shows why)", EXIT_INPUT)
    return EXIT_OK


# -- new ---------------------------------------------------------------------------


def template_dir() -> Path | None:
    """The cookiecutter template: shipped in the wheel, or the repository's (editable install)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_template" / "template", here.parents[2] / "template"):
        if (candidate / "cookiecutter.json").is_file():
            return candidate
    return None


def cmd_new(args: argparse.Namespace, out: TextIO) -> int:
    extra: dict[str, str] = {}
    for item in args.extra_context:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"template variable {item!r} is not KEY=VALUE", EXIT_USAGE)
        extra[key] = value
    template = template_dir()
    if template is None:
        raise CliError(
            "the exporter template is not in this installation of traceml-exporter-sdk",
            EXIT_INPUT,
        )
    try:
        main_module = importlib.import_module("cookiecutter.main")
        exceptions = importlib.import_module("cookiecutter.exceptions")
    except ImportError:
        raise CliError(
            "new needs cookiecutter; install it with pip install 'traceml-exporter-sdk[new]'",
            EXIT_DEPENDENCY,
        ) from None
    logging.getLogger("cookiecutter").setLevel(logging.CRITICAL)
    jinja_error: type[Exception] = importlib.import_module("jinja2").TemplateError
    hook_output = _StderrCapture()
    output = Path(args.output_dir)
    made = _Made(output)
    try:
        with hook_output, made.undone_on_failure(keep=args.keep_project_on_failure):
            project = main_module.cookiecutter(
                str(template),
                no_input=args.no_input,
                extra_context=extra or None,
                output_dir=args.output_dir,
                overwrite_if_exists=args.overwrite_if_exists,
                skip_if_file_exists=args.skip_if_file_exists,
                config_file=args.config_file,
                default_config=args.default_config,
                keep_project_on_failure=args.keep_project_on_failure,
                accept_hooks=True,
            )
    except exceptions.OutputDirExistsException as exc:
        message = _one_line(exc).removeprefix("Error: ")
        raise CliError(f"{message} (pass -f to write into it)", EXIT_INPUT) from None
    except exceptions.FailedHookException as exc:
        said = hook_output.text().removeprefix("ERROR: ") or _one_line(exc)
        raise CliError(f"the template refused: {said}", EXIT_FAILED) from None
    except exceptions.CookiecutterException as exc:
        raise CliError(f"cookiecutter: {_one_line(exc)}", EXIT_INPUT) from None
    except ValueError as exc:  # a KEY=VALUE that is not one of a variable's choices
        raise CliError(f"template variable: {_one_line(exc)}", EXIT_USAGE) from None
    except jinja_error as exc:  # answers are rendered as Jinja: '{{' alone is a syntax error
        raise CliError(
            f"template variable: an answer is not valid Jinja ({_one_line(exc)}); answers are "
            "rendered as templates, so leave out '{{', '{%' and '{#'",
            EXIT_USAGE,
        ) from None
    except (EOFError, OSError) as exc:
        if isinstance(exc, EOFError):
            raise CliError(
                "new needs answers on stdin; pass --no-input to take the defaults", EXIT_USAGE
            ) from None
        raise CliError(f"cannot create the project: {exc}", EXIT_INPUT) from None
    said = hook_output.raw()
    if said:
        sys.stderr.write(said)
    out.write(f"created {project}\n")
    return EXIT_OK


class _Made:
    """What a bake adds under ``output``, removed again when the bake fails.

    Only folders that were not there before go (cookiecutter makes the project
    folder, and ``output`` and its parents when missing); with ``-f`` into an
    existing project nothing is removed, since it was there before.
    """

    def __init__(self, output: Path) -> None:
        self.output = output.absolute()
        top = self.output
        while not top.parent.exists() and top.parent != top:
            top = top.parent
        self._top = None if top.exists() else top  # the first missing folder, if any
        self._before: set[str] | None = set()
        if self._top is None:
            try:
                self._before = {p.name for p in output.iterdir()}
            except OSError:  # cannot tell what is new: remove nothing
                self._before = None

    @contextlib.contextmanager
    def undone_on_failure(self, *, keep: bool) -> Iterator[None]:
        try:
            yield
        except BaseException:
            if not keep:
                self._undo()
            raise

    def _undo(self) -> None:
        if self._top is not None:
            shutil.rmtree(self._top, ignore_errors=True)
            return
        if self._before is None:
            return
        try:
            added = [p for p in self.output.iterdir() if p.name not in self._before]
        except OSError:
            return
        for path in added:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)


class _StderrCapture:
    """Collect what child processes (cookiecutter's hooks) write to fd 2, as one line."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 - closed in text()
        self._saved = -1

    def __enter__(self) -> _StderrCapture:
        sys.stderr.flush()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)

    def raw(self) -> str:
        if self._file.closed:
            return ""
        self._file.seek(0)
        data = self._file.read().decode(errors="replace")
        self._file.close()
        return data

    def text(self) -> str:
        return " ".join(self.raw().split())


# -- main --------------------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _error_line(message: str, prog: str = PROG) -> None:
    sys.stderr.write(f"{prog}: error: {message}\n")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (never raises, except SystemExit from --help)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    passthrough: list[str] = []
    if "--" in args_list:
        cut = args_list.index("--")
        args_list, passthrough = args_list[:cut], args_list[cut + 1 :]
    library_log = logging.getLogger("traceml_exporter_sdk")
    library_log.addHandler(logging.NullHandler())
    library_log.propagate = False
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(args_list)
        if unknown:
            prog = f"{PROG} {args.command}" if args.command else PROG
            raise CliError(
                f"unrecognized arguments: {' '.join(unknown)} (see {prog} --help)", EXIT_USAGE, prog
            )
        if args.command is None:
            raise CliError("a command is required (see traceml-exporter --help)", EXIT_USAGE)
        if passthrough and args.command != "check":
            raise CliError(
                f"arguments after '--' are only for check, not {args.command}", EXIT_USAGE
            )
        args.pytest_args = passthrough
        handler: Callable[[argparse.Namespace, TextIO], int] = args.handler
        return handler(args, sys.stdout)
    except CliError as exc:
        _error_line(str(exc), exc.prog)
        return exc.code
    except KeyboardInterrupt:
        _error_line("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_OK
    except Exception as exc:
        if os.environ.get("TRACEML_EXPORTER_DEBUG"):
            raise
        _error_line(
            f"internal error: {type(exc).__name__}: {_one_line(exc)} "
            "(set TRACEML_EXPORTER_DEBUG=1 for the traceback, and please report it)"
        )
        return EXIT_INTERNAL


def _silence_stdout() -> None:
    """After a closed pipe (``| head``), point stdout at devnull so exit does not complain."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
