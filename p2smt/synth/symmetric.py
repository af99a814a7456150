"""The ``symmetric`` engine: P²'s search on a generic small instance, every program then checked at the real size.

The groups of every DSL instruction depend on a level's size only through "is it 1" (docs/symmetry.md,
Theorem 1, Z3-certified): a group varies a fixed set of levels and Master fixes the same levels at
index 0 at every size ≥ 2. The engine therefore searches the hierarchy with every non-trivial level
set to ``size`` (2 by default) on the ``bitmatrix`` interpreter (prune on failing preconditions,
memoize suffixes) and maps the programs back by DSL label: that search costs the same at 16 and at
65,536 devices.

The program set is **not** size-independent (docs/symmetry.md: a 7-step program is valid at sizes
(a, b, c) iff a divides c, so it is valid at (2, 2, 2) and invalid at (2, 3, 5)). The generic
instance's programs are therefore only candidates: each is checked at the real size by the
driver's independent interpreter (``synth.recheck``: the dense one up to 128 devices, the compressed one
above, its vectorized form above 512) and the invalid ones are dropped (``stats["dropped_at_real_size"]``).
Every returned program is valid.
Completeness fails in general: a 7-step program on four levels is valid wherever s0·s1 divides s3 and so
invalid at size 2 (docs/symmetry.md). The engine therefore *proves* it at the real size where it can: the
inclusion exploration (``synth.lockstep.real_included``, Theorem 3') decides whether every program valid at
the real size, of any length, is valid at the generic instance; then the checked set is exact (status
complete). It runs by default with two non-trivial levels up to 16,384 devices and three up to 4,096
(tens to hundreds of pairs of states); beyond, only when asked, and the result is ``conjectured`` (with
four or more levels lengths of 7 or more are then refused). If it finds a missed program within
``max_len`` steps the engine searches at the real size instead. ``stats["rests_on"]`` says which. When
the generic instance is the problem itself (every non-trivial level already of size ``size``) the result
is exact. Problems that are not one reduction group over a kind-(d) hierarchy fall back to the same
search at the real size (exact).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from math import prod
from operator import itemgetter
from typing import Any

from p2smt.errors import InternalError, P2Error
from p2smt.model.collectives import AG, AR, BC, RED, RS
from p2smt.model.dsl import problem
from p2smt.model.hierarchy import ROOT, MasterScope, SynthesisHierarchy
from p2smt.model.problem import SynthesisProblem, canonical_order
from p2smt.semantics.bitmatrix import Device, Machine
from p2smt.synth.recheck import INTERPRETERS, RECHECK_LIMIT, checker, dropped_stats, recheck
from p2smt.synth.search import FirstStepReport

GENERIC_SIZE = 2
KNOWN_COMPLETE_BELOW = 7
"""The shortest known program valid at a real size and invalid at the generic one has 7 steps (four
levels, valid iff s0·s1 divides s3: docs/symmetry.md); at that length and beyond, with four or more
levels, the engine refuses."""
CHECK_LIMIT = RECHECK_LIMIT
"""Devices above which the real-size check of the generic programs is refused (no interpreter re-checks
there): at 65,536 the whole run on the superpod's 7,636 programs at length 5 took 5.3-6.5 s and under
390 MiB in ``benchmarks/scale.py`` (docs/symmetry.md)."""
INCLUSION_DEVICES = {1: 16_384, 2: 16_384, 3: 4_096}
"""Non-trivial levels -> the devices up to which the engine proves its completeness at the real size by
default (the inclusion exploration, docs/symmetry.md, Theorem 3'). Its cost is the pairs of states explored
times the devices times the chunks each device's bit sets hold (quadratic in the devices): two levels
explore 40 pairs (0.6 s at 4,096 devices, 7.7 s at 16,384, 160 s / 2.5 GiB at 65,536), three 722-769 (8.1 s
at 4,096). Four levels need about 24,500 pairs on the superpod's shape (100-160 s and 2.2 GiB at 1,024
devices), so there it runs only when asked (``inclusion_pairs``)."""
INCLUSION_PAIRS = 5_000
"""The bound on the pairs of states the default inclusion proof explores (no decision above it)."""


MEMORY_BOUND = 2 << 30
"""Bytes the engine's estimates keep a request under (the search's states, the inclusion exploration's pairs);
a request estimated above is refused up front."""
SEARCH_BYTES_PER_UNIT = 16
"""The explicit search's memory per candidate × device² (its states hold one k-bit set per device): 311 MiB
for 320 candidates on 256 devices at length 2 (8 levels of size 2)."""
PAIR_BYTES = 4
"""The inclusion exploration's memory per pair of states × devices^1.5: 24,500 pairs took 2.2 GiB at 1,024
devices (four levels), 40 pairs 2.5 GiB at 65,536 (two levels)."""


def check_search_size(devices: int, candidates: int) -> None:
    """Refuse, before any work, a search whose estimated memory (its first step's states, ``SEARCH_BYTES_PER_UNIT``
    per candidate × device²) passes ``MEMORY_BOUND``."""
    need = SEARCH_BYTES_PER_UNIT * candidates * devices ** 2
    if need > MEMORY_BOUND:
        raise P2Error(
            f"the symmetric engine's explicit search on {devices:,} devices with {candidates:,} "
            f"candidate instructions would hold about {need / 2**30:,.1f} GiB of states, above its "
            f"{MEMORY_BOUND >> 30} GiB bound (it grows with candidates x devices^2: {SEARCH_BYTES_PER_UNIT} B each); "
            "a hierarchy with fewer levels of size above 1 keeps it small")


def max_inclusion_pairs(devices: int) -> int:
    """The most pairs of states the inclusion exploration may explore on ``devices`` under ``MEMORY_BOUND``."""
    return max(1, int(MEMORY_BOUND / (PAIR_BYTES * devices ** 1.5)))


def inclusion_bound(asked: int | None, by_default: bool, devices: int) -> int:
    """The pairs bound of the completeness proof: the user's (refused above ``max_inclusion_pairs``), else the
    default one where it runs by default (capped the same way), else 0 (no proof)."""
    cap = max_inclusion_pairs(devices)
    if asked is not None:
        if asked > cap:
            raise P2Error(
                f"--inclusion-pairs {asked:,}: at most {cap:,} at {devices:,} devices (the exploration's memory grows "
                f"with pairs x devices^1.5; {MEMORY_BOUND >> 30} GiB bound)")
        return asked
    return min(INCLUSION_PAIRS, cap) if by_default else 0


def proof_by_default(h: SynthesisHierarchy, devices: int) -> bool:
    """Whether the completeness proof runs without being asked (``INCLUSION_DEVICES``)."""
    return devices <= INCLUSION_DEVICES.get(sum(s > 1 for s in h.sizes), 0)


Tokens = tuple[int, ...]  # a search state: its devices' tokens


def search(prob: SynthesisProblem, max_len: int,
           on_first_step: FirstStepReport | None = None) -> list[tuple[int, ...]]:
    """Every valid program of ``prob`` up to ``max_len`` (canonical order) on the bitmatrix state.

    P²'s search (as ``problem.search_programs``: prune a step whose precondition fails, stop at the
    goal, memoize the suffixes of a state and remaining length; a state's valid steps are computed
    once for every remaining length) with two shortcuts that skip only
    failing steps: the last step of a program is only tried with candidates that can end in the goal
    (an AllReduce, AllGather or Broadcast whose groups cover every device not yet in its goal
    state), and AllReduce, ReduceScatter and Reduce over the same groups share one check of their
    common precondition per state. ``on_first_step``: as in ``search_programs``.
    """
    check_search_size(prob.num_devices, len(prob.candidates))
    machine = Machine(prob.num_devices)
    cands = prob.candidates
    progress = prob.require_progress
    tokens: dict[Device, int] = {}
    table: list[Device] = []  # a state is the tuple of its devices' tokens (indices into ``table``)

    def token(device: Device) -> int:
        found = tokens.setdefault(device, len(table))
        if found == len(table):
            table.append(device)
        return found

    goal = tuple(map(token, machine.goal(prob.goal_groups)))
    readers = [[_reader(g) for g in c.groups] for c in cands]
    outcomes: dict[tuple, tuple[int, ...] | None] = {}  # (collective, members' tokens) -> new tokens
    covers = [sum(1 << d for g in c.groups for d in g) for c in cands]
    finishing = [c.collective in (AR, AG, BC) for c in cands]
    all_rows = (1 << prob.num_devices) - 1
    gathers = [c.collective is AG and min(map(len, c.groups)) > 1 for c in cands]
    needs = [covers[i] if c.collective is AR or gathers[i] else sum(1 << g[0] for g in c.groups)
             if c.collective is BC else 0 for i, c in enumerate(cands)]
    group_ids: dict[tuple, int] = {}
    reducing = [group_ids.setdefault(c.groups, len(group_ids)) if c.collective in (AR, RS, RED) else None
                for c in cands]

    def checked(state: Tokens, i: int, shared: dict[int, bool]) -> bool:
        gid = reducing[i]
        if gid is None:
            return True
        ok = shared.get(gid)
        if ok is None:
            ok = shared[gid] = all(machine.reducible([table[state[d]] for d in g]) for g in cands[i].groups)
        return ok

    def outcome(coll, members: tuple[int, ...]) -> tuple[int, ...] | None:
        devices = [table[t] for t in members]
        out = machine.apply_group(coll, devices)
        if out is None or (progress and out == devices):
            return None
        return tuple(map(token, out))

    def step(state: Tokens, i: int) -> Tokens | None:
        """``machine.step`` on tokens; a group's outcome is computed once per distinct members."""
        coll = cands[i].collective
        new = list(state)
        for g, read in zip(cands[i].groups, readers[i]):
            key = (coll, read(state))
            out = outcomes.get(key, False)
            if out is False:
                out = outcomes[key] = outcome(coll, key[1])
            if out is None:
                return None
            for d, t in zip(g, out):
                new[d] = t
        return tuple(new)

    successors: dict[Tokens, list[tuple[int, Tokens]]] = {}

    def gather_blocked(state: Tokens) -> int:
        """Devices no AllGather of two or more members can include: one holding every chunk leaves the
        others none (unequal sizes); with the progress rule, one holding none (equal sizes: all empty)."""
        out = 0
        for d, t in enumerate(state):
            rows = table[t][0]
            if rows == all_rows or (progress and not rows):
                out |= 1 << d
        return out

    def valid_steps(state: Tokens) -> list[tuple[int, Tokens]]:
        found = successors.get(state)
        if found is None:
            shared: dict[int, bool] = {}
            blocked = gather_blocked(state)
            found = successors[state] = [
                (i, nxt) for i in range(len(cands))
                if not (gathers[i] and blocked & covers[i]) and checked(state, i, shared)
                and (nxt := step(state, i)) is not None
            ]
        return found

    finishers: dict[Tokens, list[int]] = {}

    def finishing_steps(state: Tokens) -> list[int]:
        found = finishers.get(state)
        if found is None:
            if state in successors:
                found = [i for i, nxt in successors[state] if nxt == goal]
            else:
                todo = rows_off = 0
                for d, (s, g) in enumerate(zip(state, goal)):
                    if s != g:
                        todo |= 1 << d
                    if table[s][0] != table[g][0]:
                        rows_off |= 1 << d
                # necessary for ending in the goal: AllReduce keeps every member's chunks, Broadcast
                # copies the root, AllGather is valid
                blocked = {AR: rows_off, BC: todo, AG: gather_blocked(state)}
                shared: dict[int, bool] = {}
                found = [i for i in range(len(cands))
                         if finishing[i] and not todo & ~covers[i] and not blocked[cands[i].collective] & needs[i]
                         and checked(state, i, shared) and step(state, i) == goal]
            finishers[state] = found
        return found

    memo: dict[tuple[Tokens, int], list[tuple[int, ...]]] = {}

    def suffixes(state: Tokens, remaining: int) -> list[tuple[int, ...]]:
        found = memo.get((state, remaining))
        if found is not None:
            return found
        if remaining == 1:
            out = [(i,) for i in finishing_steps(state)]
        else:
            out = []
            for i, nxt in valid_steps(state):
                if nxt == goal:
                    out.append((i,))
                else:
                    out.extend((i, *rest) for rest in suffixes(nxt, remaining - 1))
        memo[state, remaining] = out
        return out

    if max_len < 1:
        return []
    start = tuple(map(token, machine.initial()))
    if on_first_step is None:
        return canonical_order(suffixes(start, max_len))
    found: list[tuple[int, ...]] = []
    nexts = dict(valid_steps(start)) if max_len > 1 else dict.fromkeys(finishing_steps(start), goal)
    for i in range(len(cands)):
        nxt = nexts.get(i)
        programs = [] if nxt is None else [(i,)] if nxt == goal else [(i, *rest) for rest in suffixes(nxt, max_len - 1)]
        found.extend(programs)
        on_first_step(i, canonical_order(programs))
    return canonical_order(found)


