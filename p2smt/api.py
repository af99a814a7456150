"""The user-level Python API: each function mirrors one ``p2smt`` sub-command.

>>> import p2smt
>>> req = p2smt.Request("a100-4x16", axes=(4, 16), reduce=(0,), matrix=((1, 4), (4, 4)))
>>> p2smt.synthesize(req).total_programs
3
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from p2smt.model.hierarchy import SynthesisHierarchy, synthesis_hierarchy
from p2smt.model.placement import Placement
from p2smt.model.request import Request
from p2smt.model.system import System
from p2smt.model.system import load_system as _load_system


def load_system(name_or_path: str | Path, nodes: int | None = None,
                levels: Mapping[str, int] | None = None) -> System:
    """A shipped system by name (``p2smt topologies``) or a YAML system file, optionally resized.

    >>> load_system("a100-4x16").sizes
    (4, 16)
    >>> load_system("a100-4x16", nodes=2).num_devices
    32
    """
    return _load_system(name_or_path, nodes, levels)


def placements(system: System | str, axes: tuple[int, ...]) -> list[Placement]:
    """Every placement (parallelism matrix) of ``axes`` on ``system``, in ascending order (``p2smt placements``).

    >>> [p.matrix for p in placements("a100-4x16", (4, 16))]
    [((1, 4), (4, 4)), ((2, 2), (2, 8)), ((4, 1), (1, 16))]
    """
    s = load_system(system) if isinstance(system, str) else system
    return Request.for_system(s, axes, (0,)).placements(s)


def hierarchy_of(request: Request) -> tuple[Placement, SynthesisHierarchy]:
    """The placement and synthesis hierarchy of a request with one ``matrix``."""
    from p2smt.errors import P2Error

    if request.matrix is None:
        raise P2Error("this needs a request with one matrix")
    system = request.load_system()
    (placement,) = request.placements(system)
    h = synthesis_hierarchy(placement, placement.check_axes(request.reduce), system.level_names,
                            request.hierarchy, request.master_scope)
    return placement, h


def verify(request: Request, program: str, *, values: bool = False, timeout_ms: int | None = None) -> Any:
    """Prove a DSL program correct with Z3, or get a counterexample (``p2smt verify``).

    ``values=True`` proves it for every integer input (sums, not only chunk identities).

    >>> req = Request("a100-4x16", axes=(4, 16), reduce=(1,), matrix=((1, 4), (4, 4)))
    >>> verify(req, "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); "
    ...             "(node, InsideGroup, AllGather)").status
    <ProofStatus.PROVED: 'proved'>
    >>> verify(req, "(node, InsideGroup, ReduceScatter)").status
    <ProofStatus.COUNTEREXAMPLE: 'counterexample'>
    """
    from p2smt.model.dsl import lower_program, parse_program

    placement, h = hierarchy_of(request)
    plan = lower_program(h, parse_program(program, h))
    goal = placement.reduction_groups(placement.check_axes(request.reduce))
    steps = [(s.collective, s.groups) for s in plan]
    common = {"require_progress": request.require_progress, "timeout_ms": timeout_ms, "chunks": len(goal[0])}
    if values:
        from p2smt.smt.cegis import verify_values

        return verify_values(placement.num_devices, steps, goal, **common)
    from p2smt.smt.verify import prove_plan

    return prove_plan(placement.num_devices, steps, goal, **common)


def lower(request: Request, program: str, backend: str = "jax", axis_names: list[str] | None = None,
          allow_invalid: bool = False) -> str:
    """Source of a module that runs a DSL program with JAX ``shard_map`` or torch.distributed (``p2smt lower``).

    An invalid program is refused (P2Error with the interpreter's reason) unless ``allow_invalid``.

    >>> req = Request("v100-2x8", axes=(2, 8), reduce=(0,), matrix=((2, 1), (1, 8)))
    >>> "def reduce(" in lower(req, "(root, InsideGroup, AllReduce)", backend="torch")
    True
    >>> lower(req, "(root, InsideGroup, ReduceScatter)")
    Traceback (most recent call last):
    p2smt.errors.P2Error: ...
    """
    from p2smt.errors import P2Error
    from p2smt.lower import lower_module, placement_target
    from p2smt.model.dsl import lower_program, parse_program
    from p2smt.semantics.verdict import judge

    placement, h = hierarchy_of(request)
    prog = parse_program(program, h)
    plan = lower_program(h, prog)
    goal = placement.reduction_groups(placement.check_axes(request.reduce))
    verdict = judge(placement.num_devices, [(s.collective, s.groups) for s in plan], goal, len(goal[0]),
                    request.require_progress, layout=False)
    if not verdict.valid and not allow_invalid:
        raise P2Error(f"refusing to lower an invalid program: {verdict.message()}")
    system = request.load_system()
    target = placement_target(placement, placement.check_axes(request.reduce), system.level_names, axis_names,
                              system.name)
    return lower_module(backend, plan, target, [str(i) for i in prog.instructions])
