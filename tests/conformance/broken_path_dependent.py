"""A correct exporter whose module imports a helper found only on the test run's sys.path.

It works in-process but not in the aggregator, which has only this module's
directory on PYTHONPATH: it must fail exactly ``importability[fresh_subprocess]``.
"""

from __future__ import annotations

import conformance_side_module  # noqa: F401 - the point: not importable from a fresh process
from broken_exporters import make_good as make_exporter

__all__ = ["make_exporter"]