def _reader(group: tuple[int, ...]):
    """The members' tokens of a state, as a tuple (``itemgetter`` returns a bare item for one index)."""
    if len(group) == 1:
        (d,) = group
        return lambda state: (state[d],)
    return itemgetter(*group)


def generic_hierarchy(h: SynthesisHierarchy, size: int) -> SynthesisHierarchy:
    """``h`` with every level of size > 1 set to ``size`` (one replica, one goal group)."""
    levels = tuple((name, s if s == 1 else size) for name, s in h.levels)
    k = prod(s for _, s in levels)
    return replace(h, levels=levels, replicas=(tuple(range(k)),), goal_groups=(tuple(range(k)),))


def one_group_hierarchy(levels: Sequence[tuple[str, int]], master_scope: MasterScope = "per-ancestor") -> SynthesisHierarchy:
    """The kind-(d) hierarchy of one reduction group over ``levels`` (outermost first, root added)."""
    k = prod(s for _, s in levels)
    return SynthesisHierarchy("d", ((ROOT, 1), *levels), (tuple(range(k)),), (tuple(range(k)),), master_scope)


def why_not_generic(h: object, k: int) -> str | None:
    if not isinstance(h, SynthesisHierarchy):
        return "the problem has no synthesis hierarchy"
    if h.kind != "d" or h.goal_groups != (tuple(range(k)),):
        return "the goal is not one reduction group over a kind-(d) hierarchy"
    return None


