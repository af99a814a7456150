"""The symmetric engine (p2smt.synth.symmetric) and its interpreter (p2smt.semantics.bitmatrix):
the same program sets as pieces and the dense interpreter, at every size where those run."""

from __future__ import annotations

import random
from math import prod

import pytest
import z3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2smt.model.dsl import problem
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement
from p2smt.semantics.bitmatrix import is_valid
from p2smt.semantics.dense import execute
from p2smt.synth.enumerative import enumerate_programs as dense_programs
from p2smt.synth.lockstep import InclusionProof
from p2smt.synth.pieces import enumerate_programs as pieces_programs
from p2smt.synth.symmetric import search, synthesize


def _hier(sizes, scope="per-ancestor", kind="d"):
    k = prod(sizes)
    names = tuple(f"l{i}" for i in range(len(sizes)))
    placement = Placement(tuple(sizes), (k,), (tuple(sizes),))
    return synthesis_hierarchy(placement, (0,), names, kind, scope)


def _problem(sizes, scope="per-ancestor", progress=True, kind="d"):
    return problem(_hier(sizes, scope, kind), progress)


def _symmetric(sizes, max_len, scope="per-ancestor", progress=True, kind="d", **kw):
    h = _hier(sizes, scope, kind)
    return synthesize(problem(h, progress), max_len, h, **kw)


@pytest.mark.parametrize(
    ("sizes", "max_len", "scope"),
    [
        ((3, 2, 4), 4, "per-ancestor"),
        ((2, 5, 3), 4, "global"),
        ((4, 1, 3), 5, "per-ancestor"),
        ((3, 2, 2, 3), 3, "per-ancestor"),
        ((2, 3, 2, 2), 3, "global"),
    ],
)
def test_same_programs_as_pieces(sizes, max_len, scope):
    """3 and 4 levels, sizes 1-5, both master scopes: the generic size-2 search finds exactly pieces'
    program set at the real size, in the same order."""
    prob = _problem(sizes, scope)
    programs, stats = _symmetric(sizes, max_len, scope)
    assert stats["generic_size"] == 2
    assert programs == pieces_programs(prob, max_len)
    assert programs, "a reduction over several levels has programs"


def test_generic_sizes_2_and_3_agree():
    """The cross-check searches the size-3 instance too and finds the same set (it raises otherwise)."""
    programs, stats = _symmetric((4, 5, 6), 4, cross_check=3)
    assert "cross-checked against generic size 3" in stats["rests_on"]
    assert programs == _symmetric((4, 5, 6), 4)[0]


def test_real_size_two_is_exact_and_other_kinds_fall_back():
    exact = _symmetric((2, 2, 2), 3)[1]
    assert exact["rests_on"].startswith("exact")
    prob = _problem((2, 3), kind="b")
    programs, stats = _symmetric((2, 3), 3, kind="b")
    assert stats["generic_size"] is None and "real size" in stats["rests_on"]
    assert programs == pieces_programs(prob, 3)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3).filter(lambda s: prod(s) <= 16),
    scope=st.sampled_from(["per-ancestor", "global"]),
    progress=st.booleans(),
)
def test_search_equals_the_dense_interpreter(sizes, scope, progress):
    """Random small hierarchies: the bitmatrix search at the real size and the symmetric engine both
    find the dense (k×k×k) interpreter's program set."""
    prob = _problem(sizes, scope, progress)
    dense = dense_programs(prob, 3)
    assert search(prob, 3) == dense
    assert _symmetric(sizes, 3, scope, progress)[0] == dense


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3).filter(lambda s: prod(s) <= 24),
    seed=st.integers(0, 10**6),
    progress=st.booleans(),
)
def test_verdicts_equal_the_dense_interpreter(sizes, seed, progress):
    """Random (mostly invalid) programs: bitmatrix's verdict is the dense interpreter's."""
    prob = _problem(sizes, progress=progress)
    rng = random.Random(seed)
    n = len(prob.candidates)
    if not n:
        return
    for _ in range(20):
        prog = [prob.candidates[rng.randrange(n)] for _ in range(rng.randint(1, 5))]
        steps = [(c.collective, c.groups) for c in prog]
        run = execute(prob.num_devices, steps, prob.goal_groups, progress)
        assert is_valid(prob.num_devices, steps, prob.goal_groups, progress) == run.valid


