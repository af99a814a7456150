"""Synthesis for the sharded goals (docs/semantics.md §6): ReduceScatter, AllGather and HSDP programs up to length
4, the same set from every engine that takes the goal, certified by the state-graph certificate whose query cvc5
re-checks, each program's lowered plan judged by the dense and positions interpreters; the orders JAX ran
(tests/test_sharded_goals_jax.py) are in the set exactly when JAX found them right; one-line refusals elsewhere."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from p2smt.api import recheck
from p2smt.certcheck.closure import Rejected, check
from p2smt.cli.main import main
from p2smt.cost.rank import rank
from p2smt.cost.volumes import held_fractions_of_programs
from p2smt.errors import P2Error
from p2smt.model.dsl import lower_program, parse_program, problem
from p2smt.model.goal import Goal
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.request import Request
from p2smt.semantics.dense import execute
from p2smt.semantics.positions import execute_positions
from p2smt.synth.certproof import checker_problem
from p2smt.synth.config import Engine, EngineConfig, Proof
from p2smt.synth.driver import synthesize
from p2smt.synth.stategraph import explore

L = 4
ENGINES = {
    "pieces": EngineConfig(engine=Engine.PIECES, max_len=L),
    "enumerative": EngineConfig(engine=Engine.ENUMERATIVE, max_len=L),
    "z3": EngineConfig(engine=Engine.Z3, max_len=L),
    "certified": EngineConfig(max_len=L),
    "certified-certificate": EngineConfig(max_len=L, proof=Proof.CERTIFICATE),
    "certified-bmc": EngineConfig(max_len=L, proof=Proof.BMC),
}
A100 = {"system": "a100-4x16", "axes": (64,), "reduce": (0,), "matrix": ((4, 16),)}
HSDP = {"system": "fig2-16gpu", "axes": (4, 4), "reduce": (0, 1), "matrix": ((1, 2, 2, 1), (1, 1, 1, 4))}
ACROSS_THEN_INSIDE = "(node, Parallel(root), {c}); (node, InsideGroup, {c})"
INSIDE_THEN_ACROSS = "(node, InsideGroup, {c}); (node, Parallel(root), {c})"


def request(where: dict, kind: str, shard_axes=None, **kw) -> Request:
    return Request(**where, goal=Goal.of(kind, shard_axes, where["reduce"]), **kw)


def programs(req: Request, config: EngineConfig):
    result = synthesize(req, config)
    (m,) = result.matrices
    return [str(p) for p in m.programs], m, result


GOALS = {"rs": (A100, "reduce-scatter", None), "ag": (A100, "all-gather", None), "hsdp": (HSDP, "reduce-scatter", (1,))}


@functools.cache
def found_sets(name: str):
    """Every engine's programs (and the certified result) for one goal, computed once per session."""
    where, kind, shard = GOALS[name]
    req = Request(**where, goal=Goal.of(kind, shard, where["reduce"]))
    return name, req, {engine: programs(req, config) for engine, config in ENGINES.items()}


@pytest.fixture(params=list(GOALS))
def sets(request):
    return found_sets(request.param)


def test_every_engine_finds_the_same_set_and_the_certificates_hold(sets):
    name, req, found = sets
    first = found["pieces"][0]
    assert all(progs == first for progs, _, _ in found.values())
    assert len(first) == {"rs": 2, "ag": 2, "hsdp": 52}[name]
    for engine in ("certified", "certified-certificate", "certified-bmc"):
        assert found[engine][2].certified is True
    assert "state-graph certificate" in found["certified-certificate"][1].stats["rests_on"]
    assert found["certified"][2].to_json()["goal"] == req.goal.to_json()


def test_the_reduce_scatter_set_tells_the_two_orders_apart():
    _, _, found = found_sets("rs")
    progs = found["pieces"][0]
    assert progs == ["(root, InsideGroup, ReduceScatter)", ACROSS_THEN_INSIDE.format(c="ReduceScatter")]
    assert INSIDE_THEN_ACROSS.format(c="ReduceScatter") not in progs
    assert found["certified"][1].stats["positions_dropped"] == 0


def test_all_gather_drops_the_orders_positions_reject():
    """Both AllGather orders hold every chunk; only inside-then-across leaves them in order (JAX agrees)."""
    _, _, found = found_sets("ag")
    progs, m, _ = found["certified"]
    assert progs == ["(root, InsideGroup, AllGather)", INSIDE_THEN_ACROSS.format(c="AllGather")]
    assert m.stats["positions_dropped"] == 3
    assert m.stats["positions_example"] == (ACROSS_THEN_INSIDE.format(c="AllGather") + ": device 0 position 1 holds "
                                            "block 16, not block 1: the result is permuted")


