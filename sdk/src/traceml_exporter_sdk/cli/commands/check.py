"""``traceml-exporter check``: run the conformance suite under pytest and summarize its report.

pytest runs in a subprocess, and its JUnit XML report gives the checks' outcomes and
the throughput figure. For SPEC it runs the SDK's plugin (``--traceml-exporter SPEC``)
in an empty folder, so the caller's folder (its conftest.py, its pytest settings) cannot
change the result; the caller's folder stays importable, as ``python -m`` has it. For a
project (``--project``, or no SPEC inside one) it runs the project's own conformance
class, ``tests/test_conformance.py`` (the checks only, ``-m traceml_conformance``), from
the project's folder, so the project's ``read_back``, ``break_sink``, ``expected_export``
and skips apply wherever it is run from.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ..._export.exit_codes import EXIT_DEPENDENCY, EXIT_FAILED, EXIT_INPUT, EXIT_OK, EXIT_USAGE
from ...testing.keys import CHECK_MARKER
from ..errors import CliError, error_line
from ..inputs import check_spec
from ..origin import install_hint
from ..parser import add_command

__all__ = ["add_parser", "cmd_check"]


def add_parser(commands: Any) -> None:
    """Add the check command to the subparsers ``commands``."""
    check = add_command(
        commands,
        "check",
        "Run the conformance suite against an exporter factory.",
        "SPEC is 'module:factory' (importable from here: install the package or set\n"
        "PYTHONPATH) or 'jsonl'. Arguments after '--' go to pytest unchanged.\n"
        "Prints how many checks passed, failed and were skipped, with the reasons, and\n"
        "the throughput figure. --read-back names a read_back(context) function that\n"
        "returns what the exporter wrote ({STREAM: [record dicts]}), which turns the\n"
        "data-fidelity checks on.",
        "  traceml-exporter check my_exporter.exporter:make_exporter -- -x -k lifecycle\n"
        "  traceml-exporter check                        # in a generated project's folder\n"
        "  traceml-exporter check --project ~/my-exporter  # the same, from any folder\n"
        "  traceml-exporter check --mutants --jobs 2     # and the suite's power, by mutation",
    )
    check.add_argument(
        "spec",
        metavar="SPEC",
        nargs="?",
        help="module:factory (or jsonl); omitted: the project this folder is in",
    )
    check.add_argument(
        "--project",
        metavar="DIR",
        type=Path,
        help="a project with tests/test_conformance.py: run its conformance class, with its "
        "own read_back, break_sink and skips",
    )
    check.add_argument(
        "--read-back",
        metavar="MODULE:FUNCTION",
        help="a read_back(context) function; turns the data-fidelity checks on",
    )
    check.add_argument(
        "-v", "--verbose", action="store_true", help="show pytest's own output as it runs"
    )
    check.add_argument(
        "--mutants",
        action="store_true",
        help="then mutate the exporter's modules and run the suite on every mutant: the share "
        "killed per module, and the survivors (slow: a suite run per mutant)",
    )
    check.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="with --mutants: mutants run side by side (default 1)",
    )
    check.set_defaults(handler=cmd_check)


def cmd_check(args: argparse.Namespace, out: TextIO) -> int:
    project = _project(args.project, args.spec)
    if project is not None:
        if args.read_back is not None:
            raise CliError(
                "--read-back with a project: the project's conformance class names its own "
                "read_back; give SPEC instead of --project to pass one",
                EXIT_USAGE,
            )
        return _run_suite(project / CONFORMANCE_FILE, [], args, out, cwd=project)
    spec = check_spec(args.spec)
    if args.read_back is not None:
        check_spec(args.read_back)
    _require_importable(spec)
    plugin = [
        "--traceml-exporter",
        spec,
        *(["--traceml-read-back", args.read_back] if args.read_back else []),
    ]
    return _run_suite(spec, plugin, args, out, cwd=None)


CONFORMANCE_FILE = Path("tests") / "test_conformance.py"
"""Where a generated project keeps its conformance class."""


def _project(given: Path | None, spec: str | None) -> Path | None:
    """The project folder to check, or None to check SPEC: ``--project``, or with no SPEC
    the nearest folder upwards from here holding ``tests/test_conformance.py``."""
    if given is not None:
        if spec is not None:
            raise CliError("give SPEC or --project, not both", EXIT_USAGE)
        project = given.expanduser().resolve()
        if not (project / CONFORMANCE_FILE).is_file():
            raise CliError(
                f"--project {given}: no {CONFORMANCE_FILE} there (a project made by "
                "`traceml-exporter new` has one)",
                EXIT_INPUT,
            )
        return project
    if spec is not None:
        return None
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / CONFORMANCE_FILE).is_file():
            return folder
    raise CliError(
        f"no SPEC, and no {CONFORMANCE_FILE} in {here} or above: give SPEC "
        "(module:factory or jsonl), or --project DIR",
        EXIT_USAGE,
    )


def _run_suite(
    spec: str | Path, plugin: list[str], args: argparse.Namespace, out: TextIO, *, cwd: Path | None
) -> int:
    """Run pytest on the suite (``plugin`` options, or the project's file ``spec``) and
    summarize its report."""
    try:
        importlib.import_module("pytest")
    except ImportError:
        raise CliError(
            f"check needs pytest; install it with {install_hint('new,testing')}",
            EXIT_DEPENDENCY,
        ) from None
    import os
    import subprocess

    with tempfile.TemporaryDirectory(prefix="traceml-check-") as tmp:
        report_path = Path(tmp) / "report.xml"
        environment = dict(os.environ)
        if cwd is None:  # SPEC: run where nothing of the caller's folder is collected
            folder = Path(tmp) / "run"
            folder.mkdir()
            (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
            environment["PYTHONPATH"] = os.pathsep.join(
                filter(None, (os.getcwd(), environment.get("PYTHONPATH")))
            )
            where = ["--rootdir", str(folder), "-c", str(folder / "pytest.ini")]
        else:
            folder = cwd
            where = [str(spec), "-m", CHECK_MARKER, "--rootdir", str(cwd)]
        pytest = [sys.executable, "-m", "pytest", *plugin, *where, "-p", "no:cacheprovider"]
        command = [
            *pytest,
            f"--junitxml={report_path}",
            "-o",
            "junit_family=legacy",
            *(["-v"] if args.verbose else ["-q"]),
            *args.pytest_args,
        ]
        stdout = None if args.verbose else subprocess.PIPE
        result = subprocess.run(
            command,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            check=False,
            cwd=folder,
            env=environment,
        )
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
        code = _check_summary(str(spec), cases, throughput, result.returncode, out)
        if not args.mutants or code != EXIT_OK:
            return code
        from ..check_mutants import exporter_source, run_mutants

        factory = ["make_exporter"]
        if cwd is None:
            module, _, name = str(spec).partition(":")
            source, modules = exporter_source(module)
            extra: tuple[str, ...] = (os.getcwd(),)
            factory.append(name)
        else:
            source, modules = _project_package(cwd)
            extra = ()
        # the first failing check kills a mutant; throughput's floor depends on the load
        unless = [] if "-k" in args.pytest_args else ["-k", "not test_throughput"]
        mutant_command = [*pytest, "-x", "-q", *unless, *args.pytest_args]
        return run_mutants(source, modules, mutant_command, folder, args.jobs, out, extra, factory)


def _project_package(project: Path) -> tuple[Path, tuple[str, ...]]:
    """A generated project's package (the one folder under ``src``) and its modules."""
    found = list((project / "src").glob("*/__init__.py"))
    if len(found) != 1:
        raise CliError(
            f"--mutants: {project / 'src'} does not hold exactly one package", EXIT_INPUT
        )
    package = found[0].parent
    modules = tuple(
        p.relative_to(package).as_posix()
        for p in sorted(package.rglob("*.py"))
        if p.name != "__init__.py"
    )
    return package, modules


PYTEST_USAGE_ERROR = 4

NO_READ_BACK_HERE = (
    "no read-back: pass --read-back MODULE:FUNCTION, a function of the context that returns "
    "{STREAM: [record dicts]}, to turn the data-fidelity checks on; ready ones: "
    "traceml_exporter_sdk.testing:read_jsonl (JSON Lines files in export_dir); a generated "
    "project's own read-back and break_sink: run check with no SPEC in its folder, or --project DIR"
)
"""What ``check`` says instead of the suite's "implement read_back(self, context)"."""

_IMPORT = "import importlib, sys; importlib.import_module(sys.argv[1])"


def _require_importable(spec: str) -> None:
    """One line when SPEC's module does not import, rather than every check failing on it.

    The module is imported in a fresh interpreter started as pytest's is (same
    working directory and environment), so nothing of it runs in this process.
    """
    import subprocess

    module, colon, _ = spec.partition(":")
    if not colon:
        return  # a built-in name such as jsonl
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT, module],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        said = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        raise CliError(
            f"{spec}: module {module!r} does not import "
            f"({said[-1] if said else f'exit {proc.returncode}'}); install its package or put "
            "the folder that holds it on PYTHONPATH",
            EXIT_INPUT,
        )


