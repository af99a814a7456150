"""The whole evaluation grid of docs/evaluation-grid.md synthesizes with the enumerative engine (run with -s to see it).

docs/evaluation-grid.md: 2-axis cases reduce axis 0 and, separately, axis 1; 1-axis cases reduce axis 0; 3-axis cases
"reduce axes 0 and 2". Read as one joint request {0, 2} this gives exactly P²'s 200
(matrix, reduction, algorithm) units (§6) and its largest configuration, [8,2,4] on [4,16], has
5 two-level matrices = 5 × 47 = 235 programs, P²'s "up to 235 programs" (§5). The separate readings
{0} and {2} are synthesized too, as extra configurations.
"""

from __future__ import annotations

import time
from math import prod

import pytest

from p2smt.model.dsl import format_program, lower_program, parse_program
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement, matrices
from p2smt.model.request import Request
from p2smt.model.system import load_system
from p2smt.semantics.dense import execute
from p2smt.synth.config import EngineConfig
from p2smt.synth.driver import synthesize

GRID = {
    "a100-2x16": [(32,), (2, 16), (4, 8), (8, 4), (16, 2)],
    "a100-4x16": [(64,), (2, 32), (4, 16), (8, 8), (16, 4), (32, 2), (16, 2, 2), (8, 2, 4), (4, 2, 8),
                  (2, 2, 16)],
    "v100-2x8": [(16,), (2, 8), (4, 4), (8, 2)],
    "v100-4x8": [(32,), (2, 16), (4, 8), (8, 4), (16, 2), (2, 2, 8), (8, 2, 2)],
}
HIERARCHY = {"a100-2x16": (2, 16), "a100-4x16": (4, 16), "v100-2x8": (2, 8), "v100-4x8": (4, 8)}


def paper_requests(axes: tuple[int, ...]) -> list[tuple[int, ...]]:
    return {1: [(0,)], 2: [(0,), (1,)], 3: [(0, 2)]}[len(axes)]


PAPER = [(s, axes, red) for s, ax in GRID.items() for axes in ax for red in paper_requests(axes)]
EXTRA = [(s, axes, red) for s, ax in GRID.items() for axes in ax if len(axes) == 3 for red in [(0,), (2,)]]
PROGRAMS_PER_MATRIX = {1: 3, 2: 93}
P2_PROGRAMS_PER_MATRIX = {1: 3, 2: 47}


def test_shipped_systems_have_the_grid_hierarchies():
    for name, sizes in HIERARCHY.items():
        assert load_system(name).sizes == sizes


def test_grid_has_p2_unit_count():
    units = 0
    for name, axes, red in PAPER:
        algorithms = 1 if (name.startswith("v100") and len(axes) == 3) else 2  # 3-axis V100: Ring only
        units += len(matrices(HIERARCHY[name], axes)) * algorithms
    assert units == 200


def test_grid_largest_configuration_is_p2s_235():
    largest = 0
    for name, axes, red in PAPER:
        system = load_system(name)
        total = 0
        for m in matrices(system.sizes, axes):
            h = synthesis_hierarchy(Placement(system.sizes, axes, m), red, system.level_names)
            total += P2_PROGRAMS_PER_MATRIX[h.nontrivial_levels]
        largest = max(largest, total)
    assert largest == 235


def _check_lowered(system, axes, mr, red, programs):
    """A sample of the programs, lowered onto the whole system, is valid there too."""
    placement = Placement(system.sizes, axes, mr.matrix)
    goal = placement.reduction_groups(red)
    step = max(1, len(programs) // 6)
    for prog in programs[::step]:
        plan = lower_program(mr.hierarchy, prog)
        run = execute(placement.num_devices, [(s.collective, s.groups) for s in plan], goal,
                      require_progress=True, chunks=mr.hierarchy.num_devices)
        assert run.valid, (mr.matrix, str(prog), run.violation)


@pytest.mark.parametrize(
    "name, axes, red, kind",
    [(*c, "paper") for c in PAPER] + [(*c, "extra") for c in EXTRA],
    ids=lambda v: ",".join(map(str, v)) if isinstance(v, tuple) else str(v),
)
def test_grid_configuration_synthesizes(name, axes, red, kind):
    system = load_system(name)
    start = time.perf_counter()
    result = synthesize(Request.for_system(system, axes, red), EngineConfig(engine="enumerative", max_len=5))
    seconds = time.perf_counter() - start
    print(f"\n[grid {kind}] {name:10s} axes {list(axes)!s:12s} reduce {list(red)!s:7s}: "
          f"{len(result.matrices)} matrices, {result.total_programs:4d} programs, {seconds:.3f} s")
    assert result.status == "complete"
    expected_matrices = matrices(system.sizes, axes)
    assert [mr.matrix for mr in result.matrices] == expected_matrices
    assert result.total_programs == sum(len(mr.programs) for mr in result.matrices)
    for mr in result.matrices:
        h = mr.hierarchy
        assert h.sizes[1:] == tuple(prod(mr.matrix[i][j] for i in red) for j in range(len(system.sizes)))
        assert len(mr.programs) == PROGRAMS_PER_MATRIX[h.nontrivial_levels], mr.matrix
        texts = [format_program(p) for p in mr.programs]
        assert len(set(texts)) == len(texts)
        assert texts[0] == "(root, InsideGroup, AllReduce)"
        assert all(parse_program(t, h) == p for t, p in zip(texts, mr.programs))
        _check_lowered(system, axes, mr, red, mr.programs)


def test_package_grid_is_this_grid():
    from p2smt.runs.grid import paper_grid

    grid = paper_grid()
    assert [(c.system, c.axes, c.reduction_axes) for c in grid] == PAPER
    for c in grid:
        expected = ("ring",) if c.system.startswith("v100") and len(c.axes) == 3 else ("ring", "tree")
        assert c.algorithms == expected


@pytest.mark.parametrize("engine", ["enumerative", "z3"])
def test_equal_problems_of_one_request_are_solved_once(engine):
    """[16,2,2] on [4,16] reducing {0,2}: 4 matrices, 2 distinct synthesis problems."""
    from p2smt.synth.driver import synthesize_hierarchy

    system = load_system("a100-4x16")
    res = synthesize(Request.for_system(system, (16, 2, 2), (0, 2)), EngineConfig(engine=engine))
    assert len(res.matrices) == 4
    reused = [m for m in res.matrices if "same_problem_as" in m.stats]
    assert len(reused) == 2
    solved = {tuple(map(tuple, m.matrix)) for m in res.matrices if "same_problem_as" not in m.stats}
    for m in res.matrices:
        alone, _, _ = synthesize_hierarchy(m.hierarchy, EngineConfig(engine=engine))
        assert [format_program(p) for p in m.programs] == [format_program(p) for p in alone]
        if m in reused:
            assert tuple(map(tuple, m.stats["same_problem_as"])) in solved
