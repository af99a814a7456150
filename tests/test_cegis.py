"""CEGIS over data values (issue 3 item 5): concrete counterexample inputs for docs/semantics.md §4's double
counting, the same program set as the Boolean encoding, and iteration counts."""

from __future__ import annotations

import pytest

from p2smt.errors import P2Error
from p2smt.model.collectives import Collective
from p2smt.model.dsl import problem
from p2smt.smt.cegis import verify_values
from p2smt.smt.engine import enumerate_z3
from p2smt.synth.config import EngineConfig
from p2smt.synth.driver import run_engine
from p2smt.synth.enumerative import enumerate_programs

AR, RS, AG, R, B = (
    Collective.ALL_REDUCE,
    Collective.REDUCE_SCATTER,
    Collective.ALL_GATHER,
    Collective.REDUCE,
    Collective.BROADCAST,
)
NODES = [(0, 1), (2, 3)]
PARALLEL = [(0, 2), (1, 3)]
ALL = [(0, 1, 2, 3)]


def test_reduce_scatter_then_allreduce_adds_an_empty_half():
    proof = verify_values(2, [(RS, [(0, 1)]), (AR, [(0, 1)])], [(0, 1)])
    assert proof.status == "counterexample" and proof.rule == "goal"
    d, r = proof.device, proof.chunk
    xs = [proof.inputs[e][r] for e in range(2)]
    assert proof.expected == sum(xs)
    assert proof.actual is not None and proof.actual != proof.expected
    # the AllReduce added what the other member's emptied chunk held: the value the proof names
    assert proof.actual == proof.expected + sum(v for _, _, _, v in proof.blanks)
    assert proof.blanks and all(chunk == r for _, _, chunk, _ in proof.blanks)
    assert f"device {d} ends with {proof.actual} instead of {proof.expected}" in proof.message
    assert proof.to_json()["empty_chunk_contents"]


def test_overlapping_allreduces_count_twice_on_a_concrete_input():
    proof = verify_values(4, [(AR, NODES), (AR, ALL)], ALL)
    assert proof.status == "counterexample"
    r = proof.chunk
    xs = [proof.inputs[e][r] for e in range(4)]
    assert proof.expected == sum(xs) > 0
    assert proof.actual == 2 * proof.expected
    assert proof.blanks == ()
    assert all(proof.inputs[e][c] == 0 for e in range(4) for c in range(4) if c != r)


@pytest.mark.parametrize(
    "steps",
    [
        [(AR, ALL)],
        [(AR, NODES), (AR, PARALLEL)],
        [(R, NODES), (AR, [(0, 2)]), (B, NODES)],
        [(RS, NODES), (AR, PARALLEL), (AG, NODES)],
        [(RS, ALL), (AG, ALL)],
    ],
)
def test_well_known_programs_are_correct_for_all_inputs(steps):
    proof = verify_values(4, steps, ALL, require_progress=True)
    assert proof.status == "proved", proof.message


def test_structural_failures_name_their_step():
    proof = verify_values(4, [(AR, ALL), (B, ALL)], ALL)
    assert (proof.status, proof.failing_step, proof.rule) == (
        "counterexample",
        2,
        "Broadcast.information_increase",
    )
    assert proof.message.startswith("failing step 2 of 2: ")
    proof = verify_values(4, [(RS, [(0, 1, 2)])], ALL)
    assert proof.rule == "ReduceScatter.divisible"
    with pytest.raises(P2Error):
        verify_values(2, [], [(0, 1)])


@pytest.mark.parametrize("sizes, max_len", [((2,), 5), ((4,), 5), ((2, 2), 5), ((2, 3), 3), ((3, 2), 3)])
def test_cegis_finds_the_boolean_program_set(flat_hierarchy, sizes, max_len):
    prob = problem(flat_hierarchy(sizes))
    res = run_engine(prob, EngineConfig(engine="z3-cegis", max_len=max_len))
    assert res.status == "complete"
    assert list(res.programs) == enumerate_programs(prob, max_len)
    assert res.stats["cegis_iterations"] >= len(res.programs)
    assert res.stats["counterexamples"] >= 1


def test_cegis_timeout_is_never_complete(flat_hierarchy):
    prob = problem(flat_hierarchy((4, 4)))
    res = run_engine(prob, EngineConfig(engine="z3-cegis", max_len=5, timeout_ms=1))
    assert res.status == "unknown"
    assert set(res.programs) <= set(enumerate_programs(prob, 5))


def test_z3_cegis_is_z3_with_the_values_encoding(flat_hierarchy):
    """One code path: the engine name only selects the encoding."""
    prob = problem(flat_hierarchy((2, 2)))
    cegis = run_engine(prob, EngineConfig(engine="z3-cegis", max_len=4))
    plain = enumerate_z3(prob, 4, encoding="values")
    assert cegis.programs == plain.programs and cegis.status == plain.status
    assert cegis.stats["encoding"] == "values" and set(cegis.stats) == set(plain.stats)
    assert cegis.stats["cegis_iterations"] == plain.stats["checks"]
