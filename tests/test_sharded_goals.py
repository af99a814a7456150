"""The sharded goals of docs/semantics.md §6 on the command line, in the API and in the interpreters: which
shard each device must end with, the two hierarchical ReduceScatter orders told apart, HSDP, AllGather,
the allreduce goal unchanged, and one-line refusals (exit 2) where a goal is not supported."""

from __future__ import annotations

import json

import numpy as np
import pytest

from p2smt.api import check, verify
from p2smt.errors import P2Error
from p2smt.model.collectives import Collective
from p2smt.model.goal import Goal, GoalKind, Sharding
from p2smt.model.placement import Placement
from p2smt.model.request import Request
from p2smt.semantics.dense import execute, execute_all, goal_state, initial_state
from p2smt.semantics.verdict import judge

RS, AG, AR = Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.ALL_REDUCE
A100 = ["--system", "a100-4x16", "--axes", "64", "--reduce", "0", "--matrix", "[[4,16]]"]
ACROSS = "[16,4]<=[4,16]T(1,0)"  # groups {g, 16+g, 32+g, 48+g}: one GPU per node, in node order
INSIDE = "[4,16]<=[64]"  # the 16 GPUs of each node
REQ = Request("a100-4x16", axes=(64,), reduce=(0,), matrix=((4, 16),))


def plan_file(tmp_path, name: str, collective: str, groups: list[str]) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps([{"collective": collective, "replica_groups": g} for g in groups]))
    return str(path)


@pytest.fixture
def orders(tmp_path):
    """The two two-step ReduceScatter orders: across nodes then inside (right), and the reverse."""
    return (plan_file(tmp_path, "right", "ReduceScatter", [ACROSS, INSIDE]),
            plan_file(tmp_path, "reversed", "ReduceScatter", [INSIDE, ACROSS]))


def test_verify_proves_one_order_and_refutes_the_other_naming_device_position_and_block(run_cli, orders):
    right, reversed_ = orders
    rc, out, _ = run_cli("verify", *A100, "--plan", right, "--goal", "reduce-scatter", "--json")
    assert rc == 0
    proved = json.loads(out)
    assert proved["status"] == "proved" and proved["goal"] == {"kind": "reduce-scatter", "shard_axes": [0]}
    assert "every step and the reduce-scatter goal" in proved["rests_on"]  # Z3 proves the sharded goal itself
    rc, out, _ = run_cli("verify", *A100, "--plan", reversed_, "--goal", "reduce-scatter", "--json")
    assert rc == 1
    refuted = json.loads(out)
    assert refuted["status"] == "counterexample" and refuted["failing_step"] is None and refuted["rule"] == "goal"
    assert refuted["violation"]["facts"]["holds_chunks"] == [4]
    assert refuted["violation"]["facts"]["shard_chunks"] == [1]
    where = refuted["positions"]
    assert (where["device"], where["position"], where["block"], where["expected_block"]) == (1, 0, 4, 1)
    assert where["misplaced"] == 60  # only the devices 16n + g with g = 5n end right
    rc, out, _ = run_cli("verify", *A100, "--plan", reversed_, "--goal", "reduce-scatter")
    assert rc == 1 and "device 1 ends with chunks [4], not its shard" in out
    assert "device 1 position 0 holds block 4, not block 1" in out


def test_check_tells_the_orders_apart_and_reports_positions(run_cli, orders):
    right, reversed_ = orders
    rc, out, _ = run_cli("check", *A100, "--plan", right, "--goal", "reduce-scatter")
    assert rc == 0 and out.startswith("VALID") and "reduce-scatter goal, sharded over axes [0]" in out
    rc, out, _ = run_cli("check", *A100, "--plan", reversed_, "--goal", "reduce-scatter", "--json")
    assert rc == 1
    data = json.loads(out)
    assert data["goal"]["kind"] == "reduce-scatter"
    assert data["positions"]["misplaced"][0] == {"device": 1, "position": 0, "expected_block": 1,
                                                 "found_block": 4, "missing": [], "foreign": []}


def test_the_allreduce_goal_is_unchanged_by_the_option(run_cli, orders):
    right, _ = orders
    for command in ("check", "verify"):
        default = run_cli(command, *A100, "--plan", right, "--json")
        explicit = run_cli(command, *A100, "--plan", right, "--json", "--goal", "allreduce")
        assert default[0] == explicit[0] == 1
        default_json, explicit_json = json.loads(default[1]), json.loads(explicit[1])
        for data in (default_json, explicit_json):
            data.get("stats", {}).pop("seconds", None)
        assert default_json == explicit_json and "goal" not in default_json


