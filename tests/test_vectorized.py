"""The vectorized re-check (``semantics.vectorized``: numpy token arrays, states in each device's frame)
gives exactly the verdicts of ``pieces.check_programs``: the same status, failing step, group and rule,
on valid and invalid programs, with and without the hierarchy's level sizes."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
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
from p2smt.semantics import arrays, pieces, vectorized


def _mixed(prob, seed: int, max_len: int) -> list[tuple[int, ...]]:
    """``_mix`` up to ``max_len`` steps, then 300 random programs of 1–5 steps."""
    rng = random.Random(seed)
    n = len(prob.candidates)
    return _mix(prob, rng, max_len) + [tuple(rng.randrange(n) for _ in range(rng.randint(1, 5))) for _ in range(300)]


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


def _spy(monkeypatch, name: str) -> Counter:
    """Counts what ``_Machine.<name>`` returns (None, a rule, or "ok") by collective."""
    seen: Counter = Counter()
    original = getattr(vectorized._Machine, name)

    def spy(self, coll, *args):
        out = original(self, coll, *args)
        seen[coll.value, "none" if out is None else out if isinstance(out, str) else "ok"] += 1
        return out

    monkeypatch.setattr(vectorized._Machine, name, spy)
    return seen


@pytest.mark.parametrize("progress", [True, False])
@pytest.mark.parametrize("sizes", [(2, 2, 3), pytest.param((2, 2, 2, 2), marks=pytest.mark.slow)])
def test_large_groups_by_structure(monkeypatch, sizes, progress):
    """Groups of more than LARGE_MEMBERS members are decided on their structure (``_Machine._large``); with
    the bound at 1 every group of 2 or more goes that way: the verdicts of pieces, its failures included."""
    monkeypatch.setattr(vectorized, "LARGE_MEMBERS", 1)
    seen = _spy(monkeypatch, "_large")
    prob = _problem(sizes, "per-ancestor", progress)
    rng = random.Random(len(sizes))
    n = len(prob.candidates)
    programs = _mix(prob, rng, 3) + [tuple(rng.randrange(n) for _ in range(rng.randint(2, 6))) for _ in range(700)]
    _assert_same(prob, programs, sizes)
    assert {(c, out) for c in ("AllReduce", "Reduce", "ReduceScatter") for out in
            ("ok", f"{c}.same_chunks", f"{c}.disjoint", "none")} <= set(seen)
    assert {("AllGather", "ok"), ("AllGather", "AllGather.disjoint_chunks"), ("AllGather", "none")} <= set(seen)


def test_large_gather_of_several_contributions(monkeypatch):
    """An AllGather of members whose contributions differ makes a state of several pieces (``_gathered``);
    with at most one class of contributions allowed, the rest go the general way: the same verdicts."""
    monkeypatch.setattr(vectorized, "LARGE_MEMBERS", 1)
    prob = _problem((2, 3), "per-ancestor", True)
    programs = list(product(range(len(prob.candidates)), repeat=3))
    classes: Counter = Counter()
    original = vectorized._Machine._gathered

    def spy(self, *args):
        out = original(self, *args)
        classes[None if out is None else len(out)] += 1
        return out

    monkeypatch.setattr(vectorized._Machine, "_gathered", spy)
    _assert_same(prob, programs, (2, 3))
    assert classes[1] and classes[2]
    monkeypatch.setattr(vectorized, "GATHER_CLASSES", 1)
    classes.clear()
    _assert_same(prob, programs, (2, 3))
    assert classes[None]


@pytest.mark.parametrize("sizes", [(2, 3, 2), (4, 2, 2, 2)])
def test_broadcast_member_by_member(monkeypatch, sizes):
    """Broadcast blocks are decided pair by pair (``_Machine._broadcast``): its first failing group and rule
    (below the root, no information increase) are those of pieces, with and without progress."""
    for progress in (True, False):
        prob = _problem(sizes, "global", progress)
        rng = random.Random(7)
        n = len(prob.candidates)
        programs = [tuple(rng.randrange(n) for _ in range(rng.randint(1, 5))) for _ in range(1500)]
        facts = _assert_same(prob, programs, sizes)
        rules = Counter(str(rule) for *_, rule in facts)
        assert rules["Broadcast.below_root"] and rules["Broadcast.information_increase"]



@pytest.mark.parametrize("goal", [((0, 1, 2), (3, 4, 5), (6, 7, 8), (9, 10, 11)), ((0, 3), (1, 4), (2, 5), (6, 9),
                                                                                   (7, 10), (8, 11))])
def test_several_goal_groups(goal):
    """Goals of several groups (each device's goal in its own frame): the verdicts of pieces, some proved."""
    prob = replace(_problem((2, 2, 3), "per-ancestor", True), goal_groups=goal)
    rng = random.Random(3)
    facts = _assert_same(prob, _mix(prob, rng, 3), (2, 2, 3))
    assert any(status == "proved" for _, status, *_ in facts)


@pytest.mark.parametrize("sizes", [(2, 3, 2), pytest.param((2, 2, 2, 2), marks=pytest.mark.slow)])
def test_repeating_states_step_one_run(monkeypatch, sizes):
    """An instruction whose groups repeat run by run, on a state that repeats with the same period, is
    stepped on the first run and repeated (``_Repeat``): the verdicts of pieces, their failing groups (the
    first copy of the first failing group) included, and the path taken."""
    taken: Counter = Counter()
    original = vectorized._Machine._apply

    def spy(self, blocks, coll, tokens, *args):
        taken[len(tokens) < self.k] += 1
        return original(self, blocks, coll, tokens, *args)

    monkeypatch.setattr(vectorized._Machine, "_apply", spy)
    prob = _problem(sizes, "global", True)
    programs = _mixed(prob, 11, 3)
    facts = _assert_same(prob, programs, sizes)
    assert taken[True] and taken[False]
    assert any(group is not None and min(group) >= sizes[-1] for _, _, _, group, _ in facts)


@pytest.mark.parametrize("columns", [False, True])
@pytest.mark.parametrize("scope", ["global", "per-ancestor"])
@pytest.mark.parametrize("sizes", [(2, 3, 2), pytest.param((3, 2, 2), marks=pytest.mark.slow),
                                   pytest.param((2, 2, 2, 2), marks=pytest.mark.slow)])
def test_runs_that_differ_by_a_chunk_shift_step_one_run(monkeypatch, sizes, scope, columns):
    """A state whose tokens repeat run by run, or are constant in each run (``columns``), while its chunk
    shifts rise by one number per run or per column (after a ReduceScatter across them; free states, whose
    shifts do not, among them) is stepped on the first run or column and lifted (``_lift``): pieces'
    verdicts, on steps that pass and that fail there."""
    taken: Counter = Counter()
    lift, apply = vectorized._Machine._lift, vectorized._Machine._apply
    lifted: list[bool] = []

    def spy_lift(self, tokens, shifts, rep):
        out = lift(self, tokens, shifts, rep)
        lifted.append(out is not False and rep.columns == columns)
        taken["with free states"] += lifted[-1] and bool(self._free(rep.part(tokens)).any())
        return out

    def spy_apply(self, *args):
        failure = apply(self, *args)
        if lifted and lifted.pop():
            taken["failed" if failure else "passed"] += 1
        return failure

    monkeypatch.setattr(vectorized._Machine, "_lift", spy_lift)
    monkeypatch.setattr(vectorized._Machine, "_apply", spy_apply)
    prob = _problem(sizes, scope, True)
    programs = _mixed(prob, 11, 4)
    _assert_same(prob, programs, sizes)
    assert taken["passed"] and taken["failed"] and taken["with free states"]


@pytest.mark.parametrize("sizes", [(2, 3, 2), pytest.param((2, 2, 2, 2), marks=pytest.mark.slow)])
def test_states_constant_in_each_run_step_one_column(monkeypatch, sizes):
    """An instruction whose groups repeat column by column, on a state constant in each run, is stepped on
    the first column and spread (``_Repeat`` with ``columns``): pieces' verdicts, their failing groups included."""
    taken: Counter = Counter()
    original = vectorized._Machine._apply

    def spy(self, blocks, coll, tokens, *args):
        failure = original(self, blocks, coll, tokens, *args)
        if any(blocks is r.blocks for _, _, reps in self.shaped.values() for r in reps if r.columns):
            taken["failed" if failure else "passed"] += 1
        return failure

    monkeypatch.setattr(vectorized._Machine, "_apply", spy)
    prob = _problem(sizes, "per-ancestor", True)
    programs = _mixed(prob, 5, 3)
    _assert_same(prob, programs, sizes)
    assert taken["passed"] and taken["failed"]


@pytest.mark.parametrize("few", [1, 2, 8, 1000])
def test_distinct_values_by_comparisons_or_sorting(monkeypatch, few):
    """``arrays.classes`` finds up to FEW_CLASSES values by comparisons, more by sorting: either way each entry's
    class holds its value, the classes are distinct and each one's first entry is its first occurrence; and
    the verdicts stay those of pieces."""
    monkeypatch.setattr(arrays, "FEW_CLASSES", few)
    rng = np.random.default_rng(few)
    for n, spread in [(1, 1), (7, 1), (50, 3), (200, 40)]:
        values = rng.integers(0, spread, size=n) * 7919
        first, inverse = arrays.classes(values)
        assert (values[first][inverse] == values).all() and len(set(values[first].tolist())) == len(first)
        assert all(int(np.flatnonzero(values == values[f])[0]) == f for f in first.tolist())
    prob = _problem((2, 3), "per-ancestor", True)
    n = len(prob.candidates)
    _assert_same(prob, [p for size in (1, 2) for p in product(range(n), repeat=size)], (2, 3))


def test_store_tells_states_apart_when_keys_collide():
    """``_Store`` interns states by a sample of their devices, checked exactly: with the sample one device
    that all the states share, distinct states still get distinct ids and equal ones (in any integer width)
    the same id."""
    store = vectorized._Store(4)
    store.sample = np.array([1])
    a = (np.array([0, 1, 2, 3], np.int32), np.zeros(4, np.int32))
    b = (np.array([0, 1, 2, 3], np.int32), np.array([0, 0, 1, 0], np.int32))
    c = (np.array([70000, 1, 2, 3], np.int32), np.zeros(4, np.int32))
    ids = [store.id(s) for s in (a, b, c)]
    assert ids == [0, 1, 2]
    assert [store.id(store[i]) for i in ids] == ids and store.id((a[0].astype(np.uint16), a[1])) == 0
    assert store[2][0].dtype == np.int32 and store[2][0][0] == 70000 and store[0][0].dtype == np.uint16


def test_rows_told_apart_exactly_when_every_hash_collides(monkeypatch):
    """Groups' rows are classed by a hash summed over their parts (frame, tokens, shifts) and checked exactly:
    with every hash equal, the exact fallback still gives the verdicts of pieces."""
    monkeypatch.setattr(arrays, "MIX", np.zeros_like(arrays.MIX))
    keys = np.array([[1, 2], [1, 3], [1, 2]])
    first, inverse = arrays.distinct_parts([keys[:, :1], keys[:, 1:]])
    assert (keys[first][inverse] == keys).all() and len(first) == 2
    prob = _problem((2, 2, 2), "per-ancestor", True)
    n = len(prob.candidates)
    _assert_same(prob, [p for size in (1, 2) for p in product(range(n), repeat=size)], (2, 2, 2))
