"""Lowering under a sharded goal (docs/semantics.md §6): ReduceScatter, HSDP and AllGather programs lowered to
JAX (``psum_scatter``/``all_gather`` tiled, over mesh axes) and torch.distributed, run on 16 local devices with
distinct integers: every device must hold exactly its shard of the sum (or every shard in rank order).

Each backend runs every case in one launch. A program that misses the goal is refused by ``lower``/``run`` in one
line; run anyway (``--allow-invalid``), the numeric check names the device and the block it holds instead.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass

import pytest

from p2smt.lower import RunCase, lower_module, placement_target, run_cases
from p2smt.lower.check import compare, device_input, expected
from p2smt.lower.layout import layout, mesh_axes_of
from p2smt.model.collectives import Collective
from p2smt.model.collectives import ExplicitStep as S
from p2smt.model.dsl import lower_program, parse_program
from p2smt.model.goal import Goal
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement
from p2smt.model.system import load_system
from p2smt.semantics.verdict import judge

SYSTEM = load_system("a100-4x16", levels={"gpu": 4})  # 4 nodes of 4 GPUs: 16 devices
CLI_SYSTEM = ["--system", "a100-4x16", "--level", "gpu=4"]
ACROSS_THEN_INSIDE = "(node, Parallel(root), ReduceScatter); (node, InsideGroup, ReduceScatter)"
INSIDE_THEN_ACROSS = "(node, InsideGroup, ReduceScatter); (node, Parallel(root), ReduceScatter)"


@dataclass(frozen=True)
class Where:
    """A placement on the 16-device system, its reduction axes and goal."""

    axes: tuple[int, ...]
    matrix: tuple[tuple[int, ...], ...]
    reduce: tuple[int, ...]
    goal: str
    shard_axes: tuple[int, ...] | None = None

    @property
    def placement(self) -> Placement:
        return Placement(SYSTEM.sizes, self.axes, self.matrix)

    def goal_obj(self) -> Goal:
        return Goal.of(self.goal, self.shard_axes, self.reduce)

    @property
    def sharding(self):
        return self.goal_obj().sharding(self.placement)

    def target(self):
        return placement_target(self.placement, self.reduce, SYSTEM.level_names, None, SYSTEM.name, self.sharding)

    def argv(self) -> list[str]:
        out = [*CLI_SYSTEM, "--axes", ",".join(map(str, self.axes)), "--reduce", ",".join(map(str, self.reduce)),
               "--matrix", json.dumps([list(r) for r in self.matrix]), "--goal", self.goal]
        return out + (["--shard-axes", ",".join(map(str, self.shard_axes))] if self.shard_axes else [])


ONE_AXIS_RS = Where((16,), ((4, 4),), (0,), "reduce-scatter")
ONE_AXIS_AG = Where((16,), ((4, 4),), (0,), "all-gather")
HSDP = Where((4, 4), ((4, 1), (1, 4)), (0, 1), "reduce-scatter", (1,))  # shard over GPUs, replicate over nodes
TWO_AXES_RS = Where((4, 4), ((2, 2), (2, 2)), (0, 1), "reduce-scatter")  # rank order is not the physical order


def dsl_case(name: str, where: Where, program: str) -> tuple[RunCase, bool]:
    h = synthesis_hierarchy(where.placement, where.reduce, SYSTEM.level_names)
    prog = parse_program(program, h)
    plan = lower_program(h, prog)
    return RunCase(name, plan, where.target(), tuple(str(i) for i in prog.instructions), 64), _valid(where, plan)


def axes_case(name: str, where: Where, ops: tuple[tuple[Collective, tuple[int, ...]], ...]) -> tuple[RunCase, bool]:
    """An explicit plan: each step over the devices that differ only on the given parallelism axes, members in
    row-major order over them (the mesh order)."""
    p = where.placement
    steps = []
    for coll, over in ops:
        groups: dict[tuple, list[int]] = {}
        for d in sorted(range(p.num_devices), key=lambda d: tuple(p.axis_coords(d)[a] for a in over)):
            key = tuple(c for a, c in enumerate(p.axis_coords(d)) if a not in over)
            groups.setdefault(key, []).append(d)
        steps.append(S(coll, tuple(tuple(g) for g in sorted(groups.values()))))
    plan = tuple(steps)
    return RunCase(name, plan, where.target(), None, 64), _valid(where, plan)


def _valid(where: Where, plan) -> bool:
    goal_groups = where.placement.reduction_groups(where.reduce)
    return judge(16, [(s.collective, s.groups) for s in plan], goal_groups, len(goal_groups[0]), True,
                 layout=True, sharding=where.sharding).valid


RS = Collective.REDUCE_SCATTER
def _cases() -> dict[str, tuple[RunCase, bool]]:
    hsdp_good = "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce)"
    hsdp_bad = "(node, Parallel(root), ReduceScatter); (node, InsideGroup, AllReduce)"
    ag_good = "(node, InsideGroup, AllGather); (node, Parallel(root), AllGather)"
    ag_bad = "(node, Parallel(root), AllGather); (node, InsideGroup, AllGather)"
    made = [
        dsl_case("rs-across-then-inside", ONE_AXIS_RS, ACROSS_THEN_INSIDE),
        dsl_case("rs-inside-then-across", ONE_AXIS_RS, INSIDE_THEN_ACROSS),
        dsl_case("rs-flat", ONE_AXIS_RS, "(root, InsideGroup, ReduceScatter)"),
        dsl_case("hsdp-rs-inside-ar-across", HSDP, hsdp_good),
        dsl_case("hsdp-rs-across-ar-inside", HSDP, hsdp_bad),
        dsl_case("ag-inside-then-across", ONE_AXIS_AG, ag_good),
        dsl_case("ag-across-then-inside", ONE_AXIS_AG, ag_bad),
        axes_case("rs-two-axes-axis0-then-axis1", TWO_AXES_RS, ((RS, (0,)), (RS, (1,)))),
        axes_case("rs-two-axes-axis1-then-axis0", TWO_AXES_RS, ((RS, (1,)), (RS, (0,)))),
    ]
    return {case.name: (case, ok) for case, ok in made}


CASES = _cases()
VALID = [n for n, (_, ok) in CASES.items() if ok]
WRONG = [n for n, (_, ok) in CASES.items() if not ok]


def test_the_interpreters_tell_the_orders_apart():
    assert set(WRONG) == {"rs-inside-then-across", "hsdp-rs-across-ar-inside", "ag-across-then-inside",
                          "rs-two-axes-axis1-then-axis0"}


@pytest.mark.parametrize("name", list(CASES))
def test_the_layout_ends_on_the_goal_exactly_when_the_interpreters_say_so(name):
    case, valid = CASES[name]
    lay = layout(case.plan, case.target)
    assert lay.reaches_goal == valid
    sharding = case.target.sharding
    b = 16 // sharding.shards
    if case.target.sharding.kind.value == "all-gather":
        assert lay.initial == tuple((sharding.rank[d],) for d in range(16))
    elif valid:
        assert lay.final == tuple(tuple(range(sharding.rank[d] * b, sharding.rank[d] * b + b)) for d in range(16))


def test_jax_calls_psum_scatter_over_the_mesh_axes_in_the_goal_order():
    case, _ = CASES["rs-across-then-inside"]
    src = lower_module("jax", case.plan, case.target, case.step_labels)
    assert [mesh_axes_of(s.groups, case.target.mesh, True) for s in case.plan] == [("axis0_node",), ("axis0_gpu",)]
    assert 'jax.lax.psum_scatter(buf[:16], ("axis0_node",), scatter_dimension=0, tiled=True)' in src
    assert 'jax.lax.psum_scatter(buf[:4], ("axis0_gpu",), scatter_dimension=0, tiled=True)' in src
    assert "SHARD = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)" in src
    assert "OUTPUT_CHUNKS = 1" in src and "return buf[:OUTPUT_CHUNKS]" in src
    ag, _ = CASES["ag-inside-then-across"]
    src = lower_module("jax", ag.plan, ag.target, ag.step_labels)
    assert 'jax.lax.all_gather(buf[:1], ("axis0_gpu",), axis=0, tiled=True)' in src
    assert 'jax.lax.all_gather(buf[:4], ("axis0_node",), axis=0, tiled=True)' in src
    assert "INPUT_CHUNKS = 1" in src and "OUTPUT_CHUNKS = 16" in src


def test_the_two_axis_goal_order_is_not_the_physical_order():
    case, _ = CASES["rs-two-axes-axis0-then-axis1"]
    rank = case.target.sharding.rank
    assert list(rank) != sorted(rank)
    src = lower_module("jax", case.plan, case.target)
    assert "SHARD = " + str(tuple(rank)) in src


def test_torch_uses_one_ordered_communicator_per_group():
    case, _ = CASES["hsdp-rs-inside-ar-across"]
    src = lower_module("torch", case.plan, case.target, case.step_labels)
    assert "dist.reduce_scatter_single(out, buf, group=comm)" in src and "dist.all_reduce(buf, group=comm)" in src
    assert "new_group(list(group), sort_ranks=False)" in src
    assert "SHARDS = 4" in src and "OUTPUT_CHUNKS = 4" in src and "divisible by {INPUT_CHUNKS}" in src


def test_the_expected_values_follow_the_goal():
    """The check's own oracle on a toy: 4 devices, one group, 4 chunks of 2 elements."""
    rank = {"kind": "reduce-scatter", "rank": [0, 2, 1, 3], "shards": 4}
    want, ids = expected(1, (0, 1, 2, 3), 4, 8, 4, rank)
    assert ids == (2,) and want.tolist() == [sum(d * 8 + p + 1 for d in range(4)) for p in (4, 5)]
    gather = {"kind": "all-gather", "rank": [0, 2, 1, 3], "shards": 4}
    assert device_input(1, 4, 8, 4, gather).tolist() == [13, 14]  # device 1's own chunk 2
    want, _ = expected(0, (0, 1, 2, 3), 4, 8, 4, gather)
    assert want.tolist() == [1, 2, 19, 20, 13, 14, 31, 32]  # chunk r from the device of rank r
    assert compare(0, want[::-1], (0, 1, 2, 3), 4, 8, gather, 4)[0] == (0, 0, 1, 32, -1)  # reversed: no chunk's
    assert compare(0, want[[2, 3, 0, 1, 4, 5, 6, 7]], (0, 1, 2, 3), 4, 8, gather, 4)[0] == (0, 0, 1, 19, 1)


