"""The user-level Python API: each function mirrors one ``p2smt`` sub-command.

>>> import p2smt
>>> req = p2smt.Request("a100-4x16", axes=(4, 16), reduce=(0,), matrix=((1, 4), (4, 4)))
>>> p2smt.synthesize(req).total_programs
3
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from p2smt.model.hierarchy import SynthesisHierarchy, synthesis_hierarchy
from p2smt.model.placement import Placement
from p2smt.model.request import Request
from p2smt.model.system import System
from p2smt.model.system import load_system as _load_system

__all__ = ["audit", "audit_text", "check", "cost", "groups", "hierarchy_of", "load_system", "lower", "placements", "run", "topologies",
           "verify"]


def load_system(name_or_path: System | str | Path, nodes: int | None = None,
                levels: Mapping[str, int] | None = None) -> System:
    """A shipped system by name (``p2smt topologies``) or a YAML system file (a System as it is), optionally
    resized.

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
    s = load_system(system)
    return Request.for_system(s, axes, (0,)).placements(s)


def one_placement(request: Request, what: str = "this") -> Request:
    """The request on one placement: its ``matrix``, or the only placement of its axes (no matrix to give when
    there is one); axes with several placements are refused, counted, in one line naming ``what`` needs it."""
    from dataclasses import replace

    from p2smt.errors import P2Error

    if request.matrix is not None:
        return request
    system = request.load_system()
    found = request.placements(system)
    if len(found) != 1:
        axes = ",".join(map(str, request.axes))
        raise P2Error(f"{what} needs a matrix: axes {axes} have {len(found):,} placements on {system.name}; give one "
                      "with --matrix (p2smt placements lists them)")
    return replace(request, matrix=found[0].matrix, _system=system)


def hierarchy_of(request: Request) -> tuple[Placement, SynthesisHierarchy]:
    """The placement and synthesis hierarchy of a request on one placement (``one_placement``)."""
    request = one_placement(request)
    system = request.load_system()
    (placement,) = request.placements(system)
    h = synthesis_hierarchy(placement, placement.check_axes(request.reduce), system.level_names,
                            request.hierarchy, request.master_scope)
    return placement, h


def verify(request: Request, program: str | Sequence[Mapping[str, Any]], *, values: bool = False,
           timeout_ms: int | None = None, goal: str | None = None, shard_axes: Sequence[int] | None = None) -> Any:
    """Prove a DSL program, or an explicit plan (``p2smt verify --plan``: a list of ``{"collective",
    "replica_groups"}`` steps on physical ids), correct with Z3, or get a counterexample (``p2smt verify``).

    ``values=True`` proves it for every integer input (sums, not only chunk identities). ``goal`` and
    ``shard_axes`` as ``--goal`` and ``--shard-axes`` (default: the request's goal; docs/semantics.md §6): under ``reduce-scatter`` Z3 proves
    every step applies and the interpreters judge the sharded final state; an explicit plan's XLA/NCCL
    positions are judged too, and under a sharded goal a DSL program's lowered plan's (a misplaced block is a
    counterexample naming device, position and block: the chunk semantics cannot see an AllGather's order).

    >>> req = Request("a100-4x16", axes=(4, 16), reduce=(1,), matrix=((1, 4), (4, 4)))
    >>> verify(req, "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); "
    ...             "(node, InsideGroup, AllGather)").status
    <ProofStatus.PROVED: 'proved'>
    >>> verify(req, "(node, InsideGroup, ReduceScatter)").status
    <ProofStatus.COUNTEREXAMPLE: 'counterexample'>
    >>> one = Request("a100-4x16", axes=(64,), reduce=(0,), matrix=((4, 16),))
    >>> across, inside = "[16,4]<=[4,16]T(1,0)", "[4,16]<=[64]"
    >>> rs = [{"collective": "ReduceScatter", "replica_groups": g} for g in (across, inside)]
    >>> verify(one, rs, goal="reduce-scatter").status
    <ProofStatus.PROVED: 'proved'>
    >>> verify(one, rs[::-1], goal="reduce-scatter").message
    'device 1 ends with chunks [4], not its shard of the reduce-scatter goal, chunks [1] (60 devices are off the goal)'
    """
    from p2smt.errors import P2Error
    from p2smt.semantics.positions import execute_positions
    from p2smt.synth.sharded import with_positions

    placement, prog, steps, goal_groups, sharding = _plan(request, program, goal, shard_axes)
    common = {"require_progress": request.require_progress, "timeout_ms": timeout_ms, "chunks": len(goal_groups[0])}
    if values:
        if sharding is not None:
            raise P2Error(f"verify with values=True does not prove the {sharding.kind.value} goal yet")
        from p2smt.smt.cegis import verify_values

        return verify_values(placement.num_devices, steps, goal_groups, **common)
    if sharding is not None:
        from p2smt.synth.sharded import prove_sharded

        proof = prove_sharded(placement.num_devices, steps, goal_groups, sharding, **common)
    else:
        from p2smt.semantics.verdict import judge
        from p2smt.synth.agree import agree

        labels = [str(i) for i in prog.instructions] if prog is not None else None
        verdict = judge(placement.num_devices, steps, goal_groups, common["chunks"], request.require_progress,
                        layout=False, labels=labels)
        proof = agree(_prove_allreduce(placement.num_devices, steps, goal_groups, common), verdict)
    if prog is not None and sharding is None:
        return proof
    run = execute_positions(placement.num_devices, steps, goal_groups, common["chunks"], sharding)
    return with_positions(proof, run, len(steps))