def test_every_program_lowered_reaches_the_goal_in_the_interpreters(sets):
    _, req, found = sets
    progs, m, _ = found["certified"]
    system = req.load_system()
    (placement,) = req.placements(system)
    sharding = req.goal.sharding(placement)
    goal_groups = placement.reduction_groups(req.reduce)
    k = len(goal_groups[0])
    for text in progs:
        steps = [(s.collective, s.groups) for s in lower_program(m.hierarchy, parse_program(text, m.hierarchy))]
        assert execute(placement.num_devices, steps, goal_groups, True, k, sharding).valid, text
        assert execute_positions(placement.num_devices, steps, goal_groups, k, sharding).valid, text


def test_cvc5_re_checks_the_certificate_query(sets, tmp_path):
    pytest.importorskip("cvc5")
    _, req, _ = sets
    config = EngineConfig(max_len=L, proof=Proof.CERTIFICATE, certificate=str(tmp_path))
    assert synthesize(req, config).certified is True
    docs = [json.loads(p.read_text()) for p in tmp_path.glob("state-graph-*.json")]
    assert docs and all(d["version"] == 2 and d["sharded_goal"]["kind"] == req.goal.kind.value for d in docs)
    results = recheck(tmp_path)
    assert results and all(r.verdict.value == "confirmed" for r in results)


# ---------------------------------------------------------------- JAX's ground truth (16 devices: node 4 > gpu 4)

JAX16 = {"system": "a100-4x16", "levels": (("gpu", 4),)}
JAX_VERDICTS = [  # the orders tests/test_sharded_goals_jax.py ran in JAX, with the verdict its numbers gave
    ({"axes": (16,), "reduce": (0,), "matrix": ((4, 4),)}, "reduce-scatter", None,
     ACROSS_THEN_INSIDE.format(c="ReduceScatter"), True),
    ({"axes": (16,), "reduce": (0,), "matrix": ((4, 4),)}, "reduce-scatter", None,
     INSIDE_THEN_ACROSS.format(c="ReduceScatter"), False),
    ({"axes": (4, 4), "reduce": (0, 1), "matrix": ((4, 1), (1, 4))}, "reduce-scatter", (1,),
     "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce)", True),
    ({"axes": (4, 4), "reduce": (0, 1), "matrix": ((4, 1), (1, 4))}, "reduce-scatter", (1,),
     "(node, Parallel(root), ReduceScatter); (node, InsideGroup, AllReduce)", False),
    ({"axes": (16,), "reduce": (0,), "matrix": ((4, 4),)}, "all-gather", None,
     INSIDE_THEN_ACROSS.format(c="AllGather"), True),
    ({"axes": (16,), "reduce": (0,), "matrix": ((4, 4),)}, "all-gather", None,
     ACROSS_THEN_INSIDE.format(c="AllGather"), False),
]


@pytest.mark.parametrize("where,kind,shard,program,jax_valid", JAX_VERDICTS,
                         ids=lambda v: v if isinstance(v, str) and v.startswith("(") else None)
def test_synthesized_exactly_when_jax_found_the_order_right(where, kind, shard, program, jax_valid):
    req = Request(**JAX16, **where, goal=Goal.of(kind, shard, where["reduce"]))
    progs, _, _ = programs(req, EngineConfig(max_len=2))
    assert (program in progs) == jax_valid


# ---------------------------------------------------------------- what refuses the goal, in one line

def test_engines_encodings_and_rules_that_know_only_allreduce_refuse():
    req = request(A100, "reduce-scatter")
    for config, words in [(EngineConfig(engine=Engine.SYMMETRIC, max_len=2), "the symmetric engine"),
                          (EngineConfig(engine=Engine.Z3, encoding="representative", max_len=2),
                           "the representative encoding"),
                          (EngineConfig(max_len=2, prune="p2-47"), "--prune p2-47")]:
        with pytest.raises(P2Error, match=f"{words}.*does not take the reduce-scatter goal"):
            synthesize(req, config)


def test_hierarchy_d_with_reduction_axes_sharing_a_level_is_refused_and_c_works():
    where = {"system": "a100-4x16", "axes": (4, 16), "reduce": (0, 1), "matrix": ((2, 2), (2, 8))}
    with pytest.raises(P2Error, match=r"hierarchy \(d\) numbers their devices level by level.*--hierarchy c"):
        synthesize(request(where, "reduce-scatter"), EngineConfig(max_len=2))
    progs, _, _ = programs(request(where, "reduce-scatter", hierarchy="c"), EngineConfig(max_len=2))
    # (c)'s levels go axis by axis, the rank order: the flat one, and across-then-inside at each split point
    assert progs == ["(root, InsideGroup, ReduceScatter)", *(f"({lv}, Parallel(root), ReduceScatter); ({lv}, InsideGroup, "
                                                             "ReduceScatter)" for lv in ("a0_node", "a0_gpu", "a1_node"))]


