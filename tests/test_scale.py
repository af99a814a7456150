"""The compressed interpreter (p2smt.semantics.pieces, the driver's re-check above synth.PIECES_ABOVE devices):
equal to the numpy interpreter where both run, exact beyond it."""

from __future__ import annotations

import random
from math import prod

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2smt.errors import InternalError, P2Error
from p2smt.model.dsl import problem
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement
from p2smt.model.request import Request
from p2smt.model.system import load_system
from p2smt.semantics.dense import execute, execute_all
from p2smt.semantics.pieces import check_programs
from p2smt.synth.config import EngineConfig
from p2smt.synth.enumerative import enumerate_programs
from p2smt.synth.recheck import PIECES_ABOVE, recheck

SUPERPOD = ("su", "node", "pcie", "gpu")


def _hierarchy(sizes, names=None, scope="per-ancestor"):
    k = prod(sizes)
    names = names or tuple(f"l{i}" for i in range(len(sizes)))
    return synthesis_hierarchy(Placement(tuple(sizes), (k,), (tuple(sizes),)), (0,), names, "d", scope)


def _problem(sizes, names=None, scope="per-ancestor", progress=True):
    return problem(_hierarchy(sizes, names, scope), progress)


def _random_programs(prob, rng, count, max_len=5):
    n = len(prob.candidates)
    return [tuple(rng.randrange(n) for _ in range(rng.randint(1, max_len))) for _ in range(count)]


@pytest.mark.parametrize("seed", range(6))
def test_verdicts_equal_the_interpreter(seed):
    """Valid and invalid programs, random sizes, both master scopes, with and without progress: same
    verdict, and for a failing step the same step, group and rule as the interpreter."""
    rng = random.Random(seed)
    sizes = tuple(rng.randint(2, 4) for _ in range(rng.randint(1, 3)))
    prob = _problem(sizes, scope=rng.choice(["per-ancestor", "global"]), progress=rng.random() < 0.7)
    programs = _random_programs(prob, rng, 120) + enumerate_programs(prob, 3 if prob.num_devices <= 16 else 2)
    for prog, verdict in zip(programs, check_programs(prob, programs)):
        steps = [(prob.candidates[i].collective, prob.candidates[i].groups) for i in prog]
        run = execute(prob.num_devices, steps, prob.goal_groups, prob.require_progress)
        assert verdict.proved == run.valid, (sizes, prob.label(prog))
        if run.violation is not None:
            v = run.violation
            assert (verdict.step, verdict.group, verdict.rule) == (v.step, v.group, v.rule)
        elif not run.valid:
            assert verdict.rule == "goal" and verdict.step is None


def _steps(prob, programs):
    return [[(prob.candidates[i].collective, prob.candidates[i].groups) for i in p] for p in programs]


def test_verdicts_equal_execute_all_on_the_benchmark_shape():
    """su 2 x node 4 x pcie 4 x gpu 2 (scale.py's smallest 4-level point): programs valid at the
    representative size, each with one step replaced and with one step appended, against
    ``semantics.execute_all`` (the re-check below PIECES_ABOVE): same verdict, step, group and rule."""
    small = _problem((2, 2, 2, 2), SUPERPOD)
    big = _problem((2, 4, 4, 2), SUPERPOD)
    idx = _index(big)
    rng = random.Random(11)
    n = len(big.candidates)
    valid = rng.sample(enumerate_programs(small, 3), 40)
    programs = []
    for p in valid:
        p = tuple(idx[small.candidates[c].label] for c in p)
        swapped = list(p)
        swapped[rng.randrange(len(p))] = rng.randrange(n)
        programs += [p, tuple(swapped), (*p, rng.randrange(n))]
    runs = execute_all(big.num_devices, _steps(big, programs), big.goal_groups, big.require_progress)
    verdicts = check_programs(big, programs)
    assert sum(v.proved for v in verdicts) >= 40
    for prog, verdict, run in zip(programs, verdicts, runs, strict=True):
        assert verdict.proved == run.valid, big.label(prog)
        if run.violation is not None:
            v = run.violation
            assert (verdict.step, verdict.group, verdict.rule) == (v.step, v.group, v.rule)
        elif not run.valid:
            assert verdict.rule == "goal" and verdict.step is None


