"""Resumable sweeps over a grid file (``p2smt sweep --grid``).

A grid (``runs.gridfile``) expands into keyed tasks (``runs.tasks``) in a fixed order. Every finished
task becomes one line of a JSONL file (``runs.store``), appended and fsynced as results arrive, so an
interrupted sweep loses only the tasks in flight and the next run with the same file runs only the tasks
whose key is missing. Tasks run on local threads or a dask.distributed cluster (``runs.executors``).
"""

from __future__ import annotations

import collections
import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from p2smt.errors import P2Error
from p2smt.model.goal import GoalKind
from p2smt.runs import executors
from p2smt.runs.gridfile import (
    Grid,
    check_store,
    load_grid,
    refuse_goal_engine,
    shared_store,
    with_goal,
    with_search,
)
from p2smt.runs.store import ResultStore
from p2smt.runs.tasks import FAILURES, STATUSES, expand, task_key


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
    certified: int = 0  # lines written by this call whose every program set Z3 certified
    goal: dict[str, Any] | None = None  # the grid's sharded goal: kind and shard axes (None: Goal.of's default)

    @property
    def succeeded(self) -> bool:
        """Every submitted task wrote a line and none failed (skipped, unknown and timeout are answers)."""
        return not any(self.by_status.get(s) for s in FAILURES)

    def to_json(self, keys: bool = False) -> dict[str, Any]:
        """JSON form for the CLI (timings under ``stats``); ``keys`` adds the submitted keys."""
        data = {"total": self.total, "skipped_existing": self.skipped_existing, "submitted": self.submitted,
                "finished": self.finished, "by_status": dict(self.by_status), "certified": self.certified,
                "succeeded": self.succeeded,
                "out": self.out, **({"goal": self.goal} if self.goal else {}),
                "stats": {"seconds": round(self.seconds, 3)}}
        if keys:
            data["submitted_keys"] = list(self.submitted_keys)
        return data


def render_summary(summary: SweepSummary):
    """A rich table of what the sweep did."""
    from rich.table import Table

    goal = f", goal {summary.goal['kind']}" if summary.goal else ""
    t = Table(title=f"sweep: {summary.out}{goal} ({summary.seconds:.1f} s)", show_header=False)
    t.add_column("what")
    t.add_column("tasks", justify="right")
    t.add_row("tasks in the grid", str(summary.total))
    t.add_row("already in the file", str(summary.skipped_existing))
    t.add_row("submitted to run", str(summary.submitted))
    t.add_row("lines written now (a skipped one is not run)", str(summary.finished))
    for status in STATUSES:
        if summary.by_status.get(status):
            t.add_row(f"  {status}", str(summary.by_status[status]))
    if summary.by_status.get("lost"):
        t.add_row("lost (their execution failed; no line written)", str(summary.by_status["lost"]))
    if summary.certified:
        t.add_row("  whose program sets Z3 certified", str(summary.certified))
    t.add_row("result", "[green]succeeded[/]" if summary.succeeded else "[red]failed tasks[/]")
    return t


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
          workers: int | None = None, progress: bool = True, timeout_s: float | None = None,
          engine: str | None = None, max_len: int | None = None, proof_budget: int | None = None,
          proof_store: str | Path | None = None, goal: GoalKind | str | None = None,
          shard_axes: Sequence[int] | None = None) -> SweepSummary:
    """Run every task of a grid whose key is not yet in ``out`` and append one line per finished task.

    Locally (default) ``workers`` threads (default: all cores) each drive a task process; with
    ``scheduler`` ("tcp://host:port") tasks run on that dask.distributed cluster and ``workers``, if
    given, caps the tasks in flight. Lines are flushed as results arrive, so killing the sweep loses only
    the tasks in flight; skipped combinations are written as "skipped" lines without being submitted.
    ``timeout_s``, ``engine``, ``max_len`` and ``proof_budget`` replace the grid's settings (each is part of
    every task, hence of its key). ``goal`` (``GoalKind``: allreduce, reduce-scatter, all-gather) and
    ``shard_axes`` replace the grid's goal (``with_goal``) as ``synth --goal --shard-axes`` set one request's:
    every task synthesizes and ranks under it, its key and line record it, and engine settings synth refuses
    with that goal are refused before any task runs. The certified engine's tasks share their proofs through
    ``proof_store`` (``ProofStore``; no part of the key); locally it defaults to a folder kept for this run only.
    """
    start = time.perf_counter()
    grid = with_search(grid_or_path if isinstance(grid_or_path, Grid) else load_grid(grid_or_path), engine, max_len,
                       proof_budget)
    grid = with_goal(grid, goal, shard_axes)
    if workers is not None and workers < 1:
        raise P2Error(f"--workers must be at least 1, got {workers}")
    if timeout_s is not None:
        if not (math.isfinite(timeout_s) and timeout_s > 0):
            raise P2Error(f"--timeout must be a positive number of seconds, got {timeout_s}")
        grid = grid.model_copy(update={"timeout_s": float(timeout_s)})
    refuse_goal_engine(grid)
    with shared_store(grid, check_store(grid, proof_store), local=scheduler is None) as shared:
        return _sweep(grid, Path(out), scheduler, workers, progress, start, shared)


def _sweep(grid: Grid, out: Path, scheduler: str | None, workers: int | None, progress: bool, start: float,
           proof_store: str | None) -> SweepSummary:
    """``sweep`` once its settings are checked: every task carries ``proof_store`` (None: no sharing)."""
    tasks = [replace(t, proof_store=proof_store) for t in expand(grid)]
    counts: collections.Counter[str] = collections.Counter()
    certified = 0
    with contextlib.ExitStack() as stack:
        client = stack.enter_context(executors.dask_client(scheduler)) if scheduler else None
        sink = stack.enter_context(ResultStore(out, marker="task"))
        pending = [t for t in tasks if task_key(t) not in sink.keys]
        to_run = [t for t in pending if not t.skip]
        bar = _progress_bar(progress)
        with bar:
            job = bar.add_task("", total=len(pending))
            for t in pending:
                if t.skip:
                    sink.append(executors.run_task(t))
                    counts["skipped"] += 1
                    bar.advance(job)
            if to_run:
                runs = (executors.run_dask(to_run, client, workers, scheduler) if client is not None
                        else executors.run_local(to_run, workers))
                for task, line, failure in runs:
                    if line is None:
                        counts["lost"] += 1
                        bar.console.print(f"[red]lost[/] {task_key(task)[:12]} {failure}")
                    else:
                        sink.append(line)
                        counts[line["status"]] += 1
                        certified += line.get("certified") is True
                    status_line = " ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                    bar.update(job, advance=1, description=status_line)
    return SweepSummary(
        total=len(tasks), skipped_existing=len(tasks) - len(pending), submitted=len(to_run),
        finished=sum(v for k, v in counts.items() if k != "lost"), by_status=dict(sorted(counts.items())),
        submitted_keys=tuple(task_key(t) for t in to_run), out=str(out), seconds=time.perf_counter() - start,
        certified=certified,
        goal=None if grid.goal is GoalKind.ALLREDUCE else {
            "kind": grid.goal.value, "shard_axes": None if grid.shard_axes is None else list(grid.shard_axes)},
    )