SIZE_DEPENDENT = (
    "(l1, InsideGroup, ReduceScatter); (l1, Parallel(l0), ReduceScatter); (l1, InsideGroup, AllGather); "
    "(l1, Master(l0), AllGather); (l0, Parallel(root), ReduceScatter); (l0, InsideGroup, Broadcast); "
    "(l0, Parallel(root), AllGather)"
)


@pytest.mark.parametrize(("sizes", "dropped"), [((2, 3, 5), 2), ((2, 3, 4), 0), ((3, 2, 2), 2), ((2, 2, 2), 0)])
def test_generic_programs_invalid_at_the_real_size_are_dropped(sizes, dropped):
    """docs/symmetry.md's 7-step program is valid at (a, b, c) iff a divides c, so the generic size-2
    instance proposes it everywhere: the engine keeps exactly the real-size search's programs, says
    how many it dropped, and proves the set complete (three levels: the inclusion exploration)."""
    programs, stats = _symmetric(sizes, 7)
    assert programs == search(_problem(sizes), 7)
    if sizes == (2, 2, 2):
        assert stats["rests_on"].startswith("exact")
        return
    assert stats["dropped_at_real_size"] == dropped
    assert stats["completeness"] == "proved" and stats["inclusion_pairs"] > 700
    assert "completeness: proved at the real size" in stats["rests_on"]
    if dropped:
        assert stats["dropped_example"].startswith("(l1, InsideGroup, ReduceScatter); (l1, Parallel(l0)")
    labels = {_problem(sizes).label(p) for p in programs}
    assert (SIZE_DEPENDENT in labels) == (sizes[2] % sizes[0] == 0)


def test_first_step_reports_hold_only_checked_programs():
    """With ``on_first_step`` (partial results at a deadline) the reported programs are the checked ones."""
    reports = []
    programs, stats = _symmetric((2, 3, 5), 7, on_first_step=lambda i, found: reports.append(found))
    assert sorted(p for found in reports for p in found) == sorted(programs)
    assert stats["dropped_at_real_size"] == 2


def test_z3_certifies_size_generic_groups():
    """Up to 4 levels and sizes 2..8 (both master scopes): the candidate instructions and which share
    groups are the size-2 instance's, the lemma the engine's label mapping rests on."""
    from p2smt.smt.symmetry_proof import certify

    cert = certify(4, 8)
    assert cert.proved and cert.queries == 2 * (2 + 4 + 8 + 16) and cert.shapes > 50
    assert certify(3, 8, "global").proved


def test_z3_certificate_detects_a_size_dependent_rule(monkeypatch):
    """A rule that changes at size 3 (a level-1 InsideGroup that drops its groups there) is refuted."""
    from p2smt.smt import symmetry_proof as proof

    honest = proof.together

    def broken(shape, x, y, sizes, scope, n):
        rule = honest(shape, x, y, sizes, scope, n)
        if shape == proof.Shape(1, "InsideGroup") and not isinstance(sizes[0], int):
            return z3.And(rule, sizes[0] != 3)
        return rule

    monkeypatch.setattr(proof, "together", broken)
    assert proof.certify(2, 8).failures


COUNTEREXAMPLE = (
    "(l0, Parallel(root), ReduceScatter)", "(l1, Parallel(l0), ReduceScatter)",
    "(l0, Parallel(root), AllGather)", "(l1, InsideGroup, ReduceScatter)", "(l0, InsideGroup, AllGather)",
)


