"""Ground truth for the sharded goals (docs/semantics.md §6): hierarchical ReduceScatter, HSDP and AllGather
orders run by JAX (``psum_scatter``/``all_gather`` with ``tiled=True``, ``psum``, over mesh axes inside
shard_map) on 16 CPU devices with distinct integers; which device holds which block, read off the numbers,
must be what the dense and positions interpreters say, and their verdict must be VALID exactly when every
device holds what one flat collective over the shard axes (JAX's own definition of the goal) gives it.

The programs run in one child process (JAX must start with 16 host devices, whatever this process imported).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import numpy as np
import pytest

from p2smt.model.collectives import Collective
from p2smt.model.goal import Goal
from p2smt.model.placement import Placement
from p2smt.semantics.dense import execute
from p2smt.semantics.positions import execute_positions
from p2smt.semantics.verdict import judge

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")

DEVICES = 16
SIZES = (4, 4)  # a100-4x16 with 4 GPUs per node: node 4 > gpu 4
OPS = {"rs": Collective.REDUCE_SCATTER, "ag": Collective.ALL_GATHER, "ar": Collective.ALL_REDUCE}


@dataclass(frozen=True)
class Case:
    """A program of collectives over mesh axes of a placement's factor mesh, judged against ``goal``."""

    name: str
    axes: tuple[int, ...]
    matrix: tuple[tuple[int, ...], ...]
    reduce: tuple[int, ...]
    goal: str
    shard_axes: tuple[int, ...] | None
    ops: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def placement(self) -> Placement:
        return Placement(SIZES, self.axes, self.matrix)

    def mesh(self) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """The factor mesh of ``p2smt lower``: one axis ``a<i>_<level>`` per matrix entry above 1."""
        shape, names = [], []
        for i, row in enumerate(self.matrix):
            for j, parts in enumerate(row):
                if parts > 1:
                    shape.append(parts)
                    names.append(f"a{i}_{('node', 'gpu')[j]}")
        return tuple(shape), tuple(names)

    @property
    def sharding(self):
        return Goal.of(self.goal, self.shard_axes, self.reduce).sharding(self.placement)


NODE_GPU = ((4, 4),)
CASES = (
    # the brief's two two-step orders, at 16 devices: across nodes then inside, and the reverse
    Case("rs-across-then-inside", (16,), NODE_GPU, (0,), "reduce-scatter", None,
         (("rs", ("a0_node",)), ("rs", ("a0_gpu",)))),
    Case("rs-inside-then-across", (16,), NODE_GPU, (0,), "reduce-scatter", None,
         (("rs", ("a0_gpu",)), ("rs", ("a0_node",)))),
    # two axes, each split over both levels: physical order is not the rank order
    Case("rs-two-axes-axis1-then-axis0", (4, 4), ((2, 2), (2, 2)), (0, 1), "reduce-scatter", None,
         (("rs", ("a1_node", "a1_gpu")), ("rs", ("a0_node", "a0_gpu")))),
    Case("rs-two-axes-axis0-then-axis1", (4, 4), ((2, 2), (2, 2)), (0, 1), "reduce-scatter", None,
         (("rs", ("a0_node", "a0_gpu")), ("rs", ("a1_node", "a1_gpu")))),
    # HSDP: shard over the GPUs of a node (axis 1), replicate over nodes (axis 0)
    Case("hsdp-rs-inside-ar-across", (4, 4), ((4, 1), (1, 4)), (0, 1), "reduce-scatter", (1,),
         (("rs", ("a1_gpu",)), ("ar", ("a0_node",)))),
    Case("hsdp-rs-across-ar-inside", (4, 4), ((4, 1), (1, 4)), (0, 1), "reduce-scatter", (1,),
         (("rs", ("a0_node",)), ("ar", ("a1_gpu",)))),
    # AllGather: inside each node then across nodes, and the reverse
    Case("ag-inside-then-across", (16,), NODE_GPU, (0,), "all-gather", None,
         (("ag", ("a0_gpu",)), ("ag", ("a0_node",)))),
    Case("ag-across-then-inside", (16,), NODE_GPU, (0,), "all-gather", None,
         (("ag", ("a0_node",)), ("ag", ("a0_gpu",)))),
)


