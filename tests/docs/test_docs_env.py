"""Every environment variable the docs name is one that something reads.

A name of the docs' text (``[A-Z][A-Z0-9_]{2,}``) looks like a variable when it has an
underscore or a variable's prefix (``PG``, ``OTEL``, ...) or stands where a variable
does (``NAME=value``, ``$NAME``). It must then be:

- read by the project's code: a string of the code (sdk/src, template/, noxfile.py,
  tests/ but this folder) where a name is read (``_reads``: not a docstring, a list of
  names, ``getattr``'s attribute, a child's ``env`` key, ``environ[NAME] = ...``) is
  that name, or a prefix and the rest of it (``env.get(PREFIX + "RUN")``); a name the
  docs end in ``_`` is a prefix some such string starts with;
- libpq's: one of the variables libpq itself lists for its connection options
  (``PQconndefaults``, through psycopg), which the postgres sink leaves to it;
- in ``THIRD_PARTY``: a variable another program the docs name reads, and which;
- in ``NOT_VARIABLES``, with what it is;
- or, where the docs do not use it as a variable (not ``NAME=``, not ``$NAME``), a
  name of the code (a constant, a class attribute: ``NO_PAYLOAD``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from doc_blocks import DOCS, ROOT, name_of
from psycopg import pq

FIXTURES = Path(__file__).parent / "fixtures"
TOKEN = re.compile(r"(?<![\w./-])(\$\{?)?([A-Z][A-Z0-9_]{2,})(?![\w.-]*\()(=)?")
PREFIXES = ("PG", "OTEL", "MLFLOW", "TRACEML", "PYTHON", "PROMETHEUS")
THIRD_PARTY = {
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "the `mlflow server` the mlflow sink's tests start",
    "MLFLOW_DISABLE_TELEMETRY": "the `mlflow server` the mlflow sink's tests start",
}
"""Variables read by a program the docs name, not by this project's code."""
NOT_VARIABLES = {
    "KEY": "the placeholder of `new`'s KEY=VALUE arguments (template variables)",
    "LOGS_": "the start of a pytest temporary folder's name",
    "DT_FLOAT": "a TensorFlow DataType enum value of a TensorBoard summary",
    "DT_DOUBLE": "a TensorFlow DataType enum value of a TensorBoard summary",
    "DT_STRING": "a TensorFlow DataType enum value of a TensorBoard summary",
    "ALLOW_CONNECTIONS": "a PostgreSQL ALTER DATABASE option",
    "CAP_SYS_PTRACE": "a Linux capability (docs/follow.md, Threat model)",
    "RLIMIT_NOFILE": "the open-files limit of setrlimit(2) (docs/conformance.md, I/O faults)",
}
"""Names the docs use that are not variables and not names of the code."""


def doc_names(paths: Iterable[Path]) -> dict[str, set[str]]:
    """Name -> where the docs name it (``doc:line``, ``=`` added where it is assigned)."""
    out: dict[str, set[str]] = {}
    for path in paths:
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            for match in TOKEN.finditer(line):
                dollar, name, assigned = match.groups()
                as_variable = bool(dollar or assigned)
                if as_variable or "_" in name or name.startswith(PREFIXES):
                    where = f"{name_of(path)}:{number}" + (
                        " (as a variable)" if as_variable else ""
                    )
                    out.setdefault(name, set()).add(where)
    return out


def _code_files() -> Iterator[Path]:
    yield ROOT / "noxfile.py"
    for top in ("sdk/src", "template", "tests"):
        for path in sorted((ROOT / top).rglob("*")):
            if (
                ".py" in path.name
                and path.is_file()
                and ROOT / "tests" / "docs" not in path.parents
            ):
                yield path


