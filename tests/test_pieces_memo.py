"""The memoized re-check (``pieces.check_programs``: shared prefix states, interned device states, the
one-piece path) gives exactly the verdicts of the plain per-program one (``pieces.check_program``):
the same status, failing step, group and rule, on valid and invalid programs."""

from __future__ import annotations

import random
from math import prod

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2smt.model.collectives import Collective
from p2smt.model.dsl import problem
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement
from p2smt.model.problem import Candidate, SynthesisProblem
from p2smt.semantics.pieces import check_program, check_programs
from p2smt.synth.enumerative import enumerate_programs


def _problem(sizes, scope, progress):
    k = prod(sizes)
    names = tuple(f"l{i}" for i in range(len(sizes)))
    return problem(synthesis_hierarchy(Placement(tuple(sizes), (k,), (tuple(sizes),)), (0,), names, "d", scope),
                   progress)


def _mix(prob, rng: random.Random, max_len: int) -> list[tuple[int, ...]]:
    """Valid programs, each with one step replaced, with a step appended, and random programs."""
    n = len(prob.candidates)
    valid = enumerate_programs(prob, max_len)
    out = list(valid)
    for p in rng.sample(valid, min(len(valid), 60)):
        swapped = list(p)
        swapped[rng.randrange(len(p))] = rng.randrange(n)
        out += [tuple(swapped), (*p, rng.randrange(n)), p[:-1] or p]
    out += [tuple(rng.randrange(n) for _ in range(rng.randint(1, max_len + 1))) for _ in range(150)]
    rng.shuffle(out)
    return out


def _facts(v):
    return (v.program, v.status, v.step, v.group, v.rule)


def _assert_same(prob, programs):
    memoized = check_programs(prob, programs)
    assert [_facts(v) for v in memoized] == [_facts(check_program(prob, p)) for p in programs]
    return memoized


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3).filter(lambda s: 2 <= prod(s) <= 32),
    scope=st.sampled_from(["per-ancestor", "global"]),
    progress=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_memoized_verdicts_equal_the_per_program_ones(sizes, scope, progress, seed):
    """Random hierarchies (1–3 levels, sizes 1–4), both master scopes, with and without progress."""
    prob = _problem(tuple(sizes), scope, progress)
    verdicts = _assert_same(prob, _mix(prob, random.Random(seed), 3))
    assert any(v.proved for v in verdicts)


def test_memoized_verdicts_on_the_grid_and_every_rule():
    """The 12 problems of the evaluation grid at length 4: every kind of verdict occurs, and each
    failing rule is reported alike by both."""
    from test_scale import _grid_problems

    rng = random.Random(5)
    rules = set()
    for prob in _grid_problems():
        verdicts = _assert_same(prob, _mix(prob, rng, 4 if prob.num_devices <= 16 else 3))
        rules |= {str(v.rule) for v in verdicts if v.rule is not None}
    assert {"goal", "progress", "AllReduce.same_chunks", "AllGather.disjoint_chunks",
            "Broadcast.below_root"} <= rules, rules


def test_a_program_that_reaches_a_shared_state_by_another_prefix():
    """Two prefixes that end in one state share its successors; their verdicts still name each one's
    own failing step."""
    prob = _problem((2, 2), "per-ancestor", True)
    valid = enumerate_programs(prob, 4)
    by_len = [p for p in valid if len(p) == 4]
    programs = by_len + [(*p[:2], p[1]) for p in by_len] + [(p[0], p[0]) for p in by_len]
    verdicts = _assert_same(prob, programs)
    assert {v.step for v in verdicts if not v.proved} >= {2, 3}


@st.composite
def _free_problem(draw):
    """Any collectives on random disjoint groups of 3–6 devices (not only hierarchy shapes), so every
    rule, including ReduceScatter.divisible, and states of several pieces occur."""
    k = draw(st.integers(3, 6))
    cands = []
    for i in range(draw(st.integers(3, 8))):
        order = draw(st.permutations(range(k)))
        cuts = sorted(draw(st.sets(st.integers(1, k - 1), max_size=2)))
        parts = [tuple(order[a:b]) for a, b in zip([0, *cuts], [*cuts, k])]
        groups = tuple(p for p in parts if len(p) >= 2) or (tuple(order),)
        cands.append(Candidate(f"c{i}", draw(st.sampled_from(list(Collective))), groups))
    return SynthesisProblem(k, (tuple(range(k)),), tuple(cands), draw(st.booleans()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prob=_free_problem(), seed=st.integers(0, 2**16))
def test_memoized_verdicts_equal_the_per_program_ones_on_free_groups(prob, seed):
    rng = random.Random(seed)
    n = len(prob.candidates)
    programs = [tuple(rng.randrange(n) for _ in range(rng.randint(1, 5))) for _ in range(200)]
    _assert_same(prob, programs)


def test_rules_off_the_one_piece_path():
    """ReduceScatter.divisible, an AllGather of members with unequal contributions (two pieces) and a
    step on such a state: the memoized re-check names the same step, group and rule."""
    C = Collective
    cands = (Candidate("rs01", C.REDUCE_SCATTER, ((0, 1),)), Candidate("rs23", C.REDUCE_SCATTER, ((2, 3),)),
             Candidate("ag03", C.ALL_GATHER, ((0, 3),)), Candidate("bc30", C.BROADCAST, ((3, 0),)),
             Candidate("rs012", C.REDUCE_SCATTER, ((0, 1, 2),)), Candidate("ar03", C.ALL_REDUCE, ((0, 3),)))
    prob = SynthesisProblem(4, ((0, 1, 2, 3),), cands, True)
    programs = [(4,), (0, 1, 2), (0, 1, 2, 3), (0, 1, 2, 5), (0, 1, 2, 2)]
    facts = [(v.step, v.group, str(v.rule)) for v in _assert_same(prob, programs)]
    assert facts == [(1, (0, 1, 2), "ReduceScatter.divisible"), (None, None, "goal"),
                     (4, (3, 0), "Broadcast.information_increase"), (4, (0, 3), "AllReduce.disjoint"),
                     (4, (0, 3), "AllGather.disjoint_chunks")]


@settings(max_examples=300, deadline=None)
@given(k=st.sampled_from([8, 64, 300, 1024]), runs=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), max_size=6),
       noise=st.booleans(), seed=st.integers(0, 2**16), data=st.data())
def test_reduce_scatter_blocks_equal_the_naive_cut(k, runs, noise, seed, data):
    """``_blocks`` (by runs of chunks, or by bisection when there are many) cuts a chunk set into equal
    blocks in chunk order exactly as listing its chunks does."""
    from p2smt.semantics.pieces import _blocks

    rows = random.Random(seed).getrandbits(k) if noise else 0
    for a, b in runs:
        lo, hi = sorted((int(a * k), int(b * k)))
        rows |= ((1 << hi) - 1) ^ ((1 << lo) - 1)
    chunks = [i for i in range(k) if rows >> i & 1]
    m = data.draw(st.sampled_from([d for d in range(1, 33) if len(chunks) % d == 0]))
    size = len(chunks) // m
    assert _blocks.__wrapped__(rows, m) == tuple(sum(1 << i for i in chunks[j * size:(j + 1) * size])
                                                 for j in range(m))