def reference(case: Case) -> Case:
    """The goal as JAX defines it: one flat collective over the shard axes' mesh axes (in mesh order), after a
    psum over the replicated axes (HSDP)."""
    shard = case.shard_axes if case.shard_axes is not None else case.reduce
    _, names = case.mesh()
    over = tuple(n for n in names if int(n[1:n.index("_")]) in shard)
    rest = tuple(n for n in names if int(n[1:n.index("_")]) in case.reduce and n not in over)
    ops = (({"reduce-scatter": "rs", "all-gather": "ag"}[case.goal], over),) + ((("ar", rest),) if rest else ())
    return Case(f"{case.name}:reference", case.axes, case.matrix, case.reduce, case.goal, case.shard_axes, ops)


def contributions(case: Case) -> np.ndarray:
    """x[d]: physical device d's buffer; distinct integers whose block sums are distinct too."""
    if case.goal == "all-gather":
        return (100 + np.arange(DEVICES)).reshape(DEVICES, 1)
    return np.array([[1000 * p + d + 1 for p in range(DEVICES)] for d in range(DEVICES)])


CHILD = textwrap.dedent(
    """
    import json, os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=16"
    os.environ["JAX_PLATFORMS"] = "cpu"
    from functools import partial
    import jax, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    shard_map = getattr(jax, "shard_map", None)
    if shard_map is None:
        from jax.experimental.shard_map import shard_map
    out = {}
    for case in json.loads(sys.stdin.read()):
        shape, names, order = tuple(case["shape"]), tuple(case["names"]), case["order"]
        mesh = Mesh(np.array(jax.devices())[order].reshape(shape), names)
        x = np.array(case["x"], dtype=np.int32)[order].reshape(-1)  # mesh position i holds device order[i]'s

        def body(v, ops=case["ops"]):
            for op, over in ops:
                over = tuple(over)
                if op == "rs":
                    v = jax.lax.psum_scatter(v, over, scatter_dimension=0, tiled=True)
                elif op == "ag":
                    v = jax.lax.all_gather(v, over, axis=0, tiled=True)
                else:
                    v = jax.lax.psum(v, over)
            return v

        f = jax.jit(shard_map(body, mesh=mesh, in_specs=P(names), out_specs=P(names)))
        y = np.asarray(f(jax.device_put(x, NamedSharding(mesh, P(names)))))
        per = y.reshape(len(order), -1)  # row i: mesh position i's final buffer
        out[case["name"]] = {str(order[i]): [int(v) for v in per[i]] for i in range(len(order))}
        if order == sorted(order):  # XLA id i is device i: the module's text, as check --hlo reads it
            lowered = f.lower(jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, P(names))))
            out[case["name"] + ":texts"] = {"hlo": lowered.compile().as_text(), "mlir": lowered.as_text()}
    print(json.dumps(out))
    """
)


def payload(case: Case) -> dict:
    shape, names = case.mesh()
    return {"name": case.name, "shape": list(shape), "names": list(names),
            "order": list(case.placement.mesh_order()), "x": contributions(case).tolist(),
            "ops": [[op, list(over)] for op, over in case.ops]}


@pytest.fixture(scope="module")
def numbers() -> dict:
    cases = [*CASES, *(reference(c) for c in CASES)]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps([payload(c) for c in cases]),
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def plan(case: Case):
    """The case's program as an explicit plan on physical ids: one group per setting of the other mesh axes,
    members in row-major order over the named axes (JAX's order)."""
    shape, names = case.mesh()
    ids = np.array(case.placement.mesh_order()).reshape(shape)
    steps = []
    for op, over in case.ops:
        dims = [names.index(n) for n in over]
        rest = [i for i in range(len(names)) if i not in dims]
        groups = np.transpose(ids, rest + dims).reshape(-1, int(np.prod([shape[i] for i in dims])))
        steps.append((OPS[op], tuple(tuple(int(d) for d in g) for g in groups)))
    return steps


def blocks_from_numbers(case: Case, got: dict) -> dict[int, list]:
    """Per device, what each position of its final buffer holds, read off JAX's numbers: the block whose exact
    sum it is (ReduceScatter), or the device whose shard it is (AllGather)."""
    x = contributions(case)
    if case.goal == "all-gather":
        return {int(d): [int(v) - 100 for v in vals] for d, vals in got.items()}
    totals = {int(t): p for p, t in enumerate(x.sum(axis=0))}
    return {int(d): [totals.get(int(v), ("not an exact block sum", int(v))) for v in vals] for d, vals in got.items()}