def _reads(tree: ast.AST) -> set[int]:
    """The strings of ``tree`` where a variable's name is read: a call's argument
    (``environ.get(NAME)``), a subscript read (``env[NAME]``), a comparison, a constant
    (``NAME_ENV = NAME``) or a mapping's value. Not a docstring, a list of names
    (``__all__``), an attribute's name (``getattr``), a dict's key (a child's ``env``),
    ``environ[NAME] = ...``, ``setenv``."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            setting = isinstance(func, ast.Attribute) and func.attr in _SETTERS
            attribute = isinstance(func, ast.Name) and func.id in _ATTRIBUTES
            ids.update(id(arg) for arg in node.args[2 if attribute else 1 if setting else 0 :])
            ids.update(id(k.value) for k in node.keywords)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            ids.add(id(node.slice))
        elif isinstance(node, ast.Compare):
            ids.update(id(n) for n in (node.left, *node.comparators))
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            ids.add(id(node.value))
        elif isinstance(node, ast.Dict):
            ids.update(id(v) for v in node.values)
    return ids


_SETTERS = ("setenv", "delenv", "putenv", "unsetenv")
_ATTRIBUTES = ("getattr", "hasattr", "setattr", "delattr")


_JINJA_VALUE = re.compile(r"\{\{.*?\}\}")
_JINJA_TAG = re.compile(r"\{%-?.*?-?%\}")


def code_names() -> tuple[set[str], set[str]]:
    """(the strings of the code that may read a variable, the identifiers of the code).

    A template file is read with each ``{{ value }}`` an identifier and each ``{% tag %}``
    dropped: every branch of the template at once."""
    strings: set[str] = set()
    identifiers: set[str] = set()
    for path in _code_files():
        text = path.read_text("utf-8")
        tree = ast.parse(_JINJA_TAG.sub("", _JINJA_VALUE.sub("X", text)), str(path))
        reads = _reads(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) in reads:
                    strings.add(node.value)
            elif isinstance(node, ast.Name):
                identifiers.add(node.id)
            elif isinstance(node, ast.Attribute):
                identifiers.add(node.attr)
            elif isinstance(node, ast.FunctionDef | ast.ClassDef):
                identifiers.add(node.name)
            elif isinstance(node, ast.alias):
                identifiers.add((node.asname or node.name).split(".")[-1])
    return strings, identifiers


def libpq_variables() -> set[str]:
    return {o.envvar.decode() for o in pq.Conninfo.get_defaults() if o.envvar}


STRINGS, IDENTIFIERS = code_names()
LIBPQ = libpq_variables()


def unread(names: dict[str, set[str]]) -> dict[str, list[str]]:
    """The names no code, no library and no list accounts for, with where they are."""
    prefixes = sorted(s for s in STRINGS if re.fullmatch(r"[A-Z][A-Z0-9]*_[A-Z0-9_]*_", s))
    out = {}
    for name, where in names.items():
        read = (
            name in STRINGS
            or any(name.startswith(p) and name[len(p) :] in STRINGS for p in prefixes)
            or name in LIBPQ
            or name in THIRD_PARTY
            or (name.endswith("_") and any(s.startswith(name) for s in STRINGS))
        )
        as_variable = any(w.endswith("(as a variable)") for w in where)
        named = name in NOT_VARIABLES or (not as_variable and name in IDENTIFIERS)
        if not (read or named):
            out[name] = sorted(where)
    return out


def test_the_reader_sees_the_docs_variables() -> None:
    names = doc_names(DOCS)
    assert len(names) > 40
    for name in ("PGHOST", "PGPASSFILE", "TRACEML_EXPORTER", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"):
        assert name in names, name
    assert "PGPASSFILE" in LIBPQ
    assert "TRACEML_POSTGRES_SCHEMA" in STRINGS


def test_every_variable_of_the_docs_is_read() -> None:
    assert unread(doc_names(DOCS)) == {}


@pytest.mark.parametrize("listed", [THIRD_PARTY, NOT_VARIABLES], ids=["third_party", "not"])
def test_every_listed_name_is_in_the_docs_and_not_the_codes(listed: dict[str, str]) -> None:
    """A list entry the docs no longer name, or that the code reads after all, goes."""
    names = doc_names(DOCS)
    assert sorted(n for n in listed if n not in names or n in STRINGS or n in LIBPQ) == []


def test_the_planted_variables_are_unread() -> None:
    """The unit's variable as it was (``PGPASSWORD_FILE``), a misspelt sink setting, and a
    constant of the code used as a variable (the same named as a constant passes)."""
    found = unread(doc_names([FIXTURES / "unknown_env.md"]))
    assert sorted(found) == ["EXIT_INTERNAL", "PGPASSWORD_FILE", "TRACEML_POSTGRES_TIMEOUT"]
    assert {"NO_PAYLOAD", "EXIT_INTERNAL"} <= IDENTIFIERS
