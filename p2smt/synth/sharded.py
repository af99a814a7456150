"""One plan proved against a sharded goal (docs/semantics.md §6): Z3's proof that every step applies, joined
with the interpreters' verdict on the final state.

A ReduceScatter or HSDP goal starts from the allreduce goal's state, so the Boolean encoding's step rules are
its rules: Z3 proves (or refutes) each step at the real size. Only the goal differs, and the encodings do not
have it yet; the dense interpreter judges the final state, which on one fixed plan is exact (every chunk and
contribution is concrete). The AllGather goal starts from another state, which the encodings lack: refused.
"""

from __future__ import annotations

from collections.abc import Sequence

from p2smt.errors import InternalError, P2Error
from p2smt.model.collectives import Group
from p2smt.model.failure import Rule, Violation
from p2smt.model.goal import GoalKind, Sharding
from p2smt.model.status import ProofStatus
from p2smt.semantics.dense import Step
from p2smt.semantics.positions import PositionRun
from p2smt.semantics.verdict import Verdict, judge
from p2smt.smt.verify import PlanProof, StepReport, prove_plan

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
    """PROVED, COUNTEREXAMPLE or unknown for ``steps`` against the sharded goal ``sharding``.

    A failing step is Z3's counterexample on the plan up to that step (as ``prove_plan`` gives it); a plan
    whose steps all apply is PROVED when the interpreter finds the sharded goal reached, else the interpreter's
    goal violation (device, the chunks it ends with and its shard's). ``verdict``: the interpreter's, when the
    caller has it already."""
    if sharding.kind is GoalKind.ALL_GATHER:
        raise P2Error("Z3 does not prove the all-gather goal yet (its encodings start every device with the whole "
                      "buffer); check judges it")
    chunks = chunks or len(goal_groups[0])
    if verdict is None:
        verdict = judge(num_devices, steps, goal_groups, chunks, require_progress, layout=False, sharding=sharding)
    v = verdict.violation
    failing = v.step if v is not None else None
    prefix = steps if failing is None else steps[:failing]
    proof = prove_plan(num_devices, prefix, goal_groups, require_progress=require_progress, timeout_ms=timeout_ms,
                       chunks=chunks, encoding=encoding, report=report)
    if failing is not None or proof.status is ProofStatus.UNKNOWN:
        return proof
    if proof.violation is not None and proof.violation.step is not None:
        raise InternalError(f"Z3 refutes step {proof.violation.step} ({proof.violation.rule}) but the interpreter "
                            "applies every step")
    if verdict.execution.valid:
        return PlanProof(ProofStatus.PROVED, stats=proof.stats)
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
