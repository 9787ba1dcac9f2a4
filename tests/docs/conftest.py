"""The sandbox the docs' commands run in: what the reader has where the docs start.

A finished TraceML 0.5.0 run at ``logs/run1`` (written as 0.5.0 writes it, by
tests/follow/writer050.py), recorded payloads (``payloads.jsonl``,
``capture.msgpack``), a ``traceml.yaml``, and the README's exporter as the package
``my_exporter`` (README.md's skeleton, whose one unwritten name, ``connect``, is
given a sink that keeps what it is sent) and ``my_exporters`` (docs/runtime.md's
name for it), under ``src/`` on ``PYTHONPATH``; ``home/`` is the reader's ``~``.
"""

from __future__ import annotations

import importlib.util
import json
import struct
import sys
from pathlib import Path
from types import ModuleType

import msgspec
import pytest
from doc_blocks import ROOT, blocks
from traceml_exporter_sdk.testing import load_corpus

TESTS = ROOT / "tests"
CONNECT = '''\
import json

import orjson


class _Sink:
    """What README.md's skeleton leaves to the reader (``connect``): JSON Lines files
    under ``export_dir``, so the suite's default ``break_sink`` breaks it; as fast as
    the jsonl exporter (orjson, binary files; json for what orjson refuses), so the
    suite's throughput floor is met on a loaded machine too."""

    def __init__(self, context):
        self._folder = context.export_dir
        self._files = {}

    def send(self, stream, data):
        file = self._files.get(stream)
        if file is None:
            file = self._files[stream] = open(self._folder / f"{stream}.jsonl", "ab")
        try:
            line = orjson.dumps(data)
        except TypeError:  # an int beyond 64 bits, a lone surrogate: json escapes them
            line = json.dumps(data).encode()
        file.write(line + b"\\n")

    def flush(self):
        for file in self._files.values():
            file.flush()

    def close(self):
        files, self._files = list(self._files.values()), {}
        errors = []
        for file in files:
            try:
                file.close()
            except OSError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


def connect(context):
    return _Sink(context)


'''


def _writer050() -> ModuleType:
    spec = importlib.util.spec_from_file_location("writer050", TESTS / "follow" / "writer050.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def readme_exporter() -> str:
    """README.md's exporter skeleton: its python block that defines ``make_exporter``."""
    (source,) = [
        b.text
        for b in blocks(ROOT / "README.md")
        if b.language == "python" and "def make_exporter" in b.text
    ]
    return source


def make_sandbox(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "home" / "src").mkdir(parents=True)
    (folder / "tmp").mkdir()
    package = folder / "src" / "my_exporter"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", "utf-8")
    (package / "exporter.py").write_text(CONNECT + readme_exporter(), "utf-8")
    (folder / "src" / "my_exporters.py").write_text(
        "from my_exporter.exporter import make_exporter\n", "utf-8"
    )
    writer050 = _writer050()
    run = writer050.Writer050(folder / "logs" / "run1")
    for batch in writer050.corpus_records_050():
        run.flush(batch)
    run.close()
    payloads = load_corpus()
    (folder / "payloads.jsonl").write_text("".join(json.dumps(p) + "\n" for p in payloads), "utf-8")
    frames = [msgspec.msgpack.encode(p) for p in payloads]
    (folder / "capture.msgpack").write_bytes(
        b"".join(struct.pack(">I", len(f)) + f for f in frames)
    )
    (folder / "traceml.yaml").write_text("export_streams: all\n", "utf-8")
    return folder


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    return make_sandbox(tmp_path / "sandbox")


@pytest.fixture
def on_sys_path(sandbox: Path) -> object:
    """The sandbox's ``src`` importable in this process, for the docs' Python snippets."""
    sys.path.insert(0, str(sandbox / "src"))
    try:
        yield sandbox
    finally:
        sys.path.remove(str(sandbox / "src"))
        for name in [n for n in sys.modules if n.split(".")[0] in ("my_exporter", "my_exporters")]:
            del sys.modules[name]
