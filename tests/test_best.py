"""Cost-guided search (``p2smt.cost.best``) returns what enumerate-then-rank returns, computed in the same run."""

from __future__ import annotations

import pytest

from p2smt.cost.best import best
from p2smt.cost.rank import rank_result
from p2smt.errors import P2Error
from p2smt.model.request import Request
from p2smt.model.system import load_system
from p2smt.synth.config import EngineConfig
from p2smt.synth.driver import synthesize

FLAT_ALLREDUCE = "(root, InsideGroup, AllReduce)"

# (system, axes, reduce, matrix or None = every placement, max_len, top, algo)
CASES = [
    ("dgx1-v100", (16,), (0,), None, 5, 3, "ring"),  # two levels, one placement
    ("a100-4x16", (4, 16), (1,), None, 5, 2, "tree"),  # two levels, three placements
    ("fig2-16gpu", (16,), (0,), None, 4, 2, "ring"),  # three levels [2, 2, 4]
    ("h100-superpod", (8, 128), (0,), ((2, 2, 2, 1), (2, 16, 2, 2)), 4, 2, "ring"),  # three levels [2, 2, 2]
]


def _enumerate_then_rank(system, axes, reduce, matrix, max_len, top, algo):
    result = synthesize(Request.for_system(system, axes, reduce, matrix=matrix), EngineConfig(engine="enumerative", max_len=max_len))
    return rank_result(system, result, algo=algo, top=top)


@pytest.fixture(scope="module")
def outcomes():
    out = []
    for name, axes, reduce, matrix, max_len, top, algo in CASES:
        system = load_system(name)
        found = best(system, axes, reduce, matrix=matrix, max_len=max_len, top=top, algo=algo, method="z3")
        ranked = _enumerate_then_rank(system, axes, reduce, matrix, max_len, top, algo)
        out.append((name, found, ranked))
    return out


def test_same_programs_seconds_and_order_as_enumerate_then_rank(outcomes):
    for name, found, ranked in outcomes:
        report = found.to_json()
        assert report["status"] == "optimal", name
        assert [m["matrix"] for m in report["matrices"]] == [m["matrix"] for m in ranked["matrices"]], name
        for mine, theirs in zip(report["matrices"], ranked["matrices"]):
            assert mine["status"] == "optimal"
            assert mine["programs"] == theirs["programs"], (name, mine["matrix"])
        assert report["best"] == ranked["best"], name
        assert report["bytes_per_device"] == ranked["bytes_per_device"]


def test_some_best_program_is_not_allreduce(outcomes):
    bests = {name: ranked["best"]["program"] for name, _, ranked in outcomes}
    assert any(p != FLAT_ALLREDUCE for p in bests.values()), bests
    for name, found, _ in outcomes:
        assert found.best[1].text == bests[name]


def test_every_listed_program_is_valid_and_priced_by_the_cost_model(outcomes):
    from p2smt.cost.model import program_time
    from p2smt.model.dsl import problem, program_steps
    from p2smt.semantics.dense import execute

    for name, found, _ in outcomes:
        system = load_system(name)
        for m in found.matrices:
            prob = problem(m.hierarchy)
            for ranked in m.programs:
                run = execute(prob.num_devices, program_steps(m.hierarchy, ranked.program), prob.goal_groups, True)
                assert run.valid, (name, ranked.text)
                seconds = program_time(system, m.hierarchy, ranked.program, algo=found.algo).seconds
                assert seconds == ranked.seconds


def test_top_larger_than_the_program_set_lists_them_all():
    system = load_system("a100-4x16")
    matrix = ((4, 1), (1, 16))  # one non-trivial level: 3 programs
    found = best(system, (4, 16), (1,), matrix=matrix, max_len=3, top=10, method="z3")
    ranked = _enumerate_then_rank(system, (4, 16), (1,), matrix, 3, 10, "ring")
    assert found.status == "optimal"
    assert [p.to_json() for p in found.matrices[0].programs] == ranked["matrices"][0]["programs"]
    assert len(found.matrices[0].programs) == 3