def test_lower_refuses_a_program_off_the_goal_in_one_line(run_cli):
    rc, out, err = run_cli("lower", "--backend", "jax", *ONE_AXIS_RS.argv(), "--program", INSIDE_THEN_ACROSS)
    assert rc == 1 and out == "" and err.count("\n") == 1
    assert "device 1 ends with chunks [4], not its shard of the reduce-scatter goal, chunks [1]" in err
    rc, out, err = run_cli("lower", "--backend", "torch", *ONE_AXIS_RS.argv(), "--program", ACROSS_THEN_INSIDE)
    assert rc == 0 and err == "" and "reduce-scatter goal over 16 shards" in out


def test_lower_refuses_a_goal_that_does_not_fit_the_request(run_cli):
    rc, out, err = run_cli("lower", "--backend", "jax", *ONE_AXIS_RS.argv(), "--shard-axes", "1",
                           "--program", ACROSS_THEN_INSIDE)
    assert rc == 2 and out == "" and err.count("\n") == 1 and "shard axis 1 is not a reduction axis" in err


@pytest.fixture(scope="module", params=["jax", "torch"])
def reports(request):
    """Every case on 16 devices of one backend, in one launch."""
    if importlib.util.find_spec(request.param) is None:
        pytest.skip(f"{request.param} is not installed")
    return {r.name: r for r in run_cases(request.param, [c for c, _ in CASES.values()], timeout=240)}


