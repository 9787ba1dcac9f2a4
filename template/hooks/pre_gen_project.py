"""Refuse answers that cannot work, before cookiecutter writes a single file.

The package name ends up as a folder name and as the ``module`` of TraceML's
``module:factory`` setting, so it must be one importable identifier that hides
nothing else on the aggregator's import path (the standard library, TraceML,
or a module the generated project imports). The exporter class must not rebind
a name its module or tests use. The free-text answers are rendered unescaped
into a Python docstring, Markdown, TOML and a license text, so they are held to
what is safe in all of them. On a bad answer this prints one message and exits
1; cookiecutter then removes the project folder it made.
"""

from __future__ import annotations

import builtins
import json
import keyword
import re
import sys
import unicodedata

# Rendered by cookiecutter; tojson keeps any quote or backslash in a value inert, and the
# ''' quotes (kept by fmt: skip) cannot occur in its output, which escapes every '.
PACKAGE_NAME = json.loads(r'''{{ cookiecutter.package_name | tojson }}''')  # fmt: skip
PROJECT_SLUG = json.loads(r'''{{ cookiecutter.project_slug | tojson }}''')  # fmt: skip
EXPORTER_CLASS = json.loads(r'''{{ cookiecutter.exporter_class | tojson }}''')  # fmt: skip
PROJECT_NAME = json.loads(r'''{{ cookiecutter.project_name | tojson }}''')  # fmt: skip
AUTHOR_NAME = json.loads(r'''{{ cookiecutter.author_name | tojson }}''')  # fmt: skip
AUTHOR_EMAIL = json.loads(r'''{{ cookiecutter.author_email | tojson }}''')  # fmt: skip

TRACEML_PACKAGES = ("traceml", "traceml_ai", "traceml_exporter_sdk")
"""Import names of TraceML (``traceml-ai`` installs both ``traceml`` and ``traceml_ai``) and the SDK."""

DEPENDENCY_MODULES = frozenset(
    {
        # what generated projects import, and their test and build tools
        "orjson", "pytest", "_pytest", "hypothesis", "nox", "packaging", "mypy", "ruff",
        "pluggy", "iniconfig", "attr", "attrs", "sortedcontainers", "exceptiongroup", "tomli",
        "typing_extensions", "hatchling", "setuptools", "pip", "pkg_resources", "wheel",
        "cookiecutter", "jinja2", "yaml", "msgspec",
        # the sinks' own libraries
        "psycopg", "psycopg_pool", "psycopg_binary", "pyarrow", "duckdb", "opentelemetry",
        "google", "grpc", "httpx", "requests", "urllib3", "certifi", "polars", "cramjam",
        "google_crc32c", "tensorboard", "mlflow", "mlflow_server",
        # folder names a project has, where a package of that name would be confused
        "tests", "conftest", "src", "sink_support", "exporter_calls", "crash_driver",
        "suite_helpers",
    }
)  # fmt: skip
"""Import names a package may not take: the generated project, or its tests, import them."""

