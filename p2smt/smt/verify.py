"""Prove hand-written plans: PROVED, or the first failing step with its group, devices and defects.

A plan is a sequence of (collective, groups) on device ids. PROVED means that, for this plan, the
Boolean encoding's formula "some precondition fails or the goal does not hold on some cell" is unsat
(``check.PlanChecker``: one symbolic cell stands for every chunk and contribution). Otherwise the
first failing step (in the interpreter's order: steps, then groups, then rules) is reported with the
Z3 witness cell, and the states of the affected devices are read off the same encoding evaluated on
concrete chunks. The failure is a ``model.failure.Violation`` (steps 1-based) whose facts come from those
states and whose sentence is worded once, in ``model.failure``; the goal's missing and foreign
contributions are listed only when the goal is what fails. ``timeout_ms`` bounds the whole proof, the
building of its formulas (checked between steps) as well as the solver calls; a proof stopped by it says
which steps were proved to apply first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import z3

from p2smt.errors import InternalError, P2Error
from p2smt.model.collectives import AG, BC, Collective, Group
from p2smt.model.components import Split
from p2smt.model.dsl import validate_plan
from p2smt.model.failure import Rule, Violation, goal_masks, mixed_pair, mixed_violation, step_text, violation
from p2smt.model.goal import Sharding
from p2smt.model.problem import Candidate, SynthesisProblem
from p2smt.model.status import ProofStatus
from p2smt.smt.check import Failure, PlanChecker, Unknown
from p2smt.smt.registry import SHARDED_ENCODINGS, load_encoding
from p2smt.smt.unroll import Semantics

Step = tuple[Collective, Sequence[Group]]
StepReport = Callable[[int], None]
MAX_DEFECTS = 256
MAX_STATES = 16


@dataclass
class ProofClock:
    """A proof's one wall-clock bound (``timeout_ms``; None: none) and the steps proved to apply so far."""

    timeout_ms: int | None
    report: StepReport | None = None
    proved: int = 0
    earlier_calls: int = 0  # solver calls of the proof's earlier checkers (a prefix proved first)
    start: float = field(default_factory=time.monotonic)
    values: bool = False  # the proof over data values: a step that applies may already hold a wrong sum

    def left_ms(self) -> float | None:
        return None if self.timeout_ms is None else self.timeout_ms - (time.monotonic() - self.start) * 1000

    def solver_ms(self) -> int | None:
        """The per-call solver limit: what is left of the bound (at least 1 ms)."""
        left = self.left_ms()
        return None if left is None else max(1, int(left))

    def check(self, doing: str) -> None:
        """Raise Unknown once the bound is spent (``doing``: what was under way)."""
        left = self.left_ms()
        if left is not None and left <= 0:
            raise Unknown(f"the proof's {self.timeout_ms / 1000:g} s ran out {doing}")

    def step_proved(self, t: int) -> None:
        """Steps 1..t apply (reported once each, though a prefix proved first proves them again)."""
        if t > self.proved:
            self.proved = t
            if self.report is not None:
                self.report(t)

    def undecided(self, steps: int) -> str:
        """Which steps were proved to apply before the proof stopped."""
        return undecided_words(self.proved, steps, self.values)


def undecided_words(proved: int, steps: int, values: bool = False) -> str:
    """The words "steps 1..n proved valid, step n+1 undecided" for a proof stopped after proving n steps;
    with ``values`` (``verify --values``, whose sums are checked at the goal only) "proved to apply": such
    a step's sums may already be wrong."""
    word, note = ("proved to apply", " (sums are checked at the goal)") if values and proved else ("proved valid", "")
    if proved >= steps:
        return f"steps 1..{steps} {word}{note}, the goal undecided"
    done = {0: f"no step {word}", 1: f"step 1 {word}"}.get(proved, f"steps 1..{proved} {word}")
    return f"{done}{note}, step {proved + 1} undecided"


def encode_steps(checker: PlanChecker, plan: Sequence[int], clock: ProofClock) -> None:
    """Build the formulas of each prefix of ``plan`` in order (cached on the checker), within ``clock``.

    The encoding's own declarations (made when the checker is created) are checked only once they are done."""
    plan = tuple(plan)
    clock.check(f"while declaring the encoding of {len(plan)} steps")
    for t in range(1, len(plan) + 1):
        clock.check(f"while encoding step {t} of {len(plan)}")
        checker.node(plan[:t])


