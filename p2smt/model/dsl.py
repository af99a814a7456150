"""The reduction DSL of docs/semantics.md §3: instructions, programs, their text syntax and their device groups.

Text syntax (one instruction per line or ``;``-separated; ``#`` starts a comment)::

    program     := instruction ((";" | newline) instruction)* [";"]
    instruction := "(" LEVEL "," form "," COLLECTIVE ")"
    form        := "InsideGroup" | "Parallel" "(" LEVEL ")" | "Master" "(" LEVEL ")"

LEVEL is a level name of the synthesis hierarchy (the system's level names plus ``root``);
COLLECTIVE is one of AllReduce, ReduceScatter, AllGather, Reduce, Broadcast.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Literal

import numpy as np

from p2smt.errors import P2Error, PlanSyntaxError
from p2smt.model.collectives import Collective, ExplicitPlan, ExplicitStep, Group
from p2smt.model.goal import Sharding
from p2smt.model.hierarchy import SynthesisHierarchy
from p2smt.model.problem import Candidate, SynthesisProblem
from p2smt.model.replica_groups import normalize, parse_groups_value

FormKind = Literal["InsideGroup", "Parallel", "Master"]


@dataclass(frozen=True)
class Form:
    """How slice groups become communicators; ``ancestor`` is e' for Parallel and Master."""

    kind: FormKind
    ancestor: str | None = None

    def __str__(self) -> str:
        return self.kind if self.kind == "InsideGroup" else f"{self.kind}({self.ancestor})"


INSIDE_GROUP = Form("InsideGroup")


@dataclass(frozen=True)
class Instruction:
    """``(slice, form, collective)``: one collective over the groups that slice and form define."""

    slice: str
    form: Form
    collective: Collective

    def __str__(self) -> str:
        return self._text

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _text(self) -> str:  # computed once: programs are sorted and priced by their text
        return f"({self.slice}, {self.form}, {self.collective.value})"

    @cached_property
    def _hash(self) -> int:  # computed once: programs and their steps key the pricing caches
        return hash((self.slice, self.form, self.collective))


@dataclass(frozen=True)
class Program:
    """A sequence of instructions run in order."""

    instructions: tuple[Instruction, ...]

    def __str__(self) -> str:
        return format_program(self)

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:  # computed once, as Instruction's
        return hash(self.instructions)

    def __len__(self) -> int:
        return len(self.instructions)


def format_program(program: Program) -> str:
    """The canonical one-line text: instructions joined by ``"; "``."""
    return "; ".join(str(i) for i in program.instructions)


_TOKEN = re.compile(r"\s*(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<punct>[(),;])|(?P<bad>\S))")


def _tokens(text: str):
    """Yield (kind, value, line, column) with newlines as separators; comments dropped."""
    for lineno, raw in enumerate(text.splitlines() or [""], start=1):
        line = raw.split("#", 1)[0]
        pos = 0
        while pos < len(line):
            m = _TOKEN.match(line, pos)
            if m is None or m.end() == pos:
                break
            col = m.start(m.lastgroup) + 1
            if m.lastgroup == "bad":
                raise PlanSyntaxError(f"unexpected character {m.group('bad')!r}", lineno, col)
            yield m.lastgroup, m.group(m.lastgroup), lineno, col
            pos = m.end()
        yield "newline", "\n", lineno, len(line) + 1


