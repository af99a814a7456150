"""The state-graph certificate: same sets as the pieces search, the checker's closure, Z3's lemmas, and a
corrupted certificate rejected (by the checker or by Z3), one test per corruption."""

from __future__ import annotations

import copy
import json

import pytest

from p2smt.certcheck.closure import Rejected, check
from p2smt.certcheck.prove import prove
from p2smt.certcheck.smt2 import query
from p2smt.cli.main import main
from p2smt.model.dsl import problem
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement
from p2smt.model.request import Request
from p2smt.model.system import load_system
from p2smt.synth.certproof import checker_problem
from p2smt.synth.config import EngineConfig
from p2smt.synth.driver import synthesize
from p2smt.synth.pieces import enumerate_programs
from p2smt.synth.stategraph import explore

BLUECONNECT = ("fig2-16gpu", (16,), ((1, 2, 2, 4),))


def _problem(system: str, axes: tuple[int, ...], matrix, reduce=(0,)):
    sysm = load_system(system)
    return problem(synthesis_hierarchy(Placement(sysm.sizes, axes, matrix), reduce, sysm.level_names))


def _certificate(prob, max_len: int):
    graph = explore(prob, max_len)
    programs = graph.programs()
    return graph, programs, graph.document(programs)


TWO_LEVEL = _problem("v100-2x8", (2, 8), ((1, 2), (2, 4)), (1,))  # (1, 2, 4): 8 devices, 93 programs


@pytest.mark.parametrize("system, axes, matrix, reduce, max_len", [
    ("v100-2x8", (2, 8), ((1, 2), (2, 4)), (0,), 5),
    ("v100-2x8", (2, 8), ((1, 2), (2, 4)), (1,), 5),
    ("a100-4x16", (4, 16), ((1, 4), (4, 4)), (1,), 5),
    ("a100-4x16", (8, 2, 4), ((2, 4), (1, 2), (2, 2)), (0, 2), 5),
    ("v100-4x8", (32,), ((4, 8),), (0,), 4),
    (*BLUECONNECT, (0,), 6),
])
def test_the_certificate_closes_and_gives_the_pieces_search_set(system, axes, matrix, reduce, max_len):
    prob = _problem(system, axes, matrix, reduce)
    _graph, programs, doc = _certificate(prob, max_len)
    assert programs == enumerate_programs(prob, max_len)
    checked = check(doc, checker_problem(prob), max_len)
    assert checked.programs == set(programs)
    assert prove(checked.lemmas, prob.num_devices).status == "unsat"


def test_blueconnect_length_6_has_744_states_and_its_4576_programs():
    prob = _problem(*BLUECONNECT)
    graph, programs, _doc = _certificate(prob, 6)
    assert (len(graph.states), graph.steps, len(programs)) == (744, 32490, 4576)


def test_the_default_engine_with_proof_auto_gives_todays_sets_certified():
    req = Request("a100-4x16", axes=(8, 2, 4), reduce=(0, 2))
    auto = synthesize(req, EngineConfig(proof="auto", prune="p2-47"))
    bmc = synthesize(req, EngineConfig(prune="p2-47"))
    assert auto.certified and bmc.certified
    assert [m.programs for m in auto.matrices] == [m.programs for m in bmc.matrices]
    assert all("state-graph certificate" in m.stats["rests_on"] for m in auto.matrices)


def _rejected(doc, prob=TWO_LEVEL, max_len=5) -> bool:
    """True when the checker rejects ``doc`` or Z3 refutes one of its lemmas."""
    try:
        checked = check(doc, checker_problem(prob), max_len)
    except Rejected:
        return True
    return prove(checked.lemmas, prob.num_devices).status == "sat"


def _edges(doc, ok: bool):
    """(state, candidate) of every expanded step that succeeds (``ok``) or fails."""
    return [(s, i) for s, row in enumerate(doc["edges"]) if row for i, e in enumerate(row) if (type(e) is int) == ok]


GOOD = _certificate(TWO_LEVEL, 5)[2]


def test_the_uncorrupted_certificate_is_accepted():
    assert not _rejected(copy.deepcopy(GOOD))


def test_a_dropped_edge_is_rejected_by_the_checker():
    doc = copy.deepcopy(GOOD)
    s, _ = _edges(doc, True)[3]
    doc["edges"][s].pop()
    with pytest.raises(Rejected, match="every candidate"):
        check(doc, checker_problem(TWO_LEVEL), 5)