TEMPLATE_NAMES = frozenset(
    {
        # bound at the top of the template's exporter and test modules (a test keeps this list
        # complete: tests/template/test_hooks.py)
        "Any", "ByStream", "Callable", "ClassVar", "DATABASE_FILE", "Expected", "IO",
        "Iterable", "JSON_TYPE", "Mapping", "NS", "PYPROJECT", "PYTHONS", "Path", "Protocol",
        "ROOT", "ROOT_ONLY", "ROW_ID", "RUNS_TABLE", "Requirement", "SDK", "SDK_NAME", "SUMMARY_FILE",
        "Sequence", "Iterator", "Final", "Literal", "TypeAlias", "Self",
        "HOSTILE_TEXT", "HealthCheck", "LINT_PATHS", "releasing", "contextmanager",
        "SettingsError", "StrayRecord",
        # the postgres sink's exporter, schema module and tests
        "APPLICATION_NAME", "Buffer", "CONNECT_TIMEOUT_S", "CONNINFO_ENV",
        "DEFAULT_SCHEMA", "Database", "FLUSHES_TABLE", "Layout", "PostgresServer",
        "PostgresUnavailableError", "RECEIPT_FILE", "REQUIRE_ENV", "SCHEMA_ENV", "SINK_COLUMNS",
        "STATEMENT_TIMEOUT_MS", "STREAM_COLUMNS", "TableKey", "UNIQUE_VIEW_SUFFIX",
        "Cursor", "DatatypeMismatch", "EXACT", "RUN_ID", "SESSION_ROOT", "STREAM_KEYS",
        "AdaptContext", "Dumper", "Format", "BoundedConnection", "DEFAULT_TIMEOUTS",
        "MIN_CONNECT_S", "PQGen", "QUICK", "StalledError", "Timeouts",
        "TypeVar", "MAX_CALL_S", "TIMEOUT_ENV",
        # the parquet sink's modules and tests
        "BACKLOG_BYTES", "BATCH", "BIG_FILE_ROWS", "CLOSE_GRACE_S", "COMPRESSION",
        "CONTRACT_VERSION", "DRIVER", "EVENTS_TYPE", "EXACT_TEXT", "FIELD_TYPES", "FLUSHES",
        "FORWARD",
        "INT_RULE", "JSON_ENCODING", "PART", "PART_GLOB", "PART_LIMIT", "REPLACED_GRACE_S",
        "ROW_GROUP_ROWS", "Recording", "STAGE_ROWS", "STATS_FIELDS", "STATS_TYPE", "STREAMS",
        "SinkError", "StreamFolder", "TEXT_RULE", "UNKNOWN_FIELD_RULE", "ExportDirLock",
        # the SDK's public names, which generated tests import
        "ALL_STREAMS", "DEFAULT_EXPORT_STREAMS", "EXPORT_STREAM_NAMES", "EventStats",
        "ExportFailure", "ExportRecord", "ExportReport", "ExportWorker", "Exporter",
        "ExporterContext", "ExporterFactory", "ExporterSettingError", "FactoryFailure",
        "JsonlExporter", "ProcessRecord", "RECORD_TYPES", "RECORD_TYPE_BY_STREAM", "Record",
        "RecordBatch", "RuntimeEnvironmentRecord", "SCHEMA_VERSION", "StdoutStderrRecord",
        "StepMemoryRecord", "StepTimeRecord", "SystemGpuRecord", "SystemRecord", "CHECKS",
        "Check", "ConformanceConfigError", "ExporterConformance", "ReadBackNotImplementedError",
        "HOSTILE", "TYPE_CHECKING", "Counter",
        # bound by the otlp sink's modules and tests (and what they import)
        "DEFAULT_ENDPOINT", "DEFAULT_SERVICE_NAME", "DEFAULT_TIMEOUT_MS", "DeadlineHTTPConnection",
        "DeadlineHTTPSConnection", "DecodeError", "Descriptor", "ENDPOINT_VARIABLE", "EVENT_PREFIX",
        "Fault", "FieldDescriptor", "HTTPConnection", "HTTPSConnection", "LOGS_PATH", "MAX_BUFFER_BYTES", "MAX_REQUEST_BYTES", "OtlpExportError", "OtlpReceiver",
        "OtlpSettings", "RETRYABLE_STATUSES", "RecordEncoder", "SCOPE_NAME",
        "TIMESTAMPS", "VALUES", "KEY_ESCAPE", "ScriptedPeer",
        # the prometheus sink's dashboard and rules generator (monitoring/) and its tests
        "DashboardSchemaError", "FIRING", "Fed", "HERE", "IDENTITY", "KINDS", "NamedTuple",
        "PLANTED_THRESHOLDS", "Query", "RANK", "RUN", "STEP", "STUCK_S", "Thresholds",
        "UNIT_TESTS", "VARIABLES", "WAIT",
        # the mlflow sink's test support (its fault proxy's deadline)
        "CHECK_MARKER", "CHECK_TIMEOUT_S",
        # the lifecycle every exporter shares (_lifecycle.py)
        "Lifecycle", "State",
        # the shared test helpers (tests/exporter_calls.py)
        "RECORD_LEVEL_CHECKS",
        # the network sinks' delivery layer (_delivery.py) and its tests
        "Backoff", "BACKOFF", "Flaky", "UNAVAILABLE",
        # the HTTP sinks' shared transport and exporter lifecycle (_http.py, _http_exporter.py),
        # the hand-written encoders' _protobuf.py, and the SDK's fault proxies
        "Answer", "Endpoint", "HttpError", "HttpTransport", "REDACTED", "WAITABLE_STATUSES",
        "Generic", "HttpExporter", "ONE_BYTE", "TcpFaultProxy",
        # the mlflow sink's cross-rank summary (_mlflow_summary.py) and its tests
        "Collection", "DEFAULT_WAIT_STEPS", "Fraction", "Group", "POINTS_FILE", "POINTS_WAIT_S",
        "STATE_FILE", "STATE_VERSION", "SUMMARIZED", "SUMMARY_TAG", "Steps", "Summary",
        "Values", "WAIT_STEPS", "RankRuns", "RunKey", "SLOWEST",
        # the prometheus sink's modules and tests (and what they import)
        "Aggregator", "BUCKETS_MS", "BaseHTTPRequestHandler", "CONTENT_ENCODING", "CONTENT_TYPE",
        "CardinalityError", "DEFAULT_TIMEOUT_S", "DEFAULT_URL", "FAMILIES", "FaultProxy",
        "GAUGES", "INFO_FIELDS", "JOB", "MAX_LABEL_CHARS", "MAX_SERIES", "MAX_SERIES_PER_REQUEST",
        "METRIC_TYPES", "MetricsServer", "MetricsServerUnavailableError", "PREFIX",
        "PROTOCOL_HEADERS", "PrometheusSettings", "PrometheusWriteError", "READS_ROWS",
        "SAMPLE_TIMES", "SKIP_CHECKS", "SNAPSHOT_COUNTERS", "Series", "ThreadingHTTPServer",
        "VM_DIGITS", "VM_TINY", "Phase", "STALE_NAN",
        # the tensorboard sink's modules and tests
        "BUFFER_BYTES", "EVENT_MEASURES", "FILE_VERSION", "GPU_FIELDS", "KEEP_ALL", "LOGDIR_ENV",
        "MEASURES", "MEMORY_FIELDS", "RECORD_PLUGIN", "RECORD_TAG", "SAMPLES", "SHOW_TIMEOUT_S",
        "SNAPSHOT", "SNAPSHOT_FIELDS", "START_TIMEOUT_S", "STEPPED_STREAMS", "STEPS",
        "ScalarValues", "StringTensors", "TAG", "TensorBoard",
        # the mlflow sink's modules and tests
        "ADMIN", "DEADLINE_S", "DEFAULT_EXPERIMENT", "FIELDS", "MAX_BATCH_BYTES", "MAX_BUFFERED_METRICS", "MAX_KEY", "MAX_METRICS", "MAX_TAGS",
        "MAX_TAG_VALUE", "MlflowApi", "MlflowExportError", "MlflowServer", "MlflowSettings",
        "MlflowUnavailableError", "NOT_EXPORTED", "PEER_ENV", "RANK_TAG", "RETRYABLE",
        "SESSION_TAG", "SLACK_S", "STEPPED", "TAG_PREFIX", "TEST_TIMEOUT_S",
        "MAX_EXAMPLES",
    }
)  # fmt: skip
"""Names an exporter class may not take: its module or its tests already bind them."""

