"""Synthesis hierarchies (a)–(d) of docs/semantics.md §2 and the groups of docs/semantics.md §3 on a hierarchy."""

from __future__ import annotations

import itertools
import random
from math import prod

import pytest

from p2smt.errors import P2Error
from p2smt.model.dsl import Form, instruction_groups
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement, matrices
from p2smt.model.system import load_system

FIG2 = (1, 2, 2, 4)
FIG2_NAMES = ("rack", "server", "cpu", "gpu")
EXAMPLE = ((1, 1, 2, 2), (1, 2, 1, 2))  # docs/semantics.md §2, reducing axis 1


def _sizes(h):
    return [s for _, s in h.levels]


@pytest.mark.parametrize(
    "kind, sizes",
    [
        ("a", [1, 2, 2, 4]),
        ("b", [1, 1, 1, 2, 2, 1, 2, 2]),
        ("c", [1, 1, 2, 2, 1, 2, 1, 2]),
        ("d", [1, 2, 1, 2]),
    ],
)
def test_p2_section2_example(hierarchy_of, kind, sizes):
    h = hierarchy_of(FIG2, (4, 4), EXAMPLE, (1,), FIG2_NAMES, kind)
    assert h.levels[0] == ("root", 1)
    assert _sizes(h)[1:] == sizes
    assert h.kind == kind


def test_p2_section2_names(hierarchy_of):
    d = hierarchy_of(FIG2, (4, 4), EXAMPLE, (1,), FIG2_NAMES, "d")
    assert d.names == ("root", *FIG2_NAMES)
    a = hierarchy_of(FIG2, (4, 4), EXAMPLE, (1,), FIG2_NAMES, "a")
    assert a.names == ("root", *FIG2_NAMES)
    assert a.replicas == (tuple(range(16)),)


def test_collapsing_two_reduction_rows(hierarchy_of):
    # rows [1,2,3] and [7,8,9] reduced together, with a non-reduced axis in between
    matrix = ((1, 2, 3), (2, 1, 1), (7, 8, 9))
    sizes = tuple(prod(r[j] for r in matrix) for j in range(3))
    axes = tuple(prod(r) for r in matrix)
    h = hierarchy_of(sizes, axes, matrix, (0, 2), ("a", "b", "c"), "d")
    assert _sizes(h) == [1, 7, 16, 27]
    assert h.num_devices == 7 * 16 * 27
    assert len(h.replicas) == 2
    assert h.goal_groups == (tuple(range(h.num_devices)),)


def test_unknown_kind(hierarchy_of):
    with pytest.raises(P2Error, match="kind"):
        hierarchy_of(FIG2, (4, 4), EXAMPLE, (1,), FIG2_NAMES, "e")


def _physical_coords(sizes, device):
    out = []
    for h in reversed(sizes):
        out.append(device % h)
        device //= h
    return tuple(reversed(out))


def _synth_coords(sizes, index):
    return _physical_coords(sizes, index)


REQUESTS = []
for _sizes_, _axes_ in [(FIG2, (4, 4)), (FIG2, (2, 2, 4)), ((4, 16), (8, 2, 4)), ((4, 8), (2, 2, 8)),
                        ((2, 3, 4), (6, 4))]:
    for _m in matrices(_sizes_, _axes_):
        for _r in range(1, len(_axes_) + 1):
            for _red in itertools.combinations(range(len(_axes_)), _r):
                REQUESTS.append((_sizes_, _axes_, _m, _red))