def test_recheck_above_the_threshold_fails_loudly():
    """synth.recheck uses pieces above PIECES_ABOVE devices: an invalid program raises, valid pass."""
    prob = _problem((4, 8, 4, 2), SUPERPOD)
    assert prob.num_devices > PIECES_ABOVE
    good = _program(prob, "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); "
                    "(node, InsideGroup, AllGather)")
    bad = _program(prob, "(root, InsideGroup, AllReduce); (root, InsideGroup, AllReduce)")
    recheck(prob, [good], "z3")
    with pytest.raises(InternalError, match="AllReduce.disjoint"):
        recheck(prob, [good, bad], "z3")


def _index(prob):
    return {c.label: i for i, c in enumerate(prob.candidates)}


def _program(prob, text):
    idx = _index(prob)
    return tuple(idx[part] for part in text.split("; "))


def test_1024_devices_beyond_the_interpreter():
    system = load_system("h100-superpod")  # su 4 x node 32 x pcie 4 x gpu 2 = 1,024
    prob = _problem(system.sizes, system.level_names)
    assert prob.num_devices == 1024
    good = [
        "(root, InsideGroup, AllReduce)",
        "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); (node, InsideGroup, AllGather)",
        "(node, InsideGroup, Reduce); (node, Master(root), AllReduce); (node, InsideGroup, Broadcast)",
    ]
    bad = {
        "(root, InsideGroup, AllReduce); (root, InsideGroup, AllReduce)": (2, "AllReduce.disjoint"),
        "(pcie, InsideGroup, ReduceScatter); (pcie, InsideGroup, AllReduce)": (2, "AllReduce.same_chunks"),
        "(pcie, InsideGroup, AllReduce)": (None, "goal"),
    }
    verdicts = check_programs(prob, [_program(prob, t) for t in [*good, *bad]])
    assert [v.status for v in verdicts[: len(good)]] == ["proved"] * len(good)
    for v, (step, rule) in zip(verdicts[len(good) :], bad.values()):
        assert v.status == "counterexample" and (v.step, v.rule) == (step, rule)


def test_verdicts_at_1024_equal_those_at_the_representative_size():
    """Every length-<=3 program valid on 2x2x2x2 is valid on 4x32x4x2, and random programs get the
    same verdict at both sizes (the size-invariance the representative encoding relies on)."""
    small = _problem((2, 2, 2, 2), SUPERPOD)
    big = _problem((4, 32, 4, 2), SUPERPOD)
    idx = _index(big)
    rng = random.Random(7)
    programs = enumerate_programs(small, 3) + _random_programs(small, rng, 100, 4)
    mapped = [tuple(idx[small.candidates[c].label] for c in p) for p in programs]
    at_small = [v.proved for v in check_programs(small, programs)]
    at_big = [v.proved for v in check_programs(big, mapped)]
    assert at_small == at_big
    assert sum(at_big) >= 114


def test_deadline_gives_unknown_never_a_wrong_verdict():
    prob = _problem((4, 32, 4, 2), SUPERPOD)
    programs = _random_programs(prob, random.Random(3), 300, 5)
    verdicts = check_programs(prob, programs, timeout_ms=1)
    assert verdicts[-1].status == "unknown" or all(v.status != "unknown" for v in verdicts)
    assert any(v.status == "unknown" for v in verdicts)
    exact = check_programs(prob, programs)
    for v, e in zip(verdicts, exact):
        assert v.status == "unknown" or v == e


@pytest.mark.parametrize(
    "programs,timeout,needle",
    [([()], None, "empty"), ([(0, 999)], None, "outside"), ([(0,)], 0, "timeout")],
)
def test_bad_input(programs, timeout, needle):
    with pytest.raises(P2Error, match=needle):
        check_programs(_problem((2, 2)), programs, timeout_ms=timeout)


# ---------------------------------------------------------------- the compressed enumerative search