def test_cli_synth_goal_and_its_refusal(capsys):
    args = ["synth", "--system", "a100-4x16", "--axes", "64", "--reduce", "0", "--matrix", "[[4,16]]",
            "--max-len", "2", "--goal", "reduce-scatter", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["goal"] == {"kind": "reduce-scatter", "shard_axes": [0]} and out["total_programs"] == 2
    assert main([*args[:-1], "--engine", "symmetric"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not take the reduce-scatter goal" in err[0]


# ---------------------------------------------------------------- the certificate and the AllReduce goal

def test_the_checker_builds_the_sharded_goal_itself_and_refuses_another_goal():
    req = request(A100, "reduce-scatter")
    (placement,) = req.placements()
    h = synthesis_hierarchy(placement, req.reduce, req.load_system().level_names)
    sharded = problem(h, True, req.sharding(placement, h))
    graph = explore(sharded, 2)
    doc = graph.document(graph.programs())
    found = check(doc, checker_problem(sharded), 2).programs
    assert [sharded.label(p) for p in sorted(found)] == ["(root, InsideGroup, ReduceScatter)",
                                                         ACROSS_THEN_INSIDE.format(c="ReduceScatter")]
    with pytest.raises(Rejected, match="not a version-1"):
        check(doc, checker_problem(problem(h, True)), 2)
    forged = dict(doc, sharded_goal=dict(doc["sharded_goal"], rank=doc["sharded_goal"]["rank"][::-1]))
    with pytest.raises(Rejected, match="another goal"):
        check(forged, checker_problem(sharded), 2)
    plain = explore(problem(h, True), 2).document([])
    assert plain["version"] == 1 and "sharded_goal" not in plain


def test_the_allreduce_request_and_result_json_are_unchanged():
    req = Request(**A100)
    assert "goal" not in req.to_json() and Request.from_json(req.to_json()) == req
    sharded = request(A100, "all-gather")
    assert Request.from_json(sharded.to_json()) == sharded
    assert "goal" not in synthesize(req, EngineConfig(max_len=1)).to_json()


# ---------------------------------------------------------------- prices

def test_all_gather_holdings_start_from_the_shard():
    req = request(A100, "all-gather")
    (placement,) = req.placements()
    h = synthesis_hierarchy(placement, req.reduce, req.load_system().level_names)
    prog = parse_program(INSIDE_THEN_ACROSS.format(c="AllGather"), h)
    sharding = req.sharding(placement, h)
    for checked in (False, True):
        before = held_fractions_of_programs(h, [prog], checked=checked, sharding=sharding)[prog]
        assert np.allclose(before[0], 1 / 64) and np.allclose(before[1], 16 / 64)


def test_rank_a_hierarchical_reduce_scatter_beats_the_flat_one():
    """Axis 0 inside the nodes, axis 1 across them: rank = 4·gpu + node, so ReduceScatter inside each node first
    (NVSwitch, the whole buffer) and then across nodes (a sixteenth) puts every shard right, and costs less than
    the flat ReduceScatter whose ring crosses the nodes' one NIC with the whole buffer."""
    req = Request("a100-4x16", axes=(16, 4), reduce=(0, 1), matrix=((1, 16), (4, 1)),
                  goal=Goal.of("reduce-scatter", None, (0, 1)))
    report = rank(req, EngineConfig(max_len=L))
    (m,) = report["matrices"]
    top = m["programs"][0]
    assert top["program"] == INSIDE_THEN_ACROSS.format(c="ReduceScatter")
    assert m["flat_collective"] == "ReduceScatter" and top["seconds"] < m["flat_seconds"] < m["allreduce_seconds"]
    b = report["bytes_per_device"]
    assert top["step_bytes"] == [b, b / 16]
    assert report["goal"] == {"kind": "reduce-scatter", "shard_axes": [0, 1]}


def test_hierarchy_c_with_several_goal_groups_the_same_set_from_every_engine():
    """Under (c) every device is a synthesis device (two goal groups of 8 here, 16 chunks, shards of 2 or 4)."""
    where = {"system": "dgx-a100", "axes": (2, 2, 4), "reduce": (1, 2), "matrix": ((2, 1), (1, 2), (1, 4))}
    for kind, shard, count in (("reduce-scatter", (2,), 6), ("all-gather", None, 2)):
        req = request(where, kind, shard, hierarchy="c")
        found = [programs(req, config)[0] for config in ENGINES.values()]
        assert all(f == found[0] for f in found) and len(found[0]) == count
