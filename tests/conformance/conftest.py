"""Enable pytester for the conformance suite's own tests.

``pytest_plugins = ["pytester"]`` is refused in a conftest below the rootdir
once collection has started (pytest: "Defining 'pytest_plugins' in a
non-top-level conftest is no longer supported"), which breaks ``pytest tests``;
registering the plugin from ``pytest_configure`` works from any depth.
"""

from __future__ import annotations

# Imported here so it stays in sys.modules across pytester's in-process runs:
# otherwise each inner run imports it again (its pytest plugin does, for the
# terminal summary) and pytest rewrites its asserts again, about 1.5 s a run.
import hypothesis  # noqa: F401
import pytest


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")
