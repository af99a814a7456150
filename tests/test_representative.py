"""The representative encoding: same program sets as the enumerative engine, the real-size check and its
refinement, the driver's re-check mode, --emit-smt2 of its auxiliary queries, bad options."""

from __future__ import annotations

from math import prod

import pytest
import z3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2smt.errors import InternalError, P2Error
from p2smt.model.dsl import problem
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement
from p2smt.model.system import load_system
from p2smt.runs.grid import paper_grid
from p2smt.smt.check import Unknown
from p2smt.smt.engine import Smt2Sink, enumerate_z3
from p2smt.smt.registry import load_encoding
from p2smt.smt.representative import Representative
from p2smt.synth.driver import placements_for
from p2smt.synth.enumerative import enumerate_programs
from p2smt.synth.recheck import recheck

FAST = {"certify": "never"}


def _hierarchy(sizes, kind="d", scope="per-ancestor"):
    k = prod(sizes)
    placement = Placement(tuple(sizes), (k,), (tuple(sizes),))
    names = tuple(f"l{i}" for i in range(len(sizes)))
    return synthesis_hierarchy(placement, (0,), names, kind, scope)


def _problem(sizes, kind="d", scope="per-ancestor", progress=True):
    return problem(_hierarchy(sizes, kind, scope), progress)


def _solve(sizes, max_len, options=None, kind="d", emit_smt2=None, progress=True, scope="per-ancestor"):
    """``enumerate_z3`` with the representative wrapper on the hierarchy of ``sizes``."""
    h = _hierarchy(sizes, kind, scope)
    return enumerate_z3(problem(h, progress), max_len, encoding="representative", options=options,
                        hierarchy=h, emit_smt2=emit_smt2)


def _wrapper(sizes, max_len, options=None, emit_smt2=None):
    """The wrapper object itself (to replace its inner solve or its check)."""
    h = _hierarchy(sizes)
    opts = load_encoding("representative").parse_options(options)
    return Representative(problem(h), h, max_len, opts, sink=Smt2Sink(emit_smt2, "representative"))


def _grid_problems():
    seen = {}
    for config in paper_grid():
        system = load_system(config.system)
        for placement in placements_for(system, config.axes, None):
            h = synthesis_hierarchy(placement, config.reduction_axes, system.level_names)
            seen.setdefault(problem(h), h)
    return list(seen.items())


GRID = _grid_problems()


def _with_faulty_inner(enc, extra=(0, 0), rounds=None):
    """The wrapper whose inner solve also returns ``extra`` (AllReduce twice over everyone: double
    counting, invalid at every size) in the first ``rounds`` rounds (all when None)."""
    solve = enc._solve
    calls = []

    def faulty(small):
        status, programs, stats = solve(small)
        calls.append(small.num_devices)
        if rounds is None or len(calls) <= rounds:
            programs = (*programs, extra)
        return status, programs, stats

    enc._solve = faulty
    return enc


@pytest.mark.parametrize("prob,h", GRID, ids=[str(list(h.sizes)) for _, h in GRID])
def test_grid_problems_equal_enumerative(prob, h):
    sizes = h.sizes
    res = enumerate_z3(prob, 5, encoding="representative", options=FAST, hierarchy=h)
    assert res.status == "complete"
    assert list(res.programs) == enumerate_programs(prob, 5)
    assert res.stats["size_refinements"] == 0 and res.stats["real_check"] == "z3"
    first = res.stats["rounds"][0]["sizes"]
    assert first == [1 if s == 1 else 2 for s in sizes]
    assert res.stats["completeness"] == ("exact" if list(sizes) == first else "conjectured")


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.integers(2, 4), min_size=1, max_size=3),
    st.sampled_from(["per-ancestor", "global"]),
    st.booleans(),
    st.sampled_from(["z3", "recheck"]),
)
def test_random_hierarchies_equal_enumerative(sizes, scope, progress, real_check):
    prob = _problem(sizes, scope=scope, progress=progress)
    max_len = 2 if len(sizes) == 3 else 4
    res = _solve(sizes, max_len, {**FAST, "real_check": real_check}, progress=progress, scope=scope)
    assert res.status == "complete" and res.stats["real_check"] == real_check
    assert list(res.programs) == enumerate_programs(prob, max_len)