def test_the_api_mirrors_the_command_line():
    right = [{"collective": "ReduceScatter", "replica_groups": g} for g in (ACROSS, INSIDE)]
    assert check(REQ, right, goal="reduce-scatter").valid
    assert not check(REQ, right[::-1], goal="reduce-scatter").valid
    assert not check(REQ, right).valid  # the allreduce goal, by default
    assert verify(REQ, right, goal="reduce-scatter").status == "proved"
    refuted = verify(REQ, right[::-1], goal="reduce-scatter")
    assert refuted.status == "counterexample" and refuted.violation.facts["holds_chunks"] == [4]
    # a DSL program over the synthesis hierarchy: the same two orders
    good = "(node, Parallel(root), ReduceScatter); (node, InsideGroup, ReduceScatter)"
    bad = "(node, InsideGroup, ReduceScatter); (node, Parallel(root), ReduceScatter)"
    assert check(REQ, good, goal="reduce-scatter").valid and not check(REQ, bad, goal="reduce-scatter").valid
    assert verify(REQ, good, goal="reduce-scatter").status == "proved"
    half = verify(REQ, [{"collective": "AllGather", "replica_groups": INSIDE}], goal="all-gather")
    assert half.status == "counterexample" and half.violation.facts["shard_chunks"] == list(range(64))


def test_a_positions_only_defect_is_a_counterexample_of_the_api_verify():
    """Under the AllReduce goal an explicit plan proved in chunk semantics can still misplace blocks."""
    reversed_gather = [{"collective": "ReduceScatter", "replica_groups": [list(range(64))]},
                       {"collective": "AllGather", "replica_groups": [list(range(63, -1, -1))]}]
    proof = verify(REQ, reversed_gather)
    assert proof.status == "counterexample" and proof.violation.rule == "positions.goal"
    assert (proof.violation.facts["device"], proof.violation.facts["position"],
            proof.violation.facts["block"]) == (0, 0, 63)


def test_all_gather_is_proved_by_z3(run_cli, tmp_path):
    right = plan_file(tmp_path, "ag", "AllGather", [INSIDE, ACROSS])
    wrong = plan_file(tmp_path, "ag-rev", "AllGather", [ACROSS, INSIDE])
    rc, out, _ = run_cli("verify", *A100, "--plan", right, "--goal", "all-gather", "--json")
    data = json.loads(out)
    assert rc == 0 and data["status"] == "proved" and "every step and the all-gather goal" in data["rests_on"]
    rc, out, _ = run_cli("verify", *A100, "--plan", wrong, "--goal", "all-gather", "--json")
    data = json.loads(out)
    assert rc == 1 and (data["device"], data["position"], data["block"]) == (0, 1, 16)
    rc, out, _ = run_cli("check", *A100, "--plan", wrong, "--goal", "all-gather")
    assert rc == 1 and "device 0 position 1 holds block 16, not block 1" in out


@pytest.mark.parametrize(("argv", "words"), [
    (["verify", *A100, "--goal", "reduce-scatter", "--values"], "--values does not prove the reduce-scatter goal"),
    (["check", *A100, "--goal", "reduce-scatter", "--shard-axes", "1"], "shard axis 1 is not a reduction axis"),
    (["check", *A100, "--goal", "allreduce", "--shard-axes", "0"], "the allreduce goal has no shard axes"),
    (["check", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "0,1", "--matrix", "[[1,4],[4,4]]",
      "--goal", "all-gather", "--shard-axes", "1"], "its shard axes must be [0, 1]"),
    (["check", *A100, "--goal", "scatter"], "unknown goal 'scatter'; choose from allreduce, reduce-scatter"),
    (["synth", *A100, "--goal", "reduce-scatter", "--engine", "symmetric"],
     "the symmetric engine (a shard rank breaks the symmetry inside a level; use the default engine) does not take"),
    (["rank", *A100, "--goal", "reduce-scatter", "--prune", "p2-47"], "--prune p2-47"),
    (["best", *A100, "--goal", "reduce-scatter", "--proof", "bound"], "is searched only by --method search"),
])
def test_unsupported_goals_are_refused_in_one_line(run_cli, orders, argv, words):
    rc, out, err = run_cli(*argv, "--plan", orders[0]) if argv[0] in ("check", "verify") else run_cli(*argv)
    assert rc == 2 and out == ""
    assert words in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if "error" in line]) == 1


def test_each_device_ends_with_its_rank_along_the_shard_axes():
    """Two axes, each split over both levels: the rank is row-major over the axes, not the physical id."""
    placement = Placement((4, 4), (4, 4), ((2, 2), (2, 2)))
    sharding = Goal.of("reduce-scatter", None, (0, 1)).sharding(placement)
    coords = placement.coordinates
    assert sharding.shards == 16
    assert sharding.rank == tuple(int(coords[d, 0] * 4 + coords[d, 1]) for d in range(16))
    assert sharding.rank != tuple(range(16))
    assert [placement.mesh_order()[r] for r in range(16)] == [sharding.rank.index(r) for r in range(16)]
    hsdp = Goal.of("reduce-scatter", (1,), (0, 1)).sharding(placement)
    assert hsdp.shards == 4 and hsdp.rank == tuple(int(coords[d, 1]) for d in range(16))


