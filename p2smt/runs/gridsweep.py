"""Resumable sweeps over a grid file: systems × nodes × axes × reductions × algorithms × message sizes.

A grid file (YAML) expands into tasks in a fixed order; each task is keyed by the sha256 of its
canonical JSON plus p2smt's version. Every finished task becomes one line of a JSONL file, written and
flushed by the driver as results arrive, so an interrupted sweep loses only the tasks in flight and the
next run with the same file runs only the tasks whose key is missing. Tasks run locally (threads, each
driving its own task process) or on a dask.distributed cluster (``scheduler=ADDRESS``); in both cases
the task function is ``run_task``, which runs the synthesis in a child process it kills at the hard
wall-clock limit so that a runaway task is reported as ``timeout`` and never blocks the sweep.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures as cf
import hashlib
import json
import math
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from p2smt import __version__
from p2smt.errors import P2Error
from p2smt.model.yamlfile import read_yaml

STATUSES = ("ok", "unknown", "timeout", "error", "skipped")
"""Statuses of a result line: synthesis complete / engine gave up / killed at the hard limit /
failed (message in ``error``) / not runnable on that system (reason in ``reason``)."""
HARD_GRACE_MIN_S = 1.0
HARD_GRACE_FRACTION = 0.25
"""The hard wall-clock limit of a task is ``timeout_s + max(HARD_GRACE_MIN_S, HARD_GRACE_FRACTION ×
timeout_s)``: the engine gets ``timeout_s`` first, the kill is the backstop."""
CHILD_STARTUP_S = 120.0
"""How long a task process may take to import p2smt before it counts as broken."""
CONNECT_TIMEOUT_S = 20.0
"""How long to keep trying to reach a dask scheduler."""


# ---------------------------------------------------------------------------------------------- grid

PositiveInt = Annotated[StrictInt, Field(ge=1)]
AxisSpec = PositiveInt | Literal["auto"]
BytesSpec = Annotated[float, Field(gt=0, allow_inf_nan=False)] | Literal["default"]


class Grid(BaseModel):
    """A validated grid file. ``systems`` are shipped names or absolute paths (resolved on load)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    systems: tuple[str, ...] = Field(min_length=1)
    nodes: tuple[PositiveInt, ...] | None = Field(default=None, min_length=1)
    axes: tuple[tuple[AxisSpec, ...], ...] = Field(min_length=1)
    reductions: tuple[tuple[Annotated[StrictInt, Field(ge=0)], ...], ...] = Field(min_length=1)
    algorithms: tuple[str, ...] = Field(default=("ring",), min_length=1)
    bytes: tuple[BytesSpec, ...] = Field(default=("default",), min_length=1)
    engine: str = "enumerative"
    encoding: str | None = None
    max_len: int = Field(default=5, ge=1)
    timeout_s: float = Field(default=120.0, gt=0, allow_inf_nan=False)

    @field_validator("systems")
    @classmethod
    def _names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for s in v:
            if not s.strip():
                raise ValueError("a system name must not be empty")
        return v

    @field_validator("axes")
    @classmethod
    def _axes(cls, v):
        for spec in v:
            if not spec:
                raise ValueError("an axes entry needs at least one axis")
            if list(spec).count("auto") > 1:
                raise ValueError(f"at most one axis may be 'auto', got {list(spec)}")
        return v

    @field_validator("reductions")
    @classmethod
    def _reductions(cls, v):
        out = []
        for red in v:
            if not red:
                raise ValueError("a reduction needs at least one axis index")
            if len(set(red)) != len(red):
                raise ValueError(f"reduction axes repeat: {list(red)}")
            out.append(tuple(sorted(red)))
        return tuple(out)

    @field_validator("algorithms")
    @classmethod
    def _algorithms(cls, v):
        from p2smt.cost.model import ALGOS

        for a in v:
            if a not in ALGOS:
                raise ValueError(f"unknown algorithm {a!r}; choose from {', '.join(ALGOS)}")
        return v

    @field_validator("engine")
    @classmethod
    def _engine(cls, v):
        from p2smt.synth.driver import ENGINES

        if v not in ENGINES:
            raise ValueError(f"unknown engine {v!r}; engines: {', '.join(ENGINES)}")
        return v

    @field_validator("max_len")
    @classmethod
    def _max_len(cls, v):
        from p2smt.synth.config import MAX_LEN_LIMIT

        if v > MAX_LEN_LIMIT:
            raise ValueError(f"max_len must be at most {MAX_LEN_LIMIT}, got {v}")
        return v