def test_a_solver_that_gives_up_is_unknown_never_optimal():
    system = load_system("a100-4x16")
    for kwargs in ({"method": "z3"}, {"method": "search", "proof": "certificate"},
                   {"method": "search", "proof": "bound"}):
        found = best(system, (4, 16), (1,), matrix=((1, 4), (4, 4)), max_len=6, timeout_ms=1, **kwargs)
        assert found.status == "unknown", kwargs
        assert found.matrices[0].status == "unknown", kwargs
        assert "not certified" in found.matrices[0].stats["rests_on"] or "gave up" in \
            found.matrices[0].stats["rests_on"], kwargs
    assert found.matrices[0].programs  # the search's list: valid, not certified


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"top": 0}, "--top"),
        ({"max_len": 0}, "--max-len"),
        ({"algo": "fastest"}, "unknown algorithm"),
        ({"bound": "exact"}, "unknown bound"),
        ({"timeout_ms": -5}, "--timeout"),
        ({"encoding": "no-such-encoding", "method": "z3"}, "no-such-encoding"),
        ({"encoding": "no-such-encoding", "proof": "bound"}, "no-such-encoding"),
        ({"proof": "magic"}, "unknown proof"),
    ],
)
def test_bad_requests_are_p2errors(kwargs, message):
    system = load_system("a100-4x16")
    with pytest.raises(P2Error, match=message):
        best(system, (4, 16), (1,), matrix=((4, 1), (1, 16)), **{"max_len": 2, **kwargs})


def test_without_lookahead_the_same_answer_on_three_levels():
    system = load_system("h100-superpod")
    matrix = ((2, 2, 2, 1), (2, 16, 2, 2))
    with_bound = best(system, (8, 128), (0,), matrix=matrix, max_len=4, top=3, method="z3").to_json()
    without = best(system, (8, 128), (0,), matrix=matrix, max_len=4, top=3, lookahead=False, method="z3").to_json()
    assert with_bound["status"] == without["status"] == "optimal"
    assert with_bound["matrices"][0]["programs"] == without["matrices"][0]["programs"]


def test_other_encodings_and_the_sum_bound_give_the_same_answer():
    system = load_system("dgx1-v100")
    reference = best(system, (16,), (0,), max_len=4, top=2, method="z3").to_json()
    for kwargs in ({"encoding": "values"}, {"bound": "sum"}, {"lookahead": False}, {"proof": "bound"},
                   {"proof": "bound", "bound": "sum"}):
        other = best(system, (16,), (0,), max_len=4, top=2, **{"method": "z3", **kwargs}
                     if "proof" not in kwargs else kwargs).to_json()
        assert other["status"] == "optimal", kwargs
        assert other["matrices"][0]["programs"] == reference["matrices"][0]["programs"], kwargs


def test_branch_and_bound_search_gives_rank_s_lists_on_every_case(outcomes):
    """The default (``cost.branch``'s search, proved by the state-graph certificate) returns the same lists,
    seconds, order and best, and says what it rests on."""
    for (name, axes, reduce, matrix, max_len, top, algo), (_, _, ranked) in zip(CASES, outcomes):
        result = best(load_system(name), axes, reduce, matrix=matrix, max_len=max_len, top=top, algo=algo)
        found = result.to_json()
        assert found["status"] == "optimal", name
        for m in result.matrices:
            assert m.stats["proof"]["certified"], name
            assert "state-graph certificate" in m.stats["rests_on"], name
        assert [m["programs"] for m in found["matrices"]] == [m["programs"] for m in ranked["matrices"]], name
        assert found["best"] == ranked["best"], name


def test_branch_and_bound_keeps_every_tie_of_the_last_place():
    """top larger than the program set lists them all; a top that cuts inside a tie keeps rank's text order."""
    system = load_system("a100-4x16")
    matrix = ((4, 1), (1, 16))
    for top in (1, 2, 10):
        found = best(system, (4, 16), (1,), matrix=matrix, max_len=3, top=top, method="search")
        ranked = _enumerate_then_rank(system, (4, 16), (1,), matrix, 3, top, "ring")
        assert [p.to_json() for p in found.matrices[0].programs] == ranked["matrices"][0]["programs"], top


