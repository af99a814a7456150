"""The certified engine's proof on several threads (``--jobs``): same verdicts as on one, deterministic."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2smt.errors import InternalError, P2Error
from p2smt.model.dsl import problem
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement
from p2smt.model.request import Request
from p2smt.model.status import SolveStatus
from p2smt.model.system import load_system
from p2smt.runs.grid import paper_grid
from p2smt.smt import certify as certify_module
from p2smt.smt.certify import certify
from p2smt.smt.engine import EngineResult
from p2smt.smt.parallel import run_units, threads
from p2smt.synth.config import EngineConfig
from p2smt.synth.driver import synthesize
from p2smt.synth.enumerative import enumerate_programs

V100 = ["synth", "--system", "v100-2x8", "--axes", "2,8", "--reduce", "1", "--max-len", "3", "--json"]


@pytest.fixture(autouse=True)
def every_set_in_parallel(monkeypatch):
    """Every set here is split over threads, however small (``certify.PARALLEL_FROM``)."""
    monkeypatch.setattr(certify_module, "PARALLEL_FROM", 1)


def _problem(sizes):
    placement = Placement(tuple(sizes), (math.prod(sizes),), (tuple(sizes),))
    return problem(synthesis_hierarchy(placement, (0,), tuple(f"l{i}" for i in range(len(sizes)))))


def _verdict(result):
    return result.status, result.certified, [[str(p) for p in m.programs] for m in result.matrices]


@pytest.mark.parametrize("index", [2, 26, 40], ids=lambda i: paper_grid()[i].label.replace(" ", "_"))
def test_grid_requests_on_two_threads_agree_with_one(index):
    config = paper_grid()[index]
    req = Request.for_system(load_system(config.system), config.axes, config.reduction_axes)
    one, two = synthesize(req, EngineConfig(max_len=3)), synthesize(req, EngineConfig(max_len=3, jobs=2))
    assert _verdict(one) == _verdict(two) and two.certified is True
    solved = [m.stats["certificate"]["completeness"] for m in two.matrices if "certificate" in m.stats]
    assert solved and all(c["jobs"] == 2 and len(c["workers"]) == 2 for c in solved)
    assert all(c["queries"] == sum(w["queries"] for w in c["workers"].values()) for c in solved)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(2, 4), min_size=1, max_size=3).filter(lambda s: math.prod(s) <= 16), st.integers(2, 3))
def test_random_hierarchies_on_several_threads_agree_with_one(sizes, jobs):
    max_len = 4 if len(sizes) < 3 else 3
    prob = _problem(sizes)
    programs = enumerate_programs(prob, max_len)
    one, many = certify(prob, max_len, programs), certify(prob, max_len, programs, jobs=jobs)
    assert (one.status, one.certified, one.missed, one.refuted) == (many.status, many.certified, (), ())
    assert many.certified and many.stats["completeness"]["jobs"] == jobs


@pytest.mark.parametrize("parity", [0, 1])
def test_a_dropped_and_an_invalid_program_are_named_whichever_share_finds_them(parity):
    """Two threads: first instruction i is in share i mod 2; the dropped program is in each share in turn."""
    prob = _problem((2, 4))
    programs = enumerate_programs(prob, 3)
    dropped = next(p for p in programs if p[0] % 2 == parity)
    invalid = next((c,) for c in range(len(prob.candidates)) if (c,) not in programs)
    cert = certify(prob, 3, [invalid, *(p for p in programs if p != dropped)], jobs=2)
    assert not cert.certified and cert.status is SolveStatus.COMPLETE
    assert [r.program for r in cert.refuted] == [invalid]
    assert list(cert.missed) == [dropped]


def test_missed_programs_of_several_shares_come_in_canonical_order():
    prob = _problem((2, 3))
    programs = enumerate_programs(prob, 3)
    dropped = sorted({next(p for p in reversed(programs) if p[0] % 3 == r) for r in range(3)},
                     key=lambda p: (len(p), p))
    cert = certify(prob, 3, [p for p in programs if p not in dropped], jobs=3)
    assert list(cert.missed) == dropped and len({p[0] % 3 for p in dropped}) == 3


def test_a_share_that_gives_up_leaves_the_set_uncertified(monkeypatch):
    real = certify_module.run_encoding

    def gives_up(enc, max_len, **kw):
        res = real(enc, max_len, **kw)
        unknown = 1 in kw["strategy"].firsts
        return EngineResult(SolveStatus.UNKNOWN, res.programs, res.stats) if unknown else res

    monkeypatch.setattr(certify_module, "run_encoding", gives_up)
    prob = _problem((2, 3))
    cert = certify(prob, 3, enumerate_programs(prob, 3), jobs=2)
    assert cert.status is SolveStatus.UNKNOWN and not cert.certified
    assert cert.reason == "a completeness query timed out"


def test_a_written_certificate_runs_on_one_thread_with_a_file_per_cube(tmp_path):
    prob = _problem((2, 3))
    cert = certify(prob, 3, enumerate_programs(prob, 3), certificate=tmp_path, jobs=2)
    assert cert.certified and "jobs" not in cert.stats["completeness"]
    assert sum("completeness" in f.name for f in tmp_path.glob("*.smt2")) == len(prob.candidates)


def test_two_runs_on_two_threads_give_the_same_json(run_cli):
    outs = []
    for _ in range(2):
        rc, out, err = run_cli(*V100, "--jobs", "2")
        assert rc == 0, err
        outs.append(json.loads(out))
    strip = [{k: v for k, v in o.items() if k != "stats"} | {"matrices": [
        {k: v for k, v in m.items() if k != "stats"} for m in o["matrices"]]} for o in outs]
    assert strip[0] == strip[1] and strip[0]["certified"] is True
    solved = [m for m in outs[0]["matrices"] if "certificate" in m]
    assert solved and all(set(m["certificate"]["completeness"]["workers"]) == {"1", "2"} for m in solved)
    assert all(set(m["stats"]["certificate"]["completeness"]["workers"]["1"]) == {"seconds", "cpu_seconds"}
               for m in solved)


@pytest.mark.parametrize(("value", "message"), [
    ("-1", "--jobs must be an integer ≥ 0"),
    ("two", "--jobs: invalid int value"),
    ("2 --engine pieces", "--jobs: only with --engine certified"),
])
def test_bad_jobs_values_are_one_line_errors(run_cli, value, message):
    rc, out, err = run_cli(*V100, "--jobs", *value.split())
    assert rc == 2 and out == "" and len(err.splitlines()) == 1 and message in err, err


def test_jobs_in_the_engine_configuration():
    assert EngineConfig(jobs=0).to_json()["jobs"] == 0
    assert EngineConfig.from_json(EngineConfig(jobs=3).to_json()) == EngineConfig(jobs=3)
    assert EngineConfig.from_json({"engine": "pieces"}).jobs == 1
    with pytest.raises(P2Error, match="--jobs"):
        EngineConfig(jobs=True)
    assert threads(0) >= 1 and threads(3) == 3


@pytest.mark.parametrize("error", [InternalError("broken"), P2Error("bad input")])
def test_a_units_exception_reaches_the_caller_unchanged(error):
    def fails():
        raise error

    with pytest.raises(type(error)) as caught:
        run_units([lambda: 1, fails, lambda: 3], 2)
    assert caught.value is error
    assert [d.result for d in run_units([lambda: 1, lambda: 2, lambda: 3], 2)] == [1, 2, 3]


def test_a_set_smaller_than_the_threshold_is_proved_on_one_thread(monkeypatch):
    prob = _problem((2, 3))
    programs = enumerate_programs(prob, 3)
    monkeypatch.setattr(certify_module, "PARALLEL_FROM", len(programs) + 1)
    assert "jobs" not in certify(prob, 3, programs, jobs=2).stats["completeness"]
    monkeypatch.setattr(certify_module, "PARALLEL_FROM", len(programs))
    assert certify(prob, 3, programs, jobs=2).stats["completeness"]["jobs"] == 2


def test_each_thread_keeps_to_the_proof_budget(monkeypatch):
    """With --jobs each unit's context has the budget: spent, the verdict is not certified, with the reason
    (here a budget unit is 100,000 resource units, so that a small problem spends it)."""
    from p2smt.smt import budget

    monkeypatch.setattr(budget, "UNITS", 100_000)
    req = Request("a100-4x16", axes=(2, 32), reduce=(1,), matrix=((1, 2), (4, 8)))
    res = synthesize(req, EngineConfig(jobs=2, proof_budget=1))
    (m,) = res.to_json()["matrices"]
    assert res.status == "complete" and res.certified is False and "spent its budget of 100,000" in m["why_not"]
    assert m["certificate"]["completeness"]["jobs"] == 2
