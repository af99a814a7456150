"""Parallelism matrices and the device numbering of docs/semantics.md §1, against P²'s table and brute force."""

from __future__ import annotations

import itertools
import random
from math import prod

import numpy as np
import pytest

from p2smt.errors import P2Error
from p2smt.model.placement import Placement, matrices, parse_matrix

# docs/semantics.md §1: matrix counts of P²'s evaluation (hierarchy, axes, count).
TABLE = [
    ((2, 16), (2, 16), 2),
    ((4, 16), (4, 16), 3),
    ((4, 16), (8, 8), 3),
    ((4, 16), (16, 2, 2), 4),
    ((4, 16), (2, 2, 16), 4),
    ((4, 16), (8, 2, 4), 5),
    ((4, 16), (4, 2, 8), 5),
    ((4, 8), (8, 4), 3),
    ((4, 8), (2, 2, 8), 4),
    ((4, 8), (8, 2, 2), 4),
]

FIG2 = (1, 2, 2, 4)
FIG2_44 = [
    ((1, 2, 2, 1), (1, 1, 1, 4)),
    ((1, 2, 1, 2), (1, 1, 2, 2)),
    ((1, 1, 2, 2), (1, 2, 1, 2)),
    ((1, 1, 1, 4), (1, 2, 2, 1)),
]


def brute_force_matrices(sizes, axes):
    """Every integer matrix whose columns multiply to the levels and rows to the axes (test oracle)."""
    m = len(axes)
    columns = []
    for h in sizes:
        divisors = [d for d in range(1, h + 1) if h % d == 0]
        columns.append([c for c in itertools.product(divisors, repeat=m) if prod(c) == h])
    out = set()
    for cols in itertools.product(*columns):
        mat = tuple(tuple(col[i] for col in cols) for i in range(m))
        if all(prod(mat[i]) == axes[i] for i in range(m)):
            out.add(mat)
    return out


def p2_label(sizes, matrix, device):
    """docs/semantics.md §1's numbering written out digit by digit (independent of p2smt's numpy code)."""
    coords = []
    rest = device
    for h in reversed(sizes):
        coords.append(rest % h)
        rest //= h
    coords.reverse()
    digits = [[0] * len(sizes) for _ in matrix]
    for j, c in enumerate(coords):
        for i in reversed(range(len(matrix))):
            digits[i][j] = c % matrix[i][j]
            c //= matrix[i][j]
    labels = []
    for i, row in enumerate(matrix):
        v = 0
        for j in range(len(sizes)):
            v = v * row[j] + digits[i][j]
        labels.append(v)
    return tuple(labels)


@pytest.mark.parametrize("sizes, axes, count", TABLE)
def test_matrix_counts_of_p2_table(sizes, axes, count):
    found = matrices(sizes, axes)
    assert len(found) == count
    for m in found:
        assert all(prod(m[i]) == axes[i] for i in range(len(axes)))
        assert all(prod(r[j] for r in m) == sizes[j] for j in range(len(sizes)))


def test_fig2_four_matrices_exactly():
    found = matrices(FIG2, (4, 4))
    assert set(found) == set(FIG2_44)
    assert len(found) == 4
    assert found == sorted(found, key=lambda m: [v for r in m for v in r])


SMALL_CASES = [
    ((6,), (6,)),
    ((6,), (2, 3)),
    ((2, 3), (6,)),
    ((2, 3), (3, 2)),
    ((1, 2, 2, 4), (4, 4)),
    ((1, 2, 2, 4), (2, 2, 4)),
    ((1, 2, 2, 4), (16,)),
    ((4, 4), (2, 2, 2, 2)),
    ((2, 3, 4), (4, 6)),
    ((2, 3, 4), (2, 3, 4)),
    ((2, 3, 4), (12, 2)),
    ((5, 6), (10, 3)),
    ((3, 3, 4), (6, 6)),
    ((1, 12), (2, 2, 3)),
    ((12, 1), (1, 12)),
    ((8,), (2, 2, 2)),
    ((4, 16), (8, 2, 4)),
    ((4, 8), (2, 2, 8)),
    ((9, 4), (6, 6)),
]


@pytest.mark.parametrize("sizes, axes", SMALL_CASES)
def test_factorisation_agrees_with_brute_force(sizes, axes):
    found = matrices(sizes, axes)
    assert len(found) == len(set(found)), "duplicates"
    assert set(found) == brute_force_matrices(sizes, axes)


def test_factorisation_agrees_with_brute_force_random():
    rng = random.Random(20220)
    for _ in range(40):
        sizes = tuple(rng.choice([1, 2, 3, 4, 6, 8, 12]) for _ in range(rng.randint(1, 3)))
        n = prod(sizes)
        axes = []
        rest = n
        for _ in range(rng.randint(0, 2)):
            divs = [d for d in range(1, rest + 1) if rest % d == 0]
            d = rng.choice(divs)
            axes.append(d)
            rest //= d
        axes.append(rest)
        rng.shuffle(axes)
        assert set(matrices(sizes, axes)) == brute_force_matrices(sizes, tuple(axes)), (sizes, axes)