@dataclass(frozen=True)
class PlanProof:
    """The verdict on one plan: the violation (None unless a counterexample), the goal's defects when the goal
    fails, and ``states``: each affected device's chunks' contributions after ``states_after`` steps (the state
    at the failure: before the failing step, or at the end for a goal failure)."""

    status: ProofStatus
    violation: Violation | None = None
    message: str = ""
    defects: tuple[dict[str, Any], ...] = ()
    defects_truncated: bool = False
    states: dict[int, list[list[int]]] = field(default_factory=dict)
    states_after: int | None = None
    witness: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    steps_proved: int | None = None

    @property
    def proved(self) -> bool:
        return self.status is ProofStatus.PROVED

    @property
    def failing_step(self) -> int | None:
        return self.violation.step if self.violation else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.status is ProofStatus.COUNTEREXAMPLE:
            v = self.violation
            out.update(
                failing_step=v.step,
                rule=str(v.rule),
                message=v.message,
                violation=v.to_json(),
                defects=list(self.defects),
                defects_truncated=self.defects_truncated,
                states_after_steps=self.states_after,
                states={str(d): rows for d, rows in self.states.items()},
                witness=dict(self.witness),
            )
        elif self.status is ProofStatus.UNKNOWN:
            out["message"] = self.message
            out["steps_proved"] = self.steps_proved
        out["stats"] = dict(self.stats)
        return out


@contextmanager
def wall_clock(checker: PlanChecker, clock: ProofClock) -> Iterator[None]:
    """Interrupt ``checker``'s solver once ``clock``'s time is spent (one bound for the whole proof)."""
    left = clock.left_ms()
    if left is None:
        yield
        return
    timer = threading.Timer(max(left, 0) / 1000, checker.ctx.interrupt)
    timer.daemon = True
    timer.start()
    try:
        yield
    except z3.Z3Exception as err:
        if "cancel" not in str(err):
            raise
        raise Unknown(f"the proof's {clock.timeout_ms / 1000:g} s ran out") from None
    finally:
        timer.cancel()


def unknown_message(err: Unknown, clock: ProofClock, steps: int) -> str:
    """Why a proof stopped (its time, or the solver's own limit) and how far it got."""
    why = str(err) if str(err).startswith("the proof's") else f"the solver gave up: {err}"
    return f"{why}; {clock.undecided(steps)}"


def plan_problem(
    num_devices: int, steps: Sequence[Step], goal_groups: Sequence[Group], require_progress: bool,
    sharding: Sharding | None = None,
) -> tuple[SynthesisProblem, tuple[int, ...]]:
    """The plan as a problem whose candidates are its distinct steps, and the plan as indices; ``sharding``: a
    sharded goal (docs/semantics.md §6) on the plan's devices, None for the AllReduce goal."""
    if num_devices < 1:
        raise P2Error(f"a plan needs at least one device, got {num_devices}")
    goals = tuple(tuple(int(d) for d in g) for g in goal_groups)
    seen: set[int] = set()
    for g in goals:
        for d in g:
            if not 0 <= d < num_devices:
                raise P2Error(f"goal group {list(g)} names device {d}; devices are 0..{num_devices - 1}")
            if d in seen:
                raise P2Error(f"device {d} is in two goal groups")
            seen.add(d)
    cands: list[Candidate] = []
    index: dict[tuple[Collective, tuple[Group, ...]], int] = {}
    plan = []
    for t, step in enumerate(validate_plan(steps, num_devices), start=1):
        coll, groups = step.collective, step.groups
        key = (coll, groups)
        if key not in index:
            index[key] = len(cands)
            cands.append(Candidate(step_text(coll, groups), coll, groups))
        plan.append(index[key])
    return SynthesisProblem(num_devices, goals, tuple(cands), require_progress, sharding), tuple(plan)


def plan_checker(
    num_devices: int,
    steps: Sequence[Step],
    goal_groups: Sequence[Group],
    require_progress: bool,
    timeout_ms: int | None,
    chunks: int | None,
    encoding: str,
    extra_dirs: Iterable[str | Path],
    sharding: Sharding | None = None,
) -> tuple[SynthesisProblem, tuple[int, ...], Any, PlanChecker]:
    """A plan's problem, its candidate indices, and ``encoding``'s checker over ``chunks`` rows."""
    if not steps:
        raise P2Error("a plan needs at least one step")
    chunks = num_devices if chunks is None else chunks
    if chunks < 1:
        raise P2Error(f"chunks must be positive, got {chunks}")
    problem, plan = plan_problem(num_devices, steps, goal_groups, require_progress, sharding)
    spec = load_encoding(encoding, extra_dirs)
    if spec.name not in SHARDED_ENCODINGS:
        problem.refuse_sharded(f"the {spec.name} encoding")
    enc = spec.create(problem, len(plan))
    if not hasattr(enc, "new_checker"):
        raise P2Error(f"encoding {encoding!r} cannot prove plans (it has no cell checker)")
    return problem, plan, enc, enc.new_checker(chunks=chunks, timeout_ms=timeout_ms)