@pytest.mark.parametrize("sizes, axes, matrix, red", REQUESTS)
def test_hierarchy_d_replicas_cover_the_system(sizes, axes, matrix, red):
    p = Placement(sizes, axes, matrix)
    names = tuple(f"l{j}" for j in range(len(sizes)))
    h = synthesis_hierarchy(p, red, names, "d")
    k = h.num_devices
    assert _sizes(h)[1:] == [prod(matrix[i][j] for i in red) for j in range(len(sizes))]
    assert k == prod(axes[i] for i in red)
    assert len(h.replicas) * k == p.num_devices
    assert sorted(d for rep in h.replicas for d in rep) == list(range(p.num_devices))
    assert all(len(rep) == k for rep in h.replicas)
    assert h.goal_groups == (tuple(range(k)),)
    assert {tuple(sorted(rep)) for rep in h.replicas} == set(p.reduction_groups(red))
    keep = [i for i in range(len(axes)) if i not in red]
    for s in range(k):
        # one synthesis index = the same reduction-axis coordinates in every replica
        reds = {tuple(p.axis_coords(rep[s])[i] for i in red) for rep in h.replicas}
        assert len(reds) == 1
    for rep in h.replicas:
        assert len({tuple(p.axis_coords(d)[i] for i in keep) for d in rep}) == 1
        # same synthesis prefix down to level j <=> same physical node at level j (within a replica)
        for j in range(len(sizes)):
            pairs = {(_synth_coords(h.sizes, s)[: j + 2], _physical_coords(sizes, rep[s])[: j + 1])
                     for s in range(k)}
            synth_prefixes = {a for a, _ in pairs}
            phys_prefixes = {b for _, b in pairs}
            assert len(pairs) == len(synth_prefixes) == len(phys_prefixes)


@pytest.mark.parametrize("kind", ["a", "b", "c"])
@pytest.mark.parametrize("sizes, axes, matrix, red", REQUESTS[::3])
def test_hierarchies_abc_cover_the_system(sizes, axes, matrix, red, kind):
    p = Placement(sizes, axes, matrix)
    names = tuple(f"l{j}" for j in range(len(sizes)))
    h = synthesis_hierarchy(p, red, names, kind)
    assert h.num_devices == p.num_devices
    (rep,) = h.replicas
    assert sorted(rep) == list(range(p.num_devices))
    assert {tuple(sorted(rep[s] for s in g)) for g in h.goal_groups} == set(p.reduction_groups(red))
    if kind == "a":
        assert _sizes(h)[1:] == list(sizes)
        assert rep == tuple(range(p.num_devices))
    if kind == "b":
        assert _sizes(h)[1:] == [matrix[i][j] for j in range(len(sizes)) for i in range(len(axes))]
        assert rep == tuple(range(p.num_devices))
    if kind == "c":
        assert _sizes(h)[1:] == [matrix[i][j] for i in range(len(axes)) for j in range(len(sizes))]
        assert rep == p.mesh_order()


# ---------------------------------------------------------------- docs/semantics.md §3 table of groups

A, B, C, D = (tuple(range(b, b + 4)) for b in (0, 4, 8, 12))  # GPUs of CPUs A, B (server 0), C, D (server 1)


@pytest.fixture(scope="module", params=["d", "a"])
def fig2_full(request):
    system = load_system("fig2-16gpu")
    p = Placement(system.sizes, (16,), (system.sizes,))
    h = synthesis_hierarchy(p, (0,), system.level_names, request.param)
    assert h.replicas == (tuple(range(16)),)
    return h


SECTION3_TABLE = [
    ("cpu", Form("InsideGroup"), {A, B, C, D}),
    ("cpu", Form("Parallel", "server"),
     {(A[k], B[k]) for k in range(4)} | {(C[k], D[k]) for k in range(4)}),
    ("cpu", Form("Parallel", "rack"), {(A[k], B[k], C[k], D[k]) for k in range(4)}),
    ("cpu", Form("Master", "rack"), {(A[0], B[0], C[0], D[0])}),
    ("server", Form("InsideGroup"), {A + B, C + D}),
    ("server", Form("Parallel", "rack"),
     {(A[k], C[k]) for k in range(4)} | {(B[k], D[k]) for k in range(4)}),
    ("rack", Form("InsideGroup"), {tuple(range(16))}),
]


@pytest.mark.parametrize("slice_, form, expected", SECTION3_TABLE, ids=lambda v: str(v)[:20])
def test_p2_section3_groups(fig2_full, slice_, form, expected):
    groups = instruction_groups(fig2_full, (slice_, form))
    assert set(groups) == expected
    assert len(groups) == len(expected)


