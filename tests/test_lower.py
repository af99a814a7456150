"""Code generation for JAX and torch.distributed: safety of names, buffer layout, readable valid code."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from p2smt.errors import P2Error
from p2smt.lower import (
    MeshSpec,
    jax_mesh_order,
    layout,
    lower_module,
    placement_mesh,
    placement_target,
    plan_target,
    run_program,
)
from p2smt.lower.layout import mesh_axes_of
from p2smt.lower.target import connected_groups
from p2smt.model.collectives import Collective as C
from p2smt.model.collectives import ExplicitStep as S
from p2smt.model.dsl import lower_program, parse_program
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement
from p2smt.model.system import load_system

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
HOSTILE = "x); import os; os.system('rm -rf /')#"
RAB = "(node, InsideGroup, Reduce); (node, Master(root), AllReduce); (node, InsideGroup, Broadcast)"
RSARAG = (
    "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); (node, InsideGroup, AllGather)"
)
PAIRS = tuple((2 * i, 2 * i + 1) for i in range(8))
QUADS = tuple(tuple(range(4 * i, 4 * i + 4)) for i in range(4))


def v100(text: str, axis_names=("data", "shard")):
    """Plan, target and labels of a program on v100-2x8, axes [4,4], matrix [[2,2],[1,4]], reduce 0."""
    system = load_system("v100-2x8")
    placement = Placement(system.sizes, (4, 4), ((2, 2), (1, 4)))
    h = synthesis_hierarchy(placement, (0,), system.level_names)
    program = parse_program(text, h)
    target = placement_target(placement, (0,), system.level_names, axis_names, system.name)
    return lower_program(h, program), target, [str(i) for i in program.instructions]


def sample_modules() -> dict[str, tuple]:
    wrong = (S(C.REDUCE_SCATTER, PAIRS), S(C.ALL_REDUCE, PAIRS))
    reversed_ag = (S(C.REDUCE_SCATTER, QUADS), S(C.ALL_GATHER, tuple(g[::-1] for g in QUADS)))
    return {
        "rab": v100(RAB),
        "rsarag": v100(RSARAG),
        "wrong-rs-ar": (wrong, plan_target(wrong, 16), None),
        "reversed-ag": (reversed_ag, plan_target(reversed_ag, 16, QUADS), None),
        "flat-reduce-bcast": (
            (S(C.REDUCE, QUADS), S(C.BROADCAST, QUADS)),
            plan_target((S(C.REDUCE, QUADS),), 16),
            None,
        ),
    }


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_generated_modules_pass_ruff_and_compile(backend, tmp_path):
    ruff = shutil.which("ruff")
    for name, (plan, target, labels) in sample_modules().items():
        src = lower_module(backend, plan, target, labels)
        compile(src, name, "exec")
        if name == "reversed-ag":
            assert "FINAL_INDEX = (3, 2, 1, 0)" in src or "FINAL_CHUNKS = (3, 2, 1, 0)" in src
        path = tmp_path / f"{name}_{backend}.py"
        path.write_text(src)
    if ruff is None:
        pytest.skip("ruff is not installed")
    isolated = ["--isolated", "--select", "E,F,W,I", "--line-length", "110"]
    project = ["--config", str(PYPROJECT)] if PYPROJECT.exists() else isolated
    for options in (isolated, project):
        proc = subprocess.run(
            [ruff, "check", "--no-cache", *options, str(tmp_path)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


def _function(src: str, name: str) -> str:
    start = src.index(f"\ndef {name}(")
    end = src.find("\n\n\n", start + 1)
    return src[start:end]


def test_one_collective_call_per_instruction_and_named_groups():
    plan, target, labels = v100(RAB)
    jax_src = lower_module("jax", plan, target, labels)
    torch_src = lower_module("torch", plan, target, labels)
    jax_calls = ("jax.lax.psum(", "jax.lax.psum_scatter(", "jax.lax.all_gather(", "_ring_all_reduce(")
    torch_calls = ("dist.all_reduce(", "dist.reduce(", "dist.broadcast(", "dist.reduce_scatter_single(")
    for t, label in enumerate(labels, start=1):
        assert f"# Step {t}: {label}" in jax_src and f"# Step {t}: {label}" in torch_src
        assert f"STEP{t}_GROUPS = " in jax_src and f"STEP{t}_GROUPS = " in torch_src
        body = _function(jax_src, f"step{t}")
        assert sum(body.count(c) for c in jax_calls) == 1, body
        body = _function(torch_src, f"step{t}")
        assert sum(body.count(c) for c in torch_calls) == 1, body
    assert 'jax.lax.psum(buf[:4], ("data_gpu",))' in jax_src
    assert "_ring_all_reduce(buf[:4], STEP2_RING, rank, 2)" in jax_src


def test_mesh_axes_native_for_inside_and_parallel_not_for_master():
    plan, target, _ = v100(RSARAG)
    mesh = target.mesh
    assert mesh.names == ("data_node", "data_gpu", "shard_gpu") and mesh.shape == (2, 2, 4)
    assert mesh_axes_of(plan[0].groups, mesh, ordered=True) == ("data_gpu",)
    assert mesh_axes_of(plan[1].groups, mesh, ordered=True) == ("data_node",)
    rab, _, _ = v100(RAB)
    assert mesh_axes_of(rab[1].groups, mesh, ordered=False) is None
    reversed_groups = tuple(tuple(reversed(g)) for g in plan[0].groups)
    assert mesh_axes_of(reversed_groups, mesh, ordered=False) == ("data_gpu",)
    assert mesh_axes_of(reversed_groups, mesh, ordered=True) is None


def test_factor_mesh_order_is_the_core_mesh_order():
    system = load_system("fig2-16gpu")
    placement = Placement(system.sizes, (4, 4), ((1, 2, 1, 2), (1, 1, 2, 2)))
    mesh = placement_mesh(placement, system.level_names, ("data", "shard"))
    assert mesh.names == ("data_server", "data_gpu", "shard_cpu", "shard_gpu")
    assert mesh.shape == (2, 2, 2, 2)
    assert mesh.order == jax_mesh_order(placement) == placement.mesh_order()
    # docs/semantics.md §1: GPUs 0-3 are data/shard 0/0, 0/1, 1/0, 1/1; GPUs 4-7 are 0/2, 0/3, 1/2, 1/3
    order = jax_mesh_order(placement)
    assert [
        order[d * 4 + s] for d, s in [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3)]
    ] == list(range(8))


def test_layout_tracks_buffers_like_nccl():
    lay = layout(
        (S(C.REDUCE_SCATTER, PAIRS), S(C.ALL_GATHER, PAIRS)), plan_target((S(C.ALL_REDUCE, PAIRS),), 16)
    )
    assert lay.steps[0].holdings[0] == (0,) and lay.steps[0].holdings[1] == (1,)
    assert lay.steps[1].holdings[1] == (0, 1) and lay.final_is_identity
    swapped = tuple((b, a) for a, b in PAIRS)
    lay = layout(
        (S(C.REDUCE_SCATTER, PAIRS), S(C.ALL_GATHER, swapped)), plan_target((S(C.ALL_REDUCE, PAIRS),), 16)
    )
    assert lay.final[0] == (1, 0) and not lay.final_is_identity
    lay = layout((S(C.REDUCE, QUADS), S(C.BROADCAST, QUADS)), plan_target((S(C.ALL_REDUCE, QUADS),), 16))
    assert lay.steps[0].holdings[0] == (0, 1, 2, 3) and lay.steps[0].holdings[1] == ()
    assert lay.steps[1].chunks_in == 4 and lay.final_is_identity and lay.capacity == 4


@pytest.mark.parametrize(
    "plan, why",
    [
        ((S(C.REDUCE, QUADS), S(C.ALL_REDUCE, QUADS)), "equal buffers"),
        ((S(C.REDUCE_SCATTER, QUADS), S(C.REDUCE_SCATTER, QUADS)), "cannot be scattered"),
        ((S(C.ALL_REDUCE, ((0, 1), (1, 2))),), "two groups"),
        ((S(C.ALL_REDUCE, ((0,), (1, 2))),), "fewer than two"),
        ((S(C.ALL_REDUCE, ((0, 16),)),), "does not exist"),
        ((S(C.ALL_REDUCE, ((0, 1), (2, 3, 4))),), "different sizes"),
        ((), "at least one step"),
    ],
)
def test_layout_rejects_plans_that_cannot_run(plan, why):
    target = plan_target((S(C.ALL_REDUCE, QUADS),), 16)
    with pytest.raises(P2Error, match=why):
        layout(plan, target)


@pytest.mark.parametrize("bad", ["0", 1.0, True, "0); import os"])
def test_plan_device_ids_must_be_ints(bad):
    with pytest.raises(P2Error):
        lower_module("jax", (S(C.ALL_REDUCE, ((bad, 1),)),), plan_target((S(C.ALL_REDUCE, ((0, 1),)),), 2))


@pytest.mark.parametrize("where", ["axis", "level", "system", "label", "mesh"])
@pytest.mark.parametrize("name", [HOSTILE, "a\nimport os", "class", "é", "a" * 65, ""])
def test_hostile_names_are_rejected(where, name):
    system = load_system("v100-2x8")
    placement = Placement(system.sizes, (4, 4), ((2, 2), (1, 4)))
    with pytest.raises(P2Error):
        if where == "axis":
            placement_target(placement, (0,), system.level_names, (name, "shard"))
        elif where == "level":
            placement_target(placement, (0,), ("node", name), ("data", "shard"))
        elif where == "system":
            placement_target(placement, (0,), system.level_names, ("data", "shard"), name + '"""')
        elif where == "label":
            plan, target, labels = v100(RAB)
            lower_module("torch", plan, target, [name + "\n", *labels[1:]])
        else:
            MeshSpec((16,), (name,), tuple(range(16)))


