"""The CLI and the Python API spell one concept one way: collective names through one parser, ``best`` on a
Request like its siblings, real signatures, one exit-code rule for an invalid program, one placement taken
without ``--matrix``, files reported on stdout."""

from __future__ import annotations

import json

import pytest

import p2smt
from p2smt.errors import P2Error
from p2smt.model.collectives import Collective, collective_named
from p2smt.model.goal import Goal, GoalKind
from p2smt.model.profile import Communication


def one_error_line(rc: int, out: str, err: str, fragment: str) -> bool:
    lines = err.splitlines()
    return rc == 2 and out == "" and len(lines) == 1 and lines[0].startswith("p2smt: error: ") and fragment in err


# ---------------------------------------------------------------- #8: one parser of collective names

@pytest.mark.parametrize("spelling", ["reduce-scatter", "reducescatter", "ReduceScatter", "reduce_scatter",
                                      "REDUCE-SCATTER"])
def test_every_spelling_names_one_collective(spelling):
    assert collective_named(spelling) is Collective.REDUCE_SCATTER
    assert Collective.parse(spelling) is Collective.REDUCE_SCATTER
    assert GoalKind.parse(spelling) is GoalKind.REDUCE_SCATTER
    assert Goal.of(spelling, None, (0,)).kind is GoalKind.REDUCE_SCATTER
    assert Communication(name="g", kind=spelling, axes=("x",), bytes_per_device=1).kind == "reduce-scatter"


def test_a_grid_file_goal_takes_every_spelling():
    from p2smt.runs.gridfile import parse_grid

    grid = {"systems": ["fig2-16gpu"], "axes": [[4, 4]], "reductions": [[0]], "algorithms": ["ring"]}
    assert parse_grid(grid | {"goal": "AllGather"}, "g.yaml").goal is GoalKind.ALL_GATHER
    with pytest.raises(P2Error, match="unknown goal 'gather'; choose from allreduce, reduce-scatter, all-gather"):
        parse_grid(grid | {"goal": "gather"}, "g.yaml")


def test_a_profile_reduction_keeps_its_kind_word():
    kinds = [Communication(name="g", kind=k, axes=("x",), bytes_per_device=1).kind
             for k in ("reduce", "allreduce", "AllReduce", "all-gather", "AllGather", "p2p")]
    assert kinds == ["reduce", "reduce", "reduce", "all-gather", "all-gather", "p2p"]


def test_unknown_names_list_each_places_canonical_names():
    with pytest.raises(P2Error, match="unknown goal 'Reduce'; choose from allreduce, reduce-scatter, all-gather$"):
        GoalKind.parse("Reduce")
    with pytest.raises(P2Error, match="choose from AllReduce, ReduceScatter, AllGather, Reduce, Broadcast$"):
        Collective.parse("gather")


@pytest.mark.parametrize("spelling", ["reduce-scatter", "ReduceScatter", "reducescatter"])
def test_cost_takes_every_spelling_and_answers_in_its_own(run_cli, spelling):
    rc, out, _ = run_cli("cost", "--system", "dgx-h100", "--collective", spelling, "--bytes", "1e6", "--json")
    assert rc == 0 and json.loads(out)["collective"] == "reducescatter"
    assert p2smt.cost("dgx-h100", spelling, 1e6).seconds == json.loads(out)["seconds"]


def test_cost_refuses_an_unknown_collective_with_its_names(run_cli):
    assert one_error_line(*run_cli("cost", "--system", "dgx-h100", "--collective", "gather", "--bytes", "1e6"),
                          "argument --collective: unknown collective 'gather'; choose from allreduce, reducescatter, "
                          "allgather, reduce, broadcast")


@pytest.mark.parametrize("spelling", ["allgather", "AllGather", "all-gather"])
def test_goal_takes_every_spelling_and_answers_in_its_own(run_cli, spelling):
    argv = ("check", "--system", "v100-2x8", "--axes", "16", "--reduce", "0", "--matrix", "[[2,8]]",
            "--program", "(root, InsideGroup, AllGather)", "--json")
    rc, out, _ = run_cli(*argv, "--goal", spelling)
    assert rc == 0 and json.loads(out)["goal"]["kind"] == "all-gather"


def test_goal_refuses_a_collective_that_is_no_goal(run_cli):
    assert one_error_line(*run_cli("synth", "--system", "v100-2x8", "--axes", "16", "--reduce", "0", "--goal",
                                   "broadcast"), "unknown goal 'broadcast'; choose from allreduce, reduce-scatter")


def test_the_dsl_reads_the_same_names():
    req = p2smt.Request("v100-2x8", axes=(16,), reduce=(0,), matrix=((2, 8),))
    assert p2smt.check(req, "(root, InsideGroup, allreduce)").valid
    assert p2smt.groups(req, "(node, InsideGroup, all_reduce)")[0]["instruction"] == "(node, InsideGroup, AllReduce)"


# ---------------------------------------------------------------- #9: API shapes

