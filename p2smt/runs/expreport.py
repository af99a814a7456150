"""Reading an experiment's result lines: the per-variant summary, its rich rendering and the time-vs-k plot."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from p2smt.errors import P2Error

STATUSES = ("complete", "conjectured", "unknown", "timeout", "error", "unsound", "skipped")
"""complete: every length exhausted; conjectured: every program valid, completeness not proved (e.g.
``representative`` above the size its sets are certified at); unknown: Z3 gave up (its timeout); timeout: killed at the wall-clock
limit; error: the run failed (message in ``error``); unsound: the interpreter rejected a returned
program; skipped: the configuration is above the variant's ``max_k``."""


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per variant: configurations, runs by status, median and total wall time, programs (summed over
    configurations with a complete or conjectured run); and every configuration whose complete or
    conjectured runs disagree."""
    variants: dict[str, dict[str, Any]] = {}
    by_config: dict[int, dict[str, set[tuple[int, str]]]] = {}
    labels: dict[int, str] = {}
    for r in rows:
        v = variants.setdefault(r["variant"], {"variant": r["variant"], "configs": set(), "runs": 0,
                                               "counts": {s: 0 for s in STATUSES}, "times": [],
                                               "programs": {}})
        v["counts"][r["status"]] = v["counts"].get(r["status"], 0) + 1
        if r["status"] == "skipped":
            continue
        v["configs"].add(r["config_index"])
        v["runs"] += 1
        v["times"].append(r["wall_seconds"])
        if r["status"] in ("complete", "conjectured"):
            v["programs"].setdefault(r["config_index"], r["programs"])
            labels[r["config_index"]] = r["config"]
            by_config.setdefault(r["config_index"], {}).setdefault(r["variant"], set()).add(
                (r["programs"], r["programs_sha256"]))
    table = []
    for v in variants.values():
        times = v["times"]
        table.append({
            "variant": v["variant"], "configs": len(v["configs"]), "runs": v["runs"], **v["counts"],
            "median_seconds": round(statistics.median(times), 6) if times else None,
            "total_seconds": round(sum(times), 6),
            "programs": sum(v["programs"].values()),
        })
    disagreements = []
    for index in sorted(by_config):
        answers = by_config[index]
        if len({a for found in answers.values() for a in found}) > 1:
            disagreements.append({
                "config_index": index, "config": labels[index],
                "answers": {var: sorted(n for n, _ in found) for var, found in answers.items()},
            })
    problems = [{"variant": r["variant"], "config": r["config"], "status": r["status"], "error": r.get("error")}
                for r in rows if r["status"] in ("error", "unsound")]
    return {"variants": table, "disagreements": disagreements, "failures": problems}


def render_summary(summary: dict[str, Any], title: str = "experiment"):
    """Rich renderables: the per-variant table, then loud panels for disagreements and failures."""
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    t = Table(title=title, caption="cfg: configurations; ok: complete; conj: every program valid, completeness not "
              "proved; unk: Z3 gave up (its timeout); t/o: killed at the wall-clock limit; err: errors and unsound "
              "runs (listed below); med, total: seconds over the runs that were not skipped; progs: programs",
              padding=(0, 1), collapse_padding=True)
    t.add_column("variant", overflow="fold", ratio=1)
    for col in ("cfg", "runs", "ok", "conj", "unk", "t/o", "err", "skip", "med s", "total s", "progs"):
        t.add_column(col, justify="right", no_wrap=True)
    for v in summary["variants"]:
        med = "—" if v["median_seconds"] is None else f"{v['median_seconds']:.3f}"
        t.add_row(escape(v["variant"]), str(v["configs"]), str(v["runs"]), str(v["complete"]), str(v["conjectured"]),
                  str(v["unknown"]),
                  str(v["timeout"]), str(v["error"] + v["unsound"]), str(v["skipped"]), med,
                  f"{v['total_seconds']:.2f}", str(v["programs"]))
    out: list[Any] = [t]
    if summary["disagreements"]:
        lines = [escape(f"{d['config']}: " + "; ".join(f"{var} -> {counts}" for var, counts in d["answers"].items()))
                 for d in summary["disagreements"]]
        out.append(Panel("\n".join(lines), title="CONFORMANCE DISAGREEMENT: complete or conjectured runs found different "
                         "program sets", style="bold red"))
    if summary["failures"]:
        lines = [escape(f"{f['variant']} on {f['config']}: {f['status']}: {f['error']}") for f in summary["failures"]]
        out.append(Panel("\n".join(lines), title="FAILED RUNS", style="bold red"))
    return out


def plot(rows: Sequence[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """PNG: wall time vs reduction-group size k (log-log); per variant a line through the median time of
    its complete (or conjectured) runs at each k, every run a dot, runs without an answer (unknown, timeout) an ×."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    order = list(dict.fromkeys(r["variant"] for r in rows))
    for i, variant in enumerate(order):
        color = f"C{i % 10}"
        mine = [r for r in rows if r["variant"] == variant and r["status"] not in ("skipped", "error", "unsound")]
        done = [r for r in mine if r["status"] in ("complete", "conjectured")]
        cut = [r for r in mine if r["status"] not in ("complete", "conjectured")]
        ks = sorted({r["k"] for r in done})
        med = [statistics.median(r["wall_seconds"] for r in done if r["k"] == k) for k in ks]
        ax.plot(ks, med, "-", color=color, label=variant, linewidth=1.6)
        ax.plot([r["k"] for r in done], [max(r["wall_seconds"], 1e-4) for r in done], "o", color=color,
                alpha=0.45, markersize=4)
        if cut:
            ax.plot([r["k"] for r in cut], [max(r["wall_seconds"], 1e-4) for r in cut], "x", color=color,
                    markersize=7, label=f"{variant}: unknown / timeout")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("reduction-group size k (devices)")
    ax.set_ylabel("wall time per run (s)")
    ax.set_title(title or "solve time vs reduction-group size")
    ax.grid(True, which="both", alpha=0.3)
    if order:
        ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=120)
    except OSError as err:
        raise P2Error(f"cannot write {out}: {err.strerror}") from None
    finally:
        plt.close(fig)
    return out