def blocks_from_positions(case: Case) -> dict[int, list]:
    goal_groups = case.placement.reduction_groups(case.reduce)
    run = execute_positions(DEVICES, plan(case), goal_groups, len(goal_groups[0]), case.sharding)
    assert run.violation is None
    if case.goal == "all-gather":
        return {d: [min(c.sources) for c in buf] for d, buf in enumerate(run.buffers)}
    assert all(c.sources == frozenset(g) for g in goal_groups for d in g for c in run.buffers[d])
    return {d: [c.block for c in buf] for d, buf in enumerate(run.buffers)}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_positions_interpreter_puts_every_block_where_jax_does(numbers, case):
    assert blocks_from_positions(case) == blocks_from_numbers(case, numbers[case.name])


@pytest.mark.parametrize("case", [c for c in CASES if c.goal != "all-gather"], ids=lambda c: c.name)
def test_the_dense_interpreter_holds_the_chunks_jax_leaves(numbers, case):
    goal_groups = case.placement.reduction_groups(case.reduce)
    final = execute(DEVICES, plan(case), goal_groups, chunks=len(goal_groups[0]), sharding=case.sharding).states[-1]
    held = {d: sorted(int(r) for r in np.flatnonzero(final[d].any(axis=1))) for d in range(DEVICES)}
    assert held == {d: sorted(b) for d, b in blocks_from_numbers(case, numbers[case.name]).items()}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_valid_exactly_when_every_device_holds_what_the_flat_collective_gives_it(numbers, case):
    got = blocks_from_numbers(case, numbers[case.name])
    want = blocks_from_numbers(case, numbers[reference(case).name])
    goal_groups = case.placement.reduction_groups(case.reduce)
    verdict = judge(DEVICES, plan(case), goal_groups, len(goal_groups[0]), True, layout=True, sharding=case.sharding)
    assert verdict.valid == (got == want)
    sharding = case.sharding  # the goal's ranks are JAX's: the flat collective leaves device d shard rank[d]
    b = DEVICES // sharding.shards
    if case.goal != "all-gather":
        assert want == {d: list(range(sharding.rank[d] * b, sharding.rank[d] * b + b)) for d in range(DEVICES)}


def test_the_cases_tell_orders_apart():
    """Each pair holds one VALID order and one that is not (else the ground truth would show nothing)."""
    verdicts = {}
    for case in CASES:
        goal_groups = case.placement.reduction_groups(case.reduce)
        verdicts[case.name] = judge(DEVICES, plan(case), goal_groups, len(goal_groups[0]), True, layout=True,
                                    sharding=case.sharding).valid
    assert verdicts == {"rs-across-then-inside": True, "rs-inside-then-across": False,
                        "rs-two-axes-axis1-then-axis0": False, "rs-two-axes-axis0-then-axis1": True,
                        "hsdp-rs-inside-ar-across": True, "hsdp-rs-across-ar-inside": False,
                        "ag-inside-then-across": True, "ag-across-then-inside": False}


SYSTEM16 = ["--system", "a100-4x16", "--level", "gpu=4"]


@pytest.mark.parametrize("case", [c for c in CASES if c.axes == (16,)], ids=lambda c: c.name)
@pytest.mark.parametrize("dialect", ["hlo", "mlir"])
def test_check_reads_the_same_verdict_from_what_xla_printed(numbers, run_cli, tmp_path, case, dialect):
    """The module JAX compiled (HLO) or lowered (StableHLO) for the case, judged by ``check --hlo --goal``."""
    path = tmp_path / f"{case.name}.{dialect}"
    path.write_text(numbers[f"{case.name}:texts"][dialect])
    argv = [*SYSTEM16, "--axes", "16", "--reduce", "0", "--matrix", "[[4,4]]", "--goal", case.goal]
    rc, out, err = run_cli("check", *argv, "--hlo", str(path), "--json")
    assert err == ""
    data = json.loads(out)
    got = blocks_from_numbers(case, numbers[case.name])
    want = blocks_from_numbers(case, numbers[reference(case).name])
    assert data["valid"] == (got == want) and rc == (0 if got == want else 1)
    if not data["valid"]:
        first = data["positions"]["misplaced"][0]
        assert got[first["device"]][first["position"]] == first["found_block"]
