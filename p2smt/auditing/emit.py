"""The fix for each improvable chain: its best program lowered to a JAX ``shard_map`` module (``lower``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from p2smt.auditing.report import AuditReport
from p2smt.errors import P2Error
from p2smt.lower.target import Target
from p2smt.model.collectives import ExplicitPlan
from p2smt.model.system import System

__all__ = ["Fix", "fixes", "write_fixes"]


@dataclass(frozen=True)
class Fix:
    """A chain's replacement: the chain, the best program's plan and labels, and the mesh target both run on."""

    chain: int
    program: str
    plan: ExplicitPlan
    labels: tuple[str, ...]
    target: Target
    replaces: ExplicitPlan


def fixes(report: AuditReport, system: System) -> list[Fix]:
    """One fix per chain whose best program is faster than it (speedup above 1)."""
    from p2smt.lower.target import placement_target
    from p2smt.model.dsl import lower_program, parse_program
    from p2smt.model.hierarchy import synthesis_hierarchy
    from p2smt.model.placement import Placement

    if report.placement is None or report.mesh is None:
        return []
    names = tuple(n for n, _ in report.mesh)
    placement = Placement(system.sizes, tuple(s for _, s in report.mesh), report.placement)
    out = []
    for chain in report.chains:
        if chain.best_program is None or chain.speedup is None or chain.speedup <= 1.0 or not chain.axes \
                or chain.goal != "allreduce":  # a sharded goal's best is offered, not lowered
            continue
        red = tuple(sorted(names.index(a) for a in chain.axes))
        h = synthesis_hierarchy(placement, red, system.level_names, "d", "per-ancestor")
        program = parse_program(chain.best_program, h)
        plan = lower_program(h, program)
        target = placement_target(placement, red, system.level_names, names, system.name)
        out.append(Fix(chain.index, chain.best_program, plan, tuple(str(i) for i in program.instructions), target,
                       chain.plan))
    return out


def write_fixes(report: AuditReport, system: System, directory: str | Path) -> list[Path]:
    """Write ``chain<k>.py`` (a JAX module with ``reduce(x)``) per fix into ``directory``; the paths written."""
    from p2smt.lower import lower_module

    target_dir = Path(directory)
    if target_dir.exists() and not target_dir.is_dir():
        raise P2Error(f"--emit {directory}: exists and is not a directory")
    found = fixes(report, system)
    target_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fix in found:
        path = target_dir / f"chain{fix.chain}.py"
        source = lower_module("jax", fix.plan, fix.target, fix.labels)
        tmp = path.with_suffix(".py.tmp")
        tmp.write_text(source, encoding="utf-8")
        tmp.replace(path)
        paths.append(path)
    return paths
