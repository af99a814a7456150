"""Parallelism matrices (placements of axes on a hierarchy) and the device ↔ axis-coordinate map."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from math import prod

import numpy as np

from p2smt.errors import P2Error
from p2smt.model.collectives import Group
from p2smt.model.limits import MAX_DEVICES

Matrix = tuple[tuple[int, ...], ...]
"""``x[i][j]``: into how many parts axis ``i`` is split at level ``j`` (rows = axes, columns = levels)."""

def _prime_exponents(n: int) -> dict[int, int]:
    out: dict[int, int] = {}
    q = 2
    while q * q <= n:
        while n % q == 0:
            out[q] = out.get(q, 0) + 1
            n //= q
        q += 1
    if n > 1:
        out[n] = out.get(n, 0) + 1
    return out


MAX_PLACEMENTS = 100_000
"""Most parallelism matrices one request may have: counted as they are made (bounded time and memory)."""


def _too_many() -> P2Error:
    return P2Error(f"more than {MAX_PLACEMENTS:,} placements of these axes; split the devices into fewer axes")


def _exponent_tables(col_sums: list[int], row_sums: list[int]) -> list[tuple[tuple[int, ...], ...]]:
    """All non-negative integer matrices with the given column and row sums (contingency tables), at most
    ``MAX_PLACEMENTS`` of them (every branch of the search ends in a table, so the work follows the count)."""
    rows, cols = len(row_sums), len(col_sums)
    tables: list[tuple[tuple[int, ...], ...]] = []
    grid = [[0] * cols for _ in range(rows)]

    def fill_column(j: int, remaining: list[int]) -> None:
        if j == cols:
            if all(r == 0 for r in remaining):
                if len(tables) == MAX_PLACEMENTS:
                    raise _too_many()
                tables.append(tuple(tuple(r) for r in grid))
            return
        for split in _compositions(col_sums[j], remaining):
            for i in range(rows):
                grid[i][j] = split[i]
            fill_column(j + 1, [remaining[i] - split[i] for i in range(rows)])

    fill_column(0, list(row_sums))
    return tables


def _compositions(total: int, caps: list[int]) -> Iterator[tuple[int, ...]]:
    """Ways to write ``total`` as an ordered sum of len(caps) parts with part i <= caps[i]."""
    if sum(caps) < total:
        return
    if not caps:
        yield ()
        return
    for first in range(min(total, caps[0]) + 1):
        for rest in _compositions(total - first, caps[1:]):
            yield (first, *rest)


def matrices(sizes: tuple[int, ...] | list[int], axes: tuple[int, ...] | list[int]) -> list[Matrix]:
    """Every parallelism matrix of ``axes`` on hierarchy ``sizes``, sorted ascending (flattened).

    Factorisation-based: for each prime, the exponent matrix is a contingency table with the levels'
    exponents as column sums and the axes' exponents as row sums; a matrix is one table per prime.
    """
    sizes, axes = tuple(sizes), tuple(axes)
    if not axes:
        raise P2Error("at least one parallelism axis is needed")
    if any(a < 1 for a in axes):
        raise P2Error(f"axis sizes must be positive integers, got {list(axes)}")
    if any(s < 1 for s in sizes):
        raise P2Error(f"level sizes must be positive integers, got {list(sizes)}")
    if prod(axes) != prod(sizes):
        raise P2Error(
            f"axes {list(axes)} (product {prod(axes)}) do not factor onto hierarchy {list(sizes)} "
            f"(product {prod(sizes)} devices)"
        )
    level_exp = [_prime_exponents(s) for s in sizes]
    axis_exp = [_prime_exponents(a) for a in axes]
    primes = sorted({q for e in level_exp + axis_exp for q in e})
    per_prime = [
        _exponent_tables([e.get(q, 0) for e in level_exp], [e.get(q, 0) for e in axis_exp]) for q in primes
    ]
    if prod(len(t) for t in per_prime) > MAX_PLACEMENTS:
        raise _too_many()
    out = set()
    for choice in itertools.product(*per_prime):
        out.add(
            tuple(
                tuple(prod(q ** t[i][j] for q, t in zip(primes, choice)) for j in range(len(sizes)))
                for i in range(len(axes))
            )
        )
    return sorted(out, key=lambda m: tuple(v for row in m for v in row))


def parse_matrix(text: str) -> Matrix:
    """Parse ``[[1,4],[4,4]]`` (JSON-like) into a matrix."""
    import json

    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise P2Error(f"--matrix: not a JSON list of lists: {err.msg} at column {err.colno}") from None
    if not (isinstance(value, list) and value and all(isinstance(r, list) and r for r in value)):
        raise P2Error("--matrix must be a non-empty list of non-empty lists, e.g. [[1,4],[4,4]]")
    if not all(isinstance(v, int) and not isinstance(v, bool) for r in value for v in r):
        raise P2Error("--matrix entries must be integers")
    return tuple(tuple(r) for r in value)


def mixed_radix(digits: np.ndarray, radices: tuple[int, ...]) -> np.ndarray:
    """Mixed-radix numbers of digit columns (first column most significant)."""
    out = np.zeros(digits.shape[0], dtype=np.int64)
    for col, r in enumerate(radices):
        out = out * r + digits[:, col]
    return out


def split_radix(numbers: np.ndarray, radices: tuple[int, ...]) -> np.ndarray:
    """Digits of mixed-radix ``numbers`` (columns, first most significant)."""
    digits = np.zeros((numbers.shape[0], len(radices)), dtype=np.int64)
    rest = numbers.astype(np.int64)
    for col in range(len(radices) - 1, -1, -1):
        digits[:, col] = rest % radices[col]
        rest = rest // radices[col]
    return digits


@dataclass(frozen=True)
class Placement:
    """One parallelism matrix on a hierarchy, with the docs/semantics.md §1 device numbering."""

    sizes: tuple[int, ...]
    axes: tuple[int, ...]
    matrix: Matrix

    def __post_init__(self) -> None:
        m = self.matrix
        if len(m) != len(self.axes) or any(len(r) != len(self.sizes) for r in m):
            raise P2Error(
                f"matrix {[list(r) for r in m]} must have {len(self.axes)} rows (axes) and "
                f"{len(self.sizes)} columns (levels)"
            )
        if any(v < 1 for r in m for v in r):
            raise P2Error("matrix entries must be positive")
        for j, h in enumerate(self.sizes):
            if prod(r[j] for r in m) != h:
                raise P2Error(f"matrix column {j} multiplies to {prod(r[j] for r in m)}, not level size {h}")
        for i, p in enumerate(self.axes):
            if prod(m[i]) != p:
                raise P2Error(f"matrix row {i} multiplies to {prod(m[i])}, not axis size {p}")
        if self.num_devices > MAX_DEVICES:
            raise P2Error(f"{self.num_devices} devices is more than p2smt handles ({MAX_DEVICES})")

    @property
    def num_devices(self) -> int:
        return prod(self.sizes)

    @cached_property
    def digits(self) -> np.ndarray:
        """``digits[device, i, j]`` = d[i][j], the axis-i digit of the device's level-j coordinate."""
        n, m, levels = self.num_devices, len(self.axes), len(self.sizes)
        coords = split_radix(np.arange(n), self.sizes)
        out = np.zeros((n, m, levels), dtype=np.int64)
        for j in range(levels):
            out[:, :, j] = split_radix(coords[:, j], tuple(r[j] for r in self.matrix))
        return out

    @cached_property
    def coordinates(self) -> np.ndarray:
        """``coordinates[device, i]`` = the device's index on axis i."""
        cols = [mixed_radix(self.digits[:, i, :], self.matrix[i]) for i in range(len(self.axes))]
        return np.stack(cols, axis=1)

    def axis_coords(self, device: int) -> tuple[int, ...]:
        return tuple(int(v) for v in self.coordinates[device])

    def device(self, axis_coords: tuple[int, ...]) -> int:
        return int(self.mesh_order()[int(mixed_radix(np.array([axis_coords]), self.axes)[0])])

    @cached_property
    def _mesh_order(self) -> tuple[int, ...]:
        flat = mixed_radix(self.coordinates, self.axes)
        order = np.empty(self.num_devices, dtype=np.int64)
        order[flat] = np.arange(self.num_devices)
        return tuple(int(v) for v in order)

    def mesh_order(self) -> tuple[int, ...]:
        """order[row-major index over the axes] = physical id: ``devices[order].reshape(axes)``."""
        return self._mesh_order

    def check_axes(self, reduction_axes: tuple[int, ...]) -> tuple[int, ...]:
        """Validate and sort reduction axes (indices into ``axes``)."""
        if not reduction_axes:
            raise P2Error("at least one reduction axis is needed")
        for a in reduction_axes:
            if not 0 <= a < len(self.axes):
                raise P2Error(f"reduction axis {a} is out of range: axes are 0..{len(self.axes) - 1}")
        if len(set(reduction_axes)) != len(reduction_axes):
            raise P2Error(f"reduction axes repeat: {list(reduction_axes)}")
        return tuple(sorted(reduction_axes))

    def reduction_groups(self, reduction_axes: tuple[int, ...]) -> tuple[Group, ...]:
        """Devices equal on every non-reduction axis, each group ascending, groups by first member."""
        red = self.check_axes(reduction_axes)
        keep = [i for i in range(len(self.axes)) if i not in red]
        buckets: dict[tuple[int, ...], list[int]] = {}
        for dev in range(self.num_devices):
            buckets.setdefault(tuple(int(self.coordinates[dev, i]) for i in keep), []).append(dev)
        return tuple(sorted(tuple(b) for b in buckets.values()))
