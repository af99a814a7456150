"""Run lowered programs on 16 local devices (JAX CPU host devices; torch gloo processes), exact sums.

Each backend runs every case in one launch (one JAX process, one gloo process group), so the whole
file costs two launches plus one JAX mesh check.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from p2smt.lower import RunCase, placement_target, plan_target, run_cases
from p2smt.lower.layout import mesh_axes_of
from p2smt.model.collectives import Collective as C
from p2smt.model.collectives import ExplicitStep as S
from p2smt.model.dsl import lower_program, parse_program
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement
from p2smt.model.system import load_system
from p2smt.semantics.dense import execute

AR = "(root, InsideGroup, AllReduce)"
RAB = "({n}, InsideGroup, Reduce); ({n}, Master(root), AllReduce); ({n}, InsideGroup, Broadcast)"
RSARAG = "({n}, InsideGroup, ReduceScatter); ({n}, Parallel(root), AllReduce); ({n}, InsideGroup, AllGather)"
RS_RS_AG = (
    "({n}, InsideGroup, ReduceScatter); ({n}, Parallel(root), ReduceScatter); (root, InsideGroup, AllGather)"
)
RS_AR_AR = (
    "({n}, InsideGroup, ReduceScatter); ({n}, Parallel(root), AllReduce); ({n}, InsideGroup, AllReduce)"
)

# (system, axes, matrix, reduction axes, slice level): two placements with one reduced axis over
# two levels, and two with two reduced axes (axes 0 and 2, collapsed per level).
ONE_AXIS = {
    "v100": ("v100-2x8", (4, 4), ((2, 2), (1, 4)), (0,), "node"),
    "fig2": ("fig2-16gpu", (4, 4), ((1, 2, 1, 2), (1, 1, 2, 2)), (0,), "server"),
}
TWO_AXES = {
    "v100-2ax": ("v100-2x8", (2, 2, 4), ((2, 1), (1, 2), (1, 4)), (0, 2), "node"),
    "fig2-2ax": ("fig2-16gpu", (2, 4, 2), ((1, 2, 1, 1), (1, 1, 2, 2), (1, 1, 1, 2)), (0, 2), "server"),
}
PAIRS = tuple((2 * i, 2 * i + 1) for i in range(8))
QUADS = tuple(tuple(range(4 * i, 4 * i + 4)) for i in range(4))


def dsl_case(name: str, where: tuple, template: str) -> tuple[RunCase, bool]:
    system_name, axes, matrix, red, level = where
    system = load_system(system_name)
    placement = Placement(system.sizes, axes, matrix)
    h = synthesis_hierarchy(placement, red, system.level_names)
    program = parse_program(template.format(n=level), h)
    plan = lower_program(h, program)
    target = placement_target(placement, red, system.level_names, None, system.name)
    labels = tuple(str(i) for i in program.instructions)
    oracle = execute(16, [(s.collective, s.groups) for s in plan], target.reduction_groups).valid
    return RunCase(name, plan, target, labels), oracle


def explicit_case(name: str, plan: tuple, groups=None) -> tuple[RunCase, bool]:
    target = plan_target(plan, 16, groups)
    oracle = execute(16, [(s.collective, s.groups) for s in plan], target.reduction_groups).valid
    return RunCase(name, plan, target, length=8 * target.num_chunks), oracle


def all_cases() -> dict[str, tuple[RunCase, bool]]:
    cases = {}
    for pname, where in ONE_AXIS.items():
        for prog, template in (("ar", AR), ("rab", RAB), ("rsarag", RSARAG)):
            cases[f"{pname}-{prog}"] = dsl_case(f"{pname}-{prog}", where, template)
    for pname, where in TWO_AXES.items():
        cases[f"{pname}-rs-rs-ag"] = dsl_case(f"{pname}-rs-rs-ag", where, RS_RS_AG)
        cases[f"{pname}-rsarag"] = dsl_case(f"{pname}-rsarag", where, RSARAG)
    # emulated (ring) paths with a correct result: groups that are not mesh axes of the flat mesh
    cases["flat-rs-ag"] = explicit_case("flat-rs-ag", (S(C.REDUCE_SCATTER, QUADS), S(C.ALL_GATHER, QUADS)))
    cases["flat-reduce-bcast"] = explicit_case(
        "flat-reduce-bcast", (S(C.REDUCE, QUADS), S(C.BROADCAST, QUADS))
    )
    triples = tuple((b, b + 1, b + 2) for b in (0, 4, 8, 12))
    uneven = (
        S(C.REDUCE, triples),
        S(C.ALL_REDUCE, tuple((b, b + 3) for b in (0, 4, 8, 12))),
        S(C.BROADCAST, QUADS),
    )
    cases["flat-ring-padded"] = explicit_case("flat-ring-padded", uneven, QUADS)  # 32 elements over 3 members
    # docs/semantics.md §4's invalid programs, NCCL runs them happily: the numeric check must catch them
    cases["wrong-rs-then-ar"] = explicit_case(
        "wrong-rs-then-ar", (S(C.REDUCE_SCATTER, PAIRS), S(C.ALL_REDUCE, PAIRS))
    )
    cases["wrong-overlapping-ar"] = explicit_case(
        "wrong-overlapping-ar", (S(C.ALL_REDUCE, PAIRS), S(C.ALL_REDUCE, QUADS))
    )
    cases["wrong-v100-rs-ar-ar"] = dsl_case("wrong-v100-rs-ar-ar", ONE_AXIS["v100"], RS_AR_AR)
    return cases


CASES = all_cases()
VALID = [n for n, (_, ok) in CASES.items() if ok]
WRONG = [n for n, (_, ok) in CASES.items() if not ok]


def test_case_list_matches_the_interpreter():
    assert set(WRONG) == {"wrong-rs-then-ar", "wrong-overlapping-ar", "wrong-v100-rs-ar-ar"}
    assert len(VALID) == 13
    # the Master step of Reduce-AllReduce-Broadcast is emulated, the others native
    rab = CASES["v100-rab"][0]
    assert [mesh_axes_of(s.groups, rab.target.mesh, False) for s in rab.plan] == [
        ("axis0_gpu",),
        None,
        ("axis0_gpu",),
    ]


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.fixture(scope="module", params=["jax", "torch"])
def reports(request):
    backend = request.param
    if not _has(backend):
        pytest.skip(f"{backend} is not installed")
    got = run_cases(backend, [case for case, _ in CASES.values()], repeats=1, timeout=240)
    return backend, {r.name: r for r in got}


@pytest.mark.parametrize("name", VALID)
def test_valid_program_gives_exact_sums(reports, name):
    _, by_name = reports
    r = by_name[name]
    assert r.ok and r.exit_code == 0, r.summary()
    assert r.error is None and not r.mismatches and r.num_devices == 16
    case = CASES[name][0]
    assert len(r.step_seconds) == len(case.plan) and all(t > 0 for t in r.step_seconds)
    assert r.total_seconds > 0 and r.step_labels == (
        case.step_labels or tuple(s.collective.value for s in case.plan)
    )


@pytest.mark.parametrize("name", WRONG)
def test_invalid_program_is_caught_by_the_numeric_check(reports, name):
    _, by_name = reports
    r = by_name[name]
    assert not r.ok and r.exit_code == 1
    assert r.error is None, r.error  # it ran; the sums are wrong
    assert r.mismatches and r.bad_devices
    assert "WRONG RESULT" in r.summary()
    assert json.dumps(r.to_json())


MESH_CHECK = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np
    from jax.sharding import Mesh, PartitionSpec as P
    spec = json.loads(sys.argv[1])
    mesh = Mesh(np.array(jax.devices())[spec["order"]].reshape(spec["axes"]), spec["names"])
    red = tuple(spec["names"][i] for i in spec["reduce"])
    f = jax.shard_map(lambda x: jax.lax.psum(x, red), mesh=mesh, in_specs=P(*spec["names"]),
                      out_specs=P(*spec["names"]))
    # the element at mesh coordinates c is the physical id of the device holding it
    ids = np.array([d.id for d in mesh.devices.flat]).reshape(spec["axes"]).astype(np.int32)
    print(json.dumps({"ids": ids.reshape(-1).tolist(), "sums": np.asarray(f(ids)).reshape(-1).tolist()}))
    """
)