def grids_dir() -> Path:
    """The shipped example grids (p2smt/grids)."""
    return Path(__file__).resolve().parent / "grids"


def shipped_grids() -> list[str]:
    return sorted(p.stem for p in grids_dir().glob("*.yaml"))


def _field_error(source: str, err: ValidationError) -> str:
    first = err.errors()[0]
    loc = [str(x) for i, x in enumerate(first["loc"]) if i == 0 or isinstance(x, int)]
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{source}: field {'.'.join(loc) or '(top level)'}: {first['msg']}{more}"


def _looks_like_path(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) or "/" in name or os.sep in name


def parse_grid(data: Any, source: str, base_dir: Path | None = None) -> Grid:
    """Validate a parsed grid document; system files are resolved against ``base_dir`` and loaded."""
    from p2smt.model.system import load_system

    if not isinstance(data, dict):
        raise P2Error(f"{source}: a grid file must be a mapping, got {type(data).__name__}")
    try:
        grid = Grid.model_validate(data)
    except ValidationError as err:
        raise P2Error(_field_error(source, err)) from None
    systems = []
    for i, name in enumerate(grid.systems):
        if _looks_like_path(name) and base_dir is not None and not Path(name).is_absolute():
            name = str((base_dir / name).resolve())
        try:
            load_system(name)
        except P2Error as err:
            raise P2Error(f"{source}: field systems.{i}: {err}") from None
        systems.append(name)
    return grid.model_copy(update={"systems": tuple(systems)})


def load_grid(path: str | Path) -> Grid:
    """Load a grid YAML file (or a shipped grid by name, see ``shipped_grids``); errors name file+field."""
    p = Path(path)
    if not p.exists() and p.suffix == "" and (grids_dir() / f"{p.name}.yaml").is_file():
        p = grids_dir() / f"{p.name}.yaml"
    if not p.is_file():
        raise P2Error(f"grid file {str(path)!r} does not exist (shipped grids: {', '.join(shipped_grids())})")
    data = read_yaml(p, "grid file")
    return parse_grid(data, str(p), p.resolve().parent)


