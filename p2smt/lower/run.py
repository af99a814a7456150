"""Run lowered modules on this machine and check exact results: JAX on N CPU host devices in a fresh
subprocess, torch with gloo in N local processes (one process group shared by all cases of a call).

Timings: JAX per step = that step as its own jitted shard_map call; total = the whole program as
one jit; setup = its compile time. torch per step = the slowest rank's time from a barrier;
total = the slowest rank's ``reduce``; setup = communicator creation. Each is the best of
``repeats`` runs, measured after the checked first run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from p2smt.errors import P2Error
from p2smt.interrupts import noting
from p2smt.lifeline import parent_env
from p2smt.lower.bounds import RunBudget, RunSize
from p2smt.lower.names import as_int
from p2smt.lower.target import Target
from p2smt.model.collectives import ExplicitPlan

MAX_ELEMENTS = 1 << 28
GOOD_WORDS = {None: "exact sums on every device",
              "reduce-scatter": "every device holds exactly its shard of the sum",
              "all-gather": "every device holds every shard of its group, in rank order"}
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
"""PyTorch's index of CPU-only wheels (PyPI's torch for Linux is the multi-GB CUDA build)."""
BACKEND_PACKAGES = {
    "jax": ("jax", "pip install 'p2smt[jax]'"),
    "torch": ("torch", (f"pip install 'p2smt[torch]' --extra-index-url {TORCH_CPU_INDEX}, the pinned torch's "
                        "CPU build; PyPI's own is the multi-GB CUDA one")),
}
"""The module each backend imports, and the install of the version p2smt pins (its extras)."""


def require_backend(backend: str) -> None:
    """Refuse a run whose backend is not installed, before any worker starts."""
    import importlib.util

    if backend not in BACKEND_PACKAGES:
        raise P2Error(f"unknown backend {backend!r}; choose one of {', '.join(BACKEND_PACKAGES)}")
    module, install = BACKEND_PACKAGES[backend]
    if importlib.util.find_spec(module) is None:
        raise P2Error(f"--backend {backend} needs the {module!r} package, which is not installed ({install})")


@dataclass(frozen=True)
class Mismatch:
    """A chunk whose value differs from the exact sum (chunk -1: the result has the wrong length)."""

    device: int
    chunk: int
    expected: int
    got: int
    found: int = -1  # the chunk whose value ``got`` is (a misplaced chunk), -1 if none


@dataclass(frozen=True)
class RunReport:
    """The outcome of running one lowered plan: exact-check verdict and wall times in seconds."""

    backend: str
    name: str
    num_devices: int
    num_chunks: int
    length: int
    ok: bool
    bad_devices: tuple[int, ...] = ()
    mismatches: tuple[Mismatch, ...] = ()
    step_labels: tuple[str, ...] = ()
    goal: str | None = None  # a sharded goal's kind (docs/semantics.md §6); None: every device ends with the sum
    step_seconds: tuple[float, ...] = ()
    total_seconds: float | None = None
    setup_seconds: float | None = None
    error: str | None = None

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def to_json(self) -> dict:
        return {
            "backend": self.backend,
            "name": self.name,
            "num_devices": self.num_devices,
            "num_chunks": self.num_chunks,
            "length": self.length,
            "ok": self.ok,
            "bad_devices": list(self.bad_devices),
            "mismatches": [vars(m) for m in self.mismatches],
            "steps": [{"step": s} for s in self.step_labels],
            **({"goal": self.goal} if self.goal else {}),
            "error": self.error,
            "stats": {"step_seconds": list(self.step_seconds), "total_seconds": self.total_seconds,
                      "setup_seconds": self.setup_seconds},
        }

    def summary(self) -> str:
        """A few human-readable lines."""
        verdict = (GOOD_WORDS[self.goal] if self.ok else "WRONG RESULT" if not self.error else "FAILED")
        lines = [
            f"{self.backend} on {self.num_devices} devices, L={self.length} ({self.num_chunks} chunks): {verdict}"
        ]
        for i, (label, secs) in enumerate(zip(self.step_labels, self.step_seconds), start=1):
            lines.append(f"  step {i} {label}: {secs * 1e3:.3f} ms (run alone)")
        if self.total_seconds is not None:
            note = ("; each step run alone pays its own dispatch, so the steps add up to more"
                    if sum(self.step_seconds) > self.total_seconds else "")
            lines.append(f"  whole program, one call: {self.total_seconds * 1e3:.3f} ms (setup "
                         f"{(self.setup_seconds or 0) * 1e3:.1f} ms){note}")
        if self.bad_devices:
            lines.append(f"  {len(self.bad_devices)} device(s) wrong: {list(self.bad_devices[:16])}")
        for m in self.mismatches:
            where = "length" if m.chunk < 0 else f"chunk {m.chunk}"
            found = f" (chunk {m.found}'s value)" if m.found >= 0 else ""
            lines.append(f"  device {m.device} {where}: expected {m.expected}, got {m.got}{found}")
        if self.error:
            lines.append(f"  error: {self.error.strip().splitlines()[0]}")
        return "\n".join(lines)


@dataclass(frozen=True)
class RunCase:
    """One plan to run: a name for the report, the plan, its target, optional DSL labels, length."""

    name: str
    plan: ExplicitPlan
    target: Target
    step_labels: tuple[str, ...] | None = None
    length: int | None = None
    source: str | None = field(default=None, repr=False)


def _length(case: RunCase, backend: str, budget: RunBudget) -> int:
    """The case's length: as given, checked, or by default ``MOST_CHUNK`` elements a chunk (fewer to fit)."""
    k, n = case.target.num_chunks, case.target.num_devices
    length = budget.default_length(_size(case, backend)) if case.length is None else as_int(case.length, "length")
    if length < k or length % k:
        raise P2Error(f"--length must be a positive multiple of the reduction-group size {k}, got {length}")
    if length * n > MAX_ELEMENTS:
        raise P2Error(f"--length {length} on {n} devices is too much data for one machine")
    return length