def prove_plan(
    num_devices: int,
    steps: Sequence[Step],
    goal_groups: Sequence[Group],
    *,
    require_progress: bool = False,
    timeout_ms: int | None = None,
    chunks: int | None = None,
    encoding: str = "bool-matrix",
    extra_dirs: Iterable[str | Path] = (),
    report: StepReport | None = None,
    sharding: Sharding | None = None,
) -> PlanProof:
    """PROVED, COUNTEREXAMPLE (first failing step, group, devices, rule, defects) or unknown.

    ``chunks``: rows of the state matrix (default ``num_devices``; the size of one reduction group for
    a lowered plan, as ``p2smt.semantics.dense.execute`` takes it). ``report(t)``: steps 1..t proved to apply.
    ``sharding``: a sharded goal (§6) Z3 proves instead of the AllReduce goal; a goal failure is then worded by
    ``synth.sharded`` (this module's goal report states the AllReduce goal).
    """
    start = time.perf_counter()
    clock = ProofClock(timeout_ms, report)
    problem, plan, enc, checker = plan_checker(
        num_devices, steps, goal_groups, require_progress, clock.solver_ms(), chunks, encoding, extra_dirs, sharding
    )
    if not hasattr(enc, "mask_payload"):
        raise P2Error(f"encoding {encoding!r} cannot prove plans (it has no mask payload to report states with)")
    try:
        encode_steps(checker, plan, clock)
        with wall_clock(checker, clock):
            failure = checker.first_failure(plan, terminal_goal=True, detail=True, on_step=clock.step_proved)
    except Unknown as err:
        return PlanProof(ProofStatus.UNKNOWN, message=unknown_message(err, clock, len(plan)),
                         stats=proof_stats(checker, start), steps_proved=clock.proved)
    if failure is None:
        return PlanProof(ProofStatus.PROVED, stats=proof_stats(checker, start))
    if failure.step is None and sharding is not None:  # the report below states the AllReduce goal: synth.sharded
        return PlanProof(ProofStatus.COUNTEREXAMPLE, None, f"the {sharding.kind.value} goal is not reached",
                         stats=proof_stats(checker, start))
    return _counterexample(enc, checker, problem, plan, failure, start)


def proof_stats(checker: PlanChecker, start: float, clock: ProofClock | None = None) -> dict[str, Any]:
    """Solver calls, steps whose formulas were built, and wall-clock seconds of a proof."""
    earlier = clock.earlier_calls if clock is not None else 0
    return {"solver_calls": earlier + checker.calls, "steps_encoded": len(checker.nodes) - 1,
            "seconds": round(time.perf_counter() - start, 6)}


def mask_states(enc, checker: PlanChecker, plan: Sequence[int]) -> list[list[list[int]]]:
    """states[t][d][r]: bit mask of the contributions device d's chunk r holds after t steps."""
    s = checker.s
    rows = []
    for r in range(checker.chunks):
        sem = Semantics(s, enc.mask_payload(), r, checker.arith, checker.sem.strict_rows, checker.chunks)
        st = sem.initial()
        per_step = [st]
        for t, c in enumerate(plan):
            n = checker.node(plan[:t]).counts
            st = sem.step(st, [(True, c)], n.__getitem__, concrete_quotients(s, n), t)
            per_step.append(st)
        rows.append(per_step)
    out = []
    for t in range(len(plan) + 1):
        out.append(
            [
                [rows[r][t].payload[d] if rows[r][t].present[d] else 0 for r in range(checker.chunks)]
                for d in range(s.k)
            ]
        )
    return out


def concrete_quotients(s, n):
    """ReduceScatter block sizes from concrete chunk counts ``n``."""
    return lambda cand, gi: n[s.group_of(cand, gi)[0]] // len(s.group_of(cand, gi))


def _bits(mask: int) -> list[int]:
    out, i = [], 0
    while mask:
        if mask & 1:
            out.append(i)
        mask >>= 1
        i += 1
    return out


