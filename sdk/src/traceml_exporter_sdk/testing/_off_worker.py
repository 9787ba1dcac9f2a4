"""Seeing the exporter's own code run on a thread other than the worker's (a timer, a pool,
a client library's callback) while the exporter is open.

Two probes, so nothing depends on one: a profile hook (``threading.setprofile``, and on
Python 3.12+ ``threading.setprofile_all_threads``) sees every call a thread started during
the watch makes, and a sampler reads every thread's stack (``sys._current_frames``) every
few milliseconds for threads that were running before it. A thread allowed to run the code
(the worker's, the suite's) removes the hook from itself on its first call, so the watched
run pays for the hook only on other threads.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

SAMPLE_S = 0.002
"""How often the sampler reads every thread's stack."""
_SAMPLER = "off-worker sampler"
_SDK = __name__.partition(".")[0]


def code_roots(*modules: str) -> tuple[str, ...]:
    """The files that count as the exporter's code: each module's top-level package folder
    (the module's own file for a lone module, and for a module of the SDK itself, whose
    worker and suite run the exporter legitimately)."""
    roots: set[str] = set()
    for name in filter(None, modules):
        top = name.partition(".")[0]
        try:
            target = importlib.import_module(name if top == _SDK else top)
        except ImportError:  # a module made at run time: nothing on disk to watch
            continue
        file = getattr(target, "__file__", None)
        if file is None:
            roots.update(str(Path(p).resolve()) + "/" for p in getattr(target, "__path__", ()))
        elif Path(file).name == "__init__.py" and top != _SDK:
            roots.add(str(Path(file).resolve().parent) + "/")
        else:
            roots.add(str(Path(file).resolve()))
    return tuple(sorted(roots))


class OffWorkerCalls:
    """Where the exporter's code ran on a thread not allowed to run it: ``(thread, place)``."""

    def __init__(self, roots: tuple[str, ...], allowed: Iterable[str]) -> None:
        self.roots = roots
        self.allowed = frozenset({*allowed, _SAMPLER})
        self.found: dict[str, str] = {}
        self._lock = threading.Lock()

    def _mine(self, filename: str) -> bool:
        return filename.startswith(self.roots)

    def _note(self, thread: str, frame: FrameType) -> None:
        code = frame.f_code
        with self._lock:
            self.found.setdefault(
                thread, f"{code.co_name}() at {Path(code.co_filename).name}:{frame.f_lineno}"
            )

    def _hook(self, frame: FrameType, event: str, arg: Any) -> None:
        del arg
        name = _thread_name(threading.get_ident())
        if name in self.allowed:
            sys.setprofile(None)  # this thread may run the exporter: stop paying for the hook
        elif event == "call" and self._mine(frame.f_code.co_filename):
            self._note(name, frame)
            sys.setprofile(None)  # one place per thread is enough

    def _sample(self, stop: threading.Event) -> None:
        me = threading.get_ident()
        while not stop.wait(SAMPLE_S):
            for ident, frame in sys._current_frames().items():
                name = _thread_name(ident)
                if ident == me or name in self.allowed or name in self.found:
                    continue
                walk: FrameType | None = frame
                while walk is not None:
                    if self._mine(walk.f_code.co_filename):
                        self._note(name, walk)
                        break
                    walk = walk.f_back

    @contextmanager
    def watching(self) -> Iterator[OffWorkerCalls]:
        """Watch for as long as the block runs."""
        all_threads = getattr(threading, "setprofile_all_threads", None)
        stop = threading.Event()
        sampler = threading.Thread(target=self._sample, args=(stop,), name=_SAMPLER, daemon=True)
        sampler.start()
        threading.setprofile(self._hook)
        if all_threads is not None:
            all_threads(self._hook)
        try:
            yield self
        finally:
            stop.set()
            threading.setprofile(None)
            if all_threads is not None:
                all_threads(None)
            sys.setprofile(None)
            sampler.join()


def _thread_name(ident: int) -> str:
    """The name of a running thread, without ``threading.current_thread()``, which makes a
    dummy thread of one that is starting or ending."""
    thread = threading._active.get(ident)  # type: ignore[attr-defined]
    return thread.name if thread is not None else f"thread {ident}"
