"""What p2smt reads from an XLA module: its reduction collectives in program order, checked to be one program.

Both readers (``hlo.py`` for HLO text, ``stablehlo.py`` for StableHLO) produce these values and apply the
same two rules before a collective joins the program:

* **sums only**: the collective's reduction computation adds (p2smt's rules are those of a sum; a
  maximum or a product would be proved as if it were one);
* **one program, on one buffer or the same on several**: every collective reads the module's input (it
  starts a chain) or the last result of one chain and nothing else, through ops that keep every value and
  its position (a copy, a reshape, tuple plumbing, …), and every chain runs the same collectives (a psum of a
  pytree runs one chain per leaf). Two different reductions of one input (``psum(x, 'a') + psum(x, 'b')``),
  a chain that forks, a result mixed with the input (``psum(psum(x, 'a') + x, 'b')``) or moved between the
  collectives (reversed, sliced, scaled) are not a program of P²'s semantics, and reading them as one would
  prove what is not a sum. Each value's ``Flow`` says which collectives (and whether the module's input) it
  is computed from, and whether an op on the way changed values or positions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from p2smt.errors import P2Error
from p2smt.model.collectives import Collective, Group
from p2smt.model.replica_groups import DeviceSpace, GroupMode

SHARDING = "sharding annotation"
"""What the readers call a sharding annotation (HLO ``custom-call`` to ``"Sharding"``, StableHLO ``custom_call
@Sharding``): it passes its operand on."""
SUM_OPS = frozenset({"add", "parameter", "tuple", "convert", "copy", "bitcast", "return", "sdy.sharding_constraint",
                     SHARDING})
"""Ops a reduction computation may hold and still be a sum (besides the add, ops that pass values on or widen
them, a sharding annotation); the readers also check that the add takes each of its two arguments once."""


@dataclass(frozen=True)
class HloCollective:
    """One reduction collective as written: line, op, collective, groups (module ids), mode, dimension."""

    line: int
    op: str
    collective: Collective
    groups: tuple[Group, ...]
    mode: GroupMode
    dimension: int | None


@dataclass(frozen=True)
class HloProgram:
    """The reduction program of a module (one chain's collectives in program order), the replicas ×
    partitions it runs on, and on how many buffers the module runs it (``buffers`` chains)."""

    name: str
    dialect: str
    space: DeviceSpace
    collectives: tuple[HloCollective, ...]
    buffers: int = 1

    def to_json(self) -> dict:
        return {"module": self.name, "dialect": self.dialect, "replicas": self.space.replicas,
                "partitions": self.space.partitions,
                "buffers": self.buffers, "collectives": [{"line": c.line, "op": c.op, "collective": c.collective.value,
                                 "replica_groups": [list(g) for g in c.groups], "mode": c.mode.value,
                                 "dimension": c.dimension} for c in self.collectives]}


def require_sum(ops: Iterable[str], what: str, where: str, line: int, op: str) -> None:
    """Refuse a reduction computation (``what`` names it) whose ops are not a sum."""
    ops = list(ops)
    other = next((o for o in ops if o not in SUM_OPS), None)
    if other is not None or "add" not in ops:
        found = other or "no add"
        raise P2Error(f"{where}:{line}: {op} reduces with {found} ({what}); p2smt proves sums only")


INPUT = -1
"""The module's input (its parameters) among a value's sources."""


@dataclass(frozen=True)
class Flow:
    """Where a value comes from: the collectives (indices) and ``INPUT`` it is computed from, and ``op``, the
    first op on the way since the last collective that changes values or positions (None: none did);
    ``opaque``: the communication ops p2smt does not verify (indices among a split reading's ``opaque``) on the way."""

    sources: frozenset[int] = frozenset()
    op: str | None = None
    reshaped: bool = False  # a reshape on the way since the last collective (it keeps positions along dim 0 only)
    opaque: frozenset[int] = frozenset()
    promoted: str = ""  # the narrower type the value was widened from exactly, then at most summed (``converted``)

    @staticmethod
    def through(op: str, flows: Iterable[Flow], keeps: bool, reshapes: bool = False) -> Flow:
        """The flow of ``op``'s result from its operands' (``keeps``: the op keeps values and positions;
        ``reshapes``: it keeps them in row-major order under another shape)."""
        flows = list(flows)
        sources = frozenset().union(*(f.sources for f in flows))
        opaque = frozenset().union(*(f.opaque for f in flows))
        if not sources and not opaque:  # constants only: nothing of any device's data
            return Flow()
        moved = next((f.op for f in flows if f.op is not None), None)
        reshaped = reshapes or any(f.reshaped for f in flows)
        promoted = flows[0].promoted if keeps and all(f.promoted == flows[0].promoted for f in flows) else ""
        return Flow(sources, moved if moved is not None or keeps else op, reshaped, opaque, promoted)


def _element(name: str) -> tuple[str, int] | None:
    """(kind, bits) of an HLO (``bf16``, ``s32``, ``u8``) or MLIR (``bf16``, ``i32``, ``ui8``) element type:
    kind ``f`` (float, ``bf`` for bfloat16), ``s`` (signed; MLIR's signless too) or ``u``."""
    m = re.fullmatch(r"(bf|f|s|si|i|u|ui)(\d+)", name.strip().lower())
    if m is None:
        return None
    return {"si": "s", "i": "s", "ui": "u"}.get(m.group(1), m.group(1)), int(m.group(2))


def widens_exactly(src: str, dst: str) -> bool:
    """Whether converting ``src`` elements to ``dst`` keeps every value exactly, and converting back gives it
    again: a float to a wider float that holds all its values (bf16 or f16 to f32 or f64, f32 to f64), an
    integer to a wider one of the same sign or an unsigned one to a wider signed one. Not between integers and
    floats (a sum converted back could be out of range)."""
    a, b = _element(src), _element(dst)
    if a is None or b is None or a[1] >= b[1]:
        return False
    if a[0] in ("f", "bf") and b[0] == "f":
        return b[1] >= 32
    return a[0] == b[0] in ("s", "u") or (a[0], b[0]) == ("u", "s")


def converted(flow: Flow, src: str, dst: str) -> Flow:
    """The flow of a ``convert`` from ``src`` to ``dst`` elements. An exact widening keeps the value (and
    records what it was widened from); converting a value widened from ``dst`` (then at most summed by
    collectives, as XLA does when it promotes a bf16 all-reduce to f32) back to ``dst`` keeps it too: it is that
    type's collective, computed wider. Any other convert can round or wrap: it changes values. A narrowing
    then widening (f32 to bf16 to f32) rounds away what bf16 does not hold, so it is not kept."""
    if not flow.sources and not flow.opaque:
        return flow
    if widens_exactly(src, dst):
        return replace(flow, promoted=src.strip().lower())
    if widens_exactly(dst, src) and flow.promoted == dst.strip().lower():
        return replace(flow, promoted="")
    return Flow.through("convert", [flow], False)


def joined(op: str, flows: Iterable[Flow]) -> Flow:
    """A value that is any of ``flows`` (``op`` chose it: a loop, a branch), or the one flow when all are it."""
    flows = list(flows)
    if all(f == flows[0] for f in flows[1:]):
        return flows[0] if flows else Flow()
    sources = frozenset().union(*(f.sources for f in flows))
    opaque = frozenset().union(*(f.opaque for f in flows))
    return Flow(sources, op, any(f.reshaped for f in flows), opaque) if sources or opaque else Flow()


def carried(before: Flow, init: Flow, out: Flow) -> Flow:
    """What a loop carries into an iteration, from what it carried into the one ``before``, what it starts from
    (``init``) and what the body gives back (``out``): ``init`` while the body gives it back unchanged, else any
    of them, changed by the loop (a collective reading it starts a chain: a chain never spans iterations)."""
    return init if before == init == out else joined("while", (before, init, out))


MAX_SETTLE = 100
"""Readings of a loop body at most, until what the loop carries settles (it only grows: a few readings)."""


INPUT_FLOW = Flow(frozenset({INPUT}))
UNTRACED = -2
"""A value the reader cannot trace (a name it never saw defined): a collective that reads one is refused."""
UNTRACED_FLOW = Flow(frozenset({UNTRACED}))


class ChainStart(str, Enum):
    """What a split reading's chain starts from: the module's input only, or earlier collectives' results."""

    INPUT = "input"
    COMPUTED = "computed"


@dataclass(frozen=True)
class ReadChain:
    """One chain of a split reading: its collectives (indices, in order), what its first step reads
    (``sources``: the collectives, ``opaque``: the unverified communication ops it is computed from,
    ``with_input``: the module's input too) and the steps whose result reaches the module's output before
    the last (``escapes``)."""

    steps: tuple[int, ...]
    start: ChainStart
    sources: tuple[int, ...] = ()
    opaque: tuple[int, ...] = ()
    with_input: bool = False
    escapes: tuple[int, ...] = ()
    runs: int | None = 1
    """How often the chain runs per run of the module: 1 outside loops, a loop's trip count (times the trip
    counts of the loops around it) inside one, None when that count is not known (a loop that is not a counted
    one, or a branch of a ``case``/``if``, which runs once or not at all)."""


def unsupported(op: str, line: int, where: str) -> P2Error:
    """The refusal of a collective that is not a reduction (the verify reading's; a split one records it)."""
    names = "all_reduce, reduce_scatter and all_gather" if "_" in op or "." in op else \
        "all-reduce, reduce-scatter and all-gather"
    return P2Error(f"{where}:{line}: {op} is not a reduction collective; p2smt does not support it (only {names})")


class Chain:
    """The collectives read so far, in chains (one per buffer): each collective starts a chain by reading the
    module's input, or extends one by reading its last result alone, unmoved. Read to verify (``split``
    False), every chain must be the same program (``program``; a psum of a pytree emits one chain per leaf) and
    anything else is refused where it is read. Read ``split``, a collective that cannot extend a chain starts
    one that records what it is computed from, and ``program`` replays the verify reading's refusals."""

    def __init__(self, where: str, split: bool = False):
        self.where = where
        self.split = split
        self.collectives: list[HloCollective] = []  # every collective, in program order
        self.chains: list[list[int]] = []  # the indices of each chain's collectives
        self.starts: list[tuple[ChainStart, tuple[int, ...], tuple[int, ...], bool]] = []
        self.reads: list[Flow] = []  # the flow each collective read
        self.opaque: list[tuple[int, str]] = []  # (line, op) of each unverified communication op
        self._order: list[tuple[bool, int]] = []  # (opaque?, index) in program order: what ``program`` replays
        self._chain_of: list[int] = []
        self._through_reshape: set[int] = set()
        self.reshaped_at: HloCollective | None = None  # the first collective that read through a reshape
        self.off_zero: HloCollective | None = None  # the first working along a dimension other than 0
        # read split, a loop body or a branch is a scope of its own (``enter``): a chain never crosses one
        self.runs: int | None = 1  # how often what is read now runs per run of the module
        self._scope = 0
        self._scopes = 0
        self._scope_of: list[int] = []  # the scope of each collective
        self._runs: list[int | None] = []  # how often each chain runs
        self.opaque_runs: list[int | None] = []  # how often each unverified communication op runs
        self.reread: Callable[[], HloProgram] | None = None  # the verify reading, where a replay is not it
        self.in_loops = False  # communication read in a loop body or a branch (read split)

    @property
    def in_scope(self) -> bool:
        """Whether communication read now lies in a loop body or a branch."""
        return self._scope != 0

    def enter(self, runs: int | None) -> tuple[int, int | None]:
        """Start reading a loop body (``runs``: its trip count, None if not known) or a branch (None); what
        ``leave`` takes to return to the scope around it."""
        token = (self._scope, self.runs)
        self._scopes += 1
        self._scope = self._scopes
        self.runs = None if runs is None or self.runs is None else self.runs * runs
        return token

    def leave(self, token: tuple[int, int | None]) -> None:
        self._scope, self.runs = token

    def mark(self) -> tuple:
        """The state read so far, for ``restore``: a loop body is read again until what it carries settles."""
        return (len(self.collectives), [list(c) for c in self.chains], len(self.starts), len(self.reads),
                len(self.opaque), len(self._order), len(self._chain_of), set(self._through_reshape),
                self.reshaped_at, self.off_zero, len(self._scope_of), len(self._runs), len(self.opaque_runs))

    def settle(self, init: Any, read: Callable[[Any], Any], carry: Callable[[Any, Any, Any], Any]) -> Any:
        """What a loop carries once it settles: ``read`` reads the body on what the loop carries (its collectives
        joining this chain) and gives what the body gives back; ``carry`` (``carried``) joins them. Only the last
        reading stays in the chain. None if it does not settle in ``MAX_SETTLE`` readings."""
        start, now = self.mark(), init
        for _ in range(MAX_SETTLE):
            self.restore(start)
            settled = carry(now, init, read(now))
            if settled == now:
                return now
            now = settled
        return None

    def restore(self, mark: tuple) -> None:
        (n, chains, starts, reads, opaque, order, chain_of, through, self.reshaped_at, self.off_zero, scope_of,
         runs, opaque_runs) = mark
        del self.collectives[n:], self.starts[starts:], self.reads[reads:], self.opaque[opaque:]
        del self._order[order:], self._chain_of[chain_of:], self._scope_of[scope_of:], self._runs[runs:]
        del self.opaque_runs[opaque_runs:]
        self.chains[:] = chains
        self._through_reshape = through

    def communicate(self, line: int, op: str, flow: Flow) -> Flow:
        """A communication op p2smt does not verify (a collective_permute, an all_to_all, …): refused, or,
        read split, recorded; the flow of its result."""
        if not self.split:
            raise unsupported(op, line, self.where)
        if UNTRACED in flow.sources:  # nothing may be said of what it sends
            raise P2Error(f"{self.where}:{line}: {op} reads a value p2smt cannot trace to the module's input or "
                          "to a collective; it refuses rather than guess where the value comes from")
        self._order.append((True, len(self.opaque)))
        self.opaque.append((line, op))
        self.opaque_runs.append(self.runs)
        self.in_loops = self.in_loops or self.in_scope
        return Flow(flow.sources, op, flow.reshaped, flow.opaque | {len(self.opaque) - 1})

    def add(self, found: HloCollective, flow: Flow) -> Flow:
        """Append ``found`` (its operand's ``flow``); the flow of its result."""
        index = len(self.collectives)
        if UNTRACED in flow.sources:
            raise P2Error(f"{self.where}:{found.line}: {found.op} reads a value p2smt cannot trace to the module's "
                          "input or to a collective; it refuses rather than guess where the value comes from")
        read = sorted(flow.sources - {INPUT})
        crosses = self._crosses(read)
        if not read and not flow.opaque:  # the input (or constants) only: a new chain
            chain = self._start(ChainStart.INPUT, (), (), True)
        elif not crosses and (why := self._refusal(found, flow, read)) is None:
            chain = self._chain_of[read[0]]
            if flow.reshaped:
                self._through_reshape.add(index)
                if self.reshaped_at is None:
                    self.reshaped_at = found
        elif self.split:
            chain = self._start(ChainStart.COMPUTED, tuple(read), tuple(sorted(flow.opaque)), INPUT in flow.sources)
        else:
            raise why
        self.collectives.append(found)
        self._scope_of.append(self._scope)
        self.in_loops = self.in_loops or self.in_scope
        self.reads.append(flow)
        self._order.append((False, index))
        self._chain_of.append(chain)
        self.chains[chain].append(index)
        if self.off_zero is None and found.dimension not in (None, 0):
            self.off_zero = found
        reshaped, off = self.reshaped_at, self.off_zero
        if off is not None and reshaped is not None and not self.split:
            raise P2Error(f"{self.where}:{reshaped.line}: {reshaped.op} reads its predecessor's "
                          f"result through a reshape, and the {off.op} at line {off.line} works along dimension "
                          f"{off.dimension}: a reshape keeps positions along dimension 0 only")
        return Flow(frozenset({index}), promoted=flow.promoted)

    def _crosses(self, read: list[int]) -> bool:
        """Whether the value read comes from a collective of another scope (around the loop or the branch, or in
        it: then of an iteration before, as a value read before its collective ran this iteration)."""
        return bool(read) and (read[0] >= len(self.collectives) or self._scope_of[read[0]] != self._scope)

    def _start(self, start: ChainStart, sources: tuple[int, ...], opaque: tuple[int, ...], with_input: bool) -> int:
        self._runs.append(self.runs)
        self.chains.append([])
        self.starts.append((start, sources, opaque, with_input and start is ChainStart.COMPUTED))
        return len(self.chains) - 1

    def _refusal(self, found: HloCollective, flow: Flow, read: list[int]) -> P2Error | None:
        """Why ``found`` cannot extend the chain whose result it reads (None: it extends it)."""
        here = f"{self.where}:{found.line}: {found.op}"
        if flow.opaque:
            line, op = self.opaque[min(flow.opaque)]
            return P2Error(f"{here} reads the result of the {op} at line {line}, which p2smt does not verify")
        prev = self.collectives[read[0]]
        after = f"the {prev.op} at line {prev.line}"
        others = read[1:] or sorted(flow.sources & {INPUT})
        if others:
            other = self.collectives[others[0]] if others[0] != INPUT else None
            what = "the module's input" if other is None else (
                f"another buffer of the {other.op} at line {other.line}" if other.line == prev.line
                else f"the {other.op} at line {other.line}")
            return P2Error(f"{here} reads the result of {after} combined with {what}: p2smt verifies "
                           "collectives applied one after another to one buffer")
        steps = self.chains[self._chain_of[read[0]]]
        if steps[-1] != read[0]:
            took = self.collectives[steps[steps.index(read[0]) + 1]]
            return P2Error(f"{here} reads the result of {after}, which the {took.op} at line {took.line} "
                           "reads too: p2smt verifies collectives applied one after another to one buffer, "
                           "not a chain that forks")
        if flow.op is not None:
            return P2Error(f"{here} reads the result of {after} through {flow.op}, which changes values or "
                           "their positions: p2smt verifies collectives applied one after another to one buffer")
        return None

    def program(self, outputs: Iterable[Flow]) -> tuple[HloCollective, ...]:
        """The one program every chain runs (its first chain's collectives), or a refusal naming where two
        chains part (independent reductions that differ would be proved as one program) or an intermediate
        result that reaches the module's ``outputs`` (a partial reduction the verdict would not cover). Read
        split, the verify reading is replayed first (its refusals raised)."""
        if self.split:
            strict = Chain(self.where)
            for is_opaque, i in self._order:
                if is_opaque:
                    strict.communicate(*self.opaque[i], Flow())
                else:
                    strict.add(self.collectives[i], self.reads[i])
            return strict.program(outputs)
        if not self.chains:
            return ()
        for flow in outputs:
            self._traced(flow)
            for i in sorted(flow.sources - {INPUT}):
                steps = self.chains[self._chain_of[i]]
                if steps[-1] != i:
                    c, last = self.collectives[i], self.collectives[steps[-1]]
                    raise P2Error(f"{self.where}:{c.line}: the result of the {c.op} at line {c.line} (step "
                                  f"{steps.index(i) + 1} of {len(steps)} of its chain) reaches the module's output "
                                  f"without the later steps (the last is the {last.op} at line {last.line}): a "
                                  "partial reduction escapes, which a verdict on the program would not cover")
        first = [self.collectives[i] for i in self.chains[0]]
        for chain in self.chains[1:]:
            other = [self.collectives[i] for i in chain]
            for t in range(max(len(first), len(other))):
                a = first[t] if t < len(first) else None
                b = other[t] if t < len(other) else None
                if a is None or b is None or _step(a) != _step(b):
                    shown = b if b is not None else other[-1]
                    base = a if a is not None else first[-1]
                    raise P2Error(f"{self.where}:{shown.line}: the chain of collectives through the {shown.op} at "
                                  f"line {shown.line} differs from the chain through the {base.op} at line "
                                  f"{base.line} (step {t + 1}): p2smt verifies one reduction program per module, "
                                  "run on one buffer or the same on several; give each program its own module")
        return tuple(first)

    def _traced(self, flow: Flow) -> None:
        if UNTRACED in flow.sources:
            raise P2Error(f"{self.where}: the module's output holds a value p2smt cannot trace (an async "
                          "collective's start read other than by its done op, or a name never defined)")

    def read(self, outputs: Iterable[Flow]) -> tuple[ReadChain, ...]:
        """The chains of a split reading: a chain that reads through a reshape and works along a dimension other
        than 0 is cut at the reshape (it keeps positions along dimension 0 only); each with its escapes."""
        outputs = list(outputs)
        for flow in outputs:
            self._traced(flow)
        out = set().union(*(f.sources - {INPUT} for f in outputs))
        chains = []
        for steps, (start, sources, opaque, with_input), runs in zip(self.chains, self.starts, self._runs, strict=True):
            pieces, cut = [[steps[0]]], any(self.collectives[i].dimension not in (None, 0) for i in steps)
            for i in steps[1:]:
                if cut and i in self._through_reshape:
                    pieces.append([])
                pieces[-1].append(i)
            for k, piece in enumerate(pieces):
                head = (start, sources, opaque, with_input) if k == 0 else \
                    (ChainStart.COMPUTED, (pieces[k - 1][-1],), (), False)
                chains.append(ReadChain(tuple(piece), *head, tuple(i for i in piece[:-1] if i in out), runs))
        return tuple(sorted(chains, key=lambda c: c.steps[0]))


def _step(c: HloCollective) -> tuple:
    """What a chain's step does, whatever its op's name (``all-reduce`` or ``all-reduce-start``)."""
    return c.collective, c.groups, c.mode, c.dimension