def test_best_takes_a_request_like_rank_and_the_older_form_gives_the_same():
    req = p2smt.Request("v100-2x8", axes=(16,), reduce=(0,), matrix=((2, 8),))
    found = p2smt.best(req, max_len=3, top=2).to_json()
    older = p2smt.best("v100-2x8", (16,), (0,), matrix=((2, 8),), max_len=3, top=2).to_json()
    assert found["best"] == older["best"] and found["best"]["program"].count(";") == 2
    assert [m["programs"] for m in found["matrices"]] == [m["programs"] for m in older["matrices"]]


def test_best_reads_the_request_s_goal():
    req = p2smt.Request("v100-2x8", axes=(16,), reduce=(0,), matrix=((2, 8),),
                        goal={"kind": "ReduceScatter", "shard_axes": [0]})
    assert p2smt.best(req, max_len=2).to_json()["goal"] == {"kind": "reduce-scatter", "shard_axes": [0]}


@pytest.mark.parametrize(("args", "kwargs", "said"), [
    (((16,), (0,)), {}, "give axes, reduction_axes in the Request"),
    ((), {"goal": "reduce-scatter"}, "give goal in the Request"),
    ((), {"matrix": ((2, 8),)}, "give matrix in the Request"),
])
def test_best_refuses_request_fields_beside_a_request(args, kwargs, said):
    with pytest.raises(P2Error, match=said):
        p2smt.best(p2smt.Request("v100-2x8", axes=(16,), reduce=(0,)), *args, **kwargs)


def test_best_without_axes_is_refused():
    with pytest.raises(P2Error, match="best takes a Request"):
        p2smt.best("v100-2x8")


@pytest.mark.parametrize("name", ["cost", "lower", "best", "rank", "verify", "check", "run"])
def test_api_functions_show_their_real_signatures(name):
    import importlib
    import inspect

    importlib.import_module("p2smt.cost.rank"), importlib.import_module("p2smt.lower")  # make the callable modules
    params = list(inspect.signature(getattr(p2smt, name)).parameters)
    assert params[:1] in (["request"], ["system"]) and "args" not in params


def test_verify_and_check_default_to_the_request_s_goal():
    req = p2smt.Request("v100-2x8", axes=(16,), reduce=(0,), matrix=((2, 8),), goal={"kind": "reduce-scatter"})
    assert p2smt.check(req, "(root, InsideGroup, ReduceScatter)").valid
    assert not p2smt.check(req, "(root, InsideGroup, ReduceScatter)", goal="allreduce").valid


MESH_RUN = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, PartitionSpec as P
import p2smt
devs = np.array(jax.devices()[:16])
declared, other = Mesh(devs.reshape(4, 4), ("data", "tensor")), Mesh(devs.reshape(2, 8), ("data", "tensor"))
f = jax.jit(jax.shard_map(lambda x: jax.lax.psum(x, "data"), mesh=declared, in_specs=P("data"), out_specs=P()))
print(p2smt.audit(f, jnp.ones(4), system="v100-2x8", mesh=declared).verdict.value)
try:
    p2smt.audit(f, jnp.ones(4), system="v100-2x8", mesh=other)
except p2smt.P2Error as err:
    print(err)
