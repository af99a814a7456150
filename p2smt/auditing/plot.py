"""A picture of where a step's communication time goes: each chain's predicted time now and with its best."""

from __future__ import annotations

from pathlib import Path

from p2smt.auditing.report import AuditReport

__all__ = ["plot_report"]


def plot_report(report: AuditReport, path: str | Path) -> None:
    """Horizontal bars per chain (now, best), in microseconds per step, written as PNG to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    priced = [c for c in report.chains if c.seconds is not None]
    labels = [f"#{c.index} {'; '.join(c.steps)}" + (f" ×{c.count}" if c.count > 1 else "") for c in priced]
    now = [c.seconds * c.count * c.per_step * 1e6 for c in priced]
    best = [(c.best_seconds if c.best_seconds is not None and c.best_seconds < c.seconds else c.seconds)
            * c.count * c.per_step * 1e6 for c in priced]
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.45 * max(len(priced), 1)))
    ys = range(len(priced))
    ax.barh([y + 0.2 for y in ys], now, height=0.4, label="now")
    ax.barh([y - 0.2 for y in ys], best, height=0.4, label="best proved program")
    ax.set_yticks(list(ys), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("predicted µs per step")
    ax.set_title(f"{report.module} on {report.system}: {report.seconds_now * 1e6:.3g} µs now, "
                 f"{report.seconds_best * 1e6:.3g} µs best", fontsize=9)
    if not priced:
        ax.text(0.5, 0.5, "no priced chain", ha="center", transform=ax.transAxes)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(str(path), format="png", dpi=110)
    plt.close(fig)
