"""Named prunings (p2smt.synth.pruning): P²'s 3 and 47, the complete set under "none", and each rule's count."""

from __future__ import annotations

import itertools
from functools import cache

import pytest

from p2smt.errors import P2Error
from p2smt.model.dsl import problem
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement
from p2smt.synth.enumerative import enumerate_programs
from p2smt.synth.pruning import PRUNINGS, apply_pruning, get_pruning, pruning_names

SIZES = range(2, 7)
TWO_LEVEL_COUNTS = {
    "none": 93,
    "p2-47": 47,
    "no-redundant-step": 75,
    "commute-canonical": 83,
    "strict-broadcast": 61,
    "no-split-allreduce": 37,
}
WELL_KNOWN = [
    "(root, InsideGroup, AllReduce)",
    "(node, InsideGroup, AllReduce); (node, Parallel(root), AllReduce)",
    "(node, InsideGroup, Reduce); (node, Master(root), AllReduce); (node, InsideGroup, Broadcast)",
    "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); (node, InsideGroup, AllGather)",
]
TREE = (
    "(node, InsideGroup, Reduce); (node, Master(root), Reduce); (node, Master(root), Broadcast); "
    "(node, InsideGroup, Broadcast)"
)


@cache
def complete(sizes: tuple[int, ...], master_scope: str = "per-ancestor"):
    """(problem, complete program list) for root + ``sizes`` fully reduced."""
    n = 1
    for s in sizes:
        n *= s
    names = ("node", "gpu") if len(sizes) == 2 else ("gpu",)
    h = synthesis_hierarchy(Placement(sizes, (n,), (sizes,)), (0,), names, "d", master_scope)
    prob = problem(h)
    return prob, enumerate_programs(prob, 5)


def labels(prob, programs) -> list[str]:
    return [prob.label(p) for p in programs]


def test_registry_default_first_and_described():
    assert pruning_names()[0] == "none"
    assert set(pruning_names()) == set(TWO_LEVEL_COUNTS)
    assert all(p.description and p.name == name for name, p in PRUNINGS.items())


@pytest.mark.parametrize("sizes", [(n, g) for n in SIZES for g in SIZES] + [(k,) for k in SIZES])
def test_none_keeps_complete_set(sizes):
    prob, programs = complete(sizes)
    assert apply_pruning("none", prob, programs) == programs


@pytest.mark.parametrize("n,g", [(n, g) for n in SIZES for g in SIZES])
def test_two_level_counts(n, g):
    prob, programs = complete((n, g))
    for name, expected in TWO_LEVEL_COUNTS.items():
        kept = apply_pruning(name, prob, programs)
        assert len(kept) == expected, name
        assert kept == [p for p in programs if p in set(kept)], f"{name} must keep the given order"


@pytest.mark.parametrize("k", SIZES)
def test_one_level_keeps_three(k):
    prob, programs = complete((k,))
    assert len(programs) == 3
    for name in pruning_names():
        assert apply_pruning(name, prob, programs) == programs, name


def test_p2_47_same_programs_at_every_size():
    reference = None
    for n, g in itertools.product(SIZES, SIZES):
        prob, programs = complete((n, g))
        kept = labels(prob, apply_pruning("p2-47", prob, programs))
        reference = reference or kept
        assert kept == reference, (n, g)


def test_p2_47_drops_exactly_master_steps_other_than_allreduce():
    prob, programs = complete((2, 4))
    kept = set(labels(prob, apply_pruning("p2-47", prob, programs)))
    for text in labels(prob, programs):
        steps = [s.strip() for s in text.split(";")]
        bad = any("Master(" in s and not s.endswith("AllReduce)") for s in steps)
        assert (text not in kept) == bad, text
    assert set(WELL_KNOWN) <= kept
    assert TREE in labels(prob, programs) and TREE not in kept


def test_p2_47_under_global_master_scope_is_not_47():
    prob, programs = complete((2, 3), "global")
    assert len(programs) == 225
    assert len(apply_pruning("p2-47", prob, programs)) == 55


def test_combination_is_intersection():
    prob, programs = complete((3, 2))
    both = apply_pruning("p2-47+commute-canonical", prob, programs)
    a = set(apply_pruning("p2-47", prob, programs))
    b = set(apply_pruning("commute-canonical", prob, programs))
    assert both == [p for p in programs if p in a & b]
    assert len(both) == 39
    assert get_pruning("p2-47+commute-canonical").name == "p2-47+commute-canonical"


def test_commute_canonical_keeps_one_order_of_two_allreduces():
    prob, programs = complete((2, 2))
    kept = labels(prob, apply_pruning("commute-canonical", prob, programs))
    assert "(node, InsideGroup, AllReduce); (node, Parallel(root), AllReduce)" in kept
    assert "(node, Parallel(root), AllReduce); (node, InsideGroup, AllReduce)" not in kept


@pytest.mark.parametrize("name", ["nope", "p2-47+", "", "P2-47"])
def test_unknown_name_lists_known(name):
    prob, programs = complete((2, 2))
    with pytest.raises(P2Error, match="known: none, p2-47"):
        apply_pruning(name, prob, programs)


def test_bad_programs_rejected():
    prob, programs = complete((2, 2))
    with pytest.raises(P2Error, match="outside"):
        apply_pruning("none", prob, [(len(prob.candidates),)])
    invalid = (programs[-1][0],)  # a first step alone never reaches the goal
    with pytest.raises(P2Error, match="invalid program"):
        apply_pruning("strict-broadcast", prob, [invalid])
