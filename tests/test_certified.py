"""The certified engine: Z3 proves a proposer's set valid and complete, and reports any disagreement."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from p2smt.cli.main import main
from p2smt.model.dsl import problem
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement
from p2smt.model.request import Request
from p2smt.model.system import load_system
from p2smt.runs.grid import paper_grid
from p2smt.semantics.dense import MAX_INTERPRETER_DEVICES
from p2smt.smt.certify import certify
from p2smt.synth import driver
from p2smt.synth.config import Engine, EngineConfig
from p2smt.synth.driver import EngineOutcome, synthesize
from p2smt.synth.enumerative import enumerate_programs
from p2smt.synth.pieces import enumerate_programs as pieces_programs


def _texts(result):
    return [[str(p) for p in m.programs] for m in result.matrices]


def _hierarchy(sizes):
    placement = Placement(tuple(sizes), (math.prod(sizes),), (tuple(sizes),))
    return synthesis_hierarchy(placement, (0,), tuple(f"l{i}" for i in range(len(sizes))))


@pytest.fixture(scope="module")
def grid_store(tmp_path_factory):
    """One proof store for the grid's requests, as a sweep shares one: the 78 placements that communicate
    are 12 distinct problems, each proved by Z3 once; a later request's placement reuses the proof only
    when the proposer gives exactly the proved set (``docs/certified.md``)."""
    return str(tmp_path_factory.mktemp("proofs"))


@pytest.mark.parametrize("config", paper_grid(), ids=lambda c: c.label.replace(" ", "_"))
def test_grid_certified_set_equals_explicit_sets(config, grid_store):
    req = Request.for_system(load_system(config.system), config.axes, config.reduction_axes)
    cert = synthesize(req, EngineConfig(proof_store=grid_store))
    assert cert.engine == Engine.CERTIFIED and cert.status == "complete" and cert.certified is True
    assert _texts(cert) == _texts(synthesize(req, EngineConfig(engine="enumerative")))
    first = cert.to_json()["matrices"][0]
    assert first["certified"] is True
    assert first["certificate"]["completeness"]["lengths"] == "1-5"


@settings(max_examples=10, deadline=None, derandomize=True,  # the same 10 hierarchies every run: CI cannot flake
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(2, 6), min_size=1, max_size=3))
def test_random_hierarchies_certify_both_proposers(sizes):
    assume(math.prod(sizes) <= MAX_INTERPRETER_DEVICES)  # the enumerative proposer's dense state stops there
    max_len = 5 if len(sizes) < 3 and math.prod(sizes) <= 16 else 3
    prob = problem(_hierarchy(sizes))
    programs = enumerate_programs(prob, max_len)
    assert list(pieces_programs(prob, max_len)) == programs
    cert = certify(prob, max_len, programs)
    assert cert.certified, (cert.refuted, cert.missed, cert.reason)


def test_certify_names_a_dropped_and_an_invalid_program():
    prob = problem(_hierarchy((2, 4)))
    programs = enumerate_programs(prob, 3)
    invalid = next((c,) for c in range(len(prob.candidates)) if (c,) not in programs)
    cert = certify(prob, 3, [*programs[1:], invalid])
    assert not cert.certified
    assert [r.program for r in cert.refuted] == [invalid]
    assert list(cert.missed) == [programs[0]]


@pytest.mark.parametrize("missing", [0, -1])
def test_a_written_certificate_runs_the_same_cubes_and_finds_the_same_missed_program(missing, tmp_path):
    """The completeness proof runs one cube per first instruction with or without a written certificate
    (the same proof): both find a dropped program, whichever first step it has, and a proof that finds one
    writes no certificate file."""
    prob = problem(_hierarchy((2, 3)))
    programs = enumerate_programs(prob, 4)
    dropped = programs[missing]
    rest = [p for p in programs if p != dropped]
    cubed = certify(prob, 4, rest)
    written = certify(prob, 4, rest, certificate=tmp_path)
    assert list(cubed.missed) == list(written.missed) == [dropped]
    assert cubed.stats["completeness"]["queries"] == written.stats["completeness"]["queries"] > len(prob.candidates)
    assert len(prob.candidates) >= 2 and not list(tmp_path.glob("*.smt2"))


def test_wrong_proposer_is_an_internal_error_naming_both(monkeypatch, capsys):
    args = ["synth", "--system", "v100-2x8", "--axes", "16", "--reduce", "0", "--max-len", "3", "--proof", "bmc"]
    system = load_system("v100-2x8")
    prob = problem(synthesis_hierarchy(Placement(system.sizes, (16,), ((2, 8),)), (0,), system.level_names))
    programs = enumerate_programs(prob, 3)
    invalid = next((c,) for c in range(len(prob.candidates)) if (c,) not in programs)

    def wrong(p, max_len, opts, h=None):
        return EngineOutcome("complete", (*enumerate_programs(p, max_len)[1:], invalid))

    monkeypatch.setitem(driver.ENGINES, driver.DEFAULT_PROPOSER, ("wrong", wrong))
    assert main(args) == 3
    err = capsys.readouterr().err
    assert prob.label(programs[0]) in err and "missed" in err
    assert prob.label(invalid) in err and "refutes" in err and "rule" in err


def test_main_command_says_certified_and_how_long(capsys):
    assert main(["synth", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "certified by Z3" in out and "NOT certified" not in out and " s)" in out


def test_json_has_certificate_statistics(capsys):
    assert main(["synth", "--system", "v100-2x8", "--axes", "2,8", "--reduce", "1", "--json", "--proof", "bmc"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["engine"] == "certified" and data["certified"] is True and data["status"] == "complete"
    solved = [m for m in data["matrices"] if "certificate" in m]
    assert solved and all(m["rests_on"].startswith("Z3-certified") for m in solved)
    for m in solved:
        completeness = m["certificate"]["completeness"]
        assert completeness["lengths"] == "1-5" and completeness["queries"] >= 1
        assert {"queries", "conflicts"} <= set(completeness) and "seconds" not in completeness
        assert m["stats"]["certificate"]["completeness"]["seconds"] >= 0


def test_out_of_reach_says_not_certified(monkeypatch):
    monkeypatch.setattr(driver, "CERTIFY_LIMIT", 4)
    res = synthesize(Request("v100-2x8", axes=(2, 8), reduce=(1,)), EngineConfig(max_len=3, proof="bmc"))
    assert res.status == "complete" and res.certified is False
    m = res.to_json()["matrices"][0]
    assert m["certified"] is False and "limit" in m["why_not"] and m["rests_on"].startswith("NOT certified")
    assert _texts(res) == _texts(synthesize(Request("v100-2x8", axes=(2, 8), reduce=(1,)),
                                            EngineConfig(engine="enumerative", max_len=3)))


def test_the_interpreter_re_checks_only_an_uncertified_set(monkeypatch):
    """A certified set rests on the proposer's interpreter and Z3's proof; a set Z3 did not certify is
    re-checked by the dense interpreter, as the proposer's own engine's would be."""
    calls = []
    real = driver.recheck
    monkeypatch.setattr(driver, "recheck", lambda prob, progs, engine, drop=False, sizes=None:
                        calls.append(len(progs)) or real(prob, progs, engine, drop, sizes))
    req = Request("v100-2x8", axes=(2, 8), reduce=(1,))
    assert synthesize(req, EngineConfig(max_len=3)).certified is True and calls == []
    monkeypatch.setattr(driver, "CERTIFY_LIMIT", 4)
    res = synthesize(req, EngineConfig(max_len=3, proof="bmc"))
    assert res.certified is False and calls == [len(m.programs) for m in res.matrices] and all(calls)


def test_solver_timeout_is_not_a_claim_of_proof():
    res = synthesize(Request("a100-4x16", axes=(64,), reduce=(0,)), EngineConfig(timeout_ms=1))
    m = res.to_json()["matrices"][0]
    assert res.status == "complete"
    if not m["certified"]:
        assert "timed out" in m["why_not"] and res.certified is False


def test_proposer_option_only_with_certified():
    from p2smt.errors import P2Error

    with pytest.raises(P2Error, match="only with --engine certified"):
        EngineConfig(engine="z3", proposer="pieces")
    with pytest.raises(P2Error, match="--proposer"):
        EngineConfig(proposer="z3")
    assert EngineConfig(proposer="pieces").proposer is Engine.PIECES


def test_a_spent_proof_budget_says_not_certified_and_why():
    """A budget of Z3 resource units bounds each placement's proof the same way on every machine: once
    spent, the set is the proposer's (re-checked), the result is not certified and says why."""
    req = Request("a100-4x16", axes=(2, 32), reduce=(1,), matrix=((1, 2), (4, 8)))
    proved = synthesize(req, EngineConfig(proof="bmc"))
    used = proved.matrices[0].stats["certificate"]["resource_units"]
    assert proved.certified is True and 0 < used < 100 * 1_000_000
    short = synthesize(req, EngineConfig(proof_budget=1, proof="bmc"))
    (m,) = short.to_json()["matrices"]
    assert short.status == "complete" and short.certified is False and used > 1_000_000
    assert m["certificate"]["resource_units"] == 1_000_000
    assert m["why_not"] == ("the completeness proof spent its budget of 1,000,000 Z3 resource units before it "
                            "finished (--proof-budget raises it; 0: no limit)")
    assert m["rests_on"].startswith("NOT certified (the completeness proof spent its budget")
    assert _texts(short) == _texts(proved)
    again = synthesize(req, EngineConfig(proof_budget=1, proof="bmc"))
    assert again.to_json()["matrices"][0]["certificate"] == m["certificate"]
    unlimited = synthesize(req, EngineConfig(proof_budget=0, proof="bmc"))
    assert unlimited.certified is True and unlimited.matrices[0].stats["certificate"]["resource_units"] == used


