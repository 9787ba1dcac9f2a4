"""Mutation testing's parts: every mutant of a module (a small AST mutator), the code a
package never uses, and a copy of the package a mutant is tried in.

``nox -s mutation`` (tests/mutation/run.py) and ``traceml-exporter check --mutants`` both
use them.

Why not mutmut or cosmic-ray (both tried, see docs/conformance.md "Mutation"):
mutmut 3 rewrites every function into a trampoline that asks mutmut's own
configuration which mutant is active, so the suite's ``fresh_subprocess`` check (a
new interpreter importing the exporter, as TraceML's aggregator does) fails on the
unmutated code and mutmut stops before its first mutant; cosmic-ray mutates the one
source tree in place (two mutants at once need its HTTP workers and a clone each),
has no statement-deletion or return-value operator, and replaces each binary operator
with every other one (hundreds of mostly equivalent mutants). This module is stdlib
``ast`` only, and a mutant is source text, so any number run side by side, each in its
own copy of the package.

Operators (the usual set): ``compare`` (``<`` and ``<=``, ``==`` and ``!=``, ``in`` and
``not in``, ``is`` and ``is not`` swapped), ``arith`` (``+``/``-``, ``*``/``/``, ``//``
to ``/``, ``%`` to ``*``, ``|``/``&``, ``<<``/``>>``), ``boolean`` (``and``/``or``,
``not x`` to ``x``), ``constant`` (an int ``n`` to ``n + 1``, True/False swapped, a
string other than a docstring or a message extended), ``delete`` (a simple statement
replaced by ``pass``), ``return`` (``return x`` to ``return None``), ``handler`` (an
``except`` clause that catches nothing), ``reraise`` (an ``except`` body that
re-raises),
``loop`` (``break`` and ``continue`` swapped).

A mutant's id is ``<file>:<function>:<operator>:<n>``: the ``n``-th point of that
operator in that function (``<module>`` outside any), so ids survive edits elsewhere.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from dataclasses import field as _field
from pathlib import Path
from typing import Any

__all__ = ["Mutant", "PackageCopy", "mutants", "package_mutants", "unused_code", "verdict"]

_COMPARE = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_ARITH = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.Mult,
    ast.BitOr: ast.BitAnd,
    ast.BitAnd: ast.BitOr,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
    ast.Pow: ast.Mult,
}
_SIMPLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete, ast.Raise, ast.Assert)
_NEVER_RAISED = "StopAsyncIteration"
"""What a disabled ``except`` clause catches instead: nothing the code under test raises."""


@dataclass(frozen=True)
class Mutant:
    """One mutant: its stable id, what it changes (one line) and the mutated module source."""

    id: str
    line: int
    description: str
    source: str


@dataclass
class _Point:
    node: ast.AST
    parent: ast.AST
    field: str
    index: int | None
    operator: str
    function: str


def _is_docstring(stmt: ast.stmt) -> bool:
    """A string on its own: a docstring, of a module, class, function or attribute."""
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _is_dunder_all(stmt: ast.stmt) -> bool:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else []
    return any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)


class _Finder:
    """Walks a module in source order and lists every mutation point."""

    def __init__(self) -> None:
        self.points: list[_Point] = []
        self._function: list[str] = []
        self._quiet = 0  # inside a raise, a warning or an annotation: strings are messages

    def add(self, node: ast.AST, parent: ast.AST, field: str, index: int | None, op: str) -> None:
        function = ".".join(self._function) or "<module>"
        self.points.append(_Point(node, parent, field, index, op, function))

    def visit(self, node: ast.AST) -> None:
        if _is_type_checking(node):
            return
        named = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        if named:
            self._function.append(node.name)  # type: ignore[attr-defined]
        quiet = isinstance(node, (ast.Raise, ast.JoinedStr)) or _is_message_call(node)
        self._quiet += quiet
        for field, value in ast.iter_fields(node):
            if field in ("annotation", "returns", "decorator_list", "type_params"):
                continue
            if isinstance(value, list):
                for index, item in enumerate(value):
                    if isinstance(item, ast.AST):
                        self.child(node, field, index, item, value)
            elif isinstance(value, ast.AST):
                self.child(node, field, None, value, None)
        self._quiet -= quiet
        if named:
            self._function.pop()

    def child(
        self,
        parent: ast.AST,
        field: str,
        index: int | None,
        node: ast.AST,
        siblings: list[Any] | None,
    ) -> None:
        if isinstance(node, ast.stmt) and siblings is not None:
            if _is_docstring(node) or _is_dunder_all(node):
                return
            if isinstance(node, _SIMPLE) and not _is_super_call(node):
                self.add(node, parent, field, index, "delete")
        self.point(node, parent, field, index)
        self.visit(node)

    def point(self, node: ast.AST, parent: ast.AST, field: str, index: int | None) -> None:
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _COMPARE:
                    self.add(node, parent, field, i, "compare")
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _ARITH:
            self.add(node, parent, field, index, "arith")
        elif isinstance(node, ast.BoolOp) or (
            isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)
        ):
            self.add(node, parent, field, index, "boolean")
        elif isinstance(node, ast.Constant) and _mutable_constant(node.value, self._quiet):
            self.add(node, parent, field, index, "constant")
        elif isinstance(node, ast.Return) and not _returns_none(node):
            self.add(node, parent, field, index, "return")
        elif isinstance(node, ast.ExceptHandler):
            self.add(node, parent, field, index, "handler")
            if not (len(node.body) == 1 and isinstance(node.body[0], ast.Raise)):
                self.add(node, parent, field, index, "reraise")
        elif isinstance(node, (ast.Break, ast.Continue)):
            self.add(node, parent, field, index, "loop")


def _mutable_constant(value: object, quiet: int) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return True
    return isinstance(value, str) and not quiet


def _returns_none(node: ast.Return) -> bool:
    return node.value is None or (isinstance(node.value, ast.Constant) and node.value.value is None)


def _is_message_call(node: ast.AST) -> bool:
    """A call whose strings are messages for people (warnings, logging)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name in ("warn", "debug", "info", "warning", "error", "exception", "log")