def test_no_hostile_text_reaches_generated_code():
    plan, target, labels = v100(RAB)
    for backend in ("jax", "torch"):
        src = lower_module(backend, plan, target, labels)
        assert "import os" not in src and "os.system" not in src


def test_reduction_groups_inferred_from_plan():
    plan = (S(C.ALL_REDUCE, PAIRS[:4]), S(C.ALL_REDUCE, ((0, 2), (1, 3), (4, 6), (5, 7))))
    assert connected_groups(plan, 8) == ((0, 1, 2, 3), (4, 5, 6, 7))
    with pytest.raises(P2Error, match="different sizes"):
        plan_target((S(C.ALL_REDUCE, ((0, 1),)),), 4)
    assert plan_target((S(C.ALL_REDUCE, ((0, 1),)),), 4, [(0, 1), (2, 3)]).num_chunks == 2


def test_unknown_backend_is_a_p2error():
    plan, target, labels = v100(RAB)
    with pytest.raises(P2Error, match="unknown backend"):
        lower_module("mpi", plan, target, labels)


def test_run_rejects_bad_requests_before_launching():
    plan, target, labels = v100(RAB)
    with pytest.raises(P2Error, match="multiple of the reduction-group size 4"):
        run_program("jax", plan, target, step_labels=labels, length=6)
    with pytest.raises(P2Error, match="unknown backend"):
        run_program("nccl", plan, target, step_labels=labels)
