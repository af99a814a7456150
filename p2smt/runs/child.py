"""Run function calls in a child Python process under a wall-clock limit; the limit kills the process group.

A call names its function as ``"package.module:function"`` or ``"/path/to/file.py:function"`` and passes
JSON arguments; the child answers with the JSON value, or with the error message when the function
raises. A call that does not answer within its limit kills the child and all its descendants (the child
leads its own process group) and comes back as ``timeout``; the next call starts a fresh child. Start-up
(importing ``preload`` modules) is not charged to a call.
"""

from __future__ import annotations

import collections
import importlib
import importlib.util
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Self

from p2smt.interrupts import received
from p2smt.lifeline import hold

GRACE_MIN_S = 1.0
GRACE_FRACTION = 0.25
"""A run with a solver budget of ``timeout_s`` is killed at ``hard_limit(timeout_s)``: the engine gets its
budget first, the kill is the backstop."""
STARTUP_S = 120.0
"""How long a child may take to start and import its ``preload`` modules before it counts as broken."""


def hard_limit(timeout_s: float) -> float:
    """``timeout_s + max(GRACE_MIN_S, GRACE_FRACTION × timeout_s)``."""
    return timeout_s + max(GRACE_MIN_S, GRACE_FRACTION * timeout_s)


class OutcomeStatus(StrEnum):
    """How a call ended: answered, killed at its limit, or failed (raised, crashed, bad answer)."""

    OK = "ok"
    TIMEOUT = "timeout"
    ERROR = "error"


@dataclass(frozen=True)
class Outcome:
    """A call's result: ``value`` when ok, ``error`` (one line) otherwise; ``seconds`` from call to answer."""

    status: OutcomeStatus
    value: Any = None
    error: str | None = None
    seconds: float = 0.0


class ChildStartError(RuntimeError):
    """The child process did not start (an infrastructure failure, not a failure of the call)."""


class Child:
    """One child process that runs calls one at a time; started on the first call, restarted after a kill.

    >>> with Child() as child:
    ...     child.call("math:factorial", [5], limit_s=60).value
    120
    """

    def __init__(self, preload: Sequence[str] = (), startup_s: float = STARTUP_S) -> None:
        self.preload = tuple(preload)
        self.startup_s = startup_s
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: collections.deque[str] = collections.deque(maxlen=20)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def _start(self) -> None:
        env = dict(os.environ)
        pkg_parent = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from p2smt.runs.child import child_main; child_main()", *self.preload],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
            env=env, start_new_session=True,
        )
        self._lines = queue.Queue()
        self._stderr.clear()
        for stream, sink in ((self._proc.stdout, self._lines.put), (self._proc.stderr, self._stderr.append)):
            threading.Thread(target=_pump, args=(stream, sink), daemon=True).start()
        try:
            ready = self._receive(self.startup_s)
        except RuntimeError as err:
            self.kill()
            raise ChildStartError(f"the child process did not start: {err}") from None
        if ready is None or ready.get("ready") is not True:
            self.kill()
            raise ChildStartError(f"the child process did not start: {self._tail()}")

    def _tail(self) -> str:
        lines = [ln.rstrip() for ln in list(self._stderr) if ln and ln.strip()]
        return " | ".join(lines[-3:]) or "no message"

    def _receive(self, limit_s: float) -> dict[str, Any] | None:
        try:
            line = self._lines.get(timeout=limit_s)
        except queue.Empty:
            return None
        if line is None:
            code = self._proc.wait() if self._proc is not None else None
            raise RuntimeError(f"the child process exited with code {code}: {self._tail()}")
        return json.loads(line)

    def call(self, target: str, args: Sequence[Any] = (), *, limit_s: float) -> Outcome:
        """Run ``target(*args)`` in the child; killed (status timeout) if it does not answer in ``limit_s``.

        Raises ChildStartError only when the child cannot start at all."""
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        start = time.perf_counter()
        try:
            self._proc.stdin.write(json.dumps({"target": target, "args": list(args)}) + "\n")
            self._proc.stdin.flush()
            answer = self._receive(limit_s)
        except (RuntimeError, OSError, ValueError) as err:
            self.kill()
            return Outcome(OutcomeStatus.ERROR, error=str(err), seconds=time.perf_counter() - start)
        seconds = time.perf_counter() - start
        if answer is None:
            self.kill()
            return Outcome(OutcomeStatus.TIMEOUT, error=f"killed after {limit_s:g} s", seconds=seconds)
        if "error" in answer:
            return Outcome(OutcomeStatus.ERROR, error=answer["error"], seconds=seconds)
        return Outcome(OutcomeStatus.OK, value=answer["value"], seconds=seconds)

    def kill(self) -> None:
        """Kill the child and every process it started."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (AttributeError, OSError):
                proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                stream.close()
            except OSError:
                pass

    def close(self) -> None:
        """Let an idle child end on end-of-input (killed if it does not within 5 s; at once after a stop
        signal: Ctrl-C or SIGTERM must not wait for a task to finish)."""
        proc = self._proc
        if proc is not None and proc.poll() is None and received() is None:
            try:
                proc.stdin.close()
                proc.wait(timeout=5)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self.kill()


def run_in_child(target: str, args: Sequence[Any] = (), *, limit_s: float, preload: Sequence[str] = (),
                 startup_s: float = STARTUP_S) -> Outcome:
    """One call in a fresh child process (fresh solver state and process-wide figures per call)."""
    with Child(preload, startup_s) as child:
        return child.call(target, args, limit_s=limit_s)


def _pump(stream, sink: Callable[[str | None], None]) -> None:
    for line in stream:
        sink(line)
    sink(None)


_loaded: dict[str, Any] = {}


def _resolve(target: str) -> Callable[..., Any]:
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name:
        raise ValueError(f"a call target is MODULE:FUNCTION or FILE.py:FUNCTION, got {target!r}")
    if where.endswith(".py"):
        if where not in _loaded:
            spec = importlib.util.spec_from_file_location(f"p2smt_child_{len(_loaded)}", where)
            if spec is None or spec.loader is None:
                raise ValueError(f"cannot load {where}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            _loaded[where] = module
        module = _loaded[where]
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


def _answer(request: dict[str, Any]) -> str:
    from p2smt.errors import P2Error

    try:
        value = _resolve(request["target"])(*request["args"])
    except P2Error as err:
        return json.dumps({"error": str(err)})
    except Exception as err:  # noqa: BLE001 - a failed call is an answer, not a dead child
        return json.dumps({"error": f"{type(err).__name__}: {err}"})
    try:
        return json.dumps({"value": value}, default=str)
    except (TypeError, ValueError) as err:
        return json.dumps({"error": f"unserializable result: {err}"})


def child_main() -> None:
    """Entry point of a child: import ``sys.argv[1:]``, say ready, answer one request line at a time."""
    protocol = sys.stdout
    sys.stdout = sys.stderr  # stray prints must not corrupt the protocol
    hold(os.getppid())  # ends with the process that started it, even one killed outright
    for module in sys.argv[1:]:
        importlib.import_module(module)
    protocol.write(json.dumps({"ready": True}) + "\n")
    protocol.flush()
    for line in sys.stdin:
        protocol.write(_answer(json.loads(line)) + "\n")
        protocol.flush()