def test_a_missing_refusal_is_rejected_by_the_checker():
    doc = copy.deepcopy(GOOD)
    s, i = _edges(doc, False)[5]
    doc["edges"][s][i] = None
    with pytest.raises(Rejected, match="malformed failure"):
        check(doc, checker_problem(TWO_LEVEL), 5)


def test_an_extra_program_is_rejected_by_the_checker():
    doc = copy.deepcopy(GOOD)
    doc["programs"].append([0, 0])
    with pytest.raises(Rejected, match="1 extra"):
        check(doc, checker_problem(TWO_LEVEL), 5)


def test_a_wrong_successor_is_refuted_by_z3():
    doc = copy.deepcopy(GOOD)
    oks = _edges(doc, True)
    s, i = oks[0]
    other = next(doc["edges"][a][b] for a, b in oks if doc["edges"][a][b] != doc["edges"][s][i])
    doc["edges"][s][i] = other  # the step now claims another state, reached elsewhere
    assert _rejected(doc)


def test_a_valid_step_declared_failing_is_refuted_by_z3():
    doc = copy.deepcopy(GOOD)
    s, i = _edges(doc, True)[0]
    doc["edges"][s][i] = [0, "progress", 0]
    doc["programs"] = [p for p in doc["programs"] if not (s == 0 and p[0] == i)] if s == 0 else doc["programs"]
    assert _rejected(doc)


def test_a_failing_step_declared_by_another_rule_is_refuted_by_z3():
    doc = copy.deepcopy(GOOD)
    for s, i in _edges(doc, False):
        edge = doc["edges"][s][i]
        if edge[1].endswith("same_chunks"):
            doc["edges"][s][i] = [edge[0], edge[1].replace("same_chunks", "disjoint"), max(edge[2], 1)]
            break
    assert _rejected(doc)


def test_a_flipped_bit_of_a_device_state_is_rejected():
    doc = copy.deepcopy(GOOD)
    last = doc["states"][-1][0]
    doc["device_states"][last] = format(int(doc["device_states"][last], 16) ^ 1, "x")
    assert _rejected(doc)


def test_another_problem_or_version_is_rejected():
    for key, value in (("version", 2), ("max_len", 4), ("devices", 4)):
        doc = copy.deepcopy(GOOD)
        doc[key] = value
        with pytest.raises(Rejected):
            check(doc, checker_problem(TWO_LEVEL), 5)
    doc = copy.deepcopy(GOOD)
    doc["states"][0], doc["states"][1] = doc["states"][1], doc["states"][0]
    with pytest.raises(Rejected, match="initial"):
        check(doc, checker_problem(TWO_LEVEL), 5)


@pytest.mark.parametrize("edge", [[0, ["AllReduce.disjoint"], 1], [0, "no.such_rule", 1], [9, "progress", 0], True])
def test_a_malformed_refusal_is_rejected_not_a_crash(edge):
    doc = copy.deepcopy(GOOD)
    s, i = _edges(doc, False)[0]
    doc["edges"][s][i] = edge
    with pytest.raises(Rejected, match="malformed failure"):
        check(doc, checker_problem(TWO_LEVEL), 5)


@pytest.mark.parametrize("goal", [0, [1], "1", None])
def test_a_wrong_goal_mark_is_rejected(goal):
    doc = copy.deepcopy(GOOD)
    doc["goal"] = goal
    with pytest.raises(Rejected, match="goal"):
        check(doc, checker_problem(TWO_LEVEL), 5)


def test_cvc5_re_checks_the_certificate_query():
    cvc5 = pytest.importorskip("cvc5")
    checked = check(copy.deepcopy(GOOD), checker_problem(TWO_LEVEL), 5)
    text, _ = query(sorted(checked.lemmas, key=repr), TWO_LEVEL.num_devices)
    tm = cvc5.TermManager()
    solver = cvc5.Solver(tm)
    parser = cvc5.InputParser(solver)
    parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, text, "certificate")
    sm = parser.getSymbolManager()
    answer = None
    while True:
        cmd = parser.nextCommand()
        if cmd.isNull():
            break
        out = cmd.invoke(solver, sm)
        if out.strip():
            answer = out.strip()
    assert answer == "unsat"