def _counterexample(enc, checker, problem, plan, failure: Failure, start: float) -> PlanProof:
    masks = mask_states(enc, checker, plan)
    s = checker.s
    goal_mask = goal_masks(s.k, problem.goal_groups)
    cands = [problem.candidates[c] for c in plan]
    last = len(plan) if failure.step is None else failure.step + 1
    v = _first_mixing(cands, masks, goal_mask, problem.goal_groups, last, checker.chunks)
    if v is None and failure.step is None:
        v = _goal_violation(masks[len(plan)], goal_mask, len(plan), checker.chunks)
    elif v is None:
        t = failure.step
        cand = cands[t]
        group = s.group_of(plan[t], failure.group)
        v = _explain(cand.collective, failure.rule, group, masks[t], checker.chunks)
        v = replace(v, step=t + 1, steps=len(plan), instruction=cand.label)
    after = len(plan) if v.step is None else v.step - 1
    state = masks[after]
    defects, truncated = _defects(state, goal_mask, v.devices, checker.chunks) if v.step is None else ([], False)
    shown = list(dict.fromkeys((*v.devices, *(v.group or ()))))[:MAX_STATES]
    states = {d: [_bits(state[d][r]) for r in range(checker.chunks)] for d in shown}
    return PlanProof(ProofStatus.COUNTEREXAMPLE, v, v.message, tuple(defects), truncated, states, after,
                     dict(failure.witness), proof_stats(checker, start))


def _first_mixing(cands, masks, goal_mask, goal_groups, last: int, chunks: int) -> Violation | None:
    """The first reduction among the first ``last`` steps that sums two reduction groups' contributions."""
    for t in range(last):
        cand = cands[t]
        if cand.collective in (AG, BC):
            continue
        for g in cand.groups:
            for r in range(chunks):
                union = 0
                for d in g:
                    union |= masks[t][d][r]
                pair = mixed_pair(union, goal_mask)
                if pair is not None:
                    return mixed_violation(t + 1, len(cands), cand.label, cand.collective, tuple(g), r, pair,
                                           goal_groups)
    return None


def _goal_violation(state, goal_mask, steps: int, chunks: int) -> Violation:
    bad = [d for d in range(len(state)) if any(state[d][r] != goal_mask[d] for r in range(chunks))]
    d = bad[0]
    r = next(r for r in range(chunks) if state[d][r] != goal_mask[d])
    return violation(None, steps, None, Rule.GOAL, None, bad, r, device=d,
                     missing=_bits(goal_mask[d] & ~state[d][r]), foreign=_bits(state[d][r] & ~goal_mask[d]),
                     devices_off=len(bad))


def _explain(coll: Collective, rule: str, group, state, chunks: int) -> Violation:
    """The facts of a failed precondition, read off the states before the failing step."""
    rows = {d: [state[d][r] != 0 for r in range(chunks)] for d in group}

    def fail(devices, chunk, **facts) -> Violation:
        return violation(0, 0, None, Rule.of(coll, rule), group, devices, chunk, coll.value, **facts)

    if rule == "same_chunks":
        head = group[0]
        for d in group[1:]:
            for r in range(chunks):
                if rows[d][r] != rows[head][r]:
                    has, lacks = (head, d) if rows[head][r] else (d, head)
                    return fail((has, lacks), r, has=has, lacks=lacks)
    if rule == "disjoint":
        for r in range(chunks):
            seen = twice = 0
            for d in group:
                twice |= state[d][r] & seen
                seen |= state[d][r]
            if twice:
                col = _bits(twice)[0]
                a, b = [d for d in group if state[d][r] >> col & 1][:2]
                return fail((a, b), r, pair=[a, b], contribution=col, counted_twice=_bits(twice))
    if rule == "disjoint_chunks":
        held = [r for r in range(chunks) if sum(rows[d][r] for d in group) > 1]
        a, b = [d for d in group if rows[d][held[0]]][:2]
        return fail((a, b), held[0], pair=[a, b], held_twice=held)
    if rule == "equal_sizes":
        counts = [sum(rows[d]) for d in group]
        i = next(i for i, v in enumerate(counts) if v != counts[0])
        return fail((group[0], group[i]), None, pair=[group[0], group[i]], sizes=[counts[0], counts[i]])
    if rule == "divisible":
        return fail(tuple(group), None, members=len(group), non_empty_chunks=sum(rows[group[0]]))
    if rule == "below_root":
        root = group[0]
        for d in group[1:]:
            for r in range(chunks):
                extra = state[d][r] & ~state[root][r]
                if extra:
                    return fail((d, root), r, device=d, root=root, contribution=_bits(extra)[0])
    if rule == "information_increase":
        return fail(tuple(group), None)
    if rule == "progress":
        return fail(tuple(group), None, members=list(group))
    raise InternalError(f"{coll.value} fails rule {rule!r} but the states do not show how")