MAX_NAME = 64
"""Longest package or class name: it is a folder and file-name part (limit 255 bytes)."""
MAX_TEXT = 100
"""Longest project name, slug and author name."""

_DIST_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
_PROJECT_PUNCTUATION = frozenset(" -.,'()&+")
_ADDRESS_PART = r"[^@\s<>\"',;:()\[\]\\]+"
_EMAIL = re.compile(rf"^{_ADDRESS_PART}@{_ADDRESS_PART}\.{_ADDRESS_PART}$")


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


def _identifier_problem(name: str) -> str | None:
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
    if len(name) > MAX_NAME:
        return f"it is {len(name)} characters long; at most {MAX_NAME}"
    normal = unicodedata.normalize("NFKC", name)
    if normal != name:
        return (
            f"Python reads it as {normal!r} (NFKC normalisation), but the file would be named "
            f"as typed; write {normal!r}"
        )
    if name.startswith("__") and name.endswith("__"):
        return "it is a dunder name, which Python reserves"
    return None


def package_problem(name: str) -> str | None:
    """Why ``name`` cannot be the import package, or None when it can."""
    problem = _identifier_problem(name)
    if problem:
        return problem
    if name in _stdlib_names():
        return f"it shadows the standard-library module {name!r}"
    if name in TRACEML_PACKAGES:
        return f"it shadows {name!r}, which TraceML's aggregator imports itself"
    if name in DEPENDENCY_MODULES:
        return f"it shadows {name!r}, which the generated project or its tests import"
    return None


