"""Every Python snippet of the docs runs, with Sybil, in order, one namespace per doc.

A doc's snippets run as a reader pastes them one after another (Sybil's Python
evaluator, so a traceback names the doc's line). A snippet that leaves names to the
reader gets them from ``PRELUDE`` (which says why); then every ``test_*`` function
the snippets defined is called (a property test runs a few examples). The process's
environment and ``sys.path`` are put back afterwards: the snippets set variables
(``OTEL_...``, ``PG...``) as a reader would.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from doc_blocks import DOCS, name_of
from doc_lists import NOT_RUN
from hypothesis import HealthCheck, settings
from sybil import Document, Example
from sybil.parsers.markdown import PythonCodeBlockParser
from traceml_exporter_sdk.testing.peers import postgres_server as postgres_peer

FIXTURES = Path(__file__).parent / "fixtures"
PRELUDE = {
    "docs/runtime.md": (
        "# The worker's lifecycle is shown on what the section before it made: a context,\n"
        "# a payload and ready records (here the SDK's corpus).\n"
        "from pathlib import Path\n"
        "from traceml_exporter_sdk import ExporterContext\n"
        "from traceml_exporter_sdk.testing import corpus_records, load_corpus\n"
        "context = ExporterContext.create(Path('{sandbox}/runs/my-run'), 'all')\n"
        "payload = load_corpus()[0]\n"
        "records = corpus_records(['step_time'])\n"
    ),
}
"""Doc -> Python run before its snippets: the names its prose gives them."""
IN_THE_SANDBOX = frozenset({"docs/follow.md"})
"""Docs whose snippets name the sandbox's files as a reader's working folder holds them
(``logs/run1``): run from the sandbox."""
PROPERTY_RUN = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
"""A doc's property test runs a few examples, untimed (the strategies' own tests run
them in full); a loaded machine draws slowly, which is not the doc's fault."""


def examples(path: Path) -> list[Example]:
    """The doc's Python snippets that are run (not those ``NOT_RUN`` lists)."""
    document = Document.parse(str(path), PythonCodeBlockParser())
    out = []
    for example in document.examples():
        first = next(line.strip() for line in str(example.parsed).splitlines() if line.strip())
        if f"{name_of(path)}: {first}" not in NOT_RUN:
            out.append(example)
    return out


@pytest.fixture
def restored_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """os.environ as it was, whatever the snippets set; no libpq variable to start with
    (the PostgreSQL peer then starts its own cluster)."""
    saved = dict(os.environ)
    for key in [k for k in os.environ if k.startswith("PG")]:
        monkeypatch.delenv(key)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_doc(path: Path, sandbox: Path) -> int:
    """Run the doc's snippets in order; then its ``test_*`` functions. How many snippets ran."""
    found = examples(path)
    if not found:
        return 0
    namespace: dict[str, Any] = found[0].namespace
    prelude = PRELUDE.get(name_of(path))
    if prelude:
        exec(prelude.format(sandbox=sandbox), namespace)
    for example in found:
        example.evaluate()
    for name, value in list(namespace.items()):
        if name.startswith("test_") and callable(value):
            if hasattr(value, "hypothesis"):
                value = PROPERTY_RUN(value)
            value()
    return len(found)


PYTHON_DOCS = [path for path in DOCS if examples(path)]


def test_the_docs_have_snippets() -> None:
    assert {name_of(p) for p in PYTHON_DOCS} >= {
        "README.md",
        "docs/conformance.md",
        "docs/follow.md",
        "docs/otlp.md",
        "docs/postgres.md",
        "docs/runtime.md",
    }


@pytest.mark.parametrize("path", PYTHON_DOCS, ids=name_of)
@pytest.mark.usefixtures("restored_environment")
def test_snippets_run(path: Path, on_sys_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if name_of(path) in IN_THE_SANDBOX:
        monkeypatch.chdir(on_sys_path)
    if (
        name_of(path) == "docs/postgres.md"
        and postgres_peer.find_bindir() is None
        and os.environ.get("TRACEML_EXPORTER_REQUIRE_POSTGRES") != "1"
    ):
        pytest.skip(f"no PostgreSQL server binaries here; {postgres_peer.HOW_TO_GET_A_SERVER}")
    assert run_doc(path, on_sys_path) > 0


@pytest.mark.usefixtures("restored_environment")
def test_a_failing_snippet_fails(on_sys_path: Path) -> None:
    """The planted doc: the OTLP snippet as it was, using ``os`` it never imported."""
    with pytest.raises(NameError, match="name 'os' is not defined"):
        run_doc(FIXTURES / "failing_snippet.md", on_sys_path)
