"""P²'s enumerative search (docs/semantics.md §5) against the interpreter and a test-side brute force."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from p2smt.model.dsl import problem
from p2smt.model.system import load_system
from p2smt.semantics.dense import execute
from p2smt.synth.enumerative import enumerate_programs

ONE_LEVEL = {
    "(root, InsideGroup, AllReduce)",
    "(root, InsideGroup, ReduceScatter); (root, InsideGroup, AllGather)",
    "(root, InsideGroup, Reduce); (root, InsideGroup, Broadcast)",
}
WELL_KNOWN = [
    "(root, InsideGroup, AllReduce)",
    "(node, InsideGroup, AllReduce); (node, Parallel(root), AllReduce)",
    "(node, InsideGroup, Reduce); (node, Master(root), AllReduce); (node, InsideGroup, Broadcast)",
    "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); (node, InsideGroup, AllGather)",
]
RS_AR_AG = WELL_KNOWN[3]


def texts(h, max_len=5, require_progress=True):
    prob = problem(h, require_progress)
    return [prob.label(p) for p in enumerate_programs(prob, max_len)]


def collectives_of(text: str) -> tuple[str, ...]:
    return tuple(ins.strip(" ()").split(",")[-1].strip() for ins in text.split(";"))


def is_valid(prob, program) -> bool:
    steps = [(prob.candidates[i].collective, prob.candidates[i].groups) for i in program]
    return execute(prob.num_devices, steps, prob.goal_groups, prob.require_progress).valid


# ---------------------------------------------------------------- one non-trivial level: 3 programs


@pytest.mark.parametrize("k", range(2, 9))
def test_one_level_three_programs(flat_hierarchy, k):
    found = texts(flat_hierarchy((k,), ("gpu",)))
    assert set(found) == ONE_LEVEL
    assert len(found) == 3
    assert found[0] == "(root, InsideGroup, AllReduce)"  # canonical order: shortest first


ONE_NONTRIVIAL = [
    ("fig2-16gpu", (4, 4), ((1, 2, 2, 1), (1, 1, 1, 4)), (1,)),
    ("fig2-16gpu", (4, 4), ((1, 1, 1, 4), (1, 2, 2, 1)), (0,)),
    ("fig2-16gpu", (2, 8), ((1, 2, 1, 1), (1, 1, 2, 4)), (0,)),
    ("a100-4x16", (4, 16), ((1, 4), (4, 4)), (0,)),
    ("a100-4x16", (4, 16), ((4, 1), (1, 16)), (0,)),
    ("a100-4x16", (4, 16), ((4, 1), (1, 16)), (1,)),
    ("v100-4x8", (2, 2, 8), ((2, 1), (2, 1), (1, 8)), (0, 1)),
]


@pytest.mark.parametrize("system_name, axes, matrix, red", ONE_NONTRIVIAL)
def test_one_nontrivial_collapsed_level_gives_three(hierarchy_of, system_name, axes, matrix, red):
    system = load_system(system_name)
    h = hierarchy_of(system.sizes, axes, matrix, red, system.level_names)
    assert h.nontrivial_levels == 1
    found = texts(h)
    assert set(found) == ONE_LEVEL


# ---------------------------------------------------------------- two non-trivial levels: 93 programs


@pytest.fixture(scope="module")
def reference_two_level(request):
    from p2smt.model.hierarchy import synthesis_hierarchy
    from p2smt.model.placement import Placement

    h = synthesis_hierarchy(Placement((2, 2), (4,), ((2, 2),)), (0,), ("node", "gpu"))
    return texts(h)


def test_two_level_reference(reference_two_level):
    assert len(reference_two_level) == 93
    assert len(set(reference_two_level)) == 93
    for known in WELL_KNOWN:
        assert known in reference_two_level
    assert set(ONE_LEVEL) <= set(reference_two_level)
    assert max(len(t.split(";")) for t in reference_two_level) <= 5


@pytest.mark.parametrize("a, b", list(itertools.product(range(2, 9), repeat=2)))
def test_two_level_set_independent_of_sizes(flat_hierarchy, reference_two_level, a, b):
    found = texts(flat_hierarchy((a, b), ("node", "gpu")))
    assert found == reference_two_level


TWO_NONTRIVIAL = [
    ("fig2-16gpu", (4, 4), ((1, 1, 2, 2), (1, 2, 1, 2)), (1,)),
    ("fig2-16gpu", (4, 4), ((1, 2, 1, 2), (1, 1, 2, 2)), (0,)),
    ("fig2-16gpu", (2, 2, 4), ((1, 2, 1, 1), (1, 1, 2, 1), (1, 1, 1, 4)), (0, 2)),
]


@pytest.mark.parametrize("system_name, axes, matrix, red", TWO_NONTRIVIAL)
def test_two_nontrivial_levels_apart_give_93(hierarchy_of, reference_two_level, system_name, axes, matrix, red):
    system = load_system(system_name)
    h = hierarchy_of(system.sizes, axes, matrix, red, system.level_names)
    assert h.nontrivial_levels == 2
    found = texts(h)
    assert len(found) == 93
    assert Counter(map(collectives_of, found)) == Counter(map(collectives_of, reference_two_level))


# ---------------------------------------------------------------- length limits


def test_max_len_one_is_allreduce_only(flat_hierarchy):
    assert texts(flat_hierarchy((4, 4), ("node", "gpu")), max_len=1) == ["(root, InsideGroup, AllReduce)"]
    assert texts(flat_hierarchy((8,), ("gpu",)), max_len=1) == ["(root, InsideGroup, AllReduce)"]


def test_max_len_zero_is_empty(flat_hierarchy):
    assert texts(flat_hierarchy((2, 2), ("node", "gpu")), max_len=0) == []


def test_rs_ar_ag_needs_length_three(flat_hierarchy):
    h = flat_hierarchy((4, 4), ("node", "gpu"))
    assert RS_AR_AG not in texts(h, max_len=2)
    assert RS_AR_AG in texts(h, max_len=3)


def test_shorter_limits_are_prefixes_of_the_full_set(flat_hierarchy, reference_two_level):
    h = flat_hierarchy((2, 2), ("node", "gpu"))
    for n in range(1, 5):
        limited = texts(h, max_len=n)
        assert limited == [t for t in reference_two_level if len(t.split(";")) <= n]
    assert texts(h, max_len=5) == texts(h, max_len=7)


def test_deterministic(flat_hierarchy):
    h = flat_hierarchy((2, 4), ("node", "gpu"))
    assert texts(h) == texts(h)


# ---------------------------------------------------------------- against the interpreter and brute force


@pytest.mark.parametrize("levels", [(6,), (2, 2), (3, 2), (2, 4), (2, 2, 2)])
def test_every_returned_program_is_valid(flat_hierarchy, levels):
    prob = problem(flat_hierarchy(levels))
    found = enumerate_programs(prob, 5 if len(levels) < 3 else 3)
    assert found
    for program in found:
        assert is_valid(prob, program), prob.label(program)


def brute_force(prob, max_len):
    """Every candidate sequence of length ≤ max_len that the interpreter accepts (test oracle).

    Sequences whose prefix already violates a precondition are skipped: the interpreter runs steps
    in order and stops at the first violation, so every extension fails identically. Prefixes that
    reach the goal are still extended.
    """
    n = len(prob.candidates)
    valid, frontier = [], [()]
    for _ in range(max_len):
        extended = []
        for prefix in frontier:
            for c in range(n):
                p = (*prefix, c)
                steps = [(prob.candidates[i].collective, prob.candidates[i].groups) for i in p]
                run = execute(prob.num_devices, steps, prob.goal_groups, prob.require_progress)
                if run.violation is None:
                    extended.append(p)
                    if run.reached_goal:
                        valid.append(p)
        frontier = extended
    return sorted(valid, key=lambda p: (len(p), p))


@pytest.mark.parametrize(
    "levels, max_len, require_progress",
    [((5,), 5, True), ((4,), 5, False), ((2, 2), 4, True), ((3, 2), 3, True), ((2, 3), 3, False),
     ((2, 2, 2), 2, True)],
)
def test_enumeration_equals_brute_force(flat_hierarchy, levels, max_len, require_progress):
    prob = problem(flat_hierarchy(levels), require_progress)
    expected = brute_force(prob, max_len)
    assert expected
    assert enumerate_programs(prob, max_len) == expected