def inclusion_proved(instance: str, pairs: int) -> str:
    """The words of a completeness proved by the inclusion exploration (``instance``: e.g. "size 2")."""
    return (f"proved at the real size: every program valid here, of any length, is valid at {instance} "
            f"(docs/symmetry.md, Theorem 3': {pairs} pairs of states explored on the compressed interpreter)")


def _rests_on(h: SynthesisHierarchy, checks: list[int], proved_pairs: int | None = None) -> str:
    """What the result rests on: the real-size check of the generic programs, then completeness (proved by
    the inclusion exploration's ``proved_pairs`` pairs of states, or not proved)."""
    if all(s == 1 or s == checks[0] for s in h.sizes):
        return "exact: the generic instance is the problem itself"
    validity = (
        f"validity: every program of the generic size-{checks[0]} instance"
        + (f" (cross-checked against generic size {checks[1]})" if len(checks) > 1 else "")
        + f" checked at the real size by {INTERPRETERS[checker(h.num_devices)]}, the invalid ones dropped; "
    )
    if proved_pairs is not None:
        return validity + "completeness: " + inclusion_proved("the generic instance", proved_pairs)
    return validity + (
        "completeness: NOT proved: the generic instance "
        f"misses programs valid at some real sizes (docs/symmetry.md: {KNOWN_COMPLETE_BELOW} steps on four "
        f"levels); none is known on fewer levels (where the engine proves it) or with fewer steps"
    )