class _Parser:
    def __init__(self, text: str, source: str | None):
        self.toks = list(_tokens(text))
        self.i = 0
        self.source = source

    def error(self, message: str, tok=None) -> PlanSyntaxError:
        tok = tok or self.peek()
        return PlanSyntaxError(message, tok[2], tok[3], self.source)

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else ("eof", "", self.toks[-1][2], self.toks[-1][3])

    def next(self):
        tok = self.peek()
        self.i += 1
        return tok

    def expect(self, value: str, what: str):
        tok = self.next()
        if tok[1] != value:
            shown = "end of line" if tok[0] == "newline" else ("end of input" if tok[0] == "eof" else repr(tok[1]))
            raise self.error(f"expected {what}, found {shown}", tok)
        return tok

    def name(self, what: str):
        tok = self.next()
        if tok[0] != "name":
            shown = "end of line" if tok[0] == "newline" else ("end of input" if tok[0] == "eof" else repr(tok[1]))
            raise self.error(f"expected {what}, found {shown}", tok)
        return tok

    def skip_separators(self) -> None:
        while self.peek()[0] == "newline" or self.peek()[1] == ";":
            self.next()

    def program(self) -> list[tuple[Instruction, dict[str, tuple[int, int]]]]:
        out = []
        self.skip_separators()
        while self.peek()[0] != "eof":
            out.append(self.instruction())
            tok = self.peek()
            if tok[0] not in ("newline", "eof") and tok[1] != ";":
                raise self.error(f"expected ';' or a new line after an instruction, found {tok[1]!r}")
            self.skip_separators()
        if not out:
            raise PlanSyntaxError("empty program: at least one instruction is needed", 1, 1, self.source)
        return out

    def instruction(self):
        self.expect("(", "'(' to start an instruction")
        slice_tok = self.name("a level name (the slice)")
        self.expect(",", "','")
        form_tok = self.name("InsideGroup, Parallel(level) or Master(level)")
        anc_tok = None
        if form_tok[1] == "InsideGroup":
            form = INSIDE_GROUP
        elif form_tok[1] in ("Parallel", "Master"):
            self.expect("(", f"'(' after {form_tok[1]}")
            anc_tok = self.name("an ancestor level name")
            self.expect(")", "')'")
            form = Form(form_tok[1], anc_tok[1])
        else:
            raise self.error(f"unknown form {form_tok[1]!r}; expected InsideGroup, Parallel(level) or Master(level)", form_tok)
        self.expect(",", "','")
        coll_tok = self.name("a collective")
        try:
            coll = Collective.parse(coll_tok[1])
        except P2Error as err:
            raise self.error(str(err), coll_tok) from None
        self.expect(")", "')' to close the instruction")
        where = {"slice": slice_tok[2:], "ancestor": (anc_tok or slice_tok)[2:]}
        return Instruction(slice_tok[1], form, coll), where


def parse_program(text: str, hierarchy: SynthesisHierarchy | None = None, source: str | None = None) -> Program:
    """Parse program text; with a hierarchy, also check level names (errors carry line and column)."""
    parsed = _Parser(text, source).program()
    if hierarchy is not None:
        for instr, where in parsed:
            try:
                _check_instruction(hierarchy, instr)
            except P2Error as err:
                key = "ancestor" if "ancestor" in str(err) and instr.form.ancestor else "slice"
                line, col = where[key]
                raise PlanSyntaxError(str(err), line, col, source) from None
            if not instruction_groups(hierarchy, instr):
                line, col = where["slice"]
                raise PlanSyntaxError(f"{instr} forms no group of two or more devices on this hierarchy, so it "
                                      "does nothing", line, col, source)
    return Program(tuple(i for i, _ in parsed))


def _check_instruction(h: SynthesisHierarchy, instr: Instruction) -> tuple[int, int | None]:
    if instr.slice not in h.names:
        raise P2Error(f"unknown slice level {instr.slice!r}; levels are {', '.join(h.names)}")
    i = h.names.index(instr.slice)
    if instr.form.kind == "InsideGroup":
        return i, None
    anc = instr.form.ancestor
    if anc not in h.names:
        raise P2Error(f"unknown ancestor level {anc!r}; levels are {', '.join(h.names)}")
    j = h.names.index(anc)
    if j >= i:
        raise P2Error(f"ancestor {anc!r} of {instr.form.kind} must be a strict ancestor of slice {instr.slice!r}")
    return i, j


