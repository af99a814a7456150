"""P²'s evaluation grid (P2.md §7) as data: systems × axes × reduction requests × NCCL algorithms.

Reading of "3-axis cases reduce axes 0 and 2": one joint request over {0, 2}. It is the reading that
gives exactly P²'s 200 (matrix, reduction, algorithm) units and its largest request of 235 programs
(5 matrices × 47 under the ``p2-47`` pruning); reducing 0 and 2 separately would give 244 units.
"""

from __future__ import annotations

from dataclasses import dataclass

PAPER_AXES: dict[str, tuple[tuple[int, ...], ...]] = {
    "a100-2x16": ((32,), (2, 16), (4, 8), (8, 4), (16, 2)),
    "a100-4x16": (
        (64,), (2, 32), (4, 16), (8, 8), (16, 4), (32, 2), (16, 2, 2), (8, 2, 4), (4, 2, 8), (2, 2, 16),
    ),
    "v100-2x8": ((16,), (2, 8), (4, 4), (8, 2)),
    "v100-4x8": ((32,), (2, 16), (4, 8), (8, 4), (16, 2), (2, 2, 8), (8, 2, 2)),
}


@dataclass(frozen=True)
class GridConfig:
    """One synthesis request of the grid and the NCCL algorithms it is evaluated with."""

    system: str
    axes: tuple[int, ...]
    reduction_axes: tuple[int, ...]
    algorithms: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.system} axes {list(self.axes)} reduce {list(self.reduction_axes)}"


def paper_requests(axes: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Axis 0 for one axis; axis 0 and, separately, axis 1 for two; axes {0, 2} jointly for three."""
    if len(axes) == 1:
        return ((0,),)
    if len(axes) == 2:
        return ((0,), (1,))
    return ((0, 2),)


def paper_grid() -> list[GridConfig]:
    """Every configuration of P2.md §7 in table order (3-axis V100 cases: Ring only)."""
    out = []
    for system, axes_list in PAPER_AXES.items():
        for axes in axes_list:
            algos = ("ring",) if system.startswith("v100") and len(axes) == 3 else ("ring", "tree")
            out.extend(GridConfig(system, axes, red, algos) for red in paper_requests(axes))
    return out