def test_certificate_proves_completeness_at_the_real_size():
    prob = _problem((3, 2))
    res = _solve((3, 2), 4, {"certify": "always"})
    assert res.stats["completeness"] == "certified"
    assert res.stats["certificate_additions"] == 0
    assert list(res.programs) == enumerate_programs(prob, 4)
    auto = _solve((3, 2), 2, {"certify_max_devices": 4})
    assert auto.stats["completeness"] == "conjectured"  # 6 devices > 4: not certified


def test_refinement_rejects_programs_invalid_at_the_real_size():
    """The invalid program fails the Z3 proof at the real size in every round, is counted, never
    reported, and the rounds grow the sizes up to the real ones (where the inner solve is exact)."""
    prob = _problem((4, 3))
    res = _with_faulty_inner(_wrapper((4, 3), 2, FAST)).run()
    rounds = res.stats["rounds"]
    assert [r["sizes"] for r in rounds] == [[1, 2, 2], [1, 3, 3], [1, 4, 3]]
    assert [r["failed_at_real_size"] for r in rounds] == [1, 1, 1]
    assert res.stats["size_refinements"] == 3 and res.stats["refinement_rounds"] == 2
    assert res.stats["completeness"] == "exact"
    assert (0, 0) not in res.programs
    assert list(res.programs) == enumerate_programs(prob, 2)


def test_refinement_stops_at_the_first_round_whose_programs_all_pass():
    prob = _problem((4, 4))
    res = _with_faulty_inner(_wrapper((4, 4), 3, FAST), rounds=1).run()
    rounds = res.stats["rounds"]
    assert [(r["sizes"], r["failed_at_real_size"]) for r in rounds] == [([1, 2, 2], 1), ([1, 3, 3], 0)]
    assert res.stats["completeness"] == "conjectured" and res.status == "complete"
    assert list(res.programs) == enumerate_programs(prob, 3)


def test_recheck_mode_returns_unchecked_programs_and_the_driver_drops_the_invalid_ones():
    """Above ``z3_check_max_devices`` the encoding does not check: no refinement, one round, and the
    invalid program reaches the driver, whose independent re-check drops it in this mode (size-2
    candidates can be invalid at the real size) and raises for every other engine."""
    prob = _problem((4, 3))
    opts = {**FAST, "z3_check_max_devices": 11}
    res = _with_faulty_inner(_wrapper((4, 3), 2, opts)).run()
    assert res.stats["real_check"] == "recheck" and res.stats["verified_at_real_size"] is False
    assert [r["sizes"] for r in res.stats["rounds"]] == [[1, 2, 2]] and "checker_calls" not in res.stats
    assert (0, 0) in res.programs
    with pytest.raises(InternalError, match="interpreter rejects"):
        recheck(prob, res.programs, "z3")
    assert recheck(prob, res.programs, "z3", drop=True) == [(0, 0)]
    assert recheck(prob, [p for p in res.programs if p != (0, 0)], "z3") == []
    at_limit = _solve((4, 3), 2, {**FAST, "z3_check_max_devices": 12})
    assert at_limit.stats["real_check"] == "z3" and at_limit.stats["verified_at_real_size"] is True


def test_a_check_that_gives_up_makes_the_run_unknown():
    wrapper = _wrapper((3, 2), 3, FAST)

    def gives_up(programs):
        raise Unknown("timeout")

    wrapper._check = gives_up
    res = wrapper.run()
    assert res.status == "unknown" and res.stats["completeness"] == "unknown"
    assert res.stats["rounds"][0]["check"] == "unknown: timeout"


def test_fallback_for_other_hierarchy_kinds():
    prob = _problem((2, 3), kind="a")
    res = _solve((2, 3), 3, FAST, kind="a")
    assert "hierarchy (a)" in res.stats["fallback"] and res.stats["real_check"] == "inner"
    bare = enumerate_z3(_problem((2, 3)), 3, encoding="representative", options=FAST)
    assert "no synthesis hierarchy" in bare.stats["fallback"] and bare.programs == res.programs
    assert list(res.programs) == enumerate_programs(prob, 3)