def _size(case: RunCase, backend: str) -> RunSize:
    return RunSize(backend, case.target.num_devices, case.target.num_chunks, len(case.plan))


def _package_root() -> str:
    return str(Path(__file__).resolve().parent.parent.parent)


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH")) if p)
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"})
    env.update(extra)
    return env


def _spawn(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[int | None, str]:
    """Run a worker in a session of its own (one process group: the worker and every process it forks);
    (exit code, or None when killed at ``timeout``; its stderr). The group is killed at the timeout and on
    any exception here (Ctrl-C, SIGTERM); a worker whose parent dies unannounced ends itself (``lifeline``)."""
    proc = subprocess.Popen(cmd, env=env | parent_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=timeout)
        return proc.returncode, stderr or ""
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return None, proc.communicate()[1] or ""
    except BaseException:
        _kill_group(proc)
        proc.communicate()
        raise


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # already gone (its group with it)
        pass


def _launch_jax(job: Path, n: int, tmp: Path, timeout: float) -> tuple[list[dict] | None, str]:
    flags = os.environ.get("XLA_FLAGS", "")
    flags = " ".join(f for f in flags.split() if not f.startswith("--xla_force_host_platform_device_count"))
    env = _env(
        {
            "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count={n}".strip(),
            "JAX_PLATFORMS": "cpu",
            "JAX_ENABLE_X64": "1",
        }
    )
    out = tmp / "jax.json"
    code, stderr = _spawn([sys.executable, "-m", "p2smt.lower._jax_worker", str(job), str(out)], env, timeout)
    if code is None:
        return None, f"the JAX run timed out after {timeout:g} s (--run-timeout)"
    if code != 0 or not out.exists():
        return None, f"the JAX worker failed (exit {code}): {_tail(stderr)}"
    return json.loads(out.read_text()), ""


def _launch_torch(job: Path, n: int, tmp: Path, timeout: float) -> tuple[list[list[dict]] | None, str]:
    env = _env({"GLOO_SOCKET_IFNAME": "lo"})
    code, stderr = _spawn([sys.executable, "-m", "p2smt.lower._torch_worker", str(job), str(tmp)], env, timeout)
    failure = f"the torch run timed out after {timeout:g} s (--run-timeout)" if code is None else ""
    results = []
    for rank in range(n):
        path = tmp / f"rank{rank}.jsonl"
        if not path.exists():
            err_path = tmp / f"rank{rank}.err"
            detail = _tail(err_path.read_text()) if err_path.exists() else _tail(stderr)
            return None, failure or f"torch rank {rank} failed: {detail}"
        results.append([json.loads(line) for line in path.read_text().splitlines() if line.strip()])
    if not failure and code:
        failure = f"the torch run failed (exit {code}): {_tail(stderr)}"
    return results, failure


def _tail(text: str, lines: int = 6) -> str:
    return " | ".join(text.strip().splitlines()[-lines:]) or "(no output)"


def _merge_torch(per_rank: list[list[dict]], index: int, failure: str) -> dict:
    """One case's result over all ranks: ok only if every rank is; times of the slowest rank."""
    missing = {"ok": False, "error": failure or "no result: the run stopped before this case"}
    rows = [r[index] if index < len(r) else missing for r in per_rank]
    errors = [r["error"] for r in rows if r.get("error")]
    if errors:
        return {"ok": False, "error": errors[0]}
    mismatches = [m for r in rows for m in r["mismatches"]]
    return {
        "ok": all(r["ok"] for r in rows),
        "bad_devices": sorted(d for r in rows for d in r["bad_devices"]),
        "mismatches": mismatches[:8],
        "setup_s": max(r["setup_s"] for r in rows),
        "step_s": [max(r["step_s"][i] for r in rows) for i in range(len(rows[0]["step_s"]))],
        "total_s": max(r["total_s"] for r in rows),
        "error": None,
    }


def run_cases(
    backend: str, cases: Sequence[RunCase], *, repeats: int = 1, timeout: float = 600.0,
    memory_gib: float | None = None,
) -> tuple[RunReport, ...]:
    """Lower and run several plans on the same number of devices in one launch; one report each. A size whose
    estimate exceeds ``memory_gib`` (default: ``RunBudget``'s) or ``timeout`` is refused before any worker starts."""
    from p2smt.lower import BACKENDS, lower_module

    if backend not in BACKENDS:
        raise P2Error(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if not cases:
        raise P2Error("nothing to run")
    n = cases[0].target.num_devices
    if any(c.target.num_devices != n for c in cases):
        raise P2Error("cases run together must have the same number of devices")
    repeats = as_int(repeats, "repeats")
    budget = RunBudget.of(memory_gib, timeout)
    lengths = [_length(c, backend, budget) for c in cases]
    for case, length in zip(cases, lengths):  # the worker runs the cases one after the other
        budget.check(_size(case, backend), length)
    sources = [c.source or lower_module(backend, c.plan, c.target, c.step_labels) for c in cases]
    with tempfile.TemporaryDirectory(prefix="p2smt-run-") as tmp_name:
        tmp = Path(tmp_name)
        job_cases = []
        for i, (case, length, src) in enumerate(zip(cases, lengths, sources)):
            path = tmp / f"case{i}.py"
            path.write_text(src)
            groups = [list(g) for g in case.target.reduction_groups]
            job_cases.append({"index": i, "module": str(path), "length": length, "groups": groups,
                              "goal": case.target.goal_json()})
        job = {
            "num_devices": n,
            "repeats": repeats,
            "cases": job_cases,
            "store": str(tmp / "store"),
            "timeout": max(30, int(timeout)),
        }
        job_path = tmp / "job.json"
        job_path.write_text(json.dumps(job))
        with noting(lambda: f"the {backend} run on {n} devices was stopped, its worker processes killed"):
            if backend == "jax":
                raw, failure = _launch_jax(job_path, n, tmp, timeout)
            else:
                per_rank, failure = _launch_torch(job_path, n, tmp, timeout)
        if backend == "jax":
            merged = raw
        else:
            merged = (
                None if per_rank is None else [_merge_torch(per_rank, i, failure) for i in range(len(cases))]
            )
    reports = []
    for i, (case, length) in enumerate(zip(cases, lengths)):
        labels = tuple(case.step_labels or (s.collective.value for s in case.plan))
        base = {
            "backend": backend,
            "name": case.name,
            "num_devices": n,
            "num_chunks": case.target.num_chunks,
            "length": length,
            "step_labels": labels,
            "goal": None if case.target.sharding is None else case.target.sharding.kind.value,
        }
        r = merged[i] if merged is not None and i < len(merged) else None
        if r is None or "step_s" not in r:
            error = (r or {}).get("error") or failure or "no result"
            reports.append(RunReport(ok=False, error=error, **base))
            continue
        reports.append(
            RunReport(
                ok=bool(r["ok"]),
                bad_devices=tuple(r["bad_devices"]),
                mismatches=tuple(Mismatch(*m) for m in r["mismatches"]),
                step_seconds=tuple(r["step_s"]),
                total_seconds=r["total_s"],
                setup_seconds=r["setup_s"],
                error=r.get("error"),
                **base,
            )
        )
    return tuple(reports)


def run_program(
    backend: str,
    plan: ExplicitPlan,
    target: Target,
    *,
    step_labels: Sequence[str] | None = None,
    length: int | None = None,
    repeats: int = 1,
    timeout: float = 600.0,
    name: str = "program",
    memory_gib: float | None = None,
) -> RunReport:
    """Lower ``plan`` for ``backend``, run it on ``target.num_devices`` local devices, check sums (a size past
    ``memory_gib`` or ``timeout`` by the estimate is refused up front, see ``run_cases``)."""
    labels = None if step_labels is None else tuple(step_labels)
    case = RunCase(name, tuple(plan), target, labels, length)
    return run_cases(backend, [case], repeats=repeats, timeout=timeout, memory_gib=memory_gib)[0]