"""


def test_audit_refuses_a_jax_mesh_other_than_the_module_s():
    import os
    import subprocess
    import sys

    pytest.importorskip("jax")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=16", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", MESH_RUN], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "PROVED", ("mesh data=2,tensor=8 is not the mesh the module declares (data=4,tensor=4); pass the "
                   "jax.sharding.Mesh the function runs on")]


# ---------------------------------------------------------------- #16: an invalid program is a verdict (exit 1)

A100_ONE = ("--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--matrix", "[[1,4],[4,4]]")
HALF = "(node, InsideGroup, ReduceScatter)"  # parses, misses the goal


@pytest.mark.parametrize("argv", [
    ("check", *A100_ONE, "--program", HALF),
    ("verify", *A100_ONE, "--program", HALF),
    ("lower", "--backend", "torch", *A100_ONE, "--program", HALF),
    ("rank", *A100_ONE, "--program", HALF, "--max-len", "1"),
])
def test_every_command_gives_an_invalid_program_exit_1(run_cli, argv):
    rc, _, _ = run_cli(*argv)
    assert rc == 1


def test_rank_refuses_an_invalid_program_in_one_line_before_synthesis(run_cli):
    rc, out, err = run_cli("rank", *A100_ONE, "--program", HALF, "--json")
    assert rc == 1 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("p2smt: rank --program: INVALID") and "rank prices only a valid program" in err


def test_rank_judges_the_program_against_the_goal(run_cli):
    program = "(node, Parallel(root), ReduceScatter); (node, InsideGroup, ReduceScatter)"
    rc, out, _ = run_cli("rank", *A100_ONE, "--goal", "reduce-scatter", "--program", program, "--max-len", "2",
                         "--json")
    assert rc == 0 and json.loads(out)["yours"]["program"] == program


@pytest.mark.parametrize("argv", [
    ("check", *A100_ONE, "--program", "(node, InsideGroup, ReduceScatte)"),
    ("rank", *A100_ONE, "--program", "(gpu, InsideGroup, AllReduce); (node, InsideGroup, AllReduce)",
     "--max-len", "1"),
])
def test_what_cannot_be_judged_stays_bad_input(run_cli, argv):
    rc, out, err = run_cli(*argv)
    assert rc == 2 and out == "" and len(err.splitlines()) == 1


# ---------------------------------------------------------------- #17: one placement needs no --matrix

@pytest.mark.parametrize("command", ["check", "verify", "groups"])
def test_the_only_placement_is_taken_without_matrix(run_cli, command):
    base = ("--system", "a100-4x16", "--axes", "64", "--reduce", "0")
    program = ("--instruction",) if command == "groups" else ("--program",)
    rc, out, _ = run_cli(command, *base, *program, "(root, InsideGroup, AllReduce)", "--json")
    with_matrix = run_cli(command, *base, "--matrix", "[[4,16]]", *program, "(root, InsideGroup, AllReduce)",
                          "--json")
    assert rc == 0 and with_matrix[0] == 0
    drop = ("stats", "seconds", "checked_by", "rests_on")
    assert {k: v for k, v in json.loads(out).items() if k not in drop} == \
           {k: v for k, v in json.loads(with_matrix[1]).items() if k not in drop}


@pytest.mark.parametrize("command", ["check", "verify", "rank"])
def test_several_placements_still_need_matrix_counted(run_cli, command):
    rc, out, err = run_cli(command, "--system", "a100-4x16", "--axes", "4,16", "--reduce", "0", "--program",
                           "(root, InsideGroup, AllReduce)")
    assert one_error_line(rc, out, err, f"{command}{' --program' if command == 'rank' else ''} needs a matrix: "
                                        "axes 4,16 have 3 placements on a100-4x16; give one with --matrix")


def test_the_api_takes_the_only_placement_too():
    req = p2smt.Request("a100-4x16", axes=(64,), reduce=(0,))
    assert p2smt.check(req, "(root, InsideGroup, AllReduce)").valid
    with pytest.raises(P2Error, match="3 placements"):
        p2smt.check(p2smt.Request("a100-4x16", axes=(4, 16), reduce=(0,)), "(root, InsideGroup, AllReduce)")


NOOP_PLAN = [{"collective": "AllReduce", "replica_groups": [[0]]}, {"collective": "AllReduce", "replica_groups": []}]
V100 = ("--system", "v100-2x8", "--axes", "16", "--reduce", "0", "--matrix", "[[2,8]]")


def test_a_plan_step_of_one_device_groups_is_xla_s_no_op_in_check_and_verify(run_cli, tmp_path):
    plan = tmp_path / "noop.json"
    plan.write_text(json.dumps(NOOP_PLAN))
    assert run_cli("check", *V100, "--plan", plan)[0] == 0
    assert run_cli("verify", *V100, "--plan", plan)[0] == 0
    assert one_error_line(*run_cli("lower", "--backend", "torch", *V100, "--plan", plan),
                          "step 1 (AllReduce): every group has one device, XLA's no-op; lower and run take no such "
                          "step: drop it from the plan")
    # the DSL names levels: an instruction that forms no group names the wrong one, a syntax error
    assert one_error_line(*run_cli("check", "--system", "v100-2x8", "--axes", "2,8", "--reduce", "1", "--matrix",
                                   "[[2,1],[1,8]]", "--program", "(root, InsideGroup, AllReduce); "
                                   "(node, Parallel(root), AllReduce)"), "forms no group")


def test_lower_reports_the_file_on_stdout_as_draw_does(run_cli, tmp_path):
    target, png = tmp_path / "m.py", tmp_path / "s.png"
    rc, out, err = run_cli("lower", "--backend", "torch", *V100, "--program", "(root, InsideGroup, AllReduce)",
                           "--out", target)
    assert (rc, out, err) == (0, f"wrote {target}\n", "")
    assert run_cli("draw", "--system", "v100-2x8", "--out", png) == (0, f"wrote {png}\n", "")


def test_audit_text_takes_the_mesh_as_audit_mesh_writes_it(data_dir):
    text = (data_dir / "audit" / "row-parallel-mlp.hlo").read_text()
    meshes = ["data=4,tensor=4", {"data": 4, "tensor": 4}, [("data", 4), ("tensor", 4)]]
    reports = [p2smt.audit_text(text, system="v100-2x8", mesh=m).to_json() for m in meshes]
    for r in reports:
        r.pop("stats", None), r.pop("seconds", None)
    assert reports[0] == reports[1] == reports[2]
    with pytest.raises(P2Error, match="give \\(axis name, size\\) pairs"):
        p2smt.audit_text(text, system="v100-2x8", mesh="data=four")