def test_branch_and_bound_refuses_large_hierarchies_and_unknown_methods():
    """Above the compressed interpreter's search limit (4,096 synthesis devices) the search is refused, naming
    what prices the symmetric engine's programs instead (1,024 devices are searched: test_branch_compressed)."""
    with pytest.raises(P2Error, match="at most 4,096 synthesis devices .8,192 here.; `p2smt rank --engine symmetric`"):
        best(load_system("h100-superpod", None, {"su": 32}), (8192,), (0,), max_len=2, method="search")
    system = load_system("h100-superpod")
    with pytest.raises(P2Error, match="unknown method"):
        best(system, (1024,), (0,), max_len=2, method="fastest")


def test_programs_seconds_are_program_time_s_floats():
    """The scoring path (prefix sums, steps priced once per holdings) gives program_time's floats exactly."""
    from p2smt.cost.model import program_time, programs_seconds

    system = load_system("h100-superpod")
    result = synthesize(Request.for_system(system, (8, 128), (0,), matrix=((2, 2, 2, 1), (2, 16, 2, 2))),
                        EngineConfig(engine="symmetric", max_len=4))
    (m,) = result.matrices
    for algo in ("ring", "auto"):
        scored = programs_seconds(system, m.hierarchy, m.programs, algo=algo)
        assert scored == [program_time(system, m.hierarchy, p, algo=algo).seconds for p in m.programs], algo
        assert programs_seconds(system, m.hierarchy, m.programs, algo=algo) == scored  # warm: looked up


def test_cli_method_search_gives_the_z3_answer(run_cli):
    import json

    argv = ["best", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--max-len", "5", "--top", "2",
            "--json"]
    rc, z3_out, _ = run_cli(*argv)
    rc2, search_out, _ = run_cli(*argv, "--method", "search")
    assert rc == rc2 == 0
    z3_best, search_best = json.loads(z3_out), json.loads(search_out)
    assert search_best["best"] == z3_best["best"]
    assert [m["programs"] for m in search_best["matrices"]] == [m["programs"] for m in z3_best["matrices"]]


def test_a_branch_and_bound_list_that_is_not_the_cheapest_is_caught_by_the_bound_query(monkeypatch):
    """The bound query is independent of the search: a search that drops its cheapest program is an internal
    error."""
    from p2smt.cost.branch import BranchAndBound
    from p2smt.errors import InternalError

    real = BranchAndBound.run

    def drop_first(self):
        ranked, stats = real(self)
        return ranked[1:], stats

    monkeypatch.setattr(BranchAndBound, "run", drop_first)
    with pytest.raises(InternalError, match="branch and bound"):
        best(load_system("dgx1-v100"), (16,), (0,), max_len=4, top=2, proof="bound")


def test_the_certified_graph_s_cheapest_paths_are_the_branch_and_bound_s_list():
    """Two exact computations of the list (the certificate's graph, the branch and bound on the bitmatrix
    state) agree program by program and float by float; a certificate out of budget leaves the search's
    list, unknown."""
    for name, axes, reduce, matrix, max_len, top, algo in CASES:
        system = load_system(name)
        kwargs = {"matrix": matrix, "max_len": max_len, "top": top, "algo": algo}
        proved = best(system, axes, reduce, proof="certificate", **kwargs)
        searched = best(system, axes, reduce, proof="none", **kwargs)
        assert proved.to_json()["matrices"][0]["programs"] == searched.to_json()["matrices"][0]["programs"], name
        assert all("state-graph certificate" in m.stats["rests_on"] for m in proved.matrices), name


def test_without_a_proof_the_result_says_it_rests_on_the_search_alone():
    found = best(load_system("dgx1-v100"), (16,), (0,), max_len=4, top=2, proof="none")
    assert found.status == "optimal"
    assert "alone" in found.matrices[0].stats["rests_on"]
    assert "proof" not in found.matrices[0].stats