def generic_search(
    h: SynthesisHierarchy, max_len: int, require_progress: bool = True, size: int = GENERIC_SIZE,
    cross_check: int | None = None, on_first_step: FirstStepReport | None = None, proved_pairs: int | None = None,
) -> tuple[SynthesisProblem, list[tuple[int, ...]], dict[str, Any]]:
    """The generic instance's problem, its programs (canonical order) and the stats; with
    ``cross_check`` the instance of that size must have the same program set (else InternalError).
    ``on_first_step`` follows the generic instance's search (its candidate indices); ``proved_pairs``: the
    size of the completeness proof, if one was made (for ``rests_on``)."""
    small = problem(generic_hierarchy(h, size), require_progress)
    programs = search(small, max_len, on_first_step)
    checks = [size]
    if cross_check and cross_check != size and any(s > 1 for s in h.sizes):
        other_prob = problem(generic_hierarchy(h, cross_check), require_progress)
        other = search(other_prob, max_len)
        if [other_prob.label(p) for p in other] != [small.label(p) for p in programs]:
            raise InternalError(
                f"the generic instances of sizes {size} and {cross_check} have different program sets "
                f"({len(programs)} vs {len(other)} programs): the size-independence does not hold here"
            )
        checks.append(cross_check)
    stats = {"generic_size": size, "generic_devices": small.num_devices, "rests_on": _rests_on(h, checks, proved_pairs)}
    return small, programs, stats


