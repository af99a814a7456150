"""Plans proved over data values: ``verify_values`` proves one plan for every input or returns a concrete
input (per device and chunk) on which some device ends with a wrong value.

Synthesis over data values (CEGIS) is the ``values`` encoding on the one solver loop (``smt.engine``):
the synthesizer proposes a program consistent with the examples gathered so far, the checker proves it
for every input and chunk, and a counterexample input becomes a new example.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from p2smt.errors import InternalError
from p2smt.model.collectives import Group
from p2smt.model.failure import Rule
from p2smt.model.status import ProofStatus
from p2smt.smt import terms as T
from p2smt.smt.check import Unknown
from p2smt.smt.unroll import Semantics
from p2smt.smt.verify import (
    ProofClock,
    Step,
    StepReport,
    concrete_quotients,
    encode_steps,
    plan_checker,
    proof_stats,
    unknown_message,
    wall_clock,
)

ENCODING = "values"


@dataclass(frozen=True)
class ValueProof:
    """``status``: "proved", "counterexample" or "unknown". A value counterexample gives the input
    (``inputs[d][r]``: device d's chunk r; distinct and non-zero on the failing chunk when such an input
    exists), the contents it assumes for chunks left empty that reach the result (``blanks``: (step,
    device, chunk, value)), a device and chunk that end wrong, and both values; a structural failure
    (shapes, Broadcast not adding information or discarding data, progress) gives its step and rule.
    Steps count from 1."""

    status: ProofStatus
    failing_step: int | None = None
    rule: Rule | None = None
    device: int | None = None
    chunk: int | None = None
    inputs: tuple[tuple[int, ...], ...] | None = None
    expected: int | None = None
    actual: int | None = None
    message: str = ""
    stats: dict[str, Any] = field(default_factory=dict)
    blanks: tuple[tuple[int, int, int, int], ...] = ()
    steps_proved: int | None = None

    @property
    def proved(self) -> bool:
        return self.status is ProofStatus.PROVED

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "message": self.message}
        if self.status is ProofStatus.COUNTEREXAMPLE:
            out.update(
                failing_step=self.failing_step,
                rule=str(self.rule),
                device=self.device,
                chunk=self.chunk,
                inputs=[list(r) for r in self.inputs] if self.inputs else None,
                empty_chunk_contents=[
                    {"after_step": t, "device": d, "chunk": r, "value": v} for t, d, r, v in self.blanks
                ],
                expected=self.expected,
                actual=self.actual,
            )
        elif self.status is ProofStatus.UNKNOWN:
            out["steps_proved"] = self.steps_proved
        out["stats"] = dict(self.stats)
        return out


def verify_values(
    num_devices: int,
    steps: Sequence[Step],
    goal_groups: Sequence[Group],
    *,
    require_progress: bool = False,
    timeout_ms: int | None = None,
    chunks: int | None = None,
    extra_dirs: Iterable[str | Path] = (),
    suspect: int | None = None,
    report: StepReport | None = None,
) -> ValueProof:
    """Prove a plan for all integer inputs, or give a concrete input on which it computes a wrong sum.

    ``suspect``: the step another semantics rejects (1-based: the interpreter's failing step). Steps
    1..suspect are proved first, and a failing one among them is the whole plan's first failing step,
    found without encoding the rest (a long plan that fails early costs what its prefix costs); else the
    whole plan is proved. ``timeout_ms`` bounds everything, formula building included; ``report(t)``:
    steps 1..t proved to apply.
    """
    start = time.perf_counter()
    clock = ProofClock(timeout_ms, report, values=True)
    run = (num_devices, goal_groups, require_progress, chunks, extra_dirs, clock, start, len(steps))
    if suspect is not None and 0 < suspect < len(steps):
        early = _verify(steps[:suspect], *run, prefix=True)
        if early is not None:
            return early
    proof = _verify(steps, *run, prefix=False)
    if proof is None:
        raise InternalError("the whole plan's proof ended without a verdict")
    return proof


def _verify(steps, num_devices, goal_groups, require_progress, chunks, extra_dirs, clock: ProofClock,
            start: float, total: int, *, prefix: bool) -> ValueProof | None:
    """``verify_values`` on ``steps`` (the first of ``total``); with ``prefix``, None when no step fails.

    No encoding is built once the clock has run out: building one is the longest piece the clock cannot
    interrupt (seconds for thousands of steps), so it bounds how far a proof overruns its time."""
    left = clock.left_ms()  # one reading: the solver's limit, or no time left to build in
    if left is not None and left <= 0:
        spent = Unknown(f"the proof's {clock.timeout_ms / 1000:g} s ran out before the encoding of {len(steps)} "
                        "steps was built")
        return ValueProof(ProofStatus.UNKNOWN, message=unknown_message(spent, clock, total), steps_proved=clock.proved,
                          stats={"solver_calls": clock.earlier_calls, "steps_encoded": 0,
                                 "seconds": round(time.perf_counter() - start, 6)})
    problem, plan, enc, checker = plan_checker(
        num_devices, steps, goal_groups, require_progress, None if left is None else max(1, int(left)), chunks,
        ENCODING, extra_dirs
    )
    try:
        encode_steps(checker, plan, clock)
        with wall_clock(checker, clock):
            fail = checker.first_failure(plan, terminal_goal=True, detail=True, on_step=clock.step_proved)
            if prefix and (fail is None or fail.step is None):
                clock.earlier_calls += checker.calls
                return None
            witness = None if fail is None or fail.step is not None else _telling_witness(enc, checker, problem, plan, fail)
    except Unknown as err:
        return ValueProof(ProofStatus.UNKNOWN, message=unknown_message(err, clock, total),
                          stats=proof_stats(checker, start, clock), steps_proved=clock.proved)
    stats = lambda: proof_stats(checker, start, clock)
    if fail is None:
        return ValueProof(
            ProofStatus.PROVED, message="every device ends with its group's sum for every input", stats=stats()
        )
    if fail.step is not None:
        cand = problem.candidates[plan[fail.step]]
        rule = Rule.of(cand.collective, fail.rule)
        step = fail.step + 1
        return ValueProof(ProofStatus.COUNTEREXAMPLE, step, rule,
                          message=f"failing step {step} of {total}: {cand.label}: {rule} fails", stats=stats())
    row, xs, contents = _decode(witness, num_devices, len(plan))
    found = _wrong_device(enc, checker, problem, plan, witness)
    if found is None:
        raise InternalError("the checker's counterexample does not reproduce on concrete inputs")
    d, want, got = found
    used = _used_blanks(enc, checker, plan, row, xs, contents, clock)
    inputs = tuple(tuple(xs[e] if r == row else 0 for r in range(checker.chunks)) for e in range(num_devices))
    shown = "no value (the chunk is empty)" if got is None else str(got)
    blanks = tuple(sorted((t, e, row, v) for (t, e), v in contents.items() if (t, e) in used))
    extra = ""
    if blanks:
        extra = " and empty-chunk contents " + ", ".join(f"{v} on device {e} after step {t}" for t, e, _, v in blanks)
    return ValueProof(
        ProofStatus.COUNTEREXAMPLE, None, Rule.GOAL, d, row, inputs, want, got,
        f"with inputs {list(xs)} on chunk {row}{extra}, device {d} ends with {shown} instead of {want}",
        stats(), blanks,
    )


def _decode(witness, num_devices: int, steps: int):
    """(chunk, inputs, empty-chunk contents by (step, device)) of a witness."""
    xs = tuple(witness[f"input_{d}"] for d in range(num_devices))
    contents = {(t, d): witness.get(f"blank_{t}_{d}", 0) for t in range(1, steps + 1) for d in range(num_devices)}
    return witness["chunk"], xs, contents


def _wrong_device(enc, checker, problem, plan, witness) -> tuple[int, int, int | None] | None:
    """The first device whose value on the witness's input is wrong: (device, expected, actual or None)."""
    row, xs, contents = _decode(witness, problem.num_devices, len(plan))
    present, values = _evaluate(enc, checker, plan, row, xs, contents)
    groups = {d: g for g in problem.goal_groups for d in g}
    for d in range(problem.num_devices):
        want = sum(xs[j] for j in groups.get(d, ()))
        if d in groups and (not present[d] or values[d] != want) or d not in groups and present[d]:
            return d, want, values[d] if present[d] else None
    return None


def _telling_witness(enc, checker, problem, plan, fail) -> dict[str, int]:
    """A witness whose inputs show the wrong sum: inputs 1, 2, …, k on the failing chunk when they do (distinct
    and non-zero, so a missing or doubled contribution changes the sum), else a solver witness with
    positive inputs, else any. Prefer a device holding a wrong sum over a chunk ending empty."""
    k = problem.num_devices
    plain = dict(fail.witness) | {f"input_{d}": d + 1 for d in range(k)}
    found = _wrong_device(enc, checker, problem, plan, plain)
    if found is not None and found[2] is not None:
        return plain
    state = checker.node(plan).state
    members = {e for g in problem.goal_groups for e in g}
    wrong = T.or_(
        T.and_((state.present[d], T.not_(checker.payload.goal(d, state.payload[d]))))
        for d in range(k) if d in members
    )
    positive = T.and_(T.le(1, v) for name, v in checker.payload_vars if name.startswith("input_"))
    if checker.sat(T.and_((wrong, positive)), "forall") or checker.sat(wrong, "forall"):
        return checker.witness()
    return fail.witness


def _used_blanks(enc, checker, plan, row, xs, contents, clock: ProofClock) -> set[tuple[int, int]]:
    """The empty-chunk contents the final values depend on (changing one changes the result). Only a chunk
    some step leaves empty reads its content, so only those are tried (not every step and device), each by
    running the plan again: once the proof's time is spent, the contents not tried yet are all kept."""
    empty: set[tuple[int, int]] = set()
    base = _evaluate(enc, checker, plan, row, xs, contents, empty)[1]
    used = set()
    for n, key in enumerate(sorted(empty)):
        left = clock.left_ms()
        if left is not None and left <= 0:
            return used | set(sorted(empty)[n:])
        bumped = dict(contents)
        bumped[key] = contents[key] + 1
        if _evaluate(enc, checker, plan, row, xs, bumped)[1] != base:
            used.add(key)
    return used


def _evaluate(enc, checker, plan, row: int, xs: Sequence[int], contents, empty: set | None = None):
    """The fixed plan on one chunk with concrete inputs: (present, value) per device, as Python values;
    ``empty`` collects each (step, device) whose chunk the step leaves empty (or might)."""
    s = checker.s
    sem = Semantics(s, enc.concrete_payload(xs, contents), row, checker.arith, False, checker.chunks)
    st = sem.initial()
    for t, c in enumerate(plan):
        n = checker.node(plan[:t]).counts
        st = sem.step(st, [(True, c)], n.__getitem__, concrete_quotients(s, n), t)
        if empty is not None:
            empty.update((t + 1, d) for d in range(s.k) if st.present[d] is not True)
    return st.present, st.payload