def _is_super_call(stmt: ast.stmt) -> bool:
    """``super().__init__(...)``: deleting it only breaks construction, never a rule."""
    value = getattr(stmt, "value", None)
    func = getattr(value, "func", None)
    inner = getattr(func, "value", None)
    return isinstance(inner, ast.Call) and getattr(inner.func, "id", "") == "super"


def _apply(point: _Point) -> str:
    """Mutate ``point.node`` in place; return what it did, in one line."""
    node, op = point.node, point.operator
    before = ast.unparse(node).splitlines()[0] if not isinstance(node, ast.ExceptHandler) else ""
    if op == "compare":
        assert isinstance(node, ast.Compare)
        assert point.index is not None
        old = node.ops[point.index]
        node.ops[point.index] = _COMPARE[type(old)]()
    elif op == "arith":
        node.op = _ARITH[type(node.op)]()  # type: ignore[attr-defined]
    elif op == "boolean" and isinstance(node, ast.BoolOp):
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif op == "boolean":
        return f"`{before}` -> `{ast.unparse(node.operand)}`"  # type: ignore[attr-defined]
    elif op == "constant":
        assert isinstance(node, ast.Constant)
        value = node.value
        if isinstance(value, bool):
            node.value = not value
        elif isinstance(value, int):
            node.value = value + 1
        elif isinstance(value, str):
            node.value = value + "XX"
    elif op == "return":
        node.value = ast.Constant(None)  # type: ignore[attr-defined]
    elif op == "reraise":
        assert isinstance(node, ast.ExceptHandler)
        node.body = [ast.Raise()]
        return f"`except {ast.unparse(node.type) if node.type else ''}:` re-raises"
    elif op == "handler":
        assert isinstance(node, ast.ExceptHandler)
        was = ast.unparse(node.type) if node.type else ""
        node.type = ast.Name(_NEVER_RAISED)
        return f"`except {was}:` catches nothing"
    elif op == "loop":
        return f"`{before}` -> `{'continue' if isinstance(node, ast.Break) else 'break'}`"
    elif op == "delete":
        return f"`{before}` deleted"
    return f"`{before}` -> `{ast.unparse(node).splitlines()[0]}`"