@pytest.mark.parametrize(
    "sizes, axes", [((4, 16), (3, 16)), ((4, 16), (4, 8)), ((2, 8), (32,)), ((1, 2, 2, 4), (5, 3))]
)
def test_non_factoring_axes_raise(sizes, axes):
    with pytest.raises(P2Error, match="do not factor"):
        matrices(sizes, axes)


@pytest.mark.parametrize("sizes, axes", [((4, 16), ()), ((4, 16), (0, 64)), ((0, 16), (0,)), ((4, 16), (-4, -16))])
def test_degenerate_requests_raise(sizes, axes):
    with pytest.raises(P2Error):
        matrices(sizes, axes)


def test_fig2_device_labels():
    p = Placement(FIG2, (4, 4), ((1, 2, 1, 2), (1, 1, 2, 2)))
    expected = {
        0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1),
        4: (0, 2), 5: (0, 3), 6: (1, 2), 7: (1, 3),
        8: (2, 0), 9: (2, 1), 10: (3, 0), 11: (3, 1),
    }
    assert {d: p.axis_coords(d) for d in range(12)} == expected


def _random_placements(seed: int, count: int):
    rng = random.Random(seed)
    cases = [((1, 2, 2, 4), (4, 4)), ((4, 16), (8, 2, 4)), ((2, 3, 4), (6, 4)), ((4, 8), (2, 2, 8)),
             ((2, 2, 2, 2), (4, 2, 2)), ((3, 4), (2, 6))]
    out = []
    for sizes, axes in cases:
        mats = matrices(sizes, axes)
        for m in rng.sample(mats, min(count, len(mats))):
            out.append(Placement(sizes, axes, m))
    return out


PLACEMENTS = _random_placements(7, 4)


@pytest.mark.parametrize("p", PLACEMENTS, ids=lambda p: f"{list(p.sizes)}-{[list(r) for r in p.matrix]}")
def test_numbering_matches_the_p2_formula(p):
    for d in range(p.num_devices):
        assert p.axis_coords(d) == p2_label(p.sizes, p.matrix, d)


@pytest.mark.parametrize("p", PLACEMENTS, ids=lambda p: f"{list(p.sizes)}-{[list(r) for r in p.matrix]}")
def test_mesh_order_round_trips(p):
    n = p.num_devices
    order = p.mesh_order()
    assert sorted(order) == list(range(n))
    coords = {p.axis_coords(d) for d in range(n)}
    assert coords == set(itertools.product(*(range(a) for a in p.axes)))
    mesh = np.arange(n)[list(order)].reshape(p.axes)
    for d in range(n):
        c = p.axis_coords(d)
        assert p.device(c) == d
        assert mesh[c] == d
        assert order[int(np.ravel_multi_index(c, p.axes))] == d


@pytest.mark.parametrize("p", PLACEMENTS, ids=lambda p: f"{list(p.sizes)}-{[list(r) for r in p.matrix]}")
def test_reduction_groups_partition_devices(p):
    m = len(p.axes)
    for r in range(1, m + 1):
        for red in itertools.combinations(range(m), r):
            groups = p.reduction_groups(red)
            members = [d for g in groups for d in g]
            assert sorted(members) == list(range(p.num_devices))
            size = prod(p.axes[i] for i in red)
            assert all(len(g) == size for g in groups)
            keep = [i for i in range(m) if i not in red]
            for g in groups:
                assert list(g) == sorted(g)
                cs = [p.axis_coords(d) for d in g]
                assert len({tuple(c[i] for i in keep) for c in cs}) == 1
                assert len({tuple(c[i] for i in red) for c in cs}) == size
            assert list(groups) == sorted(groups)


def test_fig2_reduction_groups():
    p = Placement(FIG2, (4, 4), ((1, 2, 1, 2), (1, 1, 2, 2)))
    # shard axis reduced: devices with the same data index, e.g. data 0 = GPUs 0,1,4,5
    groups = p.reduction_groups((1,))
    assert groups[0] == (0, 1, 4, 5)
    assert (8, 9, 12, 13) in groups
    assert p.reduction_groups((0,))[0] == (0, 2, 8, 10)


@pytest.mark.parametrize("red, msg", [((2,), "out of range"), ((-1,), "out of range"), ((0, 0), "repeat"),
                                      ((), "at least one")])
def test_bad_reduction_axes(red, msg):
    p = Placement(FIG2, (4, 4), FIG2_44[0])
    with pytest.raises(P2Error, match=msg):
        p.reduction_groups(red)


@pytest.mark.parametrize(
    "matrix, msg",
    [
        (((1, 2, 2, 4),), "rows"),
        (((1, 2, 2), (1, 1, 1)), "columns"),
        (((1, 2, 2, 2), (1, 1, 1, 2)), "row"),
        (((1, 4, 1, 1), (1, 1, 4, 4)), "column"),
        (((1, 2, 2, 4), (1, 1, 1, 1)), "row 0"),
    ],
)
def test_placement_rejects_inconsistent_matrices(matrix, msg):
    with pytest.raises(P2Error, match=msg):
        Placement(FIG2, (4, 4), matrix)


def test_parse_matrix():
    assert parse_matrix("[[1,4],[4,4]]") == ((1, 4), (4, 4))
    for bad in ("[[1,4],[4,4]", "[]", "[[1.5,4]]", "[1,4]", "[[true,4]]"):
        with pytest.raises(P2Error):
            parse_matrix(bad)