# --------------------------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class Task:
    """One unit of a sweep. ``axes`` are resolved (an unresolvable "auto" stays "auto"); ``nodes`` is the
    concrete node count; ``bytes`` is bytes per device or "default". ``skip`` (not part of the key) is the
    reason the task cannot run on its system, or None."""

    system: str
    nodes: int
    axes: tuple[int | str, ...]
    reduce: tuple[int, ...]
    algo: str
    bytes: float | str
    engine: str
    encoding: str | None
    max_len: int
    timeout_s: float
    skip: str | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The canonical fields (everything but ``skip``)."""
        return {
            "system": self.system, "nodes": self.nodes, "axes": list(self.axes), "reduce": list(self.reduce),
            "algo": self.algo, "bytes": self.bytes, "engine": self.engine, "encoding": self.encoding,
            "max_len": self.max_len, "timeout_s": self.timeout_s,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], skip: str | None = None) -> Task:
        return cls(
            system=data["system"], nodes=int(data["nodes"]), axes=tuple(data["axes"]),
            reduce=tuple(data["reduce"]), algo=data["algo"], bytes=data["bytes"], engine=data["engine"],
            encoding=data.get("encoding"), max_len=int(data["max_len"]), timeout_s=float(data["timeout_s"]),
            skip=skip,
        )

    @property
    def hard_limit_s(self) -> float:
        """Wall-clock limit after which the task process is killed."""
        return self.timeout_s + max(HARD_GRACE_MIN_S, HARD_GRACE_FRACTION * self.timeout_s)


def canonical_json(task: Task) -> str:
    return json.dumps(task.to_json(), sort_keys=True, separators=(",", ":"))


def task_key(task: Task) -> str:
    """sha256 (hex) of the task's canonical JSON together with p2smt's version."""
    text = json.dumps({"p2smt": __version__, "task": task.to_json()}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _resolve_axes(spec: tuple[int | str, ...], devices: int) -> tuple[tuple[int | str, ...], str | None]:
    fixed = math.prod(a for a in spec if a != "auto")
    if "auto" in spec:
        if devices % fixed:
            return spec, (f"the other axes (product {fixed}) do not divide the {devices} devices, "
                          f"so 'auto' has no size")
        spec = tuple(devices // fixed if a == "auto" else a for a in spec)
    if math.prod(spec) != devices:
        return spec, f"axes {list(spec)} (product {math.prod(spec)}) do not factor onto {devices} devices"
    return spec, None


def expand(grid: Grid) -> list[Task]:
    """All tasks of a grid, deterministically: for each system (file order), each node count (the system's
    own if ``nodes`` is absent), each axes entry, each reduction, each algorithm, each message size.
    Combinations that cannot run (axes that do not factor, reduction axes out of range) are tasks with
    ``skip`` set; duplicates (same key) keep their first occurrence."""
    from p2smt.model.system import load_system

    tasks: list[Task] = []
    seen: set[str] = set()
    for name in grid.systems:
        base = load_system(name)
        own = dict(zip(base.level_names, base.sizes, strict=True))[base.nodes_level]
        for nodes in grid.nodes or (own,):
            system = base.with_nodes(nodes)
            where = f"{system.name} with {nodes} {system.nodes_level}s ({system.num_devices} devices)"
            for spec in grid.axes:
                axes, axes_skip = _resolve_axes(tuple(spec), system.num_devices)
                for red in grid.reductions:
                    skip = f"{where}: {axes_skip}" if axes_skip else None
                    bad = [r for r in red if r >= len(axes)]
                    if skip is None and bad:
                        skip = (f"reduction axis {bad[0]} is out of range for axes {list(axes)} "
                                f"(0..{len(axes) - 1})")
                    for algo in grid.algorithms:
                        for b in grid.bytes:
                            task = Task(
                                system=name, nodes=nodes, axes=axes, reduce=tuple(red), algo=algo,
                                bytes=b if b == "default" else float(b), engine=grid.engine,
                                encoding=grid.encoding, max_len=grid.max_len, timeout_s=float(grid.timeout_s),
                                skip=skip,
                            )
                            key = task_key(task)
                            if key not in seen:
                                seen.add(key)
                                tasks.append(task)
    return tasks


# ------------------------------------------------------------------------------------ running a task


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _row(task: Task, status: str, seconds: float, **fields: Any) -> dict[str, Any]:
    return {"key": task_key(task), "p2smt": __version__, "task": task.to_json(), "status": status,
            "seconds": round(seconds, 6), **fields}


def evaluate(task: Task) -> dict[str, Any]:
    """Run one task in this process (no time limit): synthesize, rank, summarize as a result line.

    ``speedup`` is the AllReduce time of the best placement divided by the best program's time; each
    matrix entry also carries its own AllReduce time and speedup.
    """
    if task.skip:
        return _row(task, "skipped", 0.0, reason=task.skip)
    start = time.perf_counter()
    try:
        from p2smt.cost.rank import rank_result
        from p2smt.model.request import Request
        from p2smt.model.system import load_system
        from p2smt.synth.config import EngineConfig
        from p2smt.synth.driver import synthesize

        system = load_system(task.system, task.nodes)
        config = EngineConfig(engine=task.engine, max_len=task.max_len,
                              timeout_ms=max(1, int(task.timeout_s * 1000)), encoding=task.encoding)
        result = synthesize(Request.for_system(system, task.axes, task.reduce), config)
        b = None if task.bytes == "default" else float(task.bytes)
        report = rank_result(system, result, algo=task.algo, bytes_per_device=b, top=1)
    except P2Error as err:
        return _row(task, "error", time.perf_counter() - start, error=str(err))
    except Exception as err:  # noqa: BLE001 - a task failure must become a result line, not a crash
        return _row(task, "error", time.perf_counter() - start, error=f"{type(err).__name__}: {err}")
    per_matrix = []
    for m, ranked in zip(result.matrices, report["matrices"], strict=True):
        ar = ranked["allreduce_seconds"]
        top = ranked["programs"][0] if ranked["programs"] else None
        per_matrix.append({
            "matrix": ranked["matrix"], "status": m.status, "programs": len(m.programs),
            "synthesis_seconds": round(m.seconds, 6), "allreduce_seconds": _finite(ar),
            "best_program": top["program"] if top else None,
            "best_seconds": _finite(top["seconds"]) if top else None,
            "speedup": _finite(ar / top["seconds"]) if top and top["seconds"] > 0 else None,
        })
    best = report["best"]
    allreduce = min((m["allreduce_seconds"] for m in per_matrix if m["allreduce_seconds"] is not None),
                    default=None)
    speedup = None
    if best is not None:
        own_ar = next(m["allreduce_seconds"] for m in per_matrix if m["matrix"] == best["matrix"])
        best = {"matrix": best["matrix"], "program": best["program"], "seconds": _finite(best["seconds"]),
                "allreduce_seconds": own_ar,
                "speedup": _finite(own_ar / best["seconds"]) if own_ar and best["seconds"] > 0 else None}
        speedup = _finite(allreduce / best["seconds"]) if allreduce and best["seconds"] else None
    return _row(
        task, "ok" if result.status == "complete" else "unknown", time.perf_counter() - start,
        bytes_per_device=report["bytes_per_device"], matrices=len(result.matrices),
        programs=result.total_programs, per_matrix=per_matrix, best=best, allreduce_seconds=allreduce,
        speedup=speedup,
    )


class _TaskProcess:
    """A long-lived child process that evaluates tasks one at a time; killed (and later restarted) when a
    task exceeds its hard limit. Talks JSON lines over stdin/stdout."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=20)

    def _reader(self, stream, sink: Callable[[str | None], None]) -> None:
        for line in stream:
            sink(line)
        sink(None)

    def _start(self) -> None:
        pkg_parent = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from p2smt.runs.gridsweep import _child_main; _child_main()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
            env=env,
        )
        self._lines = queue.Queue()
        self._stderr.clear()
        for stream, sink in ((self._proc.stdout, self._lines.put), (self._proc.stderr, self._stderr.append)):
            threading.Thread(target=self._reader, args=(stream, sink), daemon=True).start()
        ready = self._receive(CHILD_STARTUP_S)
        if ready is None or ready.get("ready") is not True:
            self.kill()
            raise RuntimeError(f"the task process did not start: {self._tail()}")

    def _tail(self) -> str:
        lines = [ln.rstrip() for ln in list(self._stderr) if ln]
        return " | ".join(lines[-3:]) or "no message"

    def _receive(self, limit: float) -> dict[str, Any] | None:
        proc, lines = self._proc, self._lines
        if proc is None or lines is None:
            raise RuntimeError("the task process was stopped")
        try:
            line = lines.get(timeout=limit)
        except queue.Empty:
            return None
        if line is None:
            code = proc.wait()
            raise RuntimeError(f"the task process exited with code {code}: {self._tail()}")
        return json.loads(line)

    def run(self, task: Task) -> dict[str, Any]:
        """The task's result line; raises RuntimeError only if the task process cannot start at all (an
        infrastructure failure the driver leaves for a resume rather than recording)."""
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        start = time.perf_counter()
        try:
            proc = self._proc
            proc.stdin.write(json.dumps({"task": task.to_json()}) + "\n")
            proc.stdin.flush()
            row = self._receive(task.hard_limit_s)
        except (RuntimeError, OSError, ValueError, AttributeError) as err:
            self.kill()
            return _row(task, "error", time.perf_counter() - start, error=str(err))
        if row is None:
            self.kill()
            return _row(task, "timeout", time.perf_counter() - start,
                        error=f"killed after {task.hard_limit_s:g} s (solver timeout {task.timeout_s:g} s)")
        return row

    def kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        """Let an idle task process end on end-of-input (killed if it does not within 5 s)."""
        proc = self._proc
        if proc is not None:
            try:
                proc.stdin.close()
                proc.wait(timeout=5)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
            self.kill()


