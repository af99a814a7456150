"""The Z3 engines against the enumerative engine and the interpreter (issue 3's must-show).

Every program Z3 returns is re-checked by the interpreter inside ``synthesize``; here the whole sets
are compared, the length bounds are pinned, plans are proved or refuted, and CEGIS must catch
double counting with a concrete input.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2smt.model.collectives import Collective
from p2smt.model.dsl import format_program, lower_program, parse_program, problem
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement, matrices
from p2smt.model.request import Request
from p2smt.model.system import load_system
from p2smt.runs.grid import paper_grid
from p2smt.smt.cegis import verify_values
from p2smt.smt.engine import enumerate_z3
from p2smt.smt.verify import prove_plan
from p2smt.synth.config import EngineConfig
from p2smt.synth.driver import synthesize
from p2smt.synth.enumerative import enumerate_programs

AR, RS, AG = Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER

EXAMPLES = [
    "(root, InsideGroup, AllReduce)",
    "(node, InsideGroup, AllReduce); (node, Parallel(root), AllReduce)",
    "(node, InsideGroup, Reduce); (node, Master(root), AllReduce); (node, InsideGroup, Broadcast)",
    "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); (node, InsideGroup, AllGather)",
]


def _texts(result):
    return [[str(p) for p in m.programs] for m in result.matrices]


# Every distinct problem of the grid is compared in test_z3_engine.test_grid_conformance; these requests take
# the pure Z3 engine through the driver: one of each system, with one, two and three axes.
DRIVER_REQUESTS = ("a100-2x16 axes [2, 16] reduce [1]", "a100-4x16 axes [64] reduce [0]",
                   "a100-4x16 axes [8, 2, 4] reduce [0, 2]", "v100-2x8 axes [4, 4] reduce [0]",
                   "v100-4x8 axes [2, 2, 8] reduce [0, 2]")


@pytest.mark.parametrize("config", [c for c in paper_grid() if c.label in DRIVER_REQUESTS],
                         ids=lambda c: c.label.replace(" ", "_"))
def test_grid_z3_set_equals_enumerative_set(config):
    system = load_system(config.system)
    z3_result = synthesize(Request.for_system(system, config.axes, config.reduction_axes), EngineConfig(engine="z3"))
    enum_result = synthesize(Request.for_system(system, config.axes, config.reduction_axes), EngineConfig(engine="enumerative"))
    assert z3_result.status == "complete"
    assert _texts(z3_result) == _texts(enum_result)


def _hierarchy(sizes):
    axes = (int(__import__("math").prod(sizes)),)
    placement = Placement(tuple(sizes), axes, (tuple(sizes),))
    names = ("node", "gpu") if len(sizes) == 2 else tuple(f"l{i}" for i in range(len(sizes)))
    return synthesis_hierarchy(placement, (0,), names)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(2, 6), min_size=1, max_size=3), st.data())
def test_random_hierarchies_z3_equals_enumerative(sizes, data):
    k = 1
    for s in sizes:
        k *= s
    max_len = 5 if len(sizes) < 3 and k <= 16 else 3
    prob = problem(_hierarchy(sizes))
    res = enumerate_z3(prob, max_len)
    assert res.status == "complete"
    assert list(res.programs) == enumerate_programs(prob, max_len)


def test_length_bounds_are_tight():
    h = _hierarchy((4, 4))
    prob = problem(h)
    one = enumerate_z3(prob, 1).programs
    assert [prob.label(p) for p in one] == ["(root, InsideGroup, AllReduce)"]
    rs_ar_ag = EXAMPLES[3]
    assert rs_ar_ag not in [prob.label(p) for p in enumerate_z3(prob, 2).programs]
    assert rs_ar_ag in [prob.label(p) for p in enumerate_z3(prob, 3).programs]


def test_tiny_timeout_is_unknown_never_complete():
    prob = problem(_hierarchy((4, 16)))
    res = enumerate_z3(prob, 5, timeout_ms=1)
    assert res.status in ("unknown", "complete")
    if res.status == "complete":  # only if every call finished within 1 ms: then it must be the full set
        assert list(res.programs) == enumerate_programs(prob, 5)
    else:
        assert set(res.programs) <= set(enumerate_programs(prob, 5))


def test_unknown_propagates_to_synthesis_result():
    system = load_system("a100-4x16")
    result = synthesize(Request.for_system(system, (64,), (0,)), EngineConfig(engine="z3", timeout_ms=1))
    assert result.status in ("unknown", "complete")
    if result.status == "unknown":
        assert any(m.status == "unknown" for m in result.matrices)


def _lowered(system, axes, matrix, red, text):
    placement = Placement(system.sizes, axes, matrix)
    h = synthesis_hierarchy(placement, red, system.level_names)
    plan = lower_program(h, parse_program(text, h))
    goal = placement.reduction_groups(red)
    return placement, [(s.collective, s.groups) for s in plan], goal


def test_verify_proves_the_four_examples_on_every_applicable_placement():
    system = load_system("a100-4x16")
    proved = 0
    for matrix in matrices(system.sizes, (4, 16)):
        for red in ((0,), (1,)):
            h = synthesis_hierarchy(Placement(system.sizes, (4, 16), matrix), red, system.level_names)
            if h.sizes[1] < 2 or h.sizes[2] < 2:
                continue  # the examples need a non-trivial node and gpu level
            for text in EXAMPLES:
                placement, steps, goal = _lowered(system, (4, 16), matrix, red, text)
                proof = prove_plan(placement.num_devices, steps, goal, chunks=len(goal[0]))
                assert proof.status == "proved", (matrix, red, text, proof.message)
                proved += 1
    assert proved == 4 * 3


def test_verify_refutes_p2s_invalid_examples_with_details():
    # docs/semantics.md §4: ReduceScatter then AllReduce over the same pair adds different halves.
    # Steps are numbered from 1: the second step fails.
    proof = prove_plan(2, [(RS, ((0, 1),)), (AR, ((0, 1),))], ((0, 1),))
    assert proof.status == "counterexample"
    assert proof.failing_step == 2 and set(proof.violation.devices) <= {0, 1} and proof.violation.rule
    # Two AllReduces whose groups overlap in contributions count data twice.
    proof = prove_plan(4, [(AR, ((0, 1), (2, 3))), (AR, ((0, 1, 2, 3),))], ((0, 1, 2, 3),))
    assert proof.status == "counterexample" and proof.failing_step == 2
    assert "twice" in proof.message
    assert proof.violation.facts and not proof.to_json()["defects"]  # facts of the failed rule, not goal defects


def test_cegis_catches_double_counting_with_a_concrete_input():
    steps = [(AR, ((0, 1), (2, 3))), (AR, ((0, 1, 2, 3),))]
    proof = verify_values(4, steps, ((0, 1, 2, 3),))
    assert proof.status == "counterexample"
    assert proof.inputs is not None and proof.expected != proof.actual
    device, chunk = proof.device, proof.chunk
    assert proof.expected == sum(proof.inputs[d][chunk] for d in range(4))
    assert device is not None
    ok = verify_values(4, [(RS, ((0, 1, 2, 3),)), (AG, ((0, 1, 2, 3),))], ((0, 1, 2, 3),))
    assert ok.status == "proved"


@pytest.mark.parametrize("sizes", [(4,), (2, 4), (3, 2)])
def test_cegis_finds_exactly_the_boolean_set(sizes):
    """Empty chunks hold arbitrary values and Broadcast may not discard data, so value-level
    correctness coincides with P²'s Hoare rules: CEGIS returns exactly the Boolean set."""
    prob = problem(_hierarchy(sizes))
    res = enumerate_z3(prob, 4, encoding="values")
    assert res.status == "complete" and res.stats["cegis_iterations"] >= 1
    assert list(res.programs) == enumerate_programs(prob, 4)


def test_every_program_round_trips_through_the_dsl():
    h = _hierarchy((2, 2))
    prob = problem(h)
    for prog in enumerate_z3(prob, 4).programs:
        text = prob.label(prog)
        assert format_program(parse_program(text, h)) == text


def test_driver_requests_are_in_the_grid():
    assert sorted(c.label for c in paper_grid() if c.label in DRIVER_REQUESTS) == sorted(DRIVER_REQUESTS)
