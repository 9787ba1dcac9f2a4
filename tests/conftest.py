"""What every SDK test process needs, whoever started it.

Some tests send SIGINT to a CLI subprocess and check its Ctrl-C path. A runner
started in the background without job control (``nohup nox &`` from a script)
hands every child an ignored SIGINT; Python then installs no KeyboardInterrupt
handler, and those tests hang until their timeout. Children inherit an ignored
signal but not a handler, so putting Python's own handler back here gives them
SIGINT's default, as under a terminal.
"""

from __future__ import annotations

import signal

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
