"""What of the docs is not run, and why: the one list (``NOT_RUN``) the docs tests read.

Every fenced block of README.md and docs/*.md is handled by its language: ``bash``
commands run in a sandbox (``test_docs_shell.py``), ``python`` snippets run
(``test_docs_python.py``), ``ini`` systemd units go through ``systemd-analyze verify``
(``test_docs_systemd.py``), ``yaml`` Kubernetes manifests through the API's schemas
(``test_docs_kubernetes.py``), ``json`` has the shape of what the code writes (``test_docs_json.py``). What cannot
run here (a training run with torch, an interactive prompt, the network, an install)
or is not code (output, a file tree) is listed below by ``doc: command`` (a shell
command's words, comment dropped) or ``doc: first line`` (a whole block), with the
reason and, where another test covers it, which. A command of ``pip install`` and
``nox`` alone is not run (it would install, or run the repository's sessions) but
what it names is checked (``test_docs_shell.py``). A
block that is neither handled nor listed fails ``test_docs_blocks.py``, a shell
command neither listed nor passing fails ``test_docs_shell.py``, and an entry that
names nothing in the docs any more fails too. An output block may instead be
checked against what its command prints (``SHOWN_BY``).
"""

from __future__ import annotations

_TRACEML_REAL = (
    "needs torch and a training script: tests/traceml_real/test_follow_real.py runs real "
    "`traceml run` jobs and follows them (nox -s traceml_real)"
)
_OUTPUT = "output, shown as the command prints it; not a command"

NOT_RUN: dict[str, str] = {
    # README.md
    "README.md: pytest --traceml-exporter my_exporter.exporter:make_exporter": (
        "the suite `traceml-exporter check my_exporter...` runs (run here) through the same "
        "plugin; the plugin's options: tests/conformance/test_suite_api.py"
    ),
    "README.md: traceml-exporter check": (
        "needs a generated project as the working folder: tests/template/test_generated.py "
        "(check --project on each baked sink)"
    ),
    "README.md: traceml run --logs-dir logs --run-name run1 train.py &": _TRACEML_REAL,
    # docs/cli.md
    "docs/cli.md: traceml-exporter check my_exporter.exporter:make_exporter --read-back "
    "my_exporter.testing:read_back": (
        "the suite of the line above (run here) with the reader's read-back function: "
        "tests/cli/test_cli_check.py runs --read-back"
    ),
    "docs/cli.md: traceml-exporter check": (
        "needs a generated project as the working folder: tests/template/test_generated.py"
    ),
    "docs/cli.md: traceml-exporter check --project ~/src/my-exporter": (
        "the reader's generated project: tests/template/test_generated.py runs check --project"
    ),
    "docs/cli.md: conformance suite for eager:make": _OUTPUT,
    "docs/cli.md: conformance suite for connected:make": _OUTPUT,
    "docs/cli.md: replay of payloads.jsonl (jsonl, 1,204 payloads) into "
    "my_exporter.exporter:make_exporter": _OUTPUT,
    "docs/cli.md: traceml-exporter follow SPEC (--session-root RUN_DIR | --logs-dir LOGS) "
    "[--streams VALUE]": "the usage line of follow --help, shown; checked against the parser "
    "by test_docs_blocks.py::test_the_follow_synopsis_is_the_parsers",
    # docs/conformance.md
    "docs/conformance.md: test_my_exporter.py::TestMyExporter::test_lifecycle[open_close] PASSED": (
        _OUTPUT
    ),
    "docs/conformance.md: pytest --traceml-exporter my_pkg.exporter:make_exporter": (
        "my_pkg is the reader's package: the same plugin runs on jsonl two lines below (run here)"
    ),
    "docs/conformance.md: pytest --traceml-exporter my_pkg.exporter:make_exporter "
    "--traceml-read-back my_pkg.testing:read_back": (
        "my_pkg is the reader's package: --traceml-read-back in tests/conformance/test_suite_api.py"
    ),
    "docs/conformance.md: ========================= TraceML exporter: root cause "
    "=========================": _OUTPUT,
    # docs/follow.md
    "docs/follow.md: traceml run --logs-dir logs --run-name run1 train.py &": _TRACEML_REAL,
    "docs/follow.md: follow run1: following; exported 48,210 (process 96, step_memory 9,600, "
    "step_time 38,400, system 114); lag 1,212 rows, 0.6 s": _OUTPUT,
    "docs/follow.md: follow: waiting up to 120 s for the run logs/run1": (
        "what follow prints while it waits, shown: tests/follow/test_follow.py and "
        "test_follow_service.py assert these words"
    ),
    # docs/layout.md
    "docs/layout.md: traceml_exporter_sdk/": (
        "a file tree: tests/test_layout.py checks it against the package's modules"
    ),
    # docs/mlflow.md
    "docs/mlflow.md: export MLFLOW_RUN_ID=<your training run>": (
        "a placeholder for the reader's MLflow run id (the variable: test_docs_env.py)"
    ),
    # docs/parquet.md
    "docs/parquet.md: SELECT global_rank, step, timestamp_unix_ns,": (
        "DuckDB on the parquet sink's export: the template's test_parquet_readers.py runs "
        "this query's kind (nox -s \"template(sink='parquet')\"); duckdb is no SDK test dependency"
    ),
    "docs/parquet.md: import polars as pl": (
        "polars on the parquet sink's export: the template's test_parquet_readers.py "
        "(nox -s \"template(sink='parquet')\"); polars is no SDK test dependency"
    ),
    "docs/parquet.md: <export_dir>/": "a file tree of the parquet sink's export",
    "docs/parquet.md: SinkError: .../aggregator/export: another exporter is writing in this "
    "folder (it holds": _OUTPUT,
    # docs/template.md
    "docs/template.md: cookiecutter gh:<org>/traceml-exporter-sdk": "the network, a placeholder",
    "docs/template.md: template/": "a file tree of template/",
    "docs/template.md: traceml-exporter-example/": "a file tree of a generated project",
    "docs/template.md: cruft create --directory template /path/or/url/of/traceml-exporter-sdk": (
        "cruft is no SDK test dependency: tests/template/test_cruft.py creates, checks and "
        "updates a project with it"
    ),
    "docs/template.md: cruft check": "tests/template/test_cruft.py",
    "docs/template.md: cruft update": "tests/template/test_cruft.py",
    "docs/template.md: cruft link --directory template <repo>": "a placeholder; cruft as above",
    # docs/tensorboard.md
    "docs/tensorboard.md: tensorboard --logdir runs/my-run/aggregator/export/tensorboard "
    "--samples_per_plugin scalars=1000000": (
        "a server that runs until stopped: the template's tensorboard tests read the files "
        "with TensorBoard's own reader"
    ),
    "docs/tensorboard.md: uint64 length | uint32 masked CRC-32C(length) | Event bytes | uint32 "
    "masked CRC-32C(bytes)": "a record's layout on disk, not code",
    "docs/tensorboard.md: <export_dir>/tensorboard/": "a file tree of the tensorboard sink's export",
}
"""``doc: command`` or ``doc: first line`` -> why it is not run here."""