def synthesize(
    prob: SynthesisProblem, max_len: int, h: SynthesisHierarchy | None = None, size: int = GENERIC_SIZE,
    cross_check: int | None = None, on_first_step: FirstStepReport | None = None,
    inclusion_pairs: int | None = None,
) -> tuple[list[tuple[int, ...]], dict[str, Any]]:
    """The engine: programs as candidate indices of ``prob`` (built from hierarchy ``h``; canonical order)
    and stats (``rests_on`` says what the result rests on). The generic instance's programs are checked at
    the real size and the invalid ones dropped; other problems fall back to the same search at the real
    size. ``on_first_step`` (as in ``search_programs``) is only fed indices of ``prob``, after the check.

    Completeness is proved (``stats["completeness"] == "proved"``) when the inclusion exploration shows that
    every program valid at the real size is valid at the generic one: by default where ``INCLUSION_DEVICES``
    allows it, at most ``INCLUSION_PAIRS`` pairs of states; ``inclusion_pairs`` sets the bound and asks for
    it at any number of levels and devices (0: never). When it finds a program of at most
    ``max_len`` steps that the generic instance misses, the engine searches at the real size instead."""
    prob.refuse_sharded("the symmetric engine (a shard rank breaks the symmetry inside a level; use the default "
                        "engine)")
    why = why_not_generic(h, prob.num_devices)
    if why is None:
        # the generic instance has the candidates of ``prob`` (checked below): its search is sized before it is built
        check_search_size(prod(s if s == 1 else size for s in h.sizes), len(prob.candidates))
        small = problem(generic_hierarchy(h, size), prob.require_progress)
        if same_candidates(small, prob):  # same candidates in the same order: the indices carry over
            if small.num_devices == prob.num_devices:
                return generic_search(h, max_len, prob.require_progress, size, cross_check, on_first_step)[1:]
            levels = sum(s > 1 for s in h.sizes)
            if prob.num_devices > CHECK_LIMIT:
                raise P2Error(
                    f"the symmetric engine checks every program of its generic instance at the real size, which is "
                    f"out of reach above {CHECK_LIMIT} devices ({prob.num_devices} here); unchecked, those programs "
                    "are not known valid (the program set depends on the sizes: docs/symmetry.md)")
            # lockstep builds its hierarchies with this module: imported here, not at the top
            from p2smt.synth.lockstep import inclusion_proof

            bound = inclusion_bound(inclusion_pairs, proof_by_default(h, prob.num_devices), prob.num_devices)
            proof = inclusion_proof(prob, small, h, size, bound) if bound > 0 else None
            if proof is not None and proof.missed_within(max_len):
                programs, rests_on = proof.searched(prob, max_len, "the generic instance", on_first_step)
                return programs, {"rests_on": rests_on, "generic_size": None, "inclusion_pairs": proof.pairs}
            proved = proof is not None and proof.proved
            if not proved and max_len >= KNOWN_COMPLETE_BELOW and levels >= 4:
                raise P2Error(
                    f"the symmetric engine's generic instance is known to miss valid programs of "
                    f"{KNOWN_COMPLETE_BELOW} or more steps on four or more levels (docs/symmetry.md); use "
                    f"--max-len {KNOWN_COMPLETE_BELOW - 1} or less, or --engine pieces (up to 4,096 devices)")
            programs, stats = _checked_generic(prob, h, max_len, size, cross_check, on_first_step,
                                               proof.pairs if proved else None)
            return programs, stats | (proof.stats() if proof is not None else {"completeness": "conjectured"})
        why = "the generic instance has other candidate instructions"
    return search(prob, max_len, on_first_step), {"rests_on": f"search at the real size ({why})", "generic_size": None}


def _checked_generic(
    prob: SynthesisProblem, h: SynthesisHierarchy, max_len: int, size: int, cross_check: int | None,
    on_first_step: FirstStepReport | None, proved_pairs: int | None,
) -> tuple[list[tuple[int, ...]], dict[str, Any]]:
    """The generic instance's programs that the driver's independent interpreter (``synth.recheck``: the
    dense one up to 128 devices, the compressed one above, its vectorized form above 512) proves valid at
    the real size."""
    dropped: list[tuple[int, ...]] = []

    def valid(programs: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
        rejected = set(recheck(prob, programs, "symmetric", drop=True, sizes=h.sizes))
        dropped.extend(rejected)
        return [p for p in programs if p not in rejected]

    if on_first_step is None:
        _, candidates, stats = generic_search(h, max_len, prob.require_progress, size, cross_check,
                                              proved_pairs=proved_pairs)
        programs = valid(candidates)
    else:
        programs = []

        def report(i: int, found: list[tuple[int, ...]]) -> None:
            kept = valid(found)
            programs.extend(kept)
            on_first_step(i, kept)

        stats = generic_search(h, max_len, prob.require_progress, size, cross_check, report, proved_pairs)[2]
        programs = canonical_order(programs)
    return programs, stats | dropped_stats(prob, dropped)


def same_candidates(a: SynthesisProblem, b: SynthesisProblem) -> bool:
    return [(c.label, c.collective) for c in a.candidates] == [(c.label, c.collective) for c in b.candidates]