def _prove_allreduce(n: int, steps, goal_groups, common: dict) -> Any:
    """Z3's proof of the allreduce goal: whole, or each reduction group shape apart above ``Z3_PLAN_DEVICES``."""
    from p2smt.smt.verify import Z3_PLAN_DEVICES, prove_plan, prove_split

    if n > Z3_PLAN_DEVICES:  # as ``p2smt verify``: each reduction group shape apart
        from p2smt.model.components import split_plan

        split = split_plan(n, steps, goal_groups)
        if split is not None and split.size <= Z3_PLAN_DEVICES:
            return prove_split(split, steps, len(steps), **common)
    return prove_plan(n, steps, goal_groups, **common)


def _plan(request: Request, program: str | Sequence[Mapping[str, Any]], goal: str | None,
          shard_axes: Sequence[int] | None):
    """(placement, DSL program or None for an explicit plan, steps on the system, goal groups, sharding or None)
    of a DSL program or an explicit plan, and the goal bound to the placement: ``goal``/``shard_axes`` where
    given (any spelling of the collective's name), else the request's goal."""
    from p2smt.model.dsl import lower_program, parse_explicit_plan, parse_program
    from p2smt.model.goal import Goal

    placement, h = hierarchy_of(request)
    reduce = placement.check_axes(request.reduce)
    if goal is None and shard_axes is None:
        sharding = request.goal.sharding(placement)
    else:
        sharding = Goal.of(request.goal.kind if goal is None else goal, shard_axes, reduce).sharding(placement)
    prog = parse_program(program, h) if isinstance(program, str) else None
    if prog is None:
        plan = parse_explicit_plan(list(program), "plan", placement.num_devices)
    else:
        plan = lower_program(h, prog)
    goal_groups = placement.reduction_groups(reduce)
    return placement, prog, [(s.collective, s.groups) for s in plan], goal_groups, sharding


def topologies() -> list[str]:
    """The names of the shipped systems (``p2smt topologies``).

    >>> "a100-4x16" in topologies()
    True
    """
    from p2smt.model.system import shipped_systems

    return shipped_systems()


