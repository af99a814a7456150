"""P²'s evaluation grid as synthesis requests, read from the shipped grid file ``grids/paper.yaml``.

Reading of "3-axis cases reduce axes 0 and 2": one joint request over {0, 2}. It is the reading that
gives exactly P²'s 200 (matrix, reduction, algorithm) units and its largest request of 235 programs
(5 matrices × 47 under the ``p2-47`` pruning); reducing 0 and 2 separately would give 244 units.
"""

from __future__ import annotations

from dataclasses import dataclass

PAPER = "paper"
"""The shipped grid file of P²'s evaluation."""


@dataclass(frozen=True)
class GridConfig:
    """One synthesis request of a grid and the NCCL algorithms it is evaluated with."""

    system: str
    axes: tuple[int, ...]
    reduction_axes: tuple[int, ...]
    algorithms: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.system} axes {list(self.axes)} reduce {list(self.reduction_axes)}"


def grid_configs(grid) -> list[GridConfig]:
    """The runnable requests of a grid in task order, each with its algorithms (skipped tasks left out)."""
    from p2smt.runs.tasks import expand

    out: dict[tuple, list[str]] = {}
    for task in expand(grid):
        if not task.skip:
            algos = out.setdefault((task.system, task.axes, task.reduce), [])
            if task.algo not in algos:
                algos.append(task.algo)
    return [GridConfig(s, axes, red, tuple(algos)) for (s, axes, red), algos in out.items()]


def paper_grid() -> list[GridConfig]:
    """Every configuration of P²'s evaluation in table order (3-axis V100 cases: Ring only)."""
    from p2smt.runs.gridfile import load_grid

    return grid_configs(load_grid(PAPER))