@pytest.mark.parametrize("sizes", [(2, 2, 3), (3, 2, 4)])
def test_reduce_scatter_breaks_the_level_symmetry_of_states(sizes):
    """docs/symmetry.md's counterexample: a valid program whose 4th state is not invariant under
    swapping two non-zero indices of the last level (on devices, chunks and contributions alike)."""
    import numpy as np

    prob = _problem(sizes)
    by_label = {c.label: c for c in prob.candidates}
    steps = [(by_label[w].collective, by_label[w].groups) for w in COUNTEREXAMPLE]
    run = execute(prob.num_devices, steps, prob.goal_groups, True)
    assert run.valid
    index = np.arange(prob.num_devices).reshape(sizes)
    swap = index.copy()
    swap[..., [1, 2]] = index[..., [2, 1]]
    perm = swap.ravel()
    state = run.states[4]
    assert not np.array_equal(state[np.ix_(perm, perm, perm)], state)
    assert np.array_equal(run.states[0][np.ix_(perm, perm, perm)], run.states[0])


@pytest.mark.parametrize(("gpu", "dropped"), [(3, 2), (4, 0)])
def test_cli_reports_dropped_programs_and_the_completeness_proof(run_cli, gpu, dropped):
    """server 2 > cpu 2 > gpu 3: the 7-step program is valid at size 2 but not here (2 does not divide 3).
    The CLI keeps the real-size search's set, says how many generic programs it dropped, and (three
    levels) that the inclusion exploration proved the set complete."""
    import json

    args = ["synth", "--system", "fig2-16gpu", "--level", f"gpu={gpu}", "--axes", str(4 * gpu), "--reduce", "0",
            "--matrix", f"[[1,2,2,{gpu}]]", "--max-len", "7", "--engine", "symmetric"]
    rc, out, _ = run_cli(*args, "--json")
    data = json.loads(out)
    (m,) = data["matrices"]
    assert rc == 0 and data["status"] == m["status"] == "complete"
    assert m["dropped_at_real_size"] == dropped and len(m["programs"]) == 8749 - dropped
    assert "completeness: proved at the real size" in m["rests_on"]
    if dropped:
        rc, out, _ = run_cli(*args, "--show", "0")
        text = " ".join(out.split())
        assert rc == 0 and "dropped 2 programs of the generic instance" in text and "status complete" in text
        assert "completeness: proved at the real size" in text


def test_four_levels_stay_conjectured_unless_the_proof_is_asked_for():
    """Four levels: no inclusion proof by default (status conjectured); asked for, it finds docs/symmetry.md's
    7-step program valid at (2, 2, 2, 4) and invalid at size 2: beyond max_len it is named and the result
    stays conjectured; within max_len the engine searches at the real size instead (exact)."""
    sizes = (2, 2, 2, 4)
    default = _symmetric(sizes, 3)[1]
    assert default["completeness"] == "conjectured" and "inclusion_pairs" not in default
    bounded = _symmetric(sizes, 3, inclusion_pairs=50)[1]
    assert bounded["completeness"] == "conjectured" and bounded["inclusion_pairs"] == "more than 50: no decision"


def test_cli_inclusion_pairs_asks_for_or_skips_the_proof(run_cli):
    """``--inclusion-pairs N`` is the API's ``inclusion_pairs``: on four levels it runs the proof (here the bound
    is reached: no decision, conjectured); 0 skips it on three levels, where it runs by default."""
    import json

    def placement(*args: str) -> dict:
        rc, out, _ = run_cli("synth", "--system", "fig2-16gpu", *args, "--reduce", "0", "--max-len", "3",
                             "--engine", "symmetric", "--json")
        assert rc == 0
        (m,) = json.loads(out)["matrices"]
        return m

    four = placement("--level", "rack=2", "--axes", "32", "--inclusion-pairs", "50")
    assert four["status"] == "conjectured" and four["inclusion_pairs"] == "more than 50: no decision"
    three = placement("--axes", "16", "--matrix", "[[1,2,2,4]]")
    assert three["status"] == "complete" and three["inclusion_pairs"] > 0
    skipped = placement("--axes", "16", "--matrix", "[[1,2,2,4]]", "--inclusion-pairs", "0")
    assert skipped["status"] == "conjectured" and "inclusion_pairs" not in skipped
    assert skipped["programs"] == three["programs"]