def instruction_groups(h: SynthesisHierarchy, instr: Instruction | tuple[str, Form]) -> tuple[Group, ...]:
    """The communicators of an instruction on the synthesis hierarchy, in synthesis indices.

    Slice ``i`` with ``InsideGroup`` varies levels i+1..n; ``Parallel(j)`` varies levels j+1..i with
    levels ≤ j and > i fixed; ``Master(j)`` as Parallel with levels > i at 0 (and, with global
    master scope, levels ≤ j at 0 too). Groups of one device are never formed.
    """
    slice_name, form = (instr.slice, instr.form) if isinstance(instr, Instruction) else instr
    i, j = _check_instruction(h, Instruction(slice_name, form, Collective.ALL_REDUCE))
    sizes = h.sizes
    n = len(sizes)
    cube = np.arange(h.num_devices).reshape(sizes)
    vary = list(range(i + 1, n)) if j is None else list(range(j + 1, i + 1))
    if form.kind == "Master":
        index = [slice(None)] * n
        for lv in range(i + 1, n):
            index[lv] = slice(0, 1)
        if h.master_scope == "global":
            for lv in range(j + 1):
                index[lv] = slice(0, 1)
        cube = cube[tuple(index)]
    fixed = [lv for lv in range(n) if lv not in vary]
    moved = np.transpose(cube, fixed + vary)
    width = int(np.prod([cube.shape[lv] for lv in vary])) if vary else 1
    rows = moved.reshape(-1, width)
    if width < 2:
        return ()
    first = rows[:, 0]
    if (first[1:] < first[:-1]).any():  # disjoint groups: ordered by their first devices
        rows = rows[np.argsort(first, kind="stable")]
    return tuple(map(tuple, rows.tolist()))


@lru_cache(maxsize=8)
def candidate_instructions(h: SynthesisHierarchy) -> tuple[tuple[Instruction, tuple[Group, ...]], ...]:
    """Every instruction with at least one group, deduplicated by (collective, groups).

    Memoized (a few hierarchies): the driver, the cost model and the lowering ask for the same
    hierarchy's candidates, whose groups cost O(devices) each to build.

    Order: slices outermost first; forms InsideGroup, Parallel(e'), Master(e') with e' outermost
    first; collectives in DSL order. The first instruction with given groups represents them.
    """
    seen: set[tuple[Collective, tuple[Group, ...]]] = set()
    out = []
    names = h.names
    for i, slice_name in enumerate(names):
        forms = [INSIDE_GROUP] + [Form("Parallel", names[j]) for j in range(i)]
        forms += [Form("Master", names[j]) for j in range(i)]
        for form in forms:
            groups = instruction_groups(h, (slice_name, form))
            if not groups:
                continue
            for coll in Collective:
                key = (coll, groups)
                if key in seen:
                    continue
                seen.add(key)
                out.append((Instruction(slice_name, form, coll), groups))
    return tuple(out)


def problem(h: SynthesisHierarchy, require_progress: bool = True,
            sharding: Sharding | None = None) -> SynthesisProblem:
    """The engine-facing problem of a synthesis hierarchy; ``sharding`` a sharded goal on its synthesis
    devices (``Sharding.on_hierarchy``), None for the AllReduce goal."""
    cands = tuple(Candidate(str(ins), ins.collective, g) for ins, g in candidate_instructions(h))
    return SynthesisProblem(h.num_devices, h.goal_groups, cands, require_progress, sharding)


def program_steps(h: SynthesisHierarchy, program: Program) -> list[tuple[Collective, tuple[Group, ...]]]:
    """A program's steps as (collective, groups) on the synthesis hierarchy."""
    return [(ins.collective, instruction_groups(h, ins)) for ins in program.instructions]


def lower_program(h: SynthesisHierarchy, program: Program) -> ExplicitPlan:
    """Lower to the whole system: each group replicated over every replica, in physical ids."""
    steps = []
    for coll, groups in program_steps(h, program):
        lowered = tuple(tuple(rep[d] for d in g) for rep in h.replicas for g in groups)
        steps.append(ExplicitStep(coll, lowered))
    return tuple(steps)


def program_from_labels(labels: list[Instruction]) -> Program:
    return Program(tuple(labels))


PLAN_STEP_KEYS = ("collective", "replica_groups", "comment")
"""The keys of a JSON plan step. Others are refused by name: XLA's ``channel_id`` and
``use_global_device_ids`` change which devices the ids name, so they are read from HLO (``--hlo``), not ignored."""


def _where(source: str | None, step: int) -> str:
    return f"{source}: step {step}" if source else f"step {step}"