@pytest.mark.skipif(not _has("jax"), reason="jax is not installed")
def test_jax_mesh_order_realizes_the_placement():
    """A psum over the reduction axis of Mesh(devices[order].reshape(axes)) sums the reduction groups."""
    system = load_system("fig2-16gpu")
    placement = Placement(system.sizes, (4, 4), ((1, 2, 1, 2), (1, 1, 2, 2)))
    order = list(placement.mesh_order())
    assert order != sorted(order)  # a placement whose mesh is not the identity order
    spec = {"order": order, "axes": [4, 4], "names": ["data", "shard"], "reduce": [0]}
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=16", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", MESH_CHECK, json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    group_sum = {d: sum(g) for g in placement.reduction_groups((0,)) for d in g}
    assert sorted(out["ids"]) == list(range(16))
    assert out["ids"] == order
    assert out["sums"] == [group_sum[d] for d in out["ids"]]


@pytest.mark.skipif(not _has("jax"), reason="jax is not installed")
def test_the_api_runs_a_dsl_program_as_the_cli_does():
    """``p2smt.run`` (the API of ``p2smt run``): a valid program runs with exact sums on its devices."""
    import p2smt

    req = p2smt.Request("v100-2x8", axes=(2, 8), reduce=(0,), matrix=((2, 1), (1, 8)))
    report = p2smt.run(req, "(root, InsideGroup, ReduceScatter); (root, InsideGroup, AllGather)")
    assert report.ok and report.num_devices == 16 and len(report.step_labels) == 2