@pytest.mark.slow
def test_a_missed_program_is_named_or_makes_the_engine_search_at_the_real_size():
    sizes = (2, 2, 2, 4)
    short, stats = _symmetric(sizes, 3, inclusion_pairs=40_000)
    assert stats["completeness"] == "conjectured" and stats["generic_misses"].count(";") == 6
    assert short == pieces_programs(_problem(sizes), 3)
    programs, stats = _symmetric(sizes, 7, inclusion_pairs=40_000)
    assert stats["generic_size"] is None and "the generic instance misses" in stats["rests_on"]
    assert programs == pieces_programs(_problem(sizes), 7)


def test_a_missed_program_is_replaced_by_the_search_at_the_real_size():
    """``InclusionProof.searched`` (the symmetric and representative engines' fallback): the real size's
    whole program set, resting on the search and naming the missed program."""
    prob = _problem((2, 3))
    proof = InclusionProof(False, 10, 7, ("(l0, InsideGroup, AllReduce)",))
    programs, rests_on = proof.searched(prob, 3, "size 2")
    assert programs == pieces_programs(prob, 3) and proof.missed_within(3) and not proof.missed_within(0)
    assert rests_on == "search at the real size (size 2 misses '(l0, InsideGroup, AllReduce)', valid at the real size)"


def test_refuses_above_the_real_size_check_limit(run_cli, monkeypatch):
    """Above ``CHECK_LIMIT`` devices (65,536, also the CLI's largest system: lowered here to reach the refusal)
    the real-size check is out of reach, and unchecked generic programs are not known valid: one line, exit 2,
    no output."""
    from p2smt.synth import symmetric

    assert symmetric.CHECK_LIMIT == 65536
    monkeypatch.setattr(symmetric, "CHECK_LIMIT", 4096)
    rc, out, err = run_cli("synth", "--system", "h100-superpod", "--level", "node=256", "--axes", "8192",
                           "--reduce", "0", "--max-len", "3", "--engine", "symmetric", "--json")
    assert rc == 2 and out == "" and "out of reach above 4096 devices (8192 here)" in err
    assert len(err.strip().splitlines()) == 1


def test_vectorized_check_above_4096_devices(run_cli):
    """8,192 devices: every generic program is checked by the vectorized interpreter, and the result says so."""
    import json

    rc, out, _ = run_cli("synth", "--system", "h100-superpod", "--level", "node=256", "--axes", "8192",
                         "--reduce", "0", "--max-len", "2", "--engine", "symmetric", "--json")
    (m,) = json.loads(out)["matrices"]
    assert rc == 0 and m["status"] == "conjectured" and len(m["programs"]) == 9 and m["dropped_at_real_size"] == 0
    assert "checked at the real size by the vectorized compressed interpreter" in m["rests_on"]


def test_refuses_lengths_where_the_generic_instance_is_known_to_miss_programs():
    """A 7-step program is valid at (2, 2, 2, 4) and invalid at size 2 (docs/symmetry.md): with four
    levels the engine refuses 7 steps or more instead of returning an incomplete set."""
    from p2smt.errors import P2Error

    with pytest.raises(P2Error, match="known to miss valid programs of 7 or more steps"):
        _symmetric((2, 2, 2, 4), 7)
    exact = _symmetric((2, 2, 2, 2), 1)[1]  # the generic instance itself: exact, no limit applies
    assert exact["rests_on"].startswith("exact")


def test_the_default_completeness_proof_depends_on_levels_and_devices():
    """Two non-trivial levels up to 16,384 devices, three up to 4,096, never four (only when asked)."""
    from p2smt.synth.symmetric import one_group_hierarchy, proof_by_default

    def runs(*sizes: int) -> bool:
        h = one_group_hierarchy([(f"l{j}", s) for j, s in enumerate(sizes)])
        return proof_by_default(h, prod(sizes))

    assert runs(128, 128) and not runs(256, 128)
    assert runs(16, 16, 16) and runs(1, 16, 16, 16) and not runs(16, 16, 32)
    assert not runs(2, 2, 2, 2)