def slug_problem(slug: str) -> str | None:
    """Why ``slug`` cannot be the distribution and folder name, or None."""
    problem = _path_problem(slug)
    if problem:
        return problem
    if not _DIST_NAME.match(slug) or not slug.isascii():
        return "it is not a valid distribution name (ASCII letters, digits, '.', '_', '-')"
    if len(slug) > MAX_TEXT:
        return f"it is {len(slug)} characters long; at most {MAX_TEXT}"
    return None


def class_problem(name: str) -> str | None:
    """Why ``name`` cannot be the exporter class, or None."""
    if not name.isidentifier() or keyword.iskeyword(name):
        return "it is not a Python identifier (or is a keyword)"
    problem = _identifier_problem(name)
    if problem:
        return problem
    if not name[0].isupper():
        return "a class name starts with an upper-case letter (CapWords)"
    if name.startswith("Test"):
        return "pytest would collect a class named Test* in the tests that import it"
    if name in TEMPLATE_NAMES or hasattr(builtins, name):
        return f"the exporter module or its tests already use the name {name!r}"
    return None


def _text_problem(text: str) -> str | None:
    if not text.strip():
        return "it is empty"
    if len(text) > MAX_TEXT:
        return f"it is {len(text)} characters long; at most {MAX_TEXT}"
    if text != text.strip():
        return "it starts or ends with a space"
    for char in text:
        if not char.isprintable() or unicodedata.category(char) in ("Cs", "Co", "Cn"):
            return f"it holds the unprintable character {char!r}"
    return None


def project_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be the project name (in a docstring and Markdown), or None."""
    problem = _text_problem(name)
    if problem:
        return problem
    bad = sorted({c for c in name if not c.isalnum() and c not in _PROJECT_PUNCTUATION})
    if bad:
        return (
            f"it holds {''.join(bad)!r}; a project name is letters, digits, spaces and "
            "- . , ' ( ) & + (it goes unescaped into a docstring and Markdown)"
        )
    return None


def author_problem(name: str) -> str | None:
    """Why ``name`` cannot be the author (in TOML, escaped, and a license text), or None."""
    return _text_problem(name)


def email_problem(email: str) -> str | None:
    """Why ``email`` cannot be the author's address, or None."""
    problem = _text_problem(email)
    if problem:
        return problem
    if not email.isascii() or not _EMAIL.match(email):
        return "it is not an address of the form name@example.com"
    return None


def _shown(value: str) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def main() -> int:
    checks = (
        ("project_name", PROJECT_NAME, project_name_problem),
        ("package_name", PACKAGE_NAME, package_problem),
        ("project_slug", PROJECT_SLUG, slug_problem),
        ("exporter_class", EXPORTER_CLASS, class_problem),
        ("author_name", AUTHOR_NAME, author_problem),
        ("author_email", AUTHOR_EMAIL, email_problem),
    )
    problems = [
        f"{variable} {_shown(value)}: {problem}"
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
