"""A worker process ends when the process that started it dies, even by SIGKILL, when no cleanup of the
parent's runs: on Linux the kernel kills it (``prctl(PR_SET_PDEATHSIG)``), and everywhere a thread that
sees its parent change exits it.

The parent names itself in the worker's environment (``ENV``); the worker calls ``hold`` first thing."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

ENV = "P2SMT_PARENT_PID"
POLL_S = 0.5
PR_SET_PDEATHSIG = 1


def parent_env() -> dict[str, str]:
    """The environment entry that names this process as a worker's parent."""
    return {ENV: str(os.getpid())}


def hold(parent: int | None = None) -> None:
    """Die with ``parent`` (default: the pid in ``ENV``; nothing when neither is given). The kernel's
    signal follows the parent *thread*: start the worker from a thread that lives as long as the work."""
    if parent is None:
        named = os.environ.get(ENV)
        if not named:
            return
        parent = int(named)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl: the watching thread alone
    if os.getppid() != parent:  # the parent died before the worker got here
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), name="p2smt-lifeline", daemon=True).start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    os._exit(1)
