"""The reproduction of P²'s evaluation (P2.md §7): synthesis + ranking over the paper grid, with aggregates.

A *unit* is one (system, axes, reduction, matrix, algorithm), as in P². Per unit the sweep records the
synthesis time of its matrix, the number of programs, how many are predicted faster than AllReduce,
AllReduce's predicted time, the best program, its time and the speedup AllReduce / best.
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from p2smt.cost.rank import rank_result
from p2smt.errors import P2Error
from p2smt.model.request import Request
from p2smt.model.system import System, load_system
from p2smt.synth.config import EngineConfig
from p2smt.synth.driver import synthesize

P2_HEADLINE = {
    "units": 200,
    "share_beating_allreduce": 0.69,
    "mean_speedup": 1.27,
    "max_speedup": 2.04,
    "max_allreduce_spread": 448.5,
}
"""P²'s headline numbers (P2.md §7), reported beside ours."""
BEATS = 1 - 1e-9
"""A program beats AllReduce when its predicted time is below AllReduce's by more than float noise."""


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
    faster_than_allreduce: int
    allreduce_seconds: float
    best_program: str
    best_seconds: float
    speedup: float


def _fmt(values) -> str:
    return json.dumps([list(v) if isinstance(v, (list, tuple)) else v for v in values]).replace(" ", "")


def _algorithms(cfg, system: System) -> tuple[str, ...]:
    given = getattr(cfg, "algorithms", None)
    if given:
        return tuple(given)
    three_axis_v100 = system.name.startswith("v100") and len(tuple(cfg.axes)) == 3
    return ("ring",) if three_axis_v100 else ("ring", "tree")


def sweep_config(system: System, axes, reduction_axes, algos, *, engine: str = "enumerative",
                 max_len: int = 5) -> tuple[list[SweepRow], dict[str, dict[str, Any]]]:
    """Rows of one grid configuration (all matrices × algorithms) and the rank reports per algorithm."""
    result = synthesize(Request.for_system(system, axes, reduction_axes), EngineConfig(engine=engine, max_len=max_len))
    seconds = {tuple(map(tuple, m.matrix)): m.seconds for m in result.matrices}
    rows, reports = [], {}
    for algo in algos:
        report = rank_result(system, result, algo=algo)
        reports[algo] = report
        for m in report["matrices"]:
            progs = m["programs"]
            ar = m["allreduce_seconds"]
            best = progs[0] if progs else {"program": "", "seconds": math.nan}
            rows.append(SweepRow(
                system=system.name, axes=_fmt(axes), reduce=_fmt(reduction_axes), matrix=_fmt(m["matrix"]),
                algo=algo, synthesis_seconds=seconds[tuple(map(tuple, m["matrix"]))], programs=len(progs),
                faster_than_allreduce=sum(1 for p in progs if p["seconds"] < ar * BEATS),
                allreduce_seconds=ar, best_program=best["program"], best_seconds=best["seconds"],
                speedup=ar / best["seconds"] if progs else math.nan,
            ))
    return rows, reports


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


def _grid():
    try:
        from p2smt.runs.grid import paper_grid
    except ImportError as err:
        raise P2Error("the paper grid (p2smt/grid.py) is not available in this installation") from err
    return paper_grid()


def paper_sweep(out_dir: str | Path, *, engine: str = "enumerative", plots: bool = True,
                max_len: int = 5, configs=None) -> dict[str, Any]:
    """Run the P2.md §7 grid; write sweep.csv, sweep.json and one PNG per configuration to ``out_dir``.

    Returns ``{"rows": [row dicts], "aggregate": {...}, "p2": P2_HEADLINE, "seconds": wall time,
    "files": {...}}``. ``configs`` replaces the paper grid (objects with system, axes, reduction_axes).
    """
    start = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[SweepRow] = []
    pictures = []
    for cfg in (_grid() if configs is None else configs):
        system = cfg.system if isinstance(cfg.system, System) else load_system(cfg.system)
        cfg_rows, reports = sweep_config(system, cfg.axes, cfg.reduction_axes, _algorithms(cfg, system),
                                         engine=engine, max_len=max_len)
        rows.extend(cfg_rows)
        if plots:
            name = f"{system.name}_axes{'x'.join(map(str, cfg.axes))}_reduce{'-'.join(map(str, cfg.reduction_axes))}"
            path = out / f"{name}.png"
            plot_config(path, f"{system.name} axes {list(cfg.axes)} reduce {list(cfg.reduction_axes)}", reports)
            pictures.append(path.name)
    summary = {
        "rows": [asdict(r) for r in rows],
        "aggregate": aggregate(rows),
        "p2": P2_HEADLINE,
        "seconds": time.perf_counter() - start,
        "files": {"csv": "sweep.csv", "json": "sweep.json", "plots": pictures},
    }
    with open(out / "sweep.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(SweepRow.__dataclass_fields__))
        writer.writeheader()
        for r in rows:
            writer.writerow(asdict(r))
    (out / "sweep.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
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
    side.add_row("share where a program beats AllReduce", f"{agg['share_beating_allreduce']:.0%}",
                 f"{p2['share_beating_allreduce']:.0%}")
    side.add_row("mean speedup of those", f"{agg['mean_speedup']:.2f}x", f"{p2['mean_speedup']:.2f}x")
    side.add_row("max speedup", f"{agg['max_speedup']:.2f}x", f"{p2['max_speedup']:.2f}x")
    side.add_row("largest AllReduce spread between placements", f"{agg['max_allreduce_spread']:.1f}x",
                 f"{p2['max_allreduce_spread']:.1f}x")
    return RichGroup(units, side)