def test_emit_smt2_writes_every_auxiliary_query(monkeypatch, tmp_path):
    """One file per solver call (inner solves, real-size checks, certificate), in the order asked, each
    re-read by Z3 with the same verdict; a refinement round is among them."""
    prob = _problem((3, 2))
    wrapper = _with_faulty_inner(_wrapper((3, 2), 2, {"certify": "always"}, emit_smt2=tmp_path), rounds=1)
    calls = []
    original = z3.Solver.check

    def check(self, *assumptions):
        result = original(self, *assumptions)
        calls.append((self, bool(assumptions), str(result)))
        return result

    monkeypatch.setattr(z3.Solver, "check", check)
    res = wrapper.run()
    monkeypatch.setattr(z3.Solver, "check", original)
    checkers = {id(s) for s, with_args, _ in calls if not with_args}  # a checker's chunk-0 follow-up
    verdicts = [v for s, with_args, v in calls if not (with_args and id(s) in checkers)]  # is no query
    files = sorted(tmp_path.glob("*.smt2"))
    assert res.stats["refinement_rounds"] == 1 and res.stats["completeness"] == "exact"
    assert len(files) == len(verdicts) == res.stats["smt2_files"]
    kinds = {p.stem.split("-", 2)[2] for p in files}
    assert {"inner-len1-synth", "inner-len2-synth", "check-forall-batch"} <= kinds
    for path, verdict in zip(files, verdicts, strict=True):
        ctx = z3.Context()  # kept alive while Z3 reads the file
        answer = z3.Z3_eval_smtlib2_string(ctx.ref(), path.read_text()).strip()
        assert answer == verdict, path.name
    assert list(res.programs) == enumerate_programs(prob, 2)


def test_emit_smt2_includes_the_certificate(tmp_path):
    res = _solve((3, 2), 2, {"certify": "always"}, emit_smt2=tmp_path)
    assert res.stats["completeness"] == "certified"
    names = [p.name for p in tmp_path.glob("*.smt2")]
    assert sum("-certificate-len" in n for n in names) == res.stats["certificate_solver_calls"] == 2


@pytest.mark.parametrize(
    "options,needle",
    [
        ({"sizes": 2}, "sizes"),
        ({"size": 1}, "size"),
        ({"certify": "sometimes"}, "certify"),
        ({"real_check": "pieces"}, "real_check"),
        ({"z3_check_max_devices": 0}, "z3_check_max_devices"),
        ({"inner": "no-such-encoding"}, "no-such-encoding"),
        ({"inner": "bool-matrix", "inner_options": {"refine": "never"}}, "refine"),
        ({"inner": "representative"}, "representative"),
        ({"inner_timeout_ms": 0}, "inner_timeout_ms"),
    ],
)
def test_bad_options_are_clear_errors(options, needle):
    with pytest.raises(P2Error, match=needle):
        _solve((2, 2), 2, options)


@pytest.mark.parametrize(("sizes", "levels"), [((4, 3), 2), ((2, 3, 5), 3)])
def test_size_two_proved_safe_at_the_real_size_makes_the_result_complete(sizes, levels):
    """Without its Z3 certificate representative's set is conjectured; the driver then runs the inclusion
    exploration (docs/symmetry.md, Theorem 3'): every program valid at the real size is valid at size 2, so
    the set is exact. Two and three levels."""
    from p2smt.synth.config import EngineConfig
    from p2smt.synth.driver import synthesize_hierarchy

    h = _hierarchy(sizes)
    programs, outcome, _ = synthesize_hierarchy(h, EngineConfig(engine="z3", encoding="representative",
                                                               encoding_options=FAST, max_len=3))
    assert outcome.status == "complete" and outcome.stats["completeness"] == "proved"
    assert outcome.stats["inclusion_pairs"] > (30 if levels == 2 else 700)
    assert "Theorem 3'" in outcome.stats["rests_on"]
    prob = problem(h)
    assert [prob.label(p) for p in enumerate_programs(prob, 3)] == [str(p) for p in programs]


def test_four_levels_stay_conjectured():
    from p2smt.synth.config import EngineConfig
    from p2smt.synth.driver import synthesize_hierarchy

    _, outcome, _ = synthesize_hierarchy(_hierarchy((2, 2, 2, 3)), EngineConfig(
        engine="z3", encoding="representative", encoding_options=FAST, max_len=2))
    assert outcome.status == "conjectured" and "inclusion_pairs" not in outcome.stats
