"""Untrusted text on its way out (issue 41): run folder names of any bytes and manifest
values of any text are escaped by one function (``_export.shown``) in progress lines,
``status.json`` and ``/metrics`` labels; an exporter's error loses its secrets
(``_export.redact``). Property tests over what an attacker can choose."""

from __future__ import annotations

import os
import re
import string
from pathlib import Path

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from traceml_exporter_sdk._bridge.follow.metrics import _Collector
from traceml_exporter_sdk._bridge.follow.status import RunStatus, progress_line
from traceml_exporter_sdk._bridge.follow.watch import Watcher
from traceml_exporter_sdk._export.redact import MASK, redacted
from traceml_exporter_sdk._export.shown import shown

_ESCAPE = re.compile(r"\\(x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|[nrt\\])")


def unshown(text: str) -> str:
    """The reader's side of ``shown``: the text back, an escaped byte as surrogateescape."""

    def back(match: re.Match[str]) -> str:
        code = match[1]
        if code[0] in "nrt\\":
            return {"n": "\n", "r": "\r", "t": "\t", "\\": "\\"}[code]
        value = int(code[1:], 16)
        if code[0] == "x" and value >= 0x80:
            return chr(0xDC00 + value)  # a byte that was not UTF-8
        return chr(value)

    return _ESCAPE.sub(back, text)


names = st.binary(min_size=1, max_size=40).filter(lambda b: b"/" not in b and b"\0" not in b)
"""A run folder's name: any bytes a file name may hold."""
texts = st.text(max_size=60)
"""A manifest value: any text JSON can carry (controls, ANSI, line separators)."""
hostile = st.sampled_from(["\n", "\r", "\x1b[31m", "\x1b]0;t\x07", "\u2028", "\u202e", "\\"])


@given(names)
@example(b"evil\xff\n\x1b[2Kfollow run1: done")
def test_a_name_of_any_bytes_is_shown_as_one_printable_utf8_line_that_reads_back(
    raw: bytes,
) -> None:
    name = os.fsdecode(raw)
    out = shown(name)
    assert out.isprintable()
    out.encode("utf-8")  # strict: nothing an encoder refuses
    assert os.fsencode(unshown(out)) == raw


@given(texts)
def test_text_is_shown_unchanged_when_printable_and_else_reads_back(text: str) -> None:
    out = shown(text)
    assert out.isprintable()
    if text.isprintable() and "\\" not in text:
        assert out == text
    assert unshown(out) == text


@settings(max_examples=60, deadline=None)
@given(raw=names, said=st.lists(st.one_of(texts, hostile), max_size=4).map("".join))
def test_status_progress_and_metrics_show_a_hostile_run_escaped(
    tmp_path_factory: object, raw: bytes, said: str
) -> None:
    """A hostile run name and message through what writes them: the status snapshot
    (``status.json``), the progress line, a service note and the ``/metrics`` text."""
    root = Path(os.fsdecode(b"/logs/" + raw))
    status = RunStatus(root)
    status.update(state="done", end="not-started", message=said)
    status.failed(said, 0)
    snapshot = status.snapshot()
    assert orjson.loads(orjson.dumps(snapshot))["run"] == "/logs/" + shown(os.fsdecode(raw))
    line = progress_line(snapshot)
    assert line.isprintable(), line
    assert line.startswith(f"follow {shown(os.fsdecode(raw))}: ")
    notes: list[str] = []
    Watcher(None, lambda notice: notes.append(notice.line), 1.0).notice(
        "passed", f"follow {root.name}: the manifest says {said}"
    )
    assert notes[0].isprintable()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(lambda: [snapshot], None))  # type: ignore[arg-type]
    text = generate_latest(registry).decode("utf-8")
    runs = {
        sample.labels["run"]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if "run" in sample.labels
    }
    assert runs == {shown(os.fsdecode(raw))}


# -- secrets ---------------------------------------------------------------------------

secrets = st.text(string.ascii_letters + string.digits + "!#$%*+-.^_|~", min_size=6, max_size=30)
"""A password: what a URL or a conninfo holds unquoted (no separator, no ``@`` or ``/``)."""
TEMPLATES = [
    "could not connect to postgresql://trainer:{s}@db.internal:5432/runs",
    "connection to mysql+pymysql://u:{s}@10.0.0.1/x failed: timeout",
    "host=db port=5432 user=trainer password={s} dbname=runs",
    "host=db passwd={s} dbname=runs",
    "dsn: 'host=db pwd={s}'",
    "POST https://api.example/v1?token={s}&run=1: 401",
    "GET /v1/ingest?api_key={s}",
    '{{"user": "u", "password": "{s}", "host": "h"}}',
    "{{'client_secret': '{s}', 'id': 3}}",
    'settings: {{"db_password":"{s}"}}',
    "Authorization: Bearer {s}",
    "MLFLOW_TRACKING_TOKEN={s} rejected",
    "access_key={s};secret_key={s}",
]


@settings(max_examples=200)
@given(secret=secrets, template=st.sampled_from(TEMPLATES), around=texts)
def test_no_secret_survives_redaction(secret: str, template: str, around: str) -> None:
    text = around + " " + template.format(s=secret) + " " + around
    if secret in around:
        return  # the text quotes it elsewhere, as something else
    out = redacted(text)
    assert secret not in out, out
    assert MASK in out
    assert redacted(out) == out


@given(st.text(string.printable.replace("=", "").replace(":", "")))
def test_text_without_a_parameter_or_url_is_left_as_it_is(text: str) -> None:
    if "Bearer" in text or "Basic" in text:
        return
    assert redacted(text) == text


def test_what_is_kept_beside_the_mask_names_the_place() -> None:
    said = redacted("could not connect to postgresql://trainer:hunter2@db:5432/runs")
    assert said == "could not connect to postgresql://trainer:***@db:5432/runs"
    assert redacted("host=db password='a b\\' c' dbname=x") == "host=db password='***' dbname=x"


def test_a_manifest_over_the_bound_is_never_read_whole(tmp_path: Path) -> None:
    import tracemalloc

    from traceml_exporter_sdk._bridge.follow.run import MANIFEST_MAX_BYTES, RunFolder

    folder = RunFolder.at(tmp_path)
    with open(folder.manifest_path, "wb") as fh:
        fh.write(b'{"session_id": "s", "pad": "')
    os.truncate(folder.manifest_path, 100 * 2**20)
    tracemalloc.start()
    try:
        assert folder.manifest() is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * MANIFEST_MAX_BYTES + 2**16, peak
    assert "104,857,600 bytes" in (folder.manifest_refused() or "")


@pytest.mark.parametrize(
    "unit", ["a", "a=", "a:", "x://", "x://a:", "password=", '"', "token: '", "Bearer "]
)
def test_redaction_takes_time_in_proportion_to_the_text(unit: str) -> None:
    """No text makes the redactor backtrack (a long run of word characters once took
    11 s for 4 KB): a megabyte of any repeated piece is redacted in seconds at most."""
    import time

    text = unit * (2**20 // len(unit))
    started = time.process_time()
    redacted(text)
    assert time.process_time() - started < 10