SUBSTITUTE: dict[str, str] = {
    "/path/to/traceml-exporter-sdk": "{root}",
    "/tmp/run1": "{sandbox}/tmp/run1",
}
"""Placeholders a command runs with replaced: the repository (the reader's checkout) and an
absolute folder of the reader's (a test writes nothing outside its sandbox)."""

SHOWN_BY: dict[str, str] = {
    "docs/cli.md: traceml-exporter: error: payload file not found: payloads.jsonl": (
        "mkdir empty && cd empty && traceml-exporter replay jsonl --payloads payloads.jsonl; "
        "traceml-exporter replay jsonl"
    ),
    "docs/cli.md: traceml.yaml       /home/me/project/traceml.yaml": (
        "TRACEML_EXPORT_STREAMS=step_time,system traceml-exporter validate "
        "--exporter my_exporter.exporter:make_exporter --no-hostname"
    ),
    "docs/cli.md: created /home/me/src/traceml-exporter-demo": (
        "traceml-exporter new --no-input -o ~/src project_name=demo"
    ),
}
"""``doc: first line`` of an output block -> the bash that prints it: every line of the
block (``SHOWN_PATHS`` replaced, spaces collapsed) is a line of what it prints."""

SHOWN_PATHS: dict[str, str] = {
    "/home/me/src": "{sandbox}/home/src",
    "/home/me/project": "{sandbox}",
    "/home/me/traceml-exporter-sdk": "{root}",
}
"""The reader's folders an output block shows -> the sandbox's and the checkout's."""