_local = threading.local()
_all_processes: weakref.WeakSet[_TaskProcess] = weakref.WeakSet()
_registry_lock = threading.Lock()


def _task_process() -> _TaskProcess:
    proc = getattr(_local, "process", None)
    if proc is None:
        proc = _local.process = _TaskProcess()
        with _registry_lock:
            _all_processes.add(proc)
    return proc


def close_task_processes(kill: bool = False) -> None:
    """Stop every task process this Python process started (also run at exit); ``kill`` does not wait."""
    with _registry_lock:
        procs = list(_all_processes)
    for p in procs:
        p.kill() if kill else p.close()


atexit.register(close_task_processes)


def run_task(task: Task | dict[str, Any]) -> dict[str, Any]:
    """The sweep's task function (local threads and dask workers alike): the result line of ``task``.

    Skipped tasks return their row at once; others run in this thread's task process, which is killed
    at ``task.hard_limit_s`` (status "timeout"). Never raises for a task's own failure (status "error").
    ``worker`` records the host and pid of the process that ran it (provenance, e.g. which dask worker).
    """
    if isinstance(task, dict):
        task = Task.from_json(task)
    row = evaluate(task) if task.skip else _task_process().run(task)
    row["worker"] = {"host": socket.gethostname(), "pid": os.getpid()}
    return row