def _replace(point: _Point, tree: ast.Module) -> None:
    """Swap in the replacement for node kinds that are replaced rather than edited."""
    node, op = point.node, point.operator
    replacement: ast.AST | None = None
    if op == "delete":
        replacement = ast.Pass()
    elif op == "boolean" and isinstance(node, ast.UnaryOp):
        replacement = node.operand
    elif op == "loop":
        replacement = ast.Continue() if isinstance(node, ast.Break) else ast.Break()
    if replacement is None:
        return
    container = getattr(point.parent, point.field)
    if isinstance(container, list):
        container[container.index(node)] = replacement
    else:
        setattr(point.parent, point.field, replacement)


def mutants(path: Path, *, label: str | None = None) -> Iterator[Mutant]:
    """Every mutant of the module at ``path``, in source order; ``label`` names the file in ids."""
    source = path.read_text(encoding="utf-8")
    name = label or path.name
    counts: dict[tuple[str, str], int] = {}
    total = len(_points(ast.parse(source)))
    for number in range(total):
        tree = ast.parse(source)
        point = _points(tree)[number]
        key = (point.function, point.operator)
        counts[key] = counts.get(key, 0) + 1
        line = getattr(point.node, "lineno", 0)
        description = _apply(point)
        _replace(point, tree)
        ast.fix_missing_locations(tree)
        yield Mutant(
            id=f"{name}:{point.function}:{point.operator}:{counts[key]}",
            line=line,
            description=description,
            source=ast.unparse(tree) + "\n",
        )


def _points(tree: ast.Module) -> list[_Point]:
    finder = _Finder()
    finder.visit(tree)
    return finder.points


def _runtime_names(node: ast.AST) -> Iterator[str]:
    """The names ``node`` reads when it runs: loaded names, attributes and imports, not
    annotations (``from __future__ import annotations`` leaves those unevaluated)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, ast.Name) and isinstance(item.ctx, ast.Load):
            yield item.id
        elif isinstance(item, ast.Attribute):
            yield item.attr
        elif isinstance(item, ast.alias):
            yield item.name.rpartition(".")[2]
        for name, value in ast.iter_fields(item):
            if name in ("annotation", "returns", "type_params"):
                continue
            children = value if isinstance(value, list) else [value]
            stack += [child for child in children if isinstance(child, ast.AST)]


def _defined(node: ast.stmt) -> list[str]:
    """The names a top-level statement defines, if it is a def, a class or a plain
    assignment (not ``__all__``)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        return [] if "__all__" in names else names
    return []


def unused_code(
    package_dir: Path, modules: Sequence[str], entry_points: Sequence[str] = ()
) -> dict[str, list[tuple[int, int]]]:
    """Per module of ``modules``, the lines of its top-level functions, classes and
    assignments that no code of the package uses at run time (outside their own body),
    and of its protocols (an interface's declarations): the shared helpers a package does
    not call, type variables and aliases.

    A mutant there changes nothing the package does (equivalent by construction), so it
    is listed, not run. A name in ``__all__``, a docstring or an annotation is no use; an
    import is (``__init__``'s public names), and so are ``entry_points`` (the factory a
    setting names). Outside a package (no ``__init__.py``) only ``modules`` are read.
    """
    package = (package_dir / "__init__.py").is_file()
    paths = sorted(package_dir.rglob("*.py")) if package else [package_dir / m for m in modules]
    trees = {
        path.relative_to(package_dir).as_posix(): ast.parse(path.read_text(encoding="utf-8"))
        for path in paths
    }
    uses = dict.fromkeys(entry_points, 1)
    for tree in trees.values():
        for name in _runtime_names(tree):
            uses[name] = uses.get(name, 0) + 1
    out: dict[str, list[tuple[int, int]]] = {}
    for module in modules:
        for node in trees[module].body:
            names = _defined(node)
            if not names:
                continue
            protocol = isinstance(node, ast.ClassDef) and any(
                getattr(base, "id", getattr(base, "attr", "")) == "Protocol" for base in node.bases
            )
            inside = list(_runtime_names(node))
            if protocol or all(uses.get(name, 0) == inside.count(name) for name in names):
                out.setdefault(module, []).append((node.lineno, node.end_lineno or node.lineno))
    return out


