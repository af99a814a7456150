"""The ``bitvec`` encoding's own claims: its lemmas are implied by the rules, both ways of comparing
ReduceScatter ranks (case split and bit-vector arithmetic) are exact, and its queries are standalone
SMT-LIB2. Program-set equality with the enumerative engine over every option is in
``test_encoding_conformance.py``."""

from __future__ import annotations

from math import prod

import pytest

from p2smt.model.dsl import problem
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement
from p2smt.semantics.dense import Violation, apply_step, initial_state
from p2smt.smt.engine import enumerate_z3, run_encoding
from p2smt.smt.registry import load_encoding
from p2smt.synth.enumerative import enumerate_programs


def _problem(sizes, require_progress=True):
    placement = Placement(tuple(sizes), (prod(sizes),), (tuple(sizes),))
    h = synthesis_hierarchy(placement, (0,), tuple(f"l{i}" for i in range(len(sizes))))
    return problem(h, require_progress)


def _reachable_states(prob, depth):
    """Every state reached by a valid prefix of at most ``depth`` steps (interpreter)."""
    states, frontier = [], [initial_state(prob.num_devices)]
    for _ in range(depth + 1):
        states.extend(frontier)
        nxt = []
        for s in frontier:
            for c in prob.candidates:
                out = apply_step(s, 0, c.collective, c.groups, prob.require_progress)
                if not isinstance(out, Violation):
                    nxt.append(out)
        frontier = nxt
    return states


@pytest.mark.parametrize("sizes", [(2, 2), (3, 2)])
def test_lemma_pairs_are_invalid_from_every_reachable_state(sizes):
    prob = _problem(sizes)
    pairs = load_encoding("bitvec").create(prob, 2, {"lemmas": True}).lemma_pairs()
    assert pairs, "the lemmas exclude something"
    for state in _reachable_states(prob, 2):
        for a, b in pairs:
            ca, cb = prob.candidates[a], prob.candidates[b]
            mid = apply_step(state, 0, ca.collective, ca.groups, True)
            if isinstance(mid, Violation):
                continue
            out = apply_step(mid, 1, cb.collective, cb.groups, True)
            assert isinstance(out, Violation), (ca.label, cb.label)


@pytest.mark.parametrize("sizes", [(3, 2), (6,)])
def test_arithmetic_rank_comparison_is_exact(sizes):
    """Force bit-vector arithmetic for every count (no case split) and compare with the enumerator."""
    prob = _problem(sizes)
    spec = load_encoding("bitvec")
    module_globals = spec.factory.__globals__  # the loaded encodings/bitvec.py module
    saved = module_globals["CASE_SPLIT_ATOMS"]
    module_globals["CASE_SPLIT_ATOMS"] = -1
    try:
        enc = spec.create(prob, 3, {})
        res = run_encoding(enc, 3)
    finally:
        module_globals["CASE_SPLIT_ATOMS"] = saved
    assert enc.statistics()["arith_groups"] > 0
    assert res.status == "complete"
    assert list(res.programs) == enumerate_programs(prob, 3)


def test_not_reaching_the_goal_early_without_progress():
    """Without require_progress a step may follow the goal; like the enumerator, programs end there."""
    prob = _problem((2, 2), require_progress=False)
    want = enumerate_programs(prob, 4)
    for padding in ("stop", "exact"):
        res = enumerate_z3(prob, 4, encoding="bitvec", options={"padding": padding})
        assert list(res.programs) == want


def test_zero_length_and_statistics():
    prob = _problem((2, 2))
    assert enumerate_z3(prob, 0, encoding="bitvec").programs == ()
    res = enumerate_z3(prob, 2, encoding="bitvec", options={"choice": "index"})
    assert res.stats["encoding"] == "bitvec"
    assert res.stats["terms"] > 0 and res.stats["assertions"] > 0
    assert prob.label(res.programs[0]) == "(root, InsideGroup, AllReduce)"


@pytest.mark.parametrize("padding", ["stop", "exact"])
def test_every_query_is_emitted(tmp_path, padding):
    # The texts themselves are not checked here: the engine's emitter prints ``solver.sexpr()``, which
    # for a QF_FD solver omits assertions added since its last check (reported to the engine owner).
    prob = _problem((2, 2))
    res = enumerate_z3(prob, 2, encoding="bitvec", options={"padding": padding}, emit_smt2=tmp_path)
    assert len(list(tmp_path.glob("*.smt2"))) == res.stats["smt2_files"] == res.stats["solver_calls"]
    assert len(res.programs) == len(enumerate_programs(prob, 2))