def _defects(state, goal_mask, devices, chunks) -> tuple[list[dict[str, Any]], bool]:
    """Each affected device chunk's missing and foreign contributions, measured against the goal."""
    out: list[dict[str, Any]] = []
    for d in devices:
        for r in range(chunks):
            missing = goal_mask[d] & ~state[d][r]
            foreign = state[d][r] & ~goal_mask[d]
            if missing or foreign:
                if len(out) >= MAX_DEFECTS:
                    return out, True
                out.append({"device": d, "chunk": r, "missing": _bits(missing), "foreign": _bits(foreign)})
    return out, False


Z3_PLAN_DEVICES = 1024
"""Devices up to which Z3 proves a plan on the whole system (a 3-step program: 2 s at 1,024 devices, 30 s at
4,096); above, it proves each reduction group shape of a plan that splits (``model.components``)."""


def prove_split(
    split: Split, steps: Sequence[Step], steps_to_prove: int, *, chunks: int, require_progress: bool = False,
    timeout_ms: int | None = None, encoding: str = "bool-matrix", report: StepReport | None = None,
) -> PlanProof:
    """Prove the first ``steps_to_prove`` of ``steps`` on every shape of ``split``, each on its own
    ``split.size`` devices (one wall-clock bound for all). A counterexample is the whole plan's first failure
    (the earliest step, then the first group of that step; for the goal, the lowest device off it, every
    device off it counted), in real device ids with the affected devices' states and the goal's defects."""
    start = time.perf_counter()
    m = split.size
    deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
    failures = []
    calls = 0
    one = len(split.shapes) == 1
    for shape, members in enumerate(split.shapes):
        comp = split.components[members[0]]
        left = None if deadline is None else max(1, int((deadline - time.monotonic()) * 1000))
        proof = prove_plan(m, list(comp.plan[:steps_to_prove]), [tuple(range(m))], require_progress=require_progress,
                           timeout_ms=left, chunks=chunks, encoding=encoding, report=report if one else None)
        calls += proof.stats.get("solver_calls", 0)
        if proof.status is ProofStatus.UNKNOWN:
            return replace(proof, stats=_split_stats(proof.stats, calls, start, split))
        v = proof.violation
        if v is None:
            continue
        if v.step is None:
            failures.append((float("inf"), 0, shape, proof, comp))
            continue
        first = min((split.components[c] for c in members), key=lambda c: c.first_group(v.step, v.group))
        failures.append((v.step, first.first_group(v.step, v.group), shape, proof, first))
    if not failures:
        if report is not None and not one:
            report(steps_to_prove)
        return PlanProof(ProofStatus.PROVED, stats=_split_stats({}, calls, start, split))
    step, _, shape, proof, comp = min(failures, key=lambda f: f[:2])
    overrides = {}
    if step == float("inf"):  # the goal: the lowest device off it, over every failing shape's components
        off = sorted(split.components[c].real(d) for f in failures for c in split.shapes[f[2]]
                     for d in f[3].violation.devices)
        comp = next(split.components[c] for f in failures for c in split.shapes[f[2]]
                    if off[0] in split.components[c].devices)
        proof = next(f[3] for f in failures if split.components.index(comp) in split.shapes[f[2]])
        overrides = {"devices": off, "devices_off": len(off)}
    v = comp.real_violation(proof.violation, steps, **overrides)
    states = {comp.real(d): [sorted(comp.real(c) for c in row) for row in rows] for d, rows in proof.states.items()}
    defects = tuple(d | {"device": comp.real(d["device"]), "missing": sorted(comp.real(c) for c in d["missing"]),
                         "foreign": sorted(comp.real(c) for c in d["foreign"])} for d in proof.defects)
    return replace(proof, violation=v, message=v.message, states=states, defects=defects, witness={},
                   stats=_split_stats(proof.stats, calls, start, split))


def _split_stats(stats: dict[str, Any], calls: int, start: float, split: Split) -> dict[str, Any]:
    return dict(stats) | {"solver_calls": calls, "seconds": round(time.perf_counter() - start, 6),
                          "shapes_proved_apart": len(split.shapes), "devices_per_shape": split.size}