def test_section3_counts(fig2_full):
    counts = [len(instruction_groups(fig2_full, (s, f))) for s, f, _ in SECTION3_TABLE]
    assert counts == [4, 8, 4, 1, 2, 8, 1]


def test_master_global_scope():
    system = load_system("fig2-16gpu")
    p = Placement(system.sizes, (16,), (system.sizes,))
    per = synthesis_hierarchy(p, (0,), system.level_names, "d", "per-ancestor")
    glob = synthesis_hierarchy(p, (0,), system.level_names, "d", "global")
    assert instruction_groups(per, ("cpu", Form("Master", "server"))) == ((0, 4), (8, 12))
    assert instruction_groups(glob, ("cpu", Form("Master", "server"))) == ((0, 4),)
    assert instruction_groups(glob, ("cpu", Form("Master", "rack"))) == ((0, 4, 8, 12),)


def _oracle_partition(sizes, fixed):
    """Devices grouped by their coordinates on the ``fixed`` levels; groups of one are dropped."""
    buckets: dict[tuple[int, ...], list[int]] = {}
    for d in range(prod(sizes)):
        c = _physical_coords(sizes, d)
        buckets.setdefault(tuple(c[lv] for lv in fixed), []).append(d)
    return {tuple(g) for g in buckets.values() if len(g) > 1}


def _random_levels(seed: int) -> tuple[int, ...]:
    rng = random.Random(seed)
    return tuple(rng.choice([1, 2, 2, 3, 4]) for _ in range(rng.randint(2, 4)))


RANDOM_HIERARCHIES = [_random_levels(s) for s in range(16)]


@pytest.mark.parametrize("levels", RANDOM_HIERARCHIES, ids=str)
def test_group_size_and_count_formula(flat_hierarchy, levels):
    h = flat_hierarchy(levels)
    x = h.sizes  # root first: x[0] = 1
    n = len(x)
    names = h.names
    for i in range(n):
        inside = instruction_groups(h, (names[i], Form("InsideGroup")))
        size, count = prod(x[i + 1:]), prod(x[: i + 1])
        if size > 1:
            assert len(inside) == count and all(len(g) == size for g in inside)
        else:
            assert inside == ()
        assert set(inside) == _oracle_partition(x, range(i + 1))
        for j in range(i):
            size = prod(x[j + 1: i + 1])
            par = instruction_groups(h, (names[i], Form("Parallel", names[j])))
            mas = instruction_groups(h, (names[i], Form("Master", names[j])))
            if size < 2:
                assert par == () and mas == ()
                continue
            assert len(par) == prod(x[: j + 1]) * prod(x[i + 1:])
            assert all(len(g) == size for g in par)
            fixed = [lv for lv in range(n) if lv <= j or lv > i]
            assert set(par) == _oracle_partition(x, fixed)
            assert len(mas) == prod(x[: j + 1])
            assert set(mas) == {g for g in par if all(_physical_coords(x, d)[i + 1:] == (0,) * (n - i - 1)
                                                        for d in g)}
            for g in par:
                assert list(g) == sorted(g)


def test_bad_level_names(flat_hierarchy):
    h = flat_hierarchy((2, 4), ("node", "gpu"))
    with pytest.raises(P2Error, match="unknown slice"):
        instruction_groups(h, ("rack", Form("InsideGroup")))
    with pytest.raises(P2Error, match="unknown ancestor"):
        instruction_groups(h, ("gpu", Form("Parallel", "rack")))
    with pytest.raises(P2Error, match="strict ancestor"):
        instruction_groups(h, ("node", Form("Parallel", "gpu")))
    with pytest.raises(P2Error, match="strict ancestor"):
        instruction_groups(h, ("node", Form("Master", "node")))


def test_nontrivial_levels(hierarchy_of):
    assert hierarchy_of(FIG2, (4, 4), EXAMPLE, (1,)).nontrivial_levels == 2
    assert hierarchy_of(FIG2, (4, 4), ((1, 2, 2, 1), (1, 1, 1, 4)), (1,)).nontrivial_levels == 1