def _grid_problems():
    from p2smt.runs.grid import paper_grid
    from p2smt.synth.driver import placements_for

    seen = {}
    for cfg in paper_grid():
        system = load_system(cfg.system)
        for p in placements_for(system, tuple(cfg.axes), None):
            prob = problem(synthesis_hierarchy(p, tuple(cfg.reduction_axes), system.level_names), True)
            seen.setdefault(prob, prob)
    return list(seen)


def test_pieces_search_equals_enumerative_on_the_grid():
    """All 12 distinct problems of docs/evaluation-grid.md's grid, max length 5: the same programs, same order."""
    from p2smt.synth.pieces import enumerate_programs as pieces_programs

    probs = _grid_problems()
    assert len(probs) == 12
    for prob in probs:
        assert pieces_programs(prob, 5) == enumerate_programs(prob, 5), prob.num_devices


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(2, 6), min_size=1, max_size=3).filter(lambda s: prod(s) <= 64),
    scope=st.sampled_from(["per-ancestor", "global"]),
    progress=st.booleans(),
)
def test_pieces_search_equals_enumerative_on_random_hierarchies(sizes, scope, progress):
    """1–3 levels of sizes 2–6 (≤ 64 devices), both master scopes, with and without progress."""
    from p2smt.synth.pieces import enumerate_programs as pieces_programs

    prob = _problem(tuple(sizes), scope=scope, progress=progress)
    max_len = 4 if prob.num_devices <= 16 else 3
    assert pieces_programs(prob, max_len) == enumerate_programs(prob, max_len), sizes


def test_pieces_search_at_256_devices_equals_the_representative_encoding():
    """4 x 8 x 4 x 2 = 256 devices, beyond the representative's real-size proof (64): the exact search
    at the real size finds exactly the programs the size-2 solve maps up (114 at length 3)."""
    from p2smt.smt.engine import enumerate_z3
    from p2smt.synth.pieces import enumerate_programs as pieces_programs

    h = _hierarchy((4, 8, 4, 2), SUPERPOD)
    prob = problem(h)
    exact = pieces_programs(prob, 3)
    assert len(exact) == 114
    res = enumerate_z3(prob, 3, encoding="representative", hierarchy=h)
    assert res.status == "complete" and list(res.programs) == exact


def test_synthesize_with_the_pieces_engine():
    from p2smt.model.dsl import format_program
    from p2smt.synth.driver import synthesize

    system = load_system("a100-4x16")
    ref = synthesize(Request.for_system(system, (4, 16), (1,)), EngineConfig(engine="enumerative"))
    got = synthesize(Request.for_system(system, (4, 16), (1,)), EngineConfig(engine="pieces"))
    assert got.status == "complete"
    assert [[format_program(p) for p in m.programs] for m in got.matrices] == [
        [format_program(p) for p in m.programs] for m in ref.matrices
    ]


def test_pieces_engine_is_rechecked_by_numpy_only_where_numpy_fits(monkeypatch):
    """Up to PIECES_ABOVE devices the numpy interpreter re-checks the pieces engine; above, the engine
    is the compressed interpreter itself (no circular re-check)."""
    from p2smt.synth import driver as synth

    calls = []
    real = synth.recheck
    monkeypatch.setattr(synth, "recheck", lambda prob, progs, engine, drop=False, sizes=None:
                        calls.append(prob.num_devices) or real(prob, progs, engine, drop, sizes))
    small = _hierarchy((2, 4), ("node", "gpu"))
    big = _hierarchy((4, 8, 4, 2), SUPERPOD)
    progs_small, _, _ = synth.synthesize_hierarchy(small, EngineConfig(engine="pieces", max_len=3))
    progs_big, _, _ = synth.synthesize_hierarchy(big, EngineConfig(engine="pieces", max_len=1))
    assert calls == [8]
    ref, _, _ = synth.synthesize_hierarchy(small, EngineConfig(engine="enumerative", max_len=3))
    assert [str(p) for p in progs_small] == [str(p) for p in ref] and len(ref) == 29
    assert [str(p) for p in progs_big] == ["(root, InsideGroup, AllReduce)"]