@pytest.mark.parametrize("name", VALID)
def test_every_device_holds_exactly_its_shard(reports, name):
    r = reports[name]
    assert r.ok and r.error is None and not r.mismatches and r.num_devices == 16, r.summary()
    assert r.goal == CASES[name][0].target.sharding.kind.value
    assert ("exactly its shard" if r.goal == "reduce-scatter" else "every shard of its group") in r.summary()


@pytest.mark.parametrize("name", WRONG)
def test_a_wrong_order_is_caught_by_the_numbers(reports, name):
    r = reports[name]
    assert not r.ok and r.error is None and r.mismatches, r.summary()
    if name == "rs-inside-then-across":  # §6: device 1 ends with block 4's sum, not block 1's
        first = r.mismatches[0]
        assert (first.device, first.chunk, first.found) == (1, 1, 4)
        assert first.got == expected(4, tuple(range(16)), 16, 64, 16, CASES[name][0].target.goal_json())[0][0]
        assert "device 1 chunk 1: expected" in r.summary() and "(chunk 4's value)" in r.summary()
    if name == "ag-across-then-inside":  # every device gathers the shards, but in the wrong order
        assert all(m.found >= 0 for m in r.mismatches)


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_run_takes_the_goal_on_the_command_line(run_cli):
    rc, out, _ = run_cli("run", "--backend", "jax", *ONE_AXIS_AG.argv(), "--length", "32", "--json",
                           "--program", "(node, InsideGroup, AllGather); (node, Parallel(root), AllGather)")
    data = json.loads(out)
    assert rc == 0 and data["ok"] and data["goal"] == "all-gather" and data["length"] == 32


