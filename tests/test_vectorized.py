"""The vectorized re-check (``semantics.vectorized``: numpy token arrays, states in each device's frame)
gives exactly the verdicts of ``pieces.check_programs``: the same status, failing step, group and rule,
on valid and invalid programs, with and without the hierarchy's level sizes."""

from __future__ import annotations

import random
from itertools import product
from math import prod

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_pieces_memo import _facts, _mix, _problem
from test_size_independence import COUNTEREXAMPLE, MERGED_LEVELS, _hier

from p2smt.errors import P2Error
from p2smt.model.dsl import problem
from p2smt.semantics import pieces, vectorized


def _assert_same(prob, programs, sizes):
    expected = [_facts(v) for v in pieces.check_programs(prob, programs)]
    assert [_facts(v) for v in vectorized.check_programs(prob, programs, sizes=sizes)] == expected
    assert [_facts(v) for v in vectorized.check_programs(prob, programs)] == expected
    return expected


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(2, 5), min_size=1, max_size=4).filter(lambda s: prod(s) <= 48),
    scope=st.sampled_from(["per-ancestor", "global"]),
    progress=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_same_verdicts_as_pieces_on_random_hierarchies(sizes, scope, progress, seed):
    """1–4 levels of sizes 2–5: the valid programs up to length 3, variants of them and random sequences."""
    prob = _problem(tuple(sizes), scope, progress)
    facts = _assert_same(prob, _mix(prob, random.Random(seed), 3), sizes)
    assert any(status == "proved" for _, status, *_ in facts)


@pytest.mark.parametrize(("sizes", "length"), [((2, 3), 3), ((3, 2), 3), ((2, 2, 2, 2), 2)])
def test_same_verdicts_on_every_sequence(sizes, length):
    """Every candidate sequence up to ``length`` (mostly invalid: every rule fails somewhere)."""
    prob = _problem(sizes, "per-ancestor", True)
    n = len(prob.candidates)
    programs = [p for size in range(1, length + 1) for p in product(range(n), repeat=size)]
    facts = _assert_same(prob, programs, sizes)
    rules = {rule for *_, rule in facts if rule is not None}
    assert {"goal", "progress", "AllReduce.same_chunks", "AllGather.disjoint_chunks", "Broadcast.below_root",
            "Broadcast.information_increase"} <= set(map(str, rules))


@pytest.mark.parametrize("progress", [True, False])
@pytest.mark.parametrize("sizes", [(2, 2, 2), (2, 3, 4), (2, 3, 5), (3, 2, 6), (4, 2, 2)])
def test_size_dependent_program(sizes, progress):
    """Theorem 2's P: valid iff s0 | s2, else Broadcast.below_root at step 6 (docs/symmetry.md)."""
    h = _hier(sizes)
    prob = problem(h, progress)
    index = {c.label: i for i, c in enumerate(prob.candidates)}
    program = [index[label] for label in COUNTEREXAMPLE]
    (verdict,) = vectorized.check_programs(prob, [program], sizes=h.sizes)
    assert (verdict.proved, verdict.step) == ((True, None) if sizes[2] % sizes[0] == 0 else (False, 6))
    _assert_same(prob, [program, program[:6], program[:3]], h.sizes)


@pytest.mark.parametrize("sizes", [(2, 2, 2, 4), (2, 2, 2, 2), (2, 2, 3, 4)])
def test_merged_level_program(sizes):
    """The 7-step program valid iff s0·s1 | s3: same verdict as pieces."""
    h = _hier(sizes)
    prob = problem(h, True)
    index = {c.label: i for i, c in enumerate(prob.candidates)}
    program = [index[label] for label in MERGED_LEVELS]
    facts = _assert_same(prob, [program], h.sizes)
    assert facts[0][1] == ("proved" if sizes[3] % (sizes[0] * sizes[1]) == 0 else "counterexample")


def test_bad_sizes_and_programs_are_refused():
    prob = _problem((2, 3), "per-ancestor", True)
    with pytest.raises(P2Error):
        vectorized.check_programs(prob, [[0]], sizes=(2, 2))
    with pytest.raises(P2Error):
        vectorized.check_programs(prob, [[len(prob.candidates)]])


def test_stored_states_of_small_integers_step_to_full_width_tokens():
    """States are stored in 16 bits when they fit; a step from one must not wrap new tokens past 65,535."""
    prob = _problem((2, 2), "per-ancestor", True)
    machine = vectorized._Machine(prob, (2, 2))
    store = vectorized._Store(prob.num_devices)
    start = store[store.id(machine.initial)]
    assert start[0].dtype == np.uint16
    machine.states.extend([((1, 1),)] * 70000)  # push the next new token past 2**16
    tokens, shifts = machine.step(start, 5)  # (l0, InsideGroup, AllReduce): new device states
    assert tokens.dtype == shifts.dtype == np.int32 and tokens.max() >= 1 << 16
