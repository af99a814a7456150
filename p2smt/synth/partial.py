"""Partial results of a search stopped before its end: the programs of each first step whose subtree is
finished (final, even while the placement's search is not), merged per unfinished placement."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from p2smt.model.dsl import Program
from p2smt.model.hierarchy import SynthesisHierarchy
from p2smt.model.placement import Matrix
from p2smt.model.problem import canonical_order
from p2smt.model.status import SolveStatus


@dataclass(frozen=True)
class FirstStepPrograms:
    """Every program of one placement that starts with candidate ``first_step`` (of ``candidates``): that
    step's search subtree is finished, so these programs are final even while the placement's search is not."""

    matrix: Matrix
    hierarchy: SynthesisHierarchy
    first_step: int
    candidates: int
    indices: tuple[tuple[int, ...], ...]  # canonical order
    programs: tuple[Program, ...]
    rests_on: str


@dataclass(frozen=True)
class PartialPlacement:
    """An unfinished placement's programs found so far: those of its finished first steps (canonical order)."""

    matrix: Matrix
    hierarchy: SynthesisHierarchy
    programs: tuple[Program, ...]
    first_steps_done: int
    candidates: int
    rests_on: str

    def to_json(self) -> dict[str, Any]:
        return {
            "matrix": [list(r) for r in self.matrix],
            "synthesis_hierarchy": [[n, s] for n, s in self.hierarchy.levels],
            "status": SolveStatus.UNKNOWN,
            "complete": False,
            "first_steps_searched": self.first_steps_done,
            "first_steps": self.candidates,
            "programs": [str(p) for p in self.programs],
            "rests_on": self.rests_on,
        }


def partial_placements(pieces: Iterable[FirstStepPrograms], finished: Iterable[Matrix] = ()
                       ) -> tuple[PartialPlacement, ...]:
    """The placements not in ``finished`` with the programs their finished first steps found, in the order
    they were searched; each one's programs in canonical order."""
    done = set(finished)
    by_matrix: dict[Matrix, list[FirstStepPrograms]] = {}
    for piece in pieces:
        if piece.matrix not in done:
            by_matrix.setdefault(piece.matrix, []).append(piece)
    out = []
    for matrix, found in by_matrix.items():
        program_of = {i: p for piece in found for i, p in zip(piece.indices, piece.programs, strict=True)}
        programs = tuple(program_of[i] for i in canonical_order(program_of))
        first = found[0]
        out.append(PartialPlacement(matrix, first.hierarchy, programs, len({p.first_step for p in found}),
                                    first.candidates, first.rests_on))
    return tuple(out)


