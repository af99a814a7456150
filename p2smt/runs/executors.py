"""Where sweep tasks run: local threads or a dask.distributed cluster, each task in a killable child.

The task function on both is ``run_task``: each thread (or dask worker thread) keeps one child process
(``runs.child.Child``) that evaluates tasks one at a time and is killed at a task's hard limit, so a
runaway task is reported as ``timeout`` and never blocks the sweep.
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import os
import re
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from p2smt.errors import P2Error
from p2smt.runs.child import Child, OutcomeStatus, hard_limit
from p2smt.runs.tasks import Task, evaluate, row

CONNECT_TIMEOUT_S = 20.0
"""How long to keep trying to reach a dask scheduler."""
PRELOAD = ("p2smt.cost.rank", "p2smt.synth.driver", "p2smt.runs.tasks")
"""Imported by a task's child before it is ready, so start-up is not charged to a task."""

_local = threading.local()
_all_children: weakref.WeakSet[Child] = weakref.WeakSet()
_registry_lock = threading.Lock()


def _thread_child() -> Child:
    child = getattr(_local, "child", None)
    if child is None:
        child = _local.child = Child(PRELOAD)
        with _registry_lock:
            _all_children.add(child)
    return child


def close_task_processes(kill: bool = False) -> None:
    """Stop every task process this Python process started (also run at exit); ``kill`` does not wait."""
    with _registry_lock:
        children = list(_all_children)
    for c in children:
        c.kill() if kill else c.close()


atexit.register(close_task_processes)


def run_task(task: Task | dict[str, Any]) -> dict[str, Any]:
    """The sweep's task function (local threads and dask workers alike): the result line of ``task``.

    Skipped tasks return their row at once; others run in this thread's child process, killed at the
    task's hard limit (status "timeout"). Never raises for a task's own failure (status "error"); raises
    ChildStartError when no child can start (left for a resume). ``worker`` records the host and pid of
    the process that ran it (provenance, e.g. which dask worker).
    """
    if isinstance(task, dict):
        task = Task.from_json(task)
    if task.skip:
        line = evaluate(task)
    else:
        limit = hard_limit(task.timeout_s)
        outcome = _thread_child().call("p2smt.runs.tasks:evaluate_json", [task.payload()], limit_s=limit)
        if outcome.status == OutcomeStatus.OK:
            line = outcome.value
        elif outcome.status == OutcomeStatus.TIMEOUT:
            line = row(task, "timeout", outcome.seconds,
                       error=f"killed after {limit:g} s (solver timeout {task.timeout_s:g} s)")
        else:
            line = row(task, "error", outcome.seconds, error=outcome.error)
    line["worker"] = {"host": socket.gethostname(), "pid": os.getpid()}
    return line


Outcome = tuple[Task, dict[str, Any] | None, str | None]


def _windowed(tasks: list[Task], window: Callable[[], int], submit: Callable[[Task], Any],
              wait_any: Callable[[set], Iterable], result: Callable[[Any], dict[str, Any]],
              ) -> Iterator[Outcome]:
    """Submit with at most ``window()`` tasks in flight; yield (task, row or None, failure) as they finish."""
    todo = list(reversed(tasks))
    running: dict[Any, Task] = {}
    while todo or running:
        while todo and len(running) < max(1, window()):
            task = todo.pop()
            running[submit(task)] = task
        for fut in wait_any(set(running)):
            task = running.pop(fut)
            try:
                yield task, result(fut), None
            except Exception as err:  # noqa: BLE001 - infrastructure failure: leave the task for a resume
                yield task, None, f"{type(err).__name__}: {err}"


def run_local(tasks: list[Task], workers: int | None) -> Iterator[Outcome]:
    """Run tasks on ``workers`` threads (default: all cores), each driving its own child process."""
    n = workers or os.cpu_count() or 1
    pool = cf.ThreadPoolExecutor(max_workers=n, thread_name_prefix="p2smt-sweep")
    completed = False
    try:
        yield from _windowed(
            tasks, lambda: 2 * n, lambda t: pool.submit(run_task, t),
            lambda fs: cf.wait(fs, return_when=cf.FIRST_COMPLETED).done, lambda f: f.result(),
        )
        completed = True
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        close_task_processes(kill=not completed)
        pool.shutdown(wait=True)


_ADDRESS = re.compile(r"^(?:[a-z][a-z0-9+.-]*://)?[^\s/:]+(?::\d+)?$|^(?:[a-z][a-z0-9+.-]*://)?\[[0-9a-fA-F:.]+\](?::\d+)?$")


def _reachable(scheduler: str) -> None:
    """Refuse a TCP scheduler address nothing answers at, before a dask client is made (a client that fails
    to connect spends 40 s and prints a traceback when it is collected)."""
    import socket

    scheme, _, rest = scheduler.rpartition("://")
    if scheme not in ("", "tcp"):
        return
    if rest.startswith("["):  # [IPv6]:port
        host, _, port = rest[1:].partition("]")
        port = port.removeprefix(":")
    else:
        host, _, port = rest.partition(":")
    try:
        socket.create_connection((host, int(port) if port else 8786), timeout=CONNECT_TIMEOUT_S).close()
    except (OSError, ValueError) as err:
        raise P2Error(f"cannot connect to the dask scheduler at {scheduler}: {err}") from None


@contextmanager
def dask_client(scheduler: str) -> Iterator[Any]:
    """A dask.distributed client of the scheduler at ``scheduler`` ("tcp://host:port"), closed on exit; a
    malformed or unreachable address is a one-line error before anything else runs."""
    try:
        from distributed import Client
    except ImportError:
        raise P2Error("sweeps on a cluster need dask.distributed: pip install 'p2smt[dask]'") from None
    if not _ADDRESS.match(scheduler):
        raise P2Error(f"--scheduler {scheduler!r}: expected an address such as tcp://host:8786")
    _reachable(scheduler)
    try:
        client = Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as err:
        raise P2Error(f"cannot connect to the dask scheduler at {scheduler}: {err}") from None
    try:
        yield client
    finally:
        client.close()


def run_dask(tasks: list[Task], client: Any, workers: int | None, scheduler: str) -> Iterator[Outcome]:
    """Run tasks on the dask.distributed cluster of ``client`` (``dask_client`` of ``scheduler``); ``workers``
    caps the tasks in flight."""
    from distributed import as_completed

    cache = {"at": 0.0, "n": 1}

    def window() -> int:
        if workers:
            return workers
        if time.monotonic() - cache["at"] > 1.0:
            cache["n"] = max(2, 2 * sum(client.nthreads().values()))
            cache["at"] = time.monotonic()
        return cache["n"]

    finished = as_completed(loop=client.loop)

    def submit(task: Task):
        future = client.submit(run_task, task, pure=False)
        finished.add(future)
        return future

    try:
        yield from _windowed(tasks, window, submit, lambda fs: finished.next_batch(block=True),
                             lambda f: f.result())
    except OSError as err:
        raise P2Error(f"lost the dask scheduler at {scheduler} ({err}); run the sweep again to resume"
                      ) from None
