"""The reproduction of P²'s evaluation: synthesis + ranking over the paper grid file, with aggregates.

A *unit* is one (system, axes, reduction, matrix, algorithm), as in P². Per unit the sweep records the
synthesis time of its matrix, the number of programs, how many are predicted faster than AllReduce,
AllReduce's predicted time, the best program, its time and the speedup AllReduce / best.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from p2smt.cost.rank import rank_result
from p2smt.errors import P2Error
from p2smt.model.request import Request
from p2smt.model.system import System
from p2smt.runs.grid import PAPER
from p2smt.runs.gridfile import Grid, check_store, load_grid, shared_store, with_search
from p2smt.runs.tasks import BEATS, Task, expand, ranked_fields
from p2smt.synth.driver import synthesize

P2_HEADLINE = {
    "units": 200,
    "share_beating_allreduce": 0.69,
    "mean_speedup": 1.27,
    "max_speedup": 2.04,
    "max_allreduce_spread": 448.5,
}
"""P²'s headline numbers (Xie et al., MLSys 2022, §7), reported beside ours."""


@dataclass(frozen=True)
class SweepRow:
    """One unit of the sweep (CSV/JSON row)."""

    system: str
    axes: str
    reduce: str
    matrix: str
    algo: str
    synthesis_seconds: float
    programs: int
    certified: str  # "yes" / "no": whether Z3 certified the placement's program set ("": not that engine)
    faster_than_allreduce: int
    allreduce_seconds: float
    best_program: str
    best_seconds: float
    speedup: float


def _fmt(values) -> str:
    return json.dumps([list(v) if isinstance(v, (list, tuple)) else v for v in values]).replace(" ", "")


def _number(x: float | None) -> float:
    return math.nan if x is None else x


def _requests(grid: Grid) -> dict[tuple, list[Task]]:
    """The runnable tasks of a grid grouped by synthesis request (one synthesis serves every algorithm)."""
    groups: dict[tuple, list[Task]] = {}
    for task in expand(grid):
        if not task.skip:
            groups.setdefault((task.system, task.nodes, task.axes, task.reduce), []).append(task)
    return groups


def sweep_request(tasks: list[Task]) -> tuple[System, list[SweepRow], dict[str, dict[str, Any]]]:
    """One synthesis for the tasks of one request, ranked per task: the system, the rows (one per matrix
    and algorithm, from the sweep row of ``runs.tasks.ranked_fields``) and the rank report per algorithm."""
    first = tasks[0]
    request = first.request()
    system = request.load_system()
    result = synthesize(Request.for_system(system, request.axes, request.reduce), first.engine_config())
    rows, reports = [], {}
    for task in tasks:
        report = rank_result(system, result, algo=task.algo, bytes_per_device=task.bytes_per_device)
        reports[task.algo] = report
        for m in ranked_fields(result, report)["per_matrix"]:
            rows.append(SweepRow(
                system=system.name, axes=_fmt(task.axes), reduce=_fmt(task.reduce), matrix=_fmt(m["matrix"]),
                algo=task.algo, synthesis_seconds=m["synthesis_seconds"], programs=m["programs"],
                certified={True: "yes", False: "no"}.get(m["certified"], ""), faster_than_allreduce=m["faster_than_allreduce"],
                allreduce_seconds=_number(m["allreduce_seconds"]), best_program=m["best_program"] or "",
                best_seconds=_number(m["best_seconds"]), speedup=_number(m["speedup"]),
            ))
    return system, rows, reports


def aggregate(rows: list[SweepRow]) -> dict[str, Any]:
    """P²'s aggregates over units: share where a program beats AllReduce, mean/max speedup of those,
    the largest AllReduce spread between placements of one request, and the most frequent winners."""
    winners = [r for r in rows if r.best_seconds < r.allreduce_seconds * BEATS]
    spreads: dict[tuple[str, str, str, str], list[float]] = {}
    for r in rows:
        spreads.setdefault((r.system, r.axes, r.reduce, r.algo), []).append(r.allreduce_seconds)
    spread_key, spread = max(((k, max(v) / min(v)) for k, v in spreads.items()), key=lambda kv: (kv[1], kv[0]),
                             default=(None, math.nan))
    best_speed = max(winners, key=lambda r: (r.speedup, r.system, r.axes, r.matrix), default=None)
    return {
        "units": len(rows),
        "units_certified": sum(r.certified == "yes" for r in rows),
        "units_beaten": len(winners),
        "share_beating_allreduce": len(winners) / len(rows) if rows else math.nan,
        "mean_speedup": sum(r.speedup for r in winners) / len(winners) if winners else math.nan,
        "max_speedup": best_speed.speedup if best_speed else math.nan,
        "max_speedup_unit": None if best_speed is None else
        {"system": best_speed.system, "axes": best_speed.axes, "reduce": best_speed.reduce,
         "matrix": best_speed.matrix, "algo": best_speed.algo, "program": best_speed.best_program},
        "max_allreduce_spread": spread,
        "max_allreduce_spread_request": None if spread_key is None else dict(
            zip(("system", "axes", "reduce", "algo"), spread_key)),
        "winners": dict(Counter(r.best_program for r in winners).most_common(5)),
    }