def package_mutants(
    package_dir: Path, modules: Sequence[str], entry_points: Sequence[str] = ()
) -> tuple[list[tuple[str, Mutant]], list[str]]:
    """Every mutant of ``modules`` (paths relative to ``package_dir``) as (module, mutant),
    but those in code the package never uses (:func:`unused_code`), whose ids come second."""
    dead = unused_code(package_dir, modules, entry_points)
    out: list[tuple[str, Mutant]] = []
    unused: list[str] = []
    for module in modules:
        spans = dead.get(module, [])
        for mutant in mutants(package_dir / module, label=module):
            if any(first <= mutant.line <= last for first, last in spans):
                unused.append(mutant.id)
            else:
                out.append((module, mutant))
    return out, unused


PYTEST_KILLS = (1, 2)
"""pytest's exit codes that kill a mutant: tests failed (1), collection failed (2: the
mutant does not import). 3 (internal error), 4 (usage error), 5 (no tests collected)
and a signal say the run tested nothing, unless the unmutated code passes the same run
(:meth:`PackageCopy.with_mutant`)."""


def verdict(returncode: int) -> str:
    """``survived``, ``killed`` or ``error`` (the run tested nothing) for a pytest exit code."""
    if returncode == 0:
        return "survived"
    return "killed" if returncode in PYTEST_KILLS else "error"


@dataclass
class PackageCopy:
    """A folder with its own copy of a package (or of a single-file module), put first on
    ``PYTHONPATH`` so the suite's fresh interpreters import it too; a mutant is written
    there, never in the original."""

    folder: Path
    package: str
    """The package's folder name; empty for a single-file module."""
    env: dict[str, str] = _field(default_factory=dict)

    @classmethod
    def make(cls, source: Path, folder: Path, *extra_path: str) -> PackageCopy:
        """Copy ``source`` (a package folder or a module file) into ``folder/src``."""
        src = folder / "src"
        if source.is_dir():
            shutil.copytree(source, src / source.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            src.mkdir(parents=True)
            shutil.copy2(source, src / source.name)
        env = dict(os.environ)
        paths = [str(src), *extra_path, env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # a mutant's .pyc must never outlive it
        env.pop("PYTEST_ADDOPTS", None)
        return cls(folder, source.name if source.is_dir() else "", env)

    def module_path(self, module: str) -> Path:
        return self.folder / "src" / self.package / module

    def pytest(self, command: Sequence[str], cwd: Path, timeout: float) -> str:
        """Run ``command`` (a pytest command line) here: its :func:`verdict`, or ``timeout``."""
        try:
            done = subprocess.run(
                list(command),
                cwd=cwd,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return "timeout"
        return verdict(done.returncode)

    def with_mutant(
        self, module: str, mutant: Mutant | None, command: Sequence[str], cwd: Path, timeout: float
    ) -> str:
        """Run ``command`` with ``mutant`` written into ``module`` (None: unmutated), then
        put the module back.

        An ``error`` (pytest tested nothing) is the mutant's doing when the same command
        passes on the unmutated copy (a conftest that imports the package stops pytest
        with a usage error, exit 4): then it is ``killed``; otherwise the run is at fault
        and it stays ``error``."""
        path = self.module_path(module)
        original = path.read_text(encoding="utf-8")
        try:
            if mutant is not None:
                path.write_text(mutant.source, encoding="utf-8")
            said = self.pytest(command, cwd, timeout)
        finally:
            path.write_text(original, encoding="utf-8")
        if said == "error" and mutant is not None:
            return "killed" if self.pytest(command, cwd, timeout) == "survived" else "error"
        return said