def test_proof_budget_is_a_count_for_the_certified_engine_only(capsys):
    from p2smt.errors import P2Error

    with pytest.raises(P2Error, match="--proof-budget: only with --engine certified"):
        EngineConfig(engine="pieces", proof_budget=5)
    with pytest.raises(P2Error, match="--proof-budget must be an integer ≥ 0"):
        EngineConfig(proof_budget=-1)
    assert main(["synth", "--system", "v100-2x8", "--axes", "2,8", "--reduce", "1", "--engine", "auto",
                 "--proof-budget", "3"]) == 2
    assert capsys.readouterr().err.strip() == "p2smt: error: --proof-budget: only with --engine certified (got --engine auto)"


def test_a_certificates_standard_form_keeps_to_the_proof_budget(tmp_path):
    """Re-solving a query's standard form (for its ``:status``) is bounded by the proof budget as the proof
    is: past it, a one-line error that names the flag; without a budget the file is written."""
    import z3

    from p2smt.errors import P2Error
    from p2smt.smt.certify import CertificateSink

    ctx = z3.Context()
    xs = [z3.Bool(f"x{i}", ctx) for i in range(40)]
    query = z3.Solver(ctx=ctx)
    query.add(z3.PbEq([(x, 1) for x in xs], 20), z3.Or(xs[0], xs[1]))
    sink = CertificateSink(tmp_path, "t", units=1)
    sink.scoped("x").write_text("validity-check", query.sexpr())  # queued: written once the proof is done
    with pytest.raises(P2Error, match=r"^--certificate: Z3 gives no answer on the standard form of a x-validity-check "
                                      r"query within its budget of 1 Z3 resource units \(--proof-budget raises it"):
        sink.publish()
    assert not list(tmp_path.iterdir())
    unbounded = CertificateSink(tmp_path, "t")
    unbounded.write_text("validity-check", query.sexpr())
    assert not list(tmp_path.iterdir())
    unbounded.publish()
    (written,) = tmp_path.iterdir()
    assert "(set-info :status sat)" in written.read_text()
