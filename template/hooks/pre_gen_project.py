"""Refuse names that cannot work, before cookiecutter writes a single file.

The package name ends up as a folder name and as the ``module`` of TraceML's
``module:factory`` setting, so it must be one importable identifier that hides
nothing else on the aggregator's import path. On a bad name this prints one
message and exits 1; cookiecutter then removes the project folder it made.
"""

from __future__ import annotations

import json
import keyword
import re
import sys

# Rendered by cookiecutter; tojson keeps any quote or backslash in a value inert, and the
# ''' quotes (kept by fmt: skip) cannot occur in its output, which escapes every '.
PACKAGE_NAME = json.loads(r'''{{ cookiecutter.package_name | tojson }}''')  # fmt: skip
PROJECT_SLUG = json.loads(r'''{{ cookiecutter.project_slug | tojson }}''')  # fmt: skip
EXPORTER_CLASS = json.loads(r'''{{ cookiecutter.exporter_class | tojson }}''')  # fmt: skip

TRACEML_PACKAGES = ("traceml", "traceml_ai", "traceml_exporter_sdk")
"""Import names of TraceML (``traceml-ai`` installs both ``traceml`` and ``traceml_ai``) and the SDK."""

_DIST_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)


def _stdlib_names() -> frozenset[str]:
    names = getattr(sys, "stdlib_module_names", None)  # Python 3.10+
    if names is None:  # cookiecutter itself runs on an older Python
        return frozenset(sys.builtin_module_names) | {"json", "os", "re", "sys", "typing"}
    return frozenset(names)


def _path_problem(value: str) -> str | None:
    if "/" in value or "\\" in value:
        return "it contains a path separator"
    if ".." in value:
        return "it contains '..'"
    return None


def package_problem(name: str) -> str | None:
    """Why ``name`` cannot be the import package, or None when it can."""
    if not name:
        return "it is empty"
    problem = _path_problem(name)
    if problem:
        return problem
    if not name.isidentifier():
        return (
            "it is not a Python identifier (one name of letters, digits and underscores, "
            "not starting with a digit; no dots, dashes or spaces)"
        )
    if keyword.iskeyword(name):
        return "it is a Python keyword"
    if name in _stdlib_names():
        return f"it shadows the standard-library module {name!r}"
    if name in TRACEML_PACKAGES:
        return f"it shadows {name!r}, which TraceML's aggregator imports itself"
    return None


def slug_problem(slug: str) -> str | None:
    """Why ``slug`` cannot be the distribution and folder name, or None."""
    problem = _path_problem(slug)
    if problem:
        return problem
    if not _DIST_NAME.match(slug):
        return "it is not a valid distribution name (letters, digits, '.', '_', '-')"
    return None


def class_problem(name: str) -> str | None:
    """Why ``name`` cannot be the exporter class, or None."""
    if not name.isidentifier() or keyword.iskeyword(name):
        return "it is not a Python identifier (or is a keyword)"
    return None


def main() -> int:
    checks = (
        ("package_name", PACKAGE_NAME, package_problem),
        ("project_slug", PROJECT_SLUG, slug_problem),
        ("exporter_class", EXPORTER_CLASS, class_problem),
    )
    problems = [
        f"{variable} {value!r}: {problem}"
        for variable, value, check in checks
        if (problem := check(value)) is not None
    ]
    if not problems:
        return 0
    sys.stderr.write(
        "ERROR: cannot generate the exporter project: "
        + "; ".join(problems)
        + ". Choose another value (for example package_name='traceml_exporter_mysink'); "
        "nothing was generated.\n"
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