def _child_main() -> None:
    """Entry point of a task process: read task lines on stdin, answer result lines on stdout."""
    protocol = sys.stdout
    sys.stdout = sys.stderr
    parent = os.getppid()

    def watchdog() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watchdog, daemon=True).start()
    from p2smt.cost import rank  # noqa: F401 - import before "ready" so start-up is not charged to a task
    from p2smt.synth import driver as synth  # noqa: F401 - import before "ready" so start-up is not charged to a task

    protocol.write(json.dumps({"ready": True}) + "\n")
    protocol.flush()
    for line in sys.stdin:
        task = Task.from_json(json.loads(line)["task"])
        row = evaluate(task)
        try:
            text = json.dumps(row, allow_nan=False)
        except (TypeError, ValueError) as err:
            text = json.dumps(_row(task, "error", row["seconds"], error=f"unserializable result: {err}"))
        protocol.write(text + "\n")
        protocol.flush()


# ---------------------------------------------------------------------------------------- result file


def _parse_lines(path: Path, data: bytes) -> tuple[list[dict[str, Any]], int]:
    """Complete result lines and the byte length they span (a truncated last line is left out)."""
    end = data.rfind(b"\n") + 1
    rows = []
    for n, raw in enumerate(data[:end].split(b"\n")[:-1], 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise P2Error(f"{path}:{n}: not a result line (invalid JSON); remove it to resume") from None
        if not isinstance(row, dict) or not isinstance(row.get("key"), str):
            raise P2Error(f"{path}:{n}: not a result line (no 'key')")
        rows.append(row)
    return rows, end


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """The result lines of a sweep file in file order (a truncated last line is ignored)."""
    p = Path(path)
    if not p.exists():
        return []
    return _parse_lines(p, p.read_bytes())[0]


class _ResultsFile:
    """The JSONL file, opened for appending under an exclusive lock; a truncated tail is cut off."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            import fcntl

            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:
            pass
        except OSError:
            os.close(self.fd)
            raise P2Error(f"{path} is being written by another sweep") from None
        with open(path, "rb") as fh:
            data = fh.read()
        try:
            rows, end = _parse_lines(path, data)
        except P2Error:
            os.close(self.fd)
            raise
        if end < len(data):
            os.ftruncate(self.fd, end)
        self.keys = {r["key"] for r in rows}
        os.lseek(self.fd, 0, os.SEEK_END)

    def write(self, row: dict[str, Any]) -> None:
        data = (json.dumps(row, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")
        while data:
            data = data[os.write(self.fd, data):]
        self.keys.add(row["key"])

    def close(self) -> None:
        os.close(self.fd)


# --------------------------------------------------------------------------------------------- driver


@dataclass(frozen=True)
class SweepSummary:
    """What one ``sweep`` call did. ``submitted_keys`` are the keys sent for execution, in task order;
    ``by_status`` counts the lines written by this call, plus "lost" for tasks whose execution failed
    outside the task function (e.g. a dead dask worker): those are not written, so a resume retries them."""

    total: int
    skipped_existing: int
    submitted: int
    finished: int
    by_status: dict[str, int]
    submitted_keys: tuple[str, ...] = ()
    out: str = ""
    seconds: float = 0.0

    def to_json(self, keys: bool = False) -> dict[str, Any]:
        """JSON form for the CLI; ``keys`` adds the submitted keys (large for big grids)."""
        data = {"total": self.total, "skipped_existing": self.skipped_existing, "submitted": self.submitted,
                "finished": self.finished, "by_status": dict(self.by_status), "out": self.out,
                "seconds": round(self.seconds, 3)}
        if keys:
            data["submitted_keys"] = list(self.submitted_keys)
        return data


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


def _run_local(tasks: list[Task], workers: int | None) -> Iterator[Outcome]:
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


def _run_dask(tasks: list[Task], scheduler: str, workers: int | None) -> Iterator[Outcome]:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise P2Error("sweeps on a cluster need dask.distributed: pip install 'p2smt[dask]'") from None
    try:
        client = Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as err:
        raise P2Error(f"cannot connect to the dask scheduler at {scheduler}: {err}") from None
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
    finally:
        client.close()


def _progress_bar(enabled: bool):
    """A rich progress bar on stderr (stdout stays free for the CLI's output)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(TextColumn("[bold]sweep[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True),
                    disable=not enabled)


def sweep(grid_or_path: Grid | str | Path, out: str | Path, *, scheduler: str | None = None,
          workers: int | None = None, progress: bool = True, timeout_s: float | None = None) -> SweepSummary:
    """Run every task of a grid whose key is not yet in ``out`` and append one line per finished task.

    Locally (default) ``workers`` threads (default: all cores) each drive a task process; with
    ``scheduler`` ("tcp://host:port") tasks run on that dask.distributed cluster and ``workers``, if
    given, caps the tasks in flight. Lines are flushed as results arrive, so killing the sweep loses only
    the tasks in flight; skipped combinations are written as "skipped" lines without being submitted.
    ``timeout_s`` replaces the grid's per-task timeout (it is part of each task, hence of its key).
    """
    start = time.perf_counter()
    grid = grid_or_path if isinstance(grid_or_path, Grid) else load_grid(grid_or_path)
    if workers is not None and workers < 1:
        raise P2Error(f"--workers must be at least 1, got {workers}")
    if timeout_s is not None:
        if not (math.isfinite(timeout_s) and timeout_s > 0):
            raise P2Error(f"--timeout must be a positive number of seconds, got {timeout_s}")
        grid = grid.model_copy(update={"timeout_s": float(timeout_s)})
    tasks = expand(grid)
    sink = _ResultsFile(Path(out))
    counts: collections.Counter[str] = collections.Counter()
    try:
        pending = [t for t in tasks if task_key(t) not in sink.keys]
        to_run = [t for t in pending if not t.skip]
        bar = _progress_bar(progress)
        with bar:
            job = bar.add_task("", total=len(pending))
            for t in pending:
                if t.skip:
                    sink.write(run_task(t))
                    counts["skipped"] += 1
                    bar.advance(job)
            if to_run:
                runs = _run_dask(to_run, scheduler, workers) if scheduler else _run_local(to_run, workers)
                for task, row, failure in runs:
                    if row is None:
                        counts["lost"] += 1
                        bar.console.print(f"[red]lost[/] {task_key(task)[:12]} {failure}")
                    else:
                        sink.write(row)
                        counts[row["status"]] += 1
                    status_line = " ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                    bar.update(job, advance=1, description=status_line)
    finally:
        sink.close()
    return SweepSummary(
        total=len(tasks), skipped_existing=len(tasks) - len(pending), submitted=len(to_run),
        finished=sum(v for k, v in counts.items() if k != "lost"), by_status=dict(sorted(counts.items())),
        submitted_keys=tuple(task_key(t) for t in to_run), out=str(out), seconds=time.perf_counter() - start,
    )