def groups(request: Request, instructions: str) -> list[dict[str, Any]]:
    """The device groups of each DSL instruction, on the synthesis hierarchy and on the system
    (``p2smt groups``).

    >>> req = Request("fig2-16gpu", axes=(16,), reduce=(0,), matrix=((1, 2, 2, 4),))
    >>> groups(req, "(cpu, Parallel(rack), AllReduce)")[0]["device_groups"][:2]
    [[0, 4, 8, 12], [1, 5, 9, 13]]
    """
    from p2smt.model.dsl import instruction_groups, lower_program, parse_program

    placement, h = hierarchy_of(request)
    program = parse_program(instructions, h)
    return [{"instruction": str(ins), "synthesis_groups": [list(g) for g in instruction_groups(h, ins)],
             "device_groups": [list(g) for g in step.groups],
             **shard_ranks(request, placement, h, instruction_groups(h, ins))}
            for ins, step in zip(program.instructions, lower_program(h, program))]


def shard_ranks(request: Request, placement: Placement, h: SynthesisHierarchy, groups) -> dict[str, Any]:
    """Under a sharded goal (``request.goal``, docs/semantics.md §6), each synthesis group's members' shard
    ranks (``groups --goal``): a ReduceScatter leaves member i block i, so the goal wants ranks in order."""
    sharding = request.sharding(placement, h)
    return {} if sharding is None else {"shard_ranks": [[sharding.rank[d] for d in g] for g in groups]}


def _judged(request: Request, program: str | Sequence[Mapping[str, Any]], goal: str | None = None,
            shard_axes: Sequence[int] | None = None):
    """(placement, program or None, plan, sharding or None, verdict) of a DSL program or an explicit plan under
    P²'s interpreter (and XLA/NCCL positions, for an explicit plan and under a sharded goal), against ``goal``."""
    from p2smt.model.collectives import ExplicitStep
    from p2smt.semantics.verdict import judge

    placement, prog, steps, goal_groups, sharding = _plan(request, program, goal, shard_axes)
    verdict = judge(placement.num_devices, steps, goal_groups, len(goal_groups[0]), request.require_progress,
                    layout=prog is None or sharding is not None, sharding=sharding)
    return placement, prog, tuple(ExplicitStep(c, g) for c, g in steps), sharding, verdict


def check(request: Request, program: str | Sequence[Mapping[str, Any]], *, goal: str | None = None,
          shard_axes: Sequence[int] | None = None) -> Any:
    """Run a DSL program, or an explicit plan (a list of ``{"collective", "replica_groups"}`` steps on physical
    ids, judged in XLA/NCCL positions too), through the concrete interpreter (``p2smt check``): a verdict with
    ``valid``, ``violation`` (the failing step and rule) and ``message()``. ``goal`` and ``shard_axes`` as
    ``--goal`` and ``--shard-axes`` (default: the request's goal; docs/semantics.md §6); under a sharded goal a DSL program is judged in
    positions too (``positions``), so a permuted AllGather order is not ``valid``.

    >>> req = Request("a100-4x16", axes=(4, 16), reduce=(1,), matrix=((1, 4), (4, 4)))
    >>> check(req, "(root, InsideGroup, AllReduce)").valid
    True
    >>> check(req, "(node, InsideGroup, ReduceScatter)").violation.rule
    <Rule.GOAL: 'goal'>
    >>> check(req, "(node, InsideGroup, ReduceScatter); (node, Parallel(root), ReduceScatter)",
    ...       goal="reduce-scatter").valid
    False
    >>> check(req, "(node, Parallel(root), ReduceScatter); (node, InsideGroup, ReduceScatter)",
    ...       goal="reduce-scatter").valid
    True
    """
    return _judged(request, program, goal, shard_axes)[-1]


def cost(system: System | str, collective: str, nbytes: float, algo: str = "ring") -> Any:
    """The predicted time of one flat collective over all GPUs of ``system`` (``p2smt cost``): a choice
    with ``seconds`` and NCCL's ``algo`` and ``protocol``. ``collective``: allreduce, reducescatter,
    allgather, reduce or broadcast in any spelling (``reduce-scatter``, ``ReduceScatter``); ``nbytes`` as
    nccl-tests counts them.

    >>> pick = cost("dgx-h100", "allreduce", 1e6)
    >>> pick.seconds > 0, pick.algo
    (True, 'ring')
    """
    from p2smt.cost.model import flat_collective_choice

    return flat_collective_choice(load_system(system), collective, nbytes, algo)


