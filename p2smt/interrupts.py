"""Ctrl-C and SIGTERM stop the command line: a flag, Z3's running work cancelled, one exception in the main thread.

Z3's own Ctrl-C handler (installed around each check) swallows SIGINT and makes the check return
``unknown``, which reads exactly like a time limit. The command line therefore turns Z3's handler off
(global parameter ``ctrl_c``) and takes SIGINT and SIGTERM itself (``install``): the signal sets a flag
at once (read by ``received``: an unfinished proof is then never reported as a timeout), a watcher
thread woken by the signal cancels every live Z3 context (a check in any thread returns within Z3's
polling interval) and, until the main thread has raised ``Interrupted``, delivers the signal to it again
(a signal that lands while Python runs inside a Z3 callback is delivered once it has left it).
"""

from __future__ import annotations

import _thread
import contextlib
import fcntl
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

__all__ = ["Interrupted", "install", "interrupted_reason", "noting", "received", "stop_if_received"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
RETRY_S = 0.01
"""How often the watcher re-delivers the signal until the main thread has raised ``Interrupted``."""
CANCEL_S = 1.0
"""How often it cancels every live Z3 context again (work started after the first cancel stops too)."""

_received: int | None = None
_raised = False


class Interrupted(KeyboardInterrupt):
    """The command was stopped by ``signum``; ``finished`` says what was done by then (None: nothing said).

    A KeyboardInterrupt, so ``except Exception`` handlers let it through."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.finished: str | None = None

    @property
    def exit_code(self) -> int:
        """128 + the signal's number: 130 for SIGINT (Ctrl-C), 143 for SIGTERM, as a shell reports them."""
        return 128 + self.signum

    def message(self) -> str:
        """One line for stderr: which signal, and what was finished."""
        what = "interrupted (Ctrl-C)" if self.signum == signal.SIGINT else f"stopped by {signal.Signals(self.signum).name}"
        return f"p2smt: {what}: {self.finished or 'stopped before the command finished'}"


def received() -> int | None:
    """The signal that asked this process to stop (None: none)."""
    return _received


def stop_if_received() -> None:
    """Raise ``Interrupted`` if a stop signal arrived (for work that must not go on after one); the watcher
    then delivers the signal no more."""
    global _raised
    if _received is not None:
        _raised = True
        raise Interrupted(_received)


@contextlib.contextmanager
def noting(finished: Callable[[], str]) -> Iterator[None]:
    """Record ``finished()`` (what was done) on an ``Interrupted`` leaving the block; the innermost note wins.
    A block that ends otherwise after a stop signal (its delivery deferred while Z3 ran, or an error the
    signal caused, such as a killed worker) raises ``Interrupted`` here, noted too."""
    try:
        try:
            yield
        except Exception:  # re-raised unless a stop signal came first
            stop_if_received()
            raise
        stop_if_received()
    except Interrupted as err:
        if err.finished is None:
            err.finished = finished()
        raise err from None


def interrupted_reason(reason: str) -> bool:
    """Whether Z3's ``reason_unknown`` tells of a stop signal rather than a limit: 'interrupted from keyboard'
    (Z3's own Ctrl-C handler, on in a process that did not ``install``), or 'interrupted' (an interrupt
    of the context) once a stop signal came; without one, that interrupt is a caller's wall-clock timer.
    Z3's limits say 'timeout' and, for the resource limit, 'canceled'."""
    text = reason.lower()
    return "keyboard" in text or ("interrupt" in text and _received is not None)


def install() -> None:
    """Take SIGINT and SIGTERM for the command line (main thread only; once per process)."""
    global _received, _raised
    if getattr(install, "done", False):
        return
    install.done = True  # type: ignore[attr-defined]
    _received, _raised = None, False
    import z3

    z3.set_param("ctrl_c", False)  # Z3's handler would swallow SIGINT as an 'unknown'
    read, write = (_above_stdio(fd) for fd in os.pipe())
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    for signum in SIGNALS:
        signal.signal(signum, _handler)
    threading.Thread(target=_watch, args=(read,), name="p2smt-signals", daemon=True).start()
    os.register_at_fork(after_in_child=_forked)


def _above_stdio(fd: int) -> int:
    """``fd`` moved to 3 or above: with stdout closed (``>&-``) a new pipe takes descriptor 1, which the
    command then points at /dev/null."""
    if fd > 2:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return moved


def _handler(signum: int, frame: FrameType | None) -> None:
    """Python's handler in the main thread: note the signal, raise ``Interrupted`` once, outside Z3's code
    (an exception raised inside a ctypes callback is lost; the watcher delivers the signal again)."""
    global _received, _raised
    _received = _received or signum
    if _raised or _in_z3(frame):
        return
    _raised = True
    raise Interrupted(_received)


def _in_z3(frame: FrameType | None) -> bool:
    while frame is not None:
        if os.sep + "z3" + os.sep in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def _watch(read: int) -> None:
    """Wait for a signal; then cancel Z3's work and re-deliver the signal until the main thread stopped."""
    global _received
    while True:
        try:
            data = os.read(read, 64)
        except OSError:  # the descriptor is gone: the handler still stops the main thread, Z3 uncancelled
            return
        signum = next((b for b in data if b in SIGNALS), None)
        if signum is not None:
            break
    _received = _received or signum
    cancelled = 0.0
    while True:
        if time.monotonic() - cancelled >= CANCEL_S:
            _cancel_z3()
            cancelled = time.monotonic()
        if not _raised:
            _thread.interrupt_main(_received)
        time.sleep(RETRY_S if not _raised else CANCEL_S)


def _cancel_z3() -> None:
    """Interrupt every live Z3 context: its running check, simplification or parse ends ``unknown``/raises."""
    z3 = sys.modules.get("z3")
    if z3 is None:
        return
    for obj in gc.get_objects():
        if isinstance(obj, z3.Context) and obj.ctx is not None:
            with contextlib.suppress(Exception):  # a context being deleted meanwhile
                obj.interrupt()


def _forked() -> None:
    """A forked worker leaves stopping to its parent, which kills it: SIGINT ignored, SIGTERM ends it."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