def test_synth_certificate_writes_the_graph_and_its_query(tmp_path, capsys):
    folder = tmp_path / "cert"
    assert main(["synth", "--system", "v100-2x8", "--axes", "2,8", "--reduce", "1", "--proof", "certificate",
                 "--certificate", str(folder)]) == 0
    graphs = sorted(folder.glob("state-graph-*.json"))
    assert graphs and all(json.loads(g.read_text())["version"] == 1 for g in graphs)
    assert sorted(folder.glob("state-graph-*-0.smt2"))


def test_proof_is_only_for_the_certified_engine(capsys):
    assert main(["synth", "--system", "v100-2x8", "--axes", "2,8", "--reduce", "1", "--engine", "pieces",
                 "--proof", "bmc"]) == 2
    assert "--proof: only with --engine certified" in capsys.readouterr().err


@pytest.mark.parametrize("sizes, has_it", [((2, 2, 2), True), ((2, 3, 5), False)])
def test_the_hidden_size_program_is_certified_exactly_where_it_is_valid(sizes, has_it):
    """The 7-step program valid at (a, b, c) exactly when a divides c (docs/symmetry.md): the certificate's
    set is the pieces search's at both sizes, and holds the program only where it is valid."""
    from p2smt.synth.symmetric import one_group_hierarchy

    prob = problem(one_group_hierarchy([(f"l{j}", s) for j, s in enumerate(sizes)], "per-ancestor"), True)
    _graph, programs, doc = _certificate(prob, 7)
    assert programs == enumerate_programs(prob, 7)
    checked = check(doc, checker_problem(prob), 7)
    assert checked.programs == set(programs) and prove(checked.lemmas, prob.num_devices).status == "unsat"
    seven = ("(l1, InsideGroup, ReduceScatter); (l1, Parallel(l0), ReduceScatter); (l1, InsideGroup, AllGather); "
             "(l1, Master(l0), AllGather); (l0, Parallel(root), ReduceScatter); (l0, InsideGroup, Broadcast); "
             "(l0, Parallel(root), AllGather)")
    assert (seven in {prob.label(p) for p in programs}) is has_it


def test_above_the_search_limit_the_default_engine_answers_with_the_symmetric_engine_not_certified():
    req = Request("h100-superpod", axes=(8192,), reduce=(0,), levels=(("su", 32),))
    res = synthesize(req, EngineConfig())
    (m,) = res.matrices
    assert res.certified is False and str(res.status) == "conjectured" and len(m.programs) == 7636
    assert m.stats["rests_on"].startswith("NOT certified (8,192 devices: above the exact search's limit of 4,096")
    assert "completeness: NOT proved" in m.stats["rests_on"]


def test_a_spent_budget_leaves_the_certificate_unclaimed_the_same_way_every_run(monkeypatch):
    from p2smt.smt import budget

    req = Request("a100-4x16", axes=(2, 32), reduce=(1,), matrix=((1, 2), (4, 8)))
    proved = synthesize(req, EngineConfig(proof="certificate", proof_budget=1))  # a million units suffice
    assert proved.certified is True and "resource_units" not in proved.matrices[0].stats["certificate"]
    monkeypatch.setattr(budget, "UNITS", 10_000)  # one budget unit: less than this proof spends
    short = [synthesize(req, EngineConfig(proof="certificate", proof_budget=1)).to_json()["matrices"][0]
             for _ in range(2)]
    assert short[0]["certified"] is False and short[0]["certificate"] == short[1]["certificate"]
    assert short[0]["why_not"] == ("the state-graph proof spent its budget of 10,000 Z3 resource units before it "
                                   "finished (--proof-budget raises it; 0: no limit)")
    assert short[0]["programs"] == [str(p) for p in proved.matrices[0].programs]


def test_blueconnect_length_6_is_certified_by_the_default_engine_with_the_pieces_set():
    req = Request("fig2-16gpu", axes=(16,), reduce=(0,), matrix=((1, 2, 2, 4),))
    res = synthesize(req, EngineConfig(max_len=6))
    pieces = synthesize(req, EngineConfig(engine="pieces", max_len=6))
    (m,) = res.matrices
    assert res.certified is True and "state-graph certificate: 744 states" in m.stats["rests_on"]
    assert m.programs == pieces.matrices[0].programs and len(m.programs) == 4576
