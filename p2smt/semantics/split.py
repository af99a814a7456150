"""P²'s verdict on a plan too large for the dense interpreter's k×chunks×k state, with the same report.

A plan whose groups never cross a reduction group is judged one reduction group *shape* at a time
(``model.components``): each shape's renumbered plan goes through ``verdict.judge`` (the dense interpreter,
or the compressed one when even one reduction group is too large for it), and the first failure, its
facts and the goal's defects are taken back to real device ids. A plan that crosses reduction groups is
judged whole by the dense interpreter while its state fits ``dense.MAX_STATE_BYTES``, and refused above that;
one reduction group too large for it goes to the compressed interpreter (``pieces``, ``vectorized`` above
``VECTORIZED_ABOVE`` devices), which names the failing step, group and rule but not the chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from p2smt.errors import P2Error
from p2smt.model.collectives import Collective, Group
from p2smt.model.components import Component, Split
from p2smt.model.failure import Rule, Violation, step_text, violation
from p2smt.semantics.dense import Defect

Step = tuple[Collective, Sequence[Group]]
MAX_DEFECTS = 256


@dataclass(frozen=True)
class ChunkRun:
    """What callers read of ``dense.Execution``: whether P²'s semantics holds, and the goal's first defects."""

    valid: bool
    defects: tuple[Defect, ...] = ()
    devices_off: tuple[int, ...] = ()


@dataclass(frozen=True)
class SplitVerdict:
    """``verdict.Verdict``'s surface for a split plan: ``at_failure`` the (component, local verdict) pairs whose
    states are those of the whole plan at the failure (the failing one, or all off the goal); ``checked_by``:
    in words."""

    execution: ChunkRun
    positions: Any
    violation: Violation | None
    checked_by: str
    at_failure: tuple[tuple[Component, Any], ...] = field(default=(), repr=False)

    @property
    def valid(self) -> bool:
        return self.execution.valid and (self.positions is None or self.positions.valid)

    def message(self) -> str:
        from p2smt.semantics.verdict import verdict_message

        return verdict_message(self.violation, self.positions)

    def device_rows(self, devices: Sequence[int]) -> dict[int, list[list[int]]]:
        """Each device's chunks' contributions at the failure, in real ids (devices of no failing component:
        left out)."""
        wanted = set(devices)
        found: dict[int, list[list[int]]] = {}
        for comp, local in self.at_failure:
            for i, d in enumerate(comp.devices):
                if d in wanted:
                    rows = local.device_rows([i])[i]
                    found[d] = [sorted(comp.real(c) for c in row) for row in rows]
        return {d: found[d] for d in devices if d in found}


def _real_defect(d: Defect, comp: Component) -> Defect:
    return Defect(comp.real(d.device), d.chunk, tuple(sorted(comp.real(c) for c in d.missing)),
                  tuple(sorted(comp.real(c) for c in d.foreign)))


def judge_split(split: Split, steps: Sequence[Step], chunks: int, require_progress: bool,
                labels: Sequence[str] | None = None) -> SplitVerdict:
    """P²'s verdict on the whole plan from one verdict per shape (positions are the caller's)."""
    from p2smt.semantics.verdict import judge

    m = split.size
    local_goal = (tuple(range(m)),)
    failures = []  # (step or inf, first group index, shape index, component index, local verdict)
    verdicts = []
    for s, members in enumerate(split.shapes):
        comp = split.components[members[0]]
        local = judge(m, list(comp.plan), local_goal, chunks, require_progress, layout=False)
        verdicts.append(local)
        v = local.violation
        if v is None:
            continue
        if v.step is None:
            failures.append((float("inf"), 0, s, members[0], local))
            continue
        first = min(members, key=lambda c: split.components[c].first_group(v.step, v.group))
        failures.append((v.step, split.components[first].first_group(v.step, v.group), s, first, local))
    what = _checked_by(split, verdicts)
    if not failures:
        return SplitVerdict(ChunkRun(True), None, None, what)
    step, _, s, c, local = min(failures, key=lambda f: f[:2])
    comp = split.components[c]
    if step != float("inf"):
        v = comp.real_violation(local.violation, steps, labels)
        return SplitVerdict(ChunkRun(False), None, v, what, ((comp, local),))
    return _goal_verdict(split, verdicts, [f for f in failures if f[0] == float("inf")], len(steps), what)


def _goal_verdict(split: Split, verdicts, failing, steps: int, what: str) -> SplitVerdict:
    """Every step applies but some reduction groups miss the goal: the first defect by real device id, every
    device off the goal, and up to ``MAX_DEFECTS`` defects (in device order; all of them when there are fewer)."""
    off: list[int] = []
    defects: list[Defect] = []
    at_failure = []
    for _, _, s, _, local in failing:
        local_off = local.execution.devices_off
        for c in split.shapes[s]:
            comp = split.components[c]
            at_failure.append((comp, local))
            off += [comp.real(d) for d in local_off]
            if len(defects) < MAX_DEFECTS:
                defects += [_real_defect(d, comp) for d in local.execution.defects[:MAX_DEFECTS]]
    first_device = min(off)
    owner = next(split.components[c] for _, _, s, _, _ in failing for c in split.shapes[s]
                 if first_device in split.components[c].devices)
    local = next(lv for _, _, s, _, lv in failing if split.components.index(owner) in split.shapes[s])
    first = min((_real_defect(d, owner) for d in local.execution.defects), key=lambda d: (d.device, d.chunk))
    defects = sorted({(d.device, d.chunk): d for d in [first, *defects]}.values(), key=lambda d: (d.device, d.chunk))
    v = violation(None, steps, None, Rule.GOAL, None, sorted(off), first.chunk, device=first.device,
                  missing=list(first.missing), foreign=list(first.foreign), devices_off=len(off))
    return SplitVerdict(ChunkRun(False, tuple(defects[:MAX_DEFECTS]), tuple(sorted(off))), None, v, what,
                        tuple(at_failure))


def _checked_by(split: Split, verdicts) -> str:
    how = {v.checked_by.split(" at ")[0] for v in verdicts}
    return (f"{' and '.join(sorted(how))}, one reduction group shape at a time ({split.describe()}; no group "
            "crosses a reduction group, so each evolves alone)")


VECTORIZED_ABOVE = 512
"""Devices above which the vectorized form of the compressed interpreter runs (as in ``synth.recheck``)."""


def plan_as_problem(k: int, steps: Sequence[Step], goal_groups: Sequence[Group], require_progress: bool):
    """The plan as a synthesis problem whose candidates are its distinct steps, and the plan as indices."""
    from p2smt.model.problem import Candidate, SynthesisProblem

    index: dict[tuple, int] = {}
    cands, program = [], []
    for coll, groups in steps:
        key = (coll, tuple(tuple(g) for g in groups))
        if key not in index:
            index[key] = len(cands)
            cands.append(Candidate(step_text(coll, key[1]), coll, key[1]))
        program.append(index[key])
    goals = tuple(tuple(int(d) for d in g) for g in goal_groups)
    return SynthesisProblem(k, goals, tuple(cands), require_progress), tuple(program)


def judge_compressed(k: int, steps: Sequence[Step], require_progress: bool,
                     labels: Sequence[str] | None = None) -> SplitVerdict:
    """P²'s verdict on a plan whose one reduction group is all ``k`` devices (so chunks = k, as the
    compressed interpreter counts them): the failing step, group and rule, without the chunk's facts."""
    problem, program = plan_as_problem(k, steps, (tuple(range(k)),), require_progress)
    if k > VECTORIZED_ABOVE:
        from p2smt.semantics.vectorized import check_programs

        which = "the vectorized compressed interpreter"
    else:
        from p2smt.semantics.pieces import check_programs

        which = "the compressed interpreter"
    (verdict,) = check_programs(problem, [program])
    what = f"{which} at the real size ({k} devices)"
    if verdict.proved:
        return SplitVerdict(ChunkRun(True), None, None, what)
    if verdict.step is None:
        v = Violation(None, len(steps), None, Rule.GOAL, None, (), None,
                      "some device's chunks do not hold exactly its reduction group's contributions")
        return SplitVerdict(ChunkRun(False), None, v, what)
    coll, groups = steps[verdict.step - 1]
    text = labels[verdict.step - 1] if labels else step_text(coll, groups)
    group = tuple(verdict.group)
    shown = ", ".join(map(str, group[:8])) + (", …" if len(group) > 8 else "")
    message = (f"{coll.value} over devices [{shown}] breaks {verdict.rule} (the compressed interpreter names the "
               "group and the rule, not the chunk)")
    v = Violation(verdict.step, len(steps), text, verdict.rule, group, group[:2], None, message)
    return SplitVerdict(ChunkRun(False), None, v, what)


def refuse_whole(k: int, chunks: int, steps: int, limit: int) -> P2Error:
    """Why a plan that crosses reduction groups is not judged: its dense state would pass ``limit`` bytes."""
    need = k * k * chunks * (steps + 1)
    return P2Error(f"this plan's groups cross reduction groups, so it is checked on all {k} devices at once: "
                   f"the interpreter's {k}x{chunks}x{k} state over {steps} steps needs ~{need / 2**30:.1f} GiB, "
                   f"above the {limit / 2**20:g} MiB bound (a plan inside reduction groups is checked one group at a time)")


def replace_positions(v: SplitVerdict, positions) -> SplitVerdict:
    return replace(v, positions=positions)
