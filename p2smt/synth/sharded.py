"""One plan proved against a sharded goal (docs/semantics.md §6) by Z3, its goal failure worded by the interpreter.

The Boolean encoding states the sharded goals (and the AllGather goal's initial state): Z3 proves every step
applies and the final state is the sharded goal, at the real size. Where Z3 finds the goal missed, the dense
interpreter, exact on one plan, names the device and the chunks it ends with and should hold (the encoding's
own goal report states the AllReduce goal); the two must agree, else it is an internal error.
"""

from __future__ import annotations

from collections.abc import Sequence

from p2smt.errors import InternalError
from p2smt.model.collectives import Group
from p2smt.model.failure import Rule, Violation
from p2smt.model.goal import Sharding
from p2smt.model.status import ProofStatus
from p2smt.semantics.dense import Step
from p2smt.semantics.positions import PositionRun
from p2smt.semantics.verdict import Verdict, judge
from p2smt.smt.verify import PlanProof, StepReport, prove_plan
from p2smt.synth.agree import agree, same_verdict

MAX_DEFECTS = 64
MAX_STATES = 8


def prove_sharded(
    num_devices: int,
    steps: Sequence[Step],
    goal_groups: Sequence[Group],
    sharding: Sharding,
    *,
    require_progress: bool = False,
    timeout_ms: int | None = None,
    chunks: int | None = None,
    encoding: str = "bool-matrix",
    report: StepReport | None = None,
    verdict: Verdict | None = None,
) -> PlanProof:
    """PROVED, COUNTEREXAMPLE or unknown for ``steps`` against the sharded goal ``sharding``, by Z3.

    A failing step is Z3's counterexample (as ``prove_plan`` gives it); a plan whose steps all apply is PROVED
    when Z3 proves the sharded goal, else the interpreter's goal violation (device, the chunks it ends with and
    its shard's). ``verdict``: the interpreter's, when the caller has it already."""
    chunks = chunks or len(goal_groups[0])
    if verdict is None:
        verdict = judge(num_devices, steps, goal_groups, chunks, require_progress, layout=False, sharding=sharding)
    proof = prove_plan(num_devices, steps, goal_groups, require_progress=require_progress, timeout_ms=timeout_ms,
                       chunks=chunks, encoding=encoding, report=report, sharding=sharding)
    if proof.status is ProofStatus.UNKNOWN:
        return proof
    same_verdict(proof, verdict)
    if proof.status is ProofStatus.PROVED:
        return proof
    v = verdict.violation
    if proof.violation is not None and proof.violation.step is not None:  # Z3 names a failing step
        if v is None or v.step is None:
            raise InternalError(f"Z3 refutes step {proof.violation.step} but the interpreter applies every step "
                                f"of a plan against the {sharding.kind.value} goal")
        return agree(proof, verdict)
    # Z3: every step applies, the goal is missed; the interpreter names where (or the first step mixing groups)
    defects = verdict.execution.defects
    shown = list(dict.fromkeys(v.devices))[:MAX_STATES]
    return PlanProof(
        ProofStatus.COUNTEREXAMPLE, v, v.message,
        tuple({"device": d.device, "chunk": d.chunk, "missing": list(d.missing), "foreign": list(d.foreign)}
              for d in defects[:MAX_DEFECTS]),
        len(defects) > MAX_DEFECTS, verdict.device_rows(shown), len(steps), stats=proof.stats)


def with_positions(proof: PlanProof, run: PositionRun, steps: int) -> PlanProof:
    """A PROVED plan whose XLA/NCCL positions miss the goal becomes a COUNTEREXAMPLE naming the device, the
    position and the block found there (rule ``positions.goal``, or the positions rule a step breaks)."""
    if proof.status is not ProofStatus.PROVED or run.valid:
        return proof
    facts = {k: v for k, v in run.counterexample().items() if k not in ("semantics", "message", "rule")}
    rule = Rule(run.counterexample()["rule"])
    step = run.violation.step if run.violation is not None else None
    v = Violation(step, steps, None, rule, run.violation.group if run.violation else None,
                  tuple(d for d in (facts.get("device"),) if d is not None), None, run.message(), facts)
    return PlanProof(ProofStatus.COUNTEREXAMPLE, v, v.message, stats=proof.stats)