def lower(request: Request, program: str, backend: str = "jax", axis_names: list[str] | None = None,
          allow_invalid: bool = False, *, goal: str | None = None, shard_axes: Sequence[int] | None = None) -> str:
    """Source of a module that runs a DSL program with JAX ``shard_map`` or torch.distributed (``p2smt lower``).

    An invalid program is refused (P2Error with the interpreter's reason) unless ``allow_invalid``. ``goal`` and
    ``shard_axes`` as ``--goal`` and ``--shard-axes`` (default: the request's goal; docs/semantics.md §6): the program is then judged in buffer
    positions too, and the module hands each device its shard (or every shard, in rank order).

    >>> req = Request("v100-2x8", axes=(2, 8), reduce=(0,), matrix=((2, 1), (1, 8)))
    >>> "def reduce(" in lower(req, "(root, InsideGroup, AllReduce)", backend="torch")
    True
    >>> lower(req, "(root, InsideGroup, ReduceScatter)")
    Traceback (most recent call last):
    p2smt.errors.P2Error: ...
    """
    from p2smt.lower import lower_module

    prog, plan, target = _lowering(request, program, axis_names, allow_invalid, "lower", goal, shard_axes)
    return lower_module(backend, plan, target, [str(i) for i in prog.instructions])


def run(request: Request, program: str, backend: str = "jax", *, length: int | None = None, repeats: int = 1,
        timeout: float = 600.0, axis_names: list[str] | None = None, allow_invalid: bool = False,
        goal: str | None = None, shard_axes: Sequence[int] | None = None, memory_gib: float | None = None) -> Any:
    """Run a DSL program, lowered for ``backend``, on local CPU devices and check the exact sums
    (``p2smt run``): a report with ``ok``, the mismatches and the wall times. An invalid program is refused
    as in ``lower``; ``goal`` and ``shard_axes`` as in ``lower``. A size whose estimated memory exceeds
    ``memory_gib`` (``--memory``; default half the RAM, or less if less is available) or whose least time
    exceeds ``timeout`` is refused (P2Error) before any worker starts; ``length`` defaults to 256 elements a
    chunk, fewer where that does not fit.

    >>> req = Request("v100-2x8", axes=(2, 8), reduce=(0,), matrix=((2, 1), (1, 8)))
    >>> run(req, "(root, InsideGroup, ReduceScatter); (root, InsideGroup, AllGather)").ok  # doctest: +SKIP
    True
    >>> run(req, "(root, InsideGroup, ReduceScatter)")
    Traceback (most recent call last):
    p2smt.errors.P2Error: refusing to run an invalid program: ...

    (The first example needs JAX and is skipped as a doctest; ``tests/test_lower_run.py`` runs it.)
    """
    from p2smt.lower.run import require_backend, run_program

    prog, plan, target = _lowering(request, program, axis_names, allow_invalid, "run", goal, shard_axes)
    require_backend(backend)
    return run_program(backend, plan, target, step_labels=[str(i) for i in prog.instructions], length=length,
                       repeats=repeats, timeout=timeout, memory_gib=memory_gib)


def _lowering(request: Request, program: str, axis_names: list[str] | None, allow_invalid: bool, what: str,
              goal: str | None = None, shard_axes: Sequence[int] | None = None):
    """(program, plan, target) to lower or run, refusing an invalid program unless allowed (under a sharded goal
    judged in buffer positions too, as ``p2smt lower`` does: the module hands back the buffers as they are)."""
    from p2smt.errors import P2Error
    from p2smt.lower import placement_target

    placement, prog, plan, sharding, verdict = _judged(request, program, goal, shard_axes)
    if not verdict.valid and not allow_invalid:
        raise P2Error(f"refusing to {what} an invalid program: {verdict.message()}")
    system = request.load_system()
    target = placement_target(placement, placement.check_axes(request.reduce), system.level_names, axis_names,
                              system.name, sharding)
    return prog, plan, target