V100 = load_system("v100-2x8")  # 16 devices in 2 nodes of 8, wired as they are (pricing needs it)
V100_RS = ["--system", "v100-2x8", "--axes", "16", "--reduce", "0", "--matrix", "[[2,8]]", "--goal", "reduce-scatter"]


def _v100(goal: str, shard_axes=None, axes=(16,), matrix=((2, 8),), reduce=(0,)):
    from p2smt.cost.sharded import flat_plan

    p = Placement(V100.sizes, axes, matrix)
    g = Goal.of(goal, shard_axes, reduce)
    return p, g, placement_target(p, reduce, V100.level_names, None, V100.name, g.sharding(p)), flat_plan(p, reduce, g)


def test_step_bytes_follow_the_buffers_of_the_goal():
    """ReduceScatter: the message is the members' buffer, a ring member sends (g-1)/g of it; the buffer shrinks
    step by step. AllGather: it starts from one shard and its message is the gathered output."""
    from p2smt.cost.sharded import price_plan

    p, g, target, _ = _v100("reduce-scatter")
    h = synthesis_hierarchy(p, (0,), V100.level_names)
    prog = parse_program(ACROSS_THEN_INSIDE, h)
    price = price_plan(V100, lower_program(h, prog), target, p, (0,), g, 1.6e9, "ring")
    assert [(s.groups, s.group_size, s.message_bytes) for s in price.steps] == [(8, 2, 1.6e9), (2, 8, 0.8e9)]
    assert [s.sent_bytes for s in price.steps] == [0.8e9, 0.7e9]
    assert [s.links for s in price.steps] == ["net", "pci"] and price.flat[0].links == "net"
    assert [(s.collective, s.group_size, s.message_bytes, s.sent_bytes) for s in price.flat] == [
        (Collective.REDUCE_SCATTER, 16, 1.6e9, 1.5e9)]
    assert price.seconds == sum(s.seconds for s in price.steps) > 0 and price.flat_seconds > 0
    p, g, target, _ = _v100("all-gather")
    h = synthesis_hierarchy(p, (0,), V100.level_names)
    prog = parse_program("(node, InsideGroup, AllGather); (node, Parallel(root), AllGather)", h)
    price = price_plan(V100, lower_program(h, prog), target, p, (0,), g, 1.6e9, "ring")
    assert [s.message_bytes for s in price.steps] == [0.8e9, 1.6e9]  # 8 shards of 0.1e9, then 2 of 0.8e9
    assert [(s.collective, s.message_bytes) for s in price.flat] == [(Collective.ALL_GATHER, 1.6e9)]


def test_the_flat_collective_of_hsdp_is_a_reduce_scatter_then_an_allreduce():
    _, _, target, flat = _v100("reduce-scatter", (1,), (2, 8), ((2, 1), (1, 8)), (0, 1))
    assert [(s.collective, len(s.groups), len(s.groups[0])) for s in flat] == [
        (Collective.REDUCE_SCATTER, 2, 8), (Collective.ALL_REDUCE, 8, 2)]
    assert layout(flat, target).reaches_goal


