"""Prove hand-written plans: PROVED, or the first failing step with its group, devices and defects.

A plan is a sequence of (collective, groups) on device ids. PROVED means that, for this plan, the
Boolean encoding's formula "some precondition fails or the goal does not hold on some cell" is unsat
(``check.PlanChecker``: one symbolic cell stands for every chunk and contribution). Otherwise the
first failing step (in the interpreter's order: steps, then groups, then rules) is reported with the
Z3 witness cell, and the states of the affected devices are read off the same encoding evaluated on
concrete chunks, from which the defects (missing, foreign and double-counted contributions) follow.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from p2smt.errors import P2Error
from p2smt.model.collectives import Collective, Group
from p2smt.model.problem import Candidate, SynthesisProblem
from p2smt.model.status import ProofStatus
from p2smt.smt.check import Failure, PlanChecker, Unknown
from p2smt.smt.registry import load_encoding
from p2smt.smt.unroll import Semantics

Step = tuple[Collective, Sequence[Group]]
MAX_DEFECTS = 256
MAX_STATES = 16


@dataclass(frozen=True)
class PlanProof:
    """The verdict on one plan. ``failing_step`` is 0-based, None when every step applies but the goal
    fails; ``states`` maps each affected device to its chunks' contributions (before the failing step,
    or at the end for a goal failure)."""

    status: ProofStatus
    failing_step: int | None = None
    group: tuple[int, ...] | None = None
    devices: tuple[int, ...] = ()
    chunk: int | None = None
    rule: str | None = None
    message: str = ""
    defects: tuple[dict[str, Any], ...] = ()
    defects_truncated: bool = False
    states: dict[int, list[list[int]]] = field(default_factory=dict)
    witness: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def proved(self) -> bool:
        return self.status is ProofStatus.PROVED

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.status is ProofStatus.COUNTEREXAMPLE:
            out.update(
                failing_step=self.failing_step,
                group=list(self.group) if self.group is not None else None,
                devices=list(self.devices),
                chunk=self.chunk,
                rule=self.rule,
                message=self.message,
                defects=list(self.defects),
                defects_truncated=self.defects_truncated,
                states={str(d): rows for d, rows in self.states.items()},
                witness=dict(self.witness),
            )
        elif self.status is ProofStatus.UNKNOWN:
            out["message"] = self.message
        out["stats"] = dict(self.stats)
        return out


def plan_problem(
    num_devices: int, steps: Sequence[Step], goal_groups: Sequence[Group], require_progress: bool
) -> tuple[SynthesisProblem, tuple[int, ...]]:
    """The plan as a problem whose candidates are its distinct steps, and the plan as indices."""
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
    for t, (coll, groups) in enumerate(steps):
        coll = Collective.parse(coll) if isinstance(coll, str) else Collective(coll)
        groups = tuple(tuple(int(d) for d in g) for g in groups)
        used: set[int] = set()
        for g in groups:
            if not g:
                raise P2Error(f"step {t}: a group must name at least one device")
            for d in g:
                if not 0 <= d < num_devices:
                    raise P2Error(f"step {t}: device {d} does not exist (devices are 0..{num_devices - 1})")
                if d in used:
                    raise P2Error(f"step {t}: device {d} appears in two groups")
                used.add(d)
        key = (coll, groups)
        if key not in index:
            index[key] = len(cands)
            cands.append(Candidate(f"step {t}", coll, groups))
        plan.append(index[key])
    return SynthesisProblem(num_devices, goals, tuple(cands), require_progress), tuple(plan)


def plan_checker(
    num_devices: int,
    steps: Sequence[Step],
    goal_groups: Sequence[Group],
    require_progress: bool,
    timeout_ms: int | None,
    chunks: int | None,
    encoding: str,
    extra_dirs: Iterable[str | Path],
) -> tuple[SynthesisProblem, tuple[int, ...], Any, PlanChecker]:
    """A plan's problem, its candidate indices, and ``encoding``'s checker over ``chunks`` rows."""
    if not steps:
        raise P2Error("a plan needs at least one step")
    chunks = num_devices if chunks is None else chunks
    if chunks < 1:
        raise P2Error(f"chunks must be positive, got {chunks}")
    problem, plan = plan_problem(num_devices, steps, goal_groups, require_progress)
    enc = load_encoding(encoding, extra_dirs).create(problem, len(plan))
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
) -> PlanProof:
    """PROVED, COUNTEREXAMPLE (first failing step, group, devices, rule, defects) or unknown.

    ``chunks``: rows of the state matrix (default ``num_devices``; the size of one reduction group for
    a lowered plan, as ``p2smt.semantics.dense.execute`` takes it).
    """
    start = time.perf_counter()
    problem, plan, enc, checker = plan_checker(
        num_devices, steps, goal_groups, require_progress, timeout_ms, chunks, encoding, extra_dirs
    )
    if not hasattr(enc, "mask_payload"):
        raise P2Error(f"encoding {encoding!r} cannot prove plans (it has no mask payload to report states with)")
    try:
        failure = checker.first_failure(plan, terminal_goal=True, detail=True)
    except Unknown as err:
        return PlanProof(ProofStatus.UNKNOWN, message=f"the solver gave up: {err}", stats=_stats(checker, start))
    if failure is None:
        return PlanProof(ProofStatus.PROVED, stats=_stats(checker, start))
    return _counterexample(enc, checker, problem, plan, failure, start)


def _stats(checker: PlanChecker, start: float) -> dict[str, Any]:
    return {"solver_calls": checker.calls, "seconds": round(time.perf_counter() - start, 6)}


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
    goal_mask = [0] * s.k
    for g in problem.goal_groups:
        m = sum(1 << d for d in g)
        for d in g:
            goal_mask[d] = m
    if failure.step is None:
        state = masks[len(plan)]
        bad = [d for d in range(s.k) if any(state[d][r] != goal_mask[d] for r in range(checker.chunks))]
        devices = tuple(bad)
        group = None
        chunk = failure.witness.get("chunk")
        message = _goal_message(state, goal_mask, bad, checker.chunks)
        rule = "goal"
        double: dict[tuple[int, int], int] = {}
    else:
        t = failure.step
        cand = problem.candidates[plan[t]]
        group = s.group_of(plan[t], failure.group)
        state = masks[t]
        rule = failure.rule if failure.rule in ("progress",) else f"{cand.collective.value}.{failure.rule}"
        devices, chunk, message, double = _explain(cand.collective, failure.rule, group, state, checker, t)
    affected = tuple(group) if group is not None else tuple(devices)
    defects, truncated = _defects(state, goal_mask, affected, checker.chunks, double)
    shown = list(dict.fromkeys((*devices, *affected)))[:MAX_STATES]
    states = {d: [_bits(state[d][r]) for r in range(checker.chunks)] for d in shown}
    witness = dict(failure.witness)
    return PlanProof(
        ProofStatus.COUNTEREXAMPLE,
        failure.step,
        tuple(group) if group is not None else None,
        tuple(devices),
        chunk,
        rule,
        message,
        tuple(defects),
        truncated,
        states,
        witness,
        _stats(checker, start),
    )


def _explain(coll: Collective, rule: str, group, state, checker, t: int):
    """Devices, chunk, message and double-counted cells of a failed precondition (interpreter wording)."""
    chunks = checker.chunks
    name = coll.value
    double: dict[tuple[int, int], int] = {}
    rows = {d: [state[d][r] != 0 for r in range(chunks)] for d in group}
    if rule == "same_chunks":
        head = group[0]
        for d in group[1:]:
            for r in range(chunks):
                if rows[d][r] != rows[head][r]:
                    has, lacks = (head, d) if rows[head][r] else (d, head)
                    return (
                        (has, lacks),
                        r,
                        (
                            f"chunk {r} is non-empty on device {has} but empty on device {lacks}: "
                            f"{name} needs every member to hold the same chunks"
                        ),
                        double,
                    )
    if rule == "disjoint":
        first = None
        for r in range(chunks):
            seen = twice = 0
            for d in group:
                twice |= state[d][r] & seen
                seen |= state[d][r]
            if not twice:
                continue
            for d in group:
                if state[d][r] & twice:
                    double[(d, r)] = state[d][r] & twice
            if first is None:
                col = _bits(twice)[0]
                a, b = [d for d in group if state[d][r] >> col & 1][:2]
                first = (r, col, a, b)
        r, col, a, b = first
        return (
            (a, b),
            r,
            (
                f"chunk {r} of devices {a} and {b} both contain device {col}'s contribution: "
                f"{name} would count it twice"
            ),
            double,
        )
    if rule == "disjoint_chunks":
        for r in range(chunks):
            holders = [d for d in group if rows[d][r]]
            if len(holders) > 1:
                for d in holders:
                    double[(d, r)] = state[d][r]
                a, b = holders[:2]
                return (
                    (a, b),
                    r,
                    (
                        f"chunk {r} is held by both devices {a} and {b}: "
                        "AllGather needs members to hold disjoint chunks"
                    ),
                    double,
                )
    if rule == "equal_sizes":
        counts = [sum(rows[d]) for d in group]
        i = next(i for i, v in enumerate(counts) if v != counts[0])
        return (
            (group[0], group[i]),
            None,
            (
                f"device {group[0]} holds {counts[0]} chunks but device {group[i]} holds {counts[i]}: "
                "AllGather needs equal numbers of chunks"
            ),
            double,
        )
    if rule == "divisible":
        n = sum(rows[group[0]])
        return (
            tuple(group),
            None,
            (
                f"ReduceScatter over {len(group)} devices needs the number of non-empty chunks ({n}) "
                f"to be divisible by {len(group)}"
            ),
            double,
        )
    if rule == "below_root":
        root = group[0]
        for d in group[1:]:
            for r in range(chunks):
                extra = state[d][r] & ~state[root][r]
                if extra:
                    col = _bits(extra)[0]
                    return (
                        (d, root),
                        r,
                        (
                            f"chunk {r} of device {d} holds device {col}'s contribution which the root "
                            f"{root} lacks: Broadcast would lose it"
                        ),
                        double,
                    )
                if rows[d][r] and not rows[root][r]:
                    return (
                        (d, root),
                        r,
                        (
                            f"chunk {r} of device {d} is non-empty but the root {root}'s is "
                            "empty: Broadcast would lose it"
                        ),
                        double,
                    )
    if rule == "information_increase":
        return (
            tuple(group),
            None,
            ("every member already holds the root's state: Broadcast adds no information"),
            double,
        )
    if rule == "progress":
        return tuple(group), None, f"{name} over devices {list(group)} changes no member's state", double
    return tuple(group), None, f"step {t}: {name} violates {rule}", double


def _goal_message(state, goal_mask, bad, chunks) -> str:
    d = bad[0]
    r = next(r for r in range(chunks) if state[d][r] != goal_mask[d])
    missing = _bits(goal_mask[d] & ~state[d][r])
    foreign = _bits(state[d][r] & ~goal_mask[d])
    parts = []
    if missing:
        parts.append(f"misses contributions {missing}")
    if foreign:
        parts.append(f"holds foreign contributions {foreign}")
    return (
        f"the goal is not reached: chunk {r} of device {d} "
        + " and ".join(parts)
        + (f" ({len(bad)} devices are off the goal)" if len(bad) > 1 else "")
    )


def _defects(state, goal_mask, devices, chunks, double) -> tuple[list[dict[str, Any]], bool]:
    out: list[dict[str, Any]] = []
    truncated = False
    for d in devices:
        for r in range(chunks):
            missing = goal_mask[d] & ~state[d][r]
            foreign = state[d][r] & ~goal_mask[d]
            twice = double.get((d, r), 0)
            if missing or foreign or twice:
                if len(out) >= MAX_DEFECTS:
                    truncated = True
                    break
                out.append(
                    {
                        "device": d,
                        "chunk": r,
                        "missing": _bits(missing),
                        "double_counted": _bits(twice),
                        "foreign": _bits(foreign),
                    }
                )
    return out, truncated