def validate_plan(steps, num_devices: int, source: str | None = None, start: int = 1) -> ExplicitPlan:
    """The one check of every plan: known collectives, and per step (1-based in messages) ids in 0..n-1, no
    device twice in a group nor in two groups. A step whose groups all have one device is XLA's no-op (a
    collective over a mesh axis of size 1) and is kept as such; a DSL instruction that forms no group is
    refused earlier, when the program is parsed.

    ``steps`` are ``ExplicitStep`` or ``(collective, groups)`` pairs; errors name ``source`` and the step
    (numbered from ``start``, for a part of a plan).
    """
    if not steps:
        raise P2Error(f"{source or 'plan'}: a plan needs at least one step")
    out = []
    for n, step in enumerate(steps, start=start):
        coll, groups = (step.collective, step.groups) if isinstance(step, ExplicitStep) else step
        where = _where(source, n)
        try:
            coll = coll if isinstance(coll, Collective) else Collective.parse(str(coll))
        except P2Error as err:
            raise P2Error(f"{where}: {err}") from None
        checked: list[Group] = []
        owner: dict[int, Group] = {}
        for g in groups:
            g = tuple(g)
            for d in g:
                if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
                    raise P2Error(f"{where}: device id {d!r} is not an integer")
                if not 0 <= d < num_devices:
                    raise P2Error(f"{where}: device {d} does not exist (devices are 0..{num_devices - 1})")
            g = tuple(int(d) for d in g)
            twice = len(set(g)) != len(g)  # g.count per member is quadratic: 8,192-device groups took seconds
            for d in g:
                if twice and g.count(d) > 1:
                    raise P2Error(f"{where}: device {d} appears twice in group {list(g)}")
                if d in owner:
                    raise P2Error(f"{where}: device {d} appears in two groups, {list(owner[d])} and {list(g)}")
                owner[d] = g
            checked.append(g)
        out.append(ExplicitStep(coll, tuple(checked)))
    return tuple(out)


def parse_explicit_plan(data: object, source: str, num_devices: int | None = None) -> ExplicitPlan:
    """Validate a JSON plan: a list (or {"steps": list}) of {"collective", "replica_groups"[, "comment"]}.

    ``replica_groups`` follow XLA: explicit lists (groups of one device are no-op members and dropped),
    ``[]`` for one group of all ``num_devices`` devices, or an HLO string form such as ``"[4,4]<=[16]"``.
    Every error names ``source`` and the step (1-based).
    """
    steps = data.get("steps") if isinstance(data, dict) else data
    if not isinstance(steps, list) or not steps:
        raise P2Error(f"{source}: a plan is a non-empty list of steps (or an object with a 'steps' list)")
    out = []
    for n, step in enumerate(steps, start=1):
        where = _where(source, n)
        if not isinstance(step, dict):
            raise P2Error(f"{where}: expected an object with 'collective' and 'replica_groups'")
        unknown = [k for k in step if k not in PLAN_STEP_KEYS]
        if unknown:
            raise P2Error(f"{where}: unknown key {str(unknown[0])[:40]!r}; a step has 'collective', "
                          "'replica_groups' and an optional 'comment' (XLA's channel_id and use_global_device_ids "
                          "change what the ids mean: give the HLO module with --hlo instead)")
        missing = [k for k in PLAN_STEP_KEYS[:2] if k not in step]
        if missing:
            raise P2Error(f"{where}: missing key {missing[0]!r} ('collective' and 'replica_groups' are required)")
        try:
            coll = Collective.parse(str(step["collective"])[:80])
        except P2Error as err:
            raise P2Error(f"{where}: {err}") from None
        groups = parse_groups_value(step["replica_groups"], where)
        if not groups and num_devices is None:
            raise P2Error(f"{where}: empty replica_groups (all devices) needs the number of devices")
        out.append((coll, groups or (tuple(range(num_devices)),)))
    size = num_devices if num_devices is not None else 1 + max(max(g) for _, gs in out for g in gs)
    return tuple(ExplicitStep(s.collective, normalize(s.groups, size)) for s in validate_plan(out, size, source))


def explicit_plan_json(plan: ExplicitPlan) -> list[dict]:
    return [{"collective": s.collective.value, "replica_groups": [list(g) for g in s.groups]} for s in plan]
