"""Lowering of reduction plans to runnable JAX (shard_map) and torch.distributed code, and running it.

``lower_module(backend, plan, target)`` returns the source of a self-contained module with one
``reduce(x)``; ``run_program`` executes it on this machine (JAX on N CPU host devices, torch with
gloo in N processes) and checks exact sums. Targets come from a placement (``placement_target``)
or from a bare explicit plan (``plan_target``).
"""

from __future__ import annotations

from collections.abc import Sequence

from p2smt.errors import P2Error
from p2smt.lower.layout import PlanLayout, layout
from p2smt.lower.names import check_identifier
from p2smt.lower.run import Mismatch, RunCase, RunReport, run_cases, run_program
from p2smt.lower.target import (
    MeshSpec,
    Target,
    flat_mesh,
    jax_mesh_order,
    placement_mesh,
    placement_target,
    plan_target,
)
from p2smt.model.collectives import ExplicitPlan

BACKENDS = ("jax", "torch")


def lower_module(
    backend: str, plan: ExplicitPlan, target: Target, step_labels: Sequence[str] | None = None
) -> str:
    """Source of a Python module implementing ``plan`` on ``target`` with the chosen backend."""
    from p2smt.lower import jax_backend, torch_backend

    renderers = {"jax": jax_backend.render, "torch": torch_backend.render}
    if backend not in renderers:
        raise P2Error(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    return renderers[backend](layout(plan, target, step_labels))


__all__ = [
    "BACKENDS",
    "MeshSpec",
    "Mismatch",
    "PlanLayout",
    "RunCase",
    "RunReport",
    "Target",
    "check_identifier",
    "flat_mesh",
    "jax_mesh_order",
    "layout",
    "lower_module",
    "placement_mesh",
    "placement_target",
    "plan_target",
    "run_cases",
    "run_program",
]