CheckCase = tuple[str, str, str]
"""``(check id, outcome, message)``; outcome is passed, failed, skipped or xfailed; the
message as the report has it (``_clean_message`` makes the line shown)."""

_THROUGHPUT = "traceml_exporter_records_per_second"
_FLOOR = "traceml_exporter_throughput_floor"


def _junit_report(path: Path) -> tuple[list[CheckCase], str | None]:
    """The checks of a JUnit XML report, and the throughput figure if one was recorded."""
    from ...testing.environment import failure_hint  # imports pytest, known to be there

    cases: list[CheckCase] = []
    throughput: str | None = None
    root = ET.parse(path).getroot()  # noqa: S314 - pytest's own report, written just now
    for case in root.iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                text = (child.text or "").strip()
                message = child.get("message") or text
                hint = failure_hint(text).strip()
                if hint and hint in text and hint not in message:
                    message += "\n" + hint  # the suite's hint, which the message attribute lacks
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
        cases.append((case.get("name", "?"), outcome, message))
    return cases, throughput


def _clean_message(message: str) -> str:
    """The message's first line, with the suite's hint on what to do when it gave one."""
    from ...testing.environment import failure_hint

    hint = failure_hint(message).strip()
    first = _first_line(message)
    if not hint or hint not in message:
        return first
    first = first if len(first) <= 280 else first[:277] + "..."
    return first.rstrip(".") + "; " + " ".join(hint.split(":", 1)[0].split())