def plot_config(path: Path, title: str, reports: dict[str, dict[str, Any]]) -> None:
    """Predicted time per program per matrix (programs ranked), one panel per algorithm, like P² Fig. 11."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(reports), figsize=(5.5 * len(reports), 3.8), squeeze=False)
    for ax, (algo, report) in zip(axes[0], reports.items()):
        for i, m in enumerate(report["matrices"]):
            ys = [p["seconds"] for p in m["programs"]]
            line = ax.plot(range(1, len(ys) + 1), ys, marker="o", ms=2.5, lw=1, label=str(m["matrix"]))[0]
            ax.axhline(m["allreduce_seconds"], color=line.get_color(), ls="--", lw=0.7)
        ax.set_yscale("log")
        ax.set_xlabel("program (ranked by predicted time)")
        ax.set_ylabel("predicted seconds")
        ax.set_title(f"{algo} (dashed: AllReduce)", fontsize=9)
        ax.legend(fontsize=6, title="matrix", title_fontsize=6)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _write(out: Path, rows: list[SweepRow], summary: dict[str, Any]) -> None:
    with open(out / "sweep.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(SweepRow.__dataclass_fields__))
        writer.writeheader()
        for r in rows:
            writer.writerow(asdict(r))
    (out / "sweep.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")


def _publish(tmp: Path, out: Path) -> None:
    """Move the finished files of ``tmp`` to ``out`` (created, or its files replaced) and remove ``tmp``."""
    if not out.exists():
        tmp.rename(out)
        return
    for f in tmp.iterdir():
        f.replace(out / f.name)
    tmp.rmdir()


def paper_sweep(out_dir: str | Path, *, grid: Grid | str = PAPER, engine: str | None = None,
                plots: bool = True, max_len: int | None = None, proof_budget: int | None = None,
                proof_store: str | Path | None = None, report: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run a grid (default P²'s, ``grids/paper.yaml``): write sweep.csv, sweep.json and one PNG per request.

    The files are written to a hidden folder beside ``out_dir`` and moved there only when every request
    has run, so a failed sweep leaves no partial output. ``engine``, ``max_len`` and ``proof_budget``
    replace the grid's; the certified engine's requests share their proofs through ``proof_store``
    (``ProofStore``; default: a folder kept for this run only);
    ``report`` receives each finished request's label (progress).
    Returns ``{"rows": [row dicts], "aggregate": {...}, "p2": P2_HEADLINE, "files": {...},
    "stats": {"seconds"}}``.
    """
    start = time.perf_counter()
    g = grid if isinstance(grid, Grid) else load_grid(grid)
    g = with_search(g, engine, max_len, proof_budget)
    if g.goal != "allreduce":  # its aggregates and P²'s numbers are AllReduce speedups
        raise P2Error(f"the paper sweep reproduces P²'s AllReduce grid, not the {g.goal} goal (sweep --grid takes it)")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise P2Error(f"--out {out} exists and is not a folder")
    proof_store = check_store(g, proof_store)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    try:
        tmp.mkdir(parents=True)
    except OSError as err:
        raise P2Error(f"cannot write {out}: {err.strerror}") from None
    try:
        rows: list[SweepRow] = []
        pictures = []
        with shared_store(g, proof_store) as shared:
            for tasks in _requests(g).values():
                system, request_rows, reports = sweep_request([replace(t, proof_store=shared) for t in tasks])
                rows.extend(request_rows)
                if plots:
                    t = tasks[0]
                    name = f"{system.name}_axes{'x'.join(map(str, t.axes))}_reduce{'-'.join(map(str, t.reduce))}"
                    plot_config(tmp / f"{name}.png", f"{system.name} axes {list(t.axes)} reduce {list(t.reduce)}",
                                reports)
                    pictures.append(f"{name}.png")
                if report is not None:
                    report(f"{system.name} axes {list(tasks[0].axes)} reduce {list(tasks[0].reduce)}")
        summary = {
            "rows": [asdict(r) for r in rows],
            "aggregate": aggregate(rows),
            "p2": P2_HEADLINE,
            "files": {"csv": "sweep.csv", "json": "sweep.json", "plots": pictures},
            "stats": {"seconds": time.perf_counter() - start},
        }
        _write(tmp, rows, summary)
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return summary


def render_sweep(summary: dict[str, Any]):
    """Rich renderables: the per-unit table and the aggregate line beside P²'s numbers."""
    from rich.console import Group as RichGroup
    from rich.table import Table

    units = Table(title="P² grid: predicted best program per unit")
    for col in ("system", "axes", "reduce", "matrix", "algo", "progs", "faster", "AllReduce s", "best s",
                "speedup", "best program"):
        units.add_column(col, justify="right" if col[0].islower() and col not in ("best program",) else "left")
    for r in summary["rows"]:
        units.add_row(r["system"], r["axes"], r["reduce"], r["matrix"], r["algo"], str(r["programs"]),
                      str(r["faster_than_allreduce"]), f"{r['allreduce_seconds']:.4g}", f"{r['best_seconds']:.4g}",
                      f"{r['speedup']:.3f}", r["best_program"])
    agg, p2 = summary["aggregate"], summary["p2"]
    side = Table(title="aggregates: p2smt model vs P² (headline)")
    side.add_column("measure")
    side.add_column("p2smt", justify="right")
    side.add_column("P²", justify="right")
    side.add_row("units", str(agg["units"]), str(p2["units"]))
    if any(r["certified"] for r in summary["rows"]):
        side.add_row("units whose program set Z3 certified", str(agg["units_certified"]), "-")
    side.add_row("share where a program beats AllReduce", f"{agg['share_beating_allreduce']:.0%}",
                 f"{p2['share_beating_allreduce']:.0%}")
    side.add_row("mean speedup of those", f"{agg['mean_speedup']:.2f}x", f"{p2['mean_speedup']:.2f}x")
    side.add_row("max speedup", f"{agg['max_speedup']:.2f}x", f"{p2['max_speedup']:.2f}x")
    side.add_row("largest AllReduce spread between placements", f"{agg['max_allreduce_spread']:.1f}x",
                 f"{p2['max_allreduce_spread']:.1f}x")
    return RichGroup(units, side)