def audit(fn: Any, *args: Any, system: System | str, mesh: Any = None, nodes: int | None = None,
          levels: Mapping[str, int] | None = None, device_order: Any = None, expect: Any = None,
          algo: str = "auto", max_len: int = 6, **kwargs: Any) -> Any:
    """Audit a JAX training step (``p2smt audit`` on a function): lowered in-process, its StableHLO checked
    output by output against the declared shardings, its compiled HLO's chains proved, priced and improved.

    ``expect`` maps an output's index to an ``auditing.Expected`` (or ``'data,-'`` text) overriding its
    declared sharding; the result is an ``auditing.AuditReport`` (``.verdict``, ``.chains``, ``.to_json()``).
    """
    from p2smt.auditing import audit_function

    return audit_function(fn, *args, system=system, mesh=mesh, nodes=nodes, levels=levels,
                          device_order=device_order, expect=_expectations(expect), algo=algo, best_len=max_len,
                          **kwargs)


def audit_text(text: str, *, system: System | str, nodes: int | None = None,
               levels: Mapping[str, int] | None = None, device_order: Any = None, mesh: Any = None,
               expect: Any = None, algo: str = "auto", max_len: int = 6, where: str = "<module>") -> Any:
    """Audit a printed module, compiled HLO, HLO before partitioning or StableHLO (``p2smt audit STEP``).

    ``mesh`` as ``--mesh``: the mesh axes of a module that declares none (compiled HLO), as its text
    ``"data=4,tensor=4"``, a mapping ``{"data": 4, "tensor": 4}`` or (name, size) pairs, in mesh order.

    >>> from pathlib import Path
    >>> text = Path("tests/data/audit/row-parallel-mlp.mlir").read_text()  # doctest: +SKIP
    >>> audit_text(text, system="v100-2x8").verdict.value  # doctest: +SKIP
    'PROVED'
    """
    from p2smt.auditing import audit_text as run

    return run(text, system=system, nodes=nodes, levels=levels, device_order=device_order, mesh=_mesh_pairs(mesh),
               expect=_expectations(expect), algo=algo, best_len=max_len, where=where)


def _mesh_pairs(mesh: Any) -> Any:
    """``audit_text``'s mesh as (name, size) pairs: from ``--mesh``'s text or a mapping (sizes checked there)."""
    if isinstance(mesh, str):
        return [(name, size) for name, _, size in (t.partition("=") for t in mesh.split(",") if t)]
    return list(mesh.items()) if isinstance(mesh, Mapping) else mesh


def recheck(folder: str | Path, *, timeout: float | None = None, report: Any = None) -> list[Any]:
    r"""cvc5's verdict on every certificate file (``*.smt2``) that ``--certificate folder`` wrote (``p2smt
    recheck``): a ``Recheck`` per file, ``verdict`` confirmed (cvc5 gives Z3's recorded answer), refuted or
    unknown (no answer within ``timeout`` seconds per file); ``report`` is called with each as it is done.

    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "q.smt2").write_text("(set-info :status unsat)\n(set-logic ALL)\n(declare-const x Bool)\n"
    ...                                    "(assert (and x (not x)))\n(check-sat)\n")
    >>> [(r.file, r.verdict.value) for r in recheck(folder)]
    [('q.smt2', 'confirmed')]
    """
    from p2smt.smt.cvc5_recheck import recheck as run

    return run(folder, timeout_s=timeout, report=report)


def _expectations(expect: Any) -> Any:
    """``{index: Expected | 'SPEC'}`` as ``Expected`` values (``--expect``'s text form)."""
    from p2smt.auditing import Expected, parse_expect

    if not expect:
        return None
    return {int(k): v if isinstance(v, Expected) else parse_expect(f"{k}={v}")[1] for k, v in expect.items()}