def test_lower_states_the_prediction_and_a_refused_one_in_one_line(run_cli):
    rc, out, err = run_cli("lower", "--backend", "jax", *V100_RS, "--bytes", "1e9", "--program", ACROSS_THEN_INSIDE)
    assert rc == 0 and err == ""
    assert "predicted on v100-2x8 (NCCL tuner, --algo ring), 1e+09 B per device in the full buffer:" in out
    assert "step 1 (node, Parallel(root), ReduceScatter): 8 group(s) of 2, message 1e+09 B, 5e+08 B sent" in out
    assert "flat ReduceScatter over the 16-device goal groups: 1 group(s) of 16, message 1e+09 B" in out
    rc, out, err = run_cli("lower", "--backend", "jax", *ONE_AXIS_RS.argv(), "--bytes", "1e9",
                           "--program", ACROSS_THEN_INSIDE)
    assert rc == 2 and out == "" and err.count("\n") == 1 and "a node's wiring cannot be resized" in err
    rc, out, err = run_cli("lower", "--backend", "jax", *ONE_AXIS_RS.argv(), "--program", ACROSS_THEN_INSIDE)
    assert rc == 0 and err == "" and "predicted on" not in out  # the default prediction is skipped there


def test_every_rank_order_program_reaches_the_goal_and_the_first_is_flat():
    """The plan's sharded options, on placements whose rank order is and is not the physical order: each checked
    by both interpreters (not only the buffer positions plan relies on)."""
    from p2smt.cost.sharded import flat_plan, rank_order_plans

    for where in (ONE_AXIS_RS, ONE_AXIS_AG, HSDP, TWO_AXES_RS):
        options = rank_order_plans(where.placement, where.reduce, where.goal_obj(), SYSTEM.level_names)
        assert len(options) == 2 ** (len([x for r in where.matrix for x in r if x > 1]) - (where is HSDP) - 1)
        for labels, plan in options:
            assert _valid(where, plan), labels
            assert layout(plan, where.target()).reaches_goal
        flat = flat_plan(where.placement, where.reduce, where.goal_obj())
        assert [set(s.groups) for s in options[0][1]] == [set(s.groups) for s in flat]
    labels = [lab for lab, _ in rank_order_plans(ONE_AXIS_RS.placement, (0,), ONE_AXIS_RS.goal_obj(), SYSTEM.level_names)]
    assert labels == [("ReduceScatter over axis0_node+axis0_gpu",),
                      ("ReduceScatter over axis0_node", "ReduceScatter over axis0_gpu")]


def test_plan_prices_fsdp_and_hsdp_profiles_against_the_flat_collective():
    from p2smt.cost.plan import plan

    report = plan("llama2-7b-hsdp", load_system("dgx-h100", 4))
    assert "rank-order program" in report["sharded"]
    best = report["best"]
    assert best["matrix"] == [[4, 1], [1, 8]]  # the shard group inside a node
    grads = next(c for c in best["communications"] if c["name"] == "grads")
    assert grads["kind"] == "reduce-scatter" and grads["program"].endswith("AllReduce over replica")
    assert grads["step_bytes"] == [404e6, 404e6 / 8]
    for row in report["placements"]:
        for c in row["communications"]:
            assert c["seconds_each"] <= c["allreduce_seconds_each"] and "rank-order program" in c["rests_on"]
            assert "not synthesized by plan's default engine" in c["rests_on"]


def test_plan_takes_a_hierarchical_sharded_program_where_it_beats_the_flat_one():
    from p2smt.cost.plan import plan

    report = plan("llama2-7b-fsdp", load_system("gb200-nvl72", 2))
    (row,) = report["placements"]
    by = {c["name"]: c for c in row["communications"]}
    assert by["grads"]["program"] == "ReduceScatter over data_rack+data_tray; ReduceScatter over data_superchip+data_gpu"
    assert by["params_fwd"]["program"] == "AllGather over data_superchip+data_gpu; AllGather over data_rack+data_tray"
    assert by["grads"]["step_bytes"] == [404e6, 404e6 / 36]
    assert row["total_seconds"] < row["allreduce_total_seconds"]


def test_profile_shard_axes_are_checked(tmp_path):
    from p2smt.model.profile import Profile

    base = {"name": "t", "axes": [{"name": "a", "size": "auto"}, {"name": "b", "size": 2}]}
    for comm, words in (({"kind": "all-gather", "shard_axes": ["a"]}, "for kind reduce-scatter only"),
                        ({"kind": "reduce-scatter", "shard_axes": ["c"]}, "must be distinct axes of")):
        with pytest.raises(ValueError, match=words):
            Profile.model_validate(base | {"communication": [{"name": "x", "axes": ["a", "b"], "bytes_per_device": 1,
                                                              **comm}]})