def test_the_default_certificate_is_grown_only_as_far_as_the_cost_bound_and_lists_every_program_when_asked():
    """Top larger than the program set expands the whole graph and lists them all; top 1 leaves states
    beyond the bound unexpanded and is still the branch and bound's answer."""
    system = load_system("a100-4x16")
    found = best(system, (4, 16), (1,), matrix=((4, 1), (1, 16)), max_len=3, top=10)
    ranked = _enumerate_then_rank(system, (4, 16), (1,), ((4, 1), (1, 16)), 3, 10, "ring")
    assert [p.to_json() for p in found.matrices[0].programs] == ranked["matrices"][0]["programs"]
    assert found.matrices[0].stats["proof"]["certificate"]["bound_seconds"] is None  # nothing cut off
    pod = load_system("h100-superpod")
    kwargs = {"matrix": ((2, 2, 2, 1), (2, 16, 2, 2)), "max_len": 5}
    proved = best(pod, (8, 128), (0,), **kwargs)
    assert proved.matrices[0].stats["proof"]["certificate"]["unexpanded"] > 0
    assert proved.to_json()["best"] == best(pod, (8, 128), (0,), proof="none", **kwargs).to_json()["best"]


def test_a_certificate_missing_a_row_the_bound_needs_is_refused():
    """The paths are read off the certificate only after checking it expands every state a path within the
    bound reaches before its last step: a row dropped from the cheapest path is an internal error."""
    from dataclasses import replace

    from p2smt.cost.graphbest import Prices, cheapest_paths, grow
    from p2smt.errors import InternalError
    from p2smt.model.dsl import candidate_instructions, problem
    from p2smt.model.hierarchy import synthesis_hierarchy
    from p2smt.model.topology import build_topology
    from p2smt.synth.certproof import graph_proof
    from p2smt.synth.driver import placements_for

    system = load_system("dgx1-v100")
    (placement,) = placements_for(system, (16,), None)
    h = synthesis_hierarchy(placement, (0,), system.level_names, "d", "per-ancestor")
    prob = problem(h, True)
    instructions = [ins for ins, _ in candidate_instructions(h)]
    prices = Prices(instructions, build_topology(system), h, algo="ring", bytes_per_device=2.0**26,
                    k=prob.num_devices)
    bound = []
    doc, closed, figures = graph_proof(prob, 4, grow=lambda b: bound.append(grow(b, prices, 4, 1)))
    assert figures["certified"]
    (first,) = cheapest_paths(doc, closed, instructions, prices, max_len=4, top=1, bound=bound[0])
    on_path = doc["edges"][0][instructions.index(first.program.instructions[0])]
    if on_path in closed.goals:
        pytest.skip("the cheapest program is one step")
    dropped = replace(closed, unexpanded=closed.unexpanded | {on_path})
    with pytest.raises(InternalError, match="unexpanded"):
        cheapest_paths(doc, dropped, instructions, prices, max_len=4, top=1, bound=bound[0])


@pytest.mark.parametrize("goal", ["reduce-scatter", "all-gather"])
def test_sharded_goals_give_rank_s_list_from_the_certificate(goal):
    """best --goal: the certificate carries the shards, AllGather is priced from its sharded start, and the
    programs whose buffer positions are permuted are passed over: the list is rank's over the certified set."""
    from p2smt.model.goal import Goal

    system = load_system("a100-4x16")
    kwargs = {"matrix": ((4, 16),), "max_len": 4}
    found = best(system, (64,), (0,), top=3, bytes_per_device=1e8, goal=goal, **kwargs)
    req = Request.for_system(system, (64,), (0,), goal=Goal.of(goal, None, (0,)), matrix=kwargs["matrix"])
    ranked = rank_result(system, synthesize(req, EngineConfig(max_len=4)), top=3, bytes_per_device=1e8)
    assert found.status == "optimal"
    mine = found.to_json()["matrices"][0]["programs"]
    assert mine == [{k: p[k] for k in ("program", "seconds")} for p in ranked["matrices"][0]["programs"]]
    assert found.to_json()["goal"]["kind"] == goal
    stats = found.matrices[0].stats
    assert "buffer positions" in stats["rests_on"]
    assert (stats["proof"]["positions_dropped"] > 0) == (goal == "all-gather")  # AllGather's permuted orders
    with pytest.raises(P2Error, match="searched only by --method search"):
        best(system, (64,), (0,), goal=goal, proof="bound", **kwargs)