def _first_line(message: str) -> str:
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
    from ...testing._causes import root_cause
    from ...testing.environment import NO_READ_BACK

    cause = root_cause(
        [(check_id, message) for check_id, outcome, message in cases if outcome == "failed"]
    )
    explained = set(cause.explained) if cause is not None else set()
    counts = {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0}
    groups: dict[tuple[str, str], list[str]] = {}
    for check_id, outcome, message in cases:
        counts[outcome] = counts.get(outcome, 0) + 1
        if outcome != "passed" and check_id not in explained:
            groups.setdefault((outcome, _clean_message(message)), []).append(check_id)
    lines = [f"conformance suite for {spec}"]
    if cause is not None:
        lines.append(f"  CAUSE    {cause.line}")
        lines.append(f"           explains {_names(cause.explained)}")
    order = {"failed": 0, "xfailed": 1, "skipped": 2}
    for (outcome, message), ids in sorted(groups.items(), key=lambda g: order[g[0][0]]):
        message = NO_READ_BACK_HERE if message == NO_READ_BACK else message
        tag = {"failed": "FAILED", "xfailed": "xfail", "skipped": "skipped"}[outcome]
        lines.append(f"  {tag:<8} {_names(ids)}: {message or 'no reason given'}")
    if throughput is not None:
        lines.append(f"  throughput {throughput}")
    skipped = counts["skipped"] + counts["xfailed"]
    lines.append(f"{counts['passed']} passed, {counts['failed']} failed, {skipped} skipped")
    out.write("\n".join(lines) + "\n")
    out.flush()
    if counts["failed"]:
        because = f", {len(explained)} from one cause" if explained else ""
        error_line(
            f"{counts['failed']} of {len(cases)} conformance checks failed for {spec}{because} "
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