def test_plan_with_an_engine_also_synthesizes_sharded_programs_where_the_hierarchy_allows():
    from p2smt.cost.plan import plan
    from p2smt.synth.config import EngineConfig

    report = plan("llama2-7b-hsdp", load_system("dgx-h100", 4), config=EngineConfig(engine="pieces"))
    words = {tuple(map(tuple, r["matrix"])): {c["name"]: c["rests_on"] for c in r["communications"]}
             for r in report["placements"]}
    assert "synthesized programs" in words[((4, 1), (1, 8))]["grads"]
    split = [m for m in words if m[0][1] > 1 and m[1][1] > 1 or m[0][0] > 1 and m[1][0] > 1]
    assert split and all("not synthesized" in words[m]["grads"] and "give --hierarchy c" in words[m]["grads"]
                         for m in split)
    assert all("synthesized programs" in w["params_fwd"] for w in words.values())


A100_64 = ["--system", "a100-4x16", "--axes", "64", "--reduce", "0", "--matrix", "[[4,16]]", "--goal", "reduce-scatter"]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_the_issue_request_runs_on_64_devices(run_cli, backend):
    """Issue 33's system as it is: 4 nodes of 16 GPUs. Across nodes then inside each node, every one of the 64
    devices holds exactly its shard of the sum; the reverse order, run anyway, leaves device 1 block 4's sum."""
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed")
    rc, out, _ = run_cli("run", "--backend", backend, *A100_64, "--length", "128", "--bytes", "1e9", "--json",
                         "--program", ACROSS_THEN_INSIDE)
    data = json.loads(out)
    assert rc == 0 and data["ok"] and data["num_devices"] == 64 and data["goal"] == "reduce-scatter"
    assert [s["message_bytes"] for s in data["predicted"]["steps"]] == [1e9, 0.25e9]
    assert data["predicted"]["flat"][0]["group_size"] == 64
    rc, out, _ = run_cli("run", "--backend", backend, *A100_64, "--length", "128", "--json", "--allow-invalid",
                         "--program", INSIDE_THEN_ACROSS)
    data = json.loads(out)
    assert rc == 1 and not data["ok"] and data["mismatches"][0]["device"] == 1 and data["mismatches"][0]["chunk"] == 1


def test_plan_exports_sharded_communications_lowered_under_their_goal(run_cli, tmp_path):
    rc, _, err = run_cli("plan", "--profile", "llama2-7b-hsdp", "--system", "dgx-h100", "--nodes", "2",
                           "--export-dir", str(tmp_path / "out"), "--json")
    assert rc == 0, err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        ["mesh.json"] + [f"{n}_{b}.py" for n in ("params_fwd", "params_bwd", "grads") for b in ("jax", "torch")])
    grads = (tmp_path / "out" / "grads_jax.py").read_text()
    assert "reduce-scatter goal over 8 shards" in grads and "SHARDS = 8" in grads
    assert 'jax.lax.psum_scatter(buf[:16], ("shard_gpu",), scatter_dimension=0, tiled=True)' in grads
    assert 'jax.lax.psum(buf[:2], ("replica_node",))' in grads
    gather = (tmp_path / "out" / "params_fwd_torch.py").read_text()
    assert "all-gather goal over 8 shards" in gather and "dist.all_gather_single(out, buf, group=comm)" in gather


def test_the_api_lowers_under_a_goal_and_refuses_a_program_off_it():
    from p2smt.api import lower
    from p2smt.errors import P2Error
    from p2smt.model.request import Request

    req = Request("v100-2x8", axes=(16,), reduce=(0,), matrix=((2, 8),))
    src = lower(req, ACROSS_THEN_INSIDE, backend="torch", goal="reduce-scatter")
    assert "reduce-scatter goal over 16 shards" in src and "OUTPUT_CHUNKS = 1" in src
    with pytest.raises(P2Error, match="not its shard of the reduce-scatter goal"):
        lower(req, INSIDE_THEN_ACROSS, goal="reduce-scatter")
    assert "SHARD" not in lower(req, "(root, InsideGroup, AllReduce)")  # the allreduce goal's module unchanged