def test_the_goal_states_of_chunk_semantics():
    """ReduceScatter/HSDP: the shard's chunks hold the whole group, every other chunk is empty; AllGather:
    each device starts with its own chunk and ends with chunk r from the member of rank r."""
    placement = Placement((2, 2), (2, 2), ((2, 1), (1, 2)))
    groups = placement.reduction_groups((0, 1))
    hsdp = Goal.of("reduce-scatter", (1,), (0, 1)).sharding(placement)
    goal = goal_state(4, groups, 4, hsdp)
    for d in range(4):
        held = [r for r in range(4) if goal[d, r].any()]
        assert held == list(hsdp.shard(d, 4)) and len(held) == 2
        assert all(goal[d, r].sum() == 4 for r in held)
    gather = Goal.of("all-gather", None, (0, 1)).sharding(placement)
    start, end = initial_state(4, 4, gather), goal_state(4, groups, 4, gather)
    for d in range(4):
        assert np.argwhere(start[d]).tolist() == [[gather.rank[d], d]]
        assert [int(np.flatnonzero(end[d, r])[0]) for r in range(4)] == [gather.rank.index(r) for r in range(4)]
    flat = execute(4, [(AG, [tuple(gather.rank.index(r) for r in range(4))])], groups, chunks=4, sharding=gather)
    assert flat.valid


def test_goal_values():
    assert Goal.of("allreduce", None, (0, 1)) == Goal() and not Goal().sharded
    assert Goal.of("reduce-scatter", None, (1, 0)) == Goal(GoalKind.REDUCE_SCATTER, (0, 1))
    assert Goal.of(GoalKind.REDUCE_SCATTER, [1], (0, 1)).describe() == "reduce-scatter over axes [1]"
    with pytest.raises(P2Error, match="repeat"):
        Goal.of("reduce-scatter", (0, 0), (0,))
    with pytest.raises(P2Error, match="unknown goal"):
        Goal.of("gather", None, (0,))
    with pytest.raises(P2Error, match="at least one shard axis"):
        Goal.of("reduce-scatter", (), (0,))


def test_execute_all_judges_the_goal_as_execute_does():
    placement = Placement((4, 16), (64,), ((4, 16),))
    groups = placement.reduction_groups((0,))
    sharding = Goal.of("reduce-scatter", None, (0,)).sharding(placement)
    across = tuple(tuple(g + 16 * n for n in range(4)) for g in range(16))
    inside = tuple(tuple(range(16 * n, 16 * n + 16)) for n in range(4))
    programs = [[(RS, across), (RS, inside)], [(RS, inside), (RS, across)], [(AR, (tuple(range(64)),))]]
    many = execute_all(64, programs, groups, True, keep_states=False, sharding=sharding)
    assert [run.valid for run in many] == [execute(64, p, groups, True, 64, sharding).valid for p in programs]
    assert [run.valid for run in many] == [True, False, False]  # an AllReduce holds more than the shard


def test_a_plan_beyond_the_dense_interpreter_is_refused_with_its_goal():
    n = 1024
    sharding = Sharding(GoalKind.REDUCE_SCATTER, tuple(range(n)), n)
    with pytest.raises(P2Error, match="reduce-scatter goal is judged by the dense interpreter only"):
        judge(n, [(RS, (tuple(range(n)),))], (tuple(range(n)),), n, True, layout=True, sharding=sharding)


@pytest.mark.parametrize(("kind", "reduce", "valid"), [
    ("d", (1,), ["(root, InsideGroup, ReduceScatter)",
                 "(node, Parallel(root), ReduceScatter); (node, InsideGroup, ReduceScatter)"]),
    ("c", (0, 1), ["(root, InsideGroup, ReduceScatter)",
                   "(a0_node, Parallel(root), ReduceScatter); (a0_node, InsideGroup, ReduceScatter)"]),
    ("d", (0, 1), []),  # collapsed levels order devices level-major, never axis-major: see §6
])
def test_a_program_reaches_the_goal_on_its_synthesis_hierarchy_exactly_when_lowered(kind, reduce, valid):
    """The goal bound to synthesis devices (``Sharding.on_hierarchy``) gives the verdict of the lowered plan, on
    a placement whose synthesis order need be neither the physical order nor the rank order; the first
    programs (by length, then candidate order) of up to two ReduceScatter steps that reach the goal."""
    from itertools import product

    from p2smt.model.dsl import Program, candidate_instructions, lower_program, program_steps
    from p2smt.model.hierarchy import synthesis_hierarchy

    placement = Placement((4, 16), (4, 16), ((2, 2), (2, 8)))
    h = synthesis_hierarchy(placement, reduce, ("node", "gpu"), kind)
    sharding = Goal.of("reduce-scatter", None, reduce).sharding(placement)
    local = sharding.on_hierarchy(h)
    groups = placement.reduction_groups(reduce)
    scatters = [ins for ins, _ in candidate_instructions(h) if ins.collective is RS]
    found = []
    for program in [Program(p) for n in (1, 2) for p in product(scatters, repeat=n)]:
        lowered = [(s.collective, s.groups) for s in lower_program(h, program)]
        system = execute(64, lowered, groups, True, len(groups[0]), sharding)
        synth = execute(h.num_devices, program_steps(h, program), h.goal_groups, True, len(groups[0]), local)
        fails = [(run.valid, run.violation and (run.violation.step, run.violation.rule)) for run in (synth, system)]
        assert fails[0] == fails[1], str(program)
        if system.valid:
            found.append(str(program))
    assert found[:2] == valid
