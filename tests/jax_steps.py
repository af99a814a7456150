"""JAX training steps on 16 CPU devices with a numpy reference of their intended global math: the audit's ground truth.

Each builder returns a `Step`: the jitted function, example arguments (small exact integers in float32, so every
sum is exact), the mesh, a numpy ``reference`` of what the step is meant to compute, and whether it does
(``correct``) with the class of its bug (`Finding`) when it does not. `run` executes a step on the devices and
`matches` compares with the reference exactly; tests assert that ``correct`` is what the numbers say.

Importing this module before JAX asks for 16 host devices (``--xla_force_host_platform_device_count=16``);
`require_devices` says so in one line when JAX was imported first with fewer.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

DEVICES = 16
if "jax" not in sys.modules:  # the flag is read once, when JAX starts its CPU backend
    _flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in _flags:
        os.environ["XLA_FLAGS"] = f"{_flags} --xla_force_host_platform_device_count={DEVICES}".strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

psum, psum_scatter, all_gather, axis_index = jax.lax.psum, jax.lax.psum_scatter, jax.lax.all_gather, jax.lax.axis_index


class Finding(Enum):
    """What is wrong with a wrong step, in the audit's words."""

    MISSING_REDUCTION = "missing-reduction"  # a contraction's psum left out (forward before a nonlinearity, or backward)
    SWAPPED_OUTPUTS = "swapped-outputs"  # outputs returned in the wrong order; their declared shardings differ
    SHARDED_AFTER_SLICE = "sharded-after-slice"  # a sum left sharded after an axis_index dynamic_slice
    HIDDEN_CUSTOM_PARTITIONING = "hidden-custom-partitioning"  # a psum inside a custom_partitioning body
    GSPMD_INSERTED = "gspmd-inserted"  # an all-reduce GSPMD adds at compile time (absent from StableHLO)
    WRONG_AXIS = "wrong-axis"  # a psum over the other mesh axis
    PARTIAL_TO_OUTPUT = "partial-to-output"  # a partial sum (over some of the axes) reaches an output
    NONLINEAR_ON_PARTIAL = "nonlinear-on-partial"  # a nonlinearity applied before the psum it needs
    BIAS_ON_PARTIAL = "bias-on-partial"  # a replicated bias added before the psum: counted once per device
    DOUBLE_COUNT = "double-count"  # a value summed twice over the same axis
    PERMUTED_SLICE = "permuted-slice"  # an axis_index dynamic_slice that takes another device's block


@dataclass(frozen=True)
class Step:
    """One step: ``fn(*args)`` on ``mesh`` should equal ``reference(*numpy args)``; ``finding`` says why not."""

    name: str
    fn: Callable[..., Any]
    args: tuple
    mesh: Mesh
    reference: Callable[..., Any]
    correct: bool
    finding: Finding | None = None
    doc: str = ""


def require_devices() -> None:
    """Fail in one line when JAX started with fewer than 16 devices (imported before this module)."""
    if jax.device_count() < DEVICES:
        raise RuntimeError(f"tests/jax_steps.py needs {DEVICES} JAX devices, found {jax.device_count()}: "
                           f"set XLA_FLAGS=--xla_force_host_platform_device_count={DEVICES} before importing jax")


def mesh_of(names: tuple[str, ...] = ("data", "tensor"), shape: tuple[int, ...] = (4, 4)) -> Mesh:
    """The first 16 devices, in order, as a mesh."""
    require_devices()
    return Mesh(np.array(jax.devices()[:DEVICES]).reshape(shape), names)


def small_ints(shape: tuple[int, ...], seed: int, bound: int = 2) -> np.ndarray:
    """Integers in [-bound, bound] (float32): matmul chains stay far below 2**24, so every sum is exact."""
    return np.random.default_rng(seed).integers(-bound, bound + 1, shape).astype(np.float32)


def distinct(shape: tuple[int, ...], offset: int = 0) -> np.ndarray:
    """Distinct integers (float32), negative and positive: a moved or dropped element changes the result."""
    n = int(np.prod(shape))
    return (np.arange(n) - n // 2 + offset).reshape(shape).astype(np.float32)


def put(mesh: Mesh, x: np.ndarray, spec: P) -> jax.Array:
    return jax.device_put(jnp.asarray(x), NamedSharding(mesh, spec))


def smap(body: Callable, mesh: Mesh, in_specs: Any, out_specs: Any, check: bool = False) -> Callable:
    """``jit(shard_map(body))``; ``check`` is JAX's varying-axes check (wrong steps must turn it off)."""
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=check))


def run(step: Step) -> Any:
    """The step's outputs on the devices, as numpy arrays (same pytree)."""
    return jax.tree.map(np.asarray, step.fn(*step.args))


def expected(step: Step) -> Any:
    return step.reference(*jax.tree.map(np.asarray, step.args))


def same(got: Any, want: Any) -> bool:
    """Exact equality of two pytrees of arrays: same structure, shapes and values."""
    g, gt = jax.tree.flatten(got)
    w, wt = jax.tree.flatten(want)
    return gt == wt and all(np.shape(a) == np.shape(b) and np.array_equal(a, b) for a, b in zip(g, w, strict=True))


def matches(step: Step) -> bool:
    """Does the step compute its reference exactly on the 16 devices?"""
    return same(run(step), expected(step))


relu = jax.nn.relu


def _np_relu(v: np.ndarray) -> np.ndarray:
    return np.maximum(v, 0)


# ---------------------------------------------------------------- (a) transformer block, data x tensor

B, D, H = 8, 8, 16  # global batch (2 a data shard), model width, hidden width (4 a tensor shard)
W_SPECS = (P(), P(None, "tensor"), P("tensor", None))  # W0 replicated, W1 column-parallel, W2 row-parallel
XY_SPEC = P("data", None)


def _block_args(mesh: Mesh, seed: int) -> tuple:
    w0, w1, w2 = small_ints((D, D), seed), small_ints((D, H), seed + 1), small_ints((H, D), seed + 2)
    x, y = small_ints((B, D), seed + 3), small_ints((B, D), seed + 4)
    return tuple(put(mesh, a, s) for a, s in zip((w0, w1, w2, x, y), (*W_SPECS, XY_SPEC, XY_SPEC), strict=True))


def _block_reference(w0, w1, w2, x, y):
    """loss = sum((relu(x W0 W1) W2 + x W0) * y) over the global batch, and its gradients by hand."""
    e = x @ w0
    z = e @ w1
    h = _np_relu(z)
    o = h @ w2 + e
    dz = (y @ w2.T) * (z > 0)
    de = dz @ w1.T + y
    return np.sum(o * y), x.T @ de, e.T @ dz, h.T @ y


def _block_loss(params, x, y):
    w0, w1, w2 = params
    e = x @ w0
    h = relu(e @ w1)  # column-parallel: each tensor shard holds H/4 hidden units, no communication
    o = psum(h @ w2, "tensor") + e  # row-parallel: partial sums over tensor, one all-reduce
    return jnp.sum(o * y)


def transformer_dp_tp() -> Step:
    """(a) A transformer MLP block, Megatron-style: column- then row-parallel matmul over ``tensor`` with a
    ReLU between, a residual, forward and backward by ``jax.grad`` (which adds the backward psum over
    ``tensor`` for the replicated W0), gradients and loss summed over ``data``."""
    mesh = mesh_of()

    def body(w0, w1, w2, x, y):
        params = jax.lax.pcast((w0, w1, w2), "data", to="varying")  # per data shard: its own gradient
        loss, grads = jax.value_and_grad(_block_loss)(params, x, y)
        return psum(loss, "data"), *psum(grads, "data")

    fn = smap(body, mesh, (*W_SPECS, XY_SPEC, XY_SPEC), (P(), *W_SPECS), check=True)
    return Step("transformer-dp-tp", fn, _block_args(mesh, 10), mesh, _block_reference, True,
                doc=transformer_dp_tp.__doc__ or "")


def _manual_block(with_backward_psum: bool) -> Callable:
    """The block's forward and backward written out (Megatron's f and g operators by hand)."""

    def body(w0, w1, w2, x, y):
        e = x @ w0
        z = e @ w1
        h = relu(z)
        o = psum(h @ w2, "tensor") + e
        loss = psum(jnp.sum(o * y), "data")
        dz = (y @ w2.T) * (z > 0)
        de_part = dz @ w1.T  # each tensor shard holds its hidden units' share of de
        de = (psum(de_part, "tensor") if with_backward_psum else de_part) + y
        grads = (x.T @ de, e.T @ dz, h.T @ y)
        return loss, *psum(grads, "data")

    return body


def tp_backward_manual() -> Step:
    """The block's backward pass by hand, with the psum over ``tensor`` of the input gradient."""
    mesh = mesh_of()
    fn = smap(_manual_block(True), mesh, (*W_SPECS, XY_SPEC, XY_SPEC), (P(), *W_SPECS))
    return Step("tp-backward-manual", fn, _block_args(mesh, 10), mesh, _block_reference, True,
                doc=tp_backward_manual.__doc__ or "")


def wrong_tp_backward_missing_psum() -> Step:
    """The same backward without the psum over ``tensor`` of the input gradient: W0's gradient is a partial
    sum (one tensor shard's hidden units), returned as if replicated."""
    mesh = mesh_of()
    fn = smap(_manual_block(False), mesh, (*W_SPECS, XY_SPEC, XY_SPEC), (P(), *W_SPECS))
    return Step("wrong-tp-backward-missing-psum", fn, _block_args(mesh, 10), mesh, _block_reference, False,
                Finding.MISSING_REDUCTION, doc=wrong_tp_backward_missing_psum.__doc__ or "")


def _mlp_args(mesh: Mesh, seed: int) -> tuple:
    x, w1, w2 = small_ints((B, H), seed), small_ints((H, D), seed + 1), small_ints((D, D), seed + 2)
    return put(mesh, x, P("data", "tensor")), put(mesh, w1, P("tensor", None)), put(mesh, w2, P())


def _mlp_reference(x, w1, w2):
    return _np_relu(x @ w1) @ w2


def _mlp(psum_at: str) -> Callable:
    """``psum_at``: "matmul" (right), "output" (after the ReLU and the second matmul) or "nowhere"."""

    def body(x, w1, w2):
        part = x @ w1  # row-parallel: the contraction dimension is sharded over tensor
        if psum_at == "matmul":
            return relu(psum(part, "tensor")) @ w2
        out = relu(part) @ w2
        return psum(out, "tensor") if psum_at == "output" else out

    return body


MLP_SPECS = ((P("data", "tensor"), P("tensor", None), P()), P("data", None))


def row_parallel_mlp() -> Step:
    """A row-parallel matmul over ``tensor``, its psum, then ReLU and a replicated matmul (batch over ``data``)."""
    mesh = mesh_of()
    return Step("row-parallel-mlp", smap(_mlp("matmul"), mesh, *MLP_SPECS), _mlp_args(mesh, 20), mesh,
                _mlp_reference, True, doc=row_parallel_mlp.__doc__ or "")


def wrong_missing_psum_before_nonlinearity() -> Step:
    """The row-parallel matmul's psum is missing: the ReLU and the next matmul run on a partial sum over
    ``tensor``, which goes out declared replicated."""
    mesh = mesh_of()
    return Step("wrong-missing-psum-before-nonlinearity", smap(_mlp("nowhere"), mesh, *MLP_SPECS),
                _mlp_args(mesh, 20), mesh, _mlp_reference, False, Finding.MISSING_REDUCTION,
                doc=wrong_missing_psum_before_nonlinearity.__doc__ or "")


def wrong_psum_after_nonlinearity() -> Step:
    """The row-parallel matmul's psum moved past the ReLU (and the next matmul): ReLU of a partial sum."""
    mesh = mesh_of()
    return Step("wrong-psum-after-nonlinearity", smap(_mlp("output"), mesh, *MLP_SPECS), _mlp_args(mesh, 20),
                mesh, _mlp_reference, False, Finding.NONLINEAR_ON_PARTIAL,
                doc=wrong_psum_after_nonlinearity.__doc__ or "")


# ---------------------------------------------------------------- TP over one axis, DP over the other


def _linear_args(mesh: Mesh, seed: int) -> tuple:
    w, x, y = small_ints((H, D), seed), small_ints((B, H), seed + 1), small_ints((B, D), seed + 2)
    return put(mesh, w, P("tensor", None)), put(mesh, x, P("data", "tensor")), put(mesh, y, XY_SPEC)


def _linear_reference(w, x, y):
    o = x @ w
    return o, w - x.T @ y, np.sum(o * y)


def _linear(axis: str) -> Callable:
    """A row-parallel linear layer (TP over ``tensor``), its weight gradient summed over ``data``, an SGD step."""

    def body(w, x, y):
        o = psum(x @ w, axis)
        g = psum(x.T @ y, "data")  # dL/dW for L = sum(o * y): each data shard's batch, summed
        return o, w - g, psum(jnp.sum(o * y), "data")

    return body


LINEAR_SPECS = ((P("tensor", None), P("data", "tensor"), XY_SPEC), (XY_SPEC, P("tensor", None), P()))


def tp_dp_linear() -> Step:
    """TP over one axis, DP over the other: a row-parallel linear (psum over ``tensor``), the weight gradient
    summed over ``data`` and applied."""
    mesh = mesh_of()
    fn = smap(_linear("tensor"), mesh, *LINEAR_SPECS)
    return Step("tp-dp-linear", fn, _linear_args(mesh, 30), mesh, _linear_reference, True,
                doc=tp_dp_linear.__doc__ or "")


def wrong_axis_linear() -> Step:
    """The row-parallel linear's psum runs over ``data`` instead of ``tensor``."""
    mesh = mesh_of()
    fn = smap(_linear("data"), mesh, *LINEAR_SPECS)
    return Step("wrong-axis-linear", fn, _linear_args(mesh, 30), mesh, _linear_reference, False,
                Finding.WRONG_AXIS, doc=wrong_axis_linear.__doc__ or "")


def _bias_args(mesh: Mesh, seed: int) -> tuple:
    x, w, b = small_ints((B, H), seed), small_ints((H, D), seed + 1), small_ints((D,), seed + 2)
    return put(mesh, x, P("data", "tensor")), put(mesh, w, P("tensor", None)), put(mesh, b, P())


def wrong_bias_before_psum() -> Step:
    """A row-parallel linear whose replicated bias is added to the partial sums: it is counted four times."""
    mesh = mesh_of()
    fn = smap(lambda x, w, b: psum(x @ w + b, "tensor"), mesh, (P("data", "tensor"), P("tensor", None), P()),
              XY_SPEC)
    return Step("wrong-bias-before-psum", fn, _bias_args(mesh, 40), mesh, lambda x, w, b: x @ w + b, False,
                Finding.BIAS_ON_PARTIAL, doc=wrong_bias_before_psum.__doc__ or "")


# ---------------------------------------------------------------- (b) data parallel over a pytree


def _tree_args(mesh: Mesh) -> tuple:
    params = {"w": small_ints((D, 4), 50), "b": small_ints((4,), 51), "layers": [small_ints((4, 4), 52)]}
    x, y = small_ints((32, D), 53), small_ints((32, 4), 54)
    rep = jax.tree.map(lambda a: put(mesh, a, P()), params)
    return rep, put(mesh, x, P("data")), put(mesh, y, P("data"))


def _tree_loss(params, x, y):
    return jnp.sum(((x @ params["w"] + params["b"]) @ params["layers"][0]) * y)


def _tree_reference(params, x, y):
    w, b, v = params["w"], params["b"], params["layers"][0]
    a = x @ w + b
    dv = a.T @ y
    da = y @ v.T
    grads = {"w": x.T @ da, "b": da.sum(0), "layers": [dv]}
    return jax.tree.map(lambda p, g: p - g, params, grads), np.sum((a @ v) * y)


def data_parallel_pytree() -> Step:
    """(b) Data parallelism over 16 devices: each device's gradient of a pytree of parameters (a dict with a
    list inside), every leaf summed over ``data`` by its own psum, an SGD step with step size 1."""
    mesh = mesh_of(("data",), (DEVICES,))

    def body(params, x, y):
        loss, grads = jax.value_and_grad(_tree_loss)(jax.lax.pcast(params, "data", to="varying"), x, y)
        grads = jax.tree.map(lambda g: psum(g, "data"), grads)
        return jax.tree.map(lambda p, g: p - g, params, grads), psum(loss, "data")

    fn = smap(body, mesh, (P(), P("data"), P("data")), (P(), P()), check=True)
    return Step("data-parallel-pytree", fn, _tree_args(mesh), mesh, _tree_reference, True,
                doc=data_parallel_pytree.__doc__ or "")


# ---------------------------------------------------------------- (c) ZeRO / FSDP


def _fsdp_args(mesh: Mesh) -> tuple:
    w1, w2 = small_ints((16, 16), 60), small_ints((16, 16), 61)  # one row a device
    x, y = small_ints((32, 16), 62), small_ints((32, 16), 63)
    return tuple(put(mesh, a, P("data")) for a in (w1, w2, x, y))


def _fsdp_reference(w1, w2, x, y):
    z = x @ w1
    h = _np_relu(z)
    dz = (y @ w2.T) * (z > 0)
    return w1 - x.T @ dz, w2 - h.T @ y, np.sum((h @ w2) * y)


def fsdp_step() -> Step:
    """(c) ZeRO-3 / FSDP over 16 devices: each device keeps 1/16 of every weight (rows), all-gathers the full
    weights for its batch, and reduce-scatters (psum_scatter) the gradients back to its rows."""
    mesh = mesh_of(("data",), (DEVICES,))

    def loss_fn(w1, w2, x, y):
        return jnp.sum((relu(x @ w1) @ w2) * y)

    def body(w1s, w2s, x, y):
        w1, w2 = (all_gather(w, "data", axis=0, tiled=True) for w in (w1s, w2s))
        loss, (g1, g2) = jax.value_and_grad(loss_fn, argnums=(0, 1))(w1, w2, x, y)
        g1s, g2s = (psum_scatter(g, "data", scatter_dimension=0, tiled=True) for g in (g1, g2))
        return w1s - g1s, w2s - g2s, psum(loss, "data")

    fn = smap(body, mesh, (P("data"),) * 4, (P("data"), P("data"), P()))
    return Step("fsdp", fn, _fsdp_args(mesh), mesh, _fsdp_reference, True, doc=fsdp_step.__doc__ or "")


# ---------------------------------------------------------------- one chain per leaf, over (node, gpu)

NG = ("node", "gpu")


def _ng_args(mesh: Mesh) -> tuple:
    return put(mesh, distinct((DEVICES * 8,)), P(NG)), put(mesh, distinct((DEVICES * 8,), 7), P(NG))


def _blocks_sum(v: np.ndarray) -> np.ndarray:
    """The sum of a global vector's 16 device blocks: what a psum over both axes leaves on every device."""
    return v.reshape(DEVICES, -1).sum(0)


def mixed_node_gpu() -> Step:
    """Two leaves, two chains over the same devices: ``psum(x, ('node', 'gpu'))`` and
    ``psum(psum(y, 'node'), 'gpu')``."""
    mesh = mesh_of(NG)
    fn = smap(lambda x, y: (psum(x, NG), psum(psum(y, "node"), "gpu")), mesh, (P(NG), P(NG)), (P(), P()), True)
    return Step("mixed-node-gpu", fn, _ng_args(mesh), mesh, lambda x, y: (_blocks_sum(x), _blocks_sum(y)), True,
                doc=mixed_node_gpu.__doc__ or "")


def wrong_partial_to_output() -> Step:
    """The second leaf is summed over ``node`` only: a partial sum over ``gpu`` reaches the output."""
    mesh = mesh_of(NG)
    fn = smap(lambda x, y: (psum(x, NG), psum(y, "node")), mesh, (P(NG), P(NG)), (P(), P()))
    return Step("wrong-partial-to-output", fn, _ng_args(mesh), mesh,
                lambda x, y: (_blocks_sum(x), _blocks_sum(y)), False, Finding.PARTIAL_TO_OUTPUT,
                doc=wrong_partial_to_output.__doc__ or "")


def wrong_double_count() -> Step:
    """``psum(psum(x, 'gpu'), ('node', 'gpu'))``: the sum over ``gpu`` is taken twice."""
    mesh = mesh_of(NG)
    fn = smap(lambda x, y: psum(psum(x, "gpu"), NG), mesh, (P(NG), P(NG)), P())
    return Step("wrong-double-count", fn, _ng_args(mesh), mesh, lambda x, y: _blocks_sum(x), False,
                Finding.DOUBLE_COUNT, doc=wrong_double_count.__doc__ or "")


# ---------------------------------------------------------------- swapped outputs, slices


def _stats_args(mesh: Mesh) -> tuple:
    return (put(mesh, distinct((B, 4 * D)), P("data", "tensor")),)


def _stats_reference(x):
    return x.reshape(B, 4, D).sum(1), 2 * x


def _stats(swap: bool) -> Callable:
    def body(x):
        total, doubled = psum(x, "tensor"), 2 * x  # same local shape, different shardings
        return (doubled, total) if swap else (total, doubled)

    return body


STATS_OUT = (P("data", None), P("data", "tensor"))


def stats_pair() -> Step:
    """Two outputs of one local shape: the sum of ``x``'s tensor blocks (replicated over ``tensor``) and
    ``2 x`` (sharded over ``tensor``)."""
    mesh = mesh_of()
    fn = smap(_stats(False), mesh, P("data", "tensor"), STATS_OUT, True)
    return Step("stats-pair", fn, _stats_args(mesh), mesh, _stats_reference, True, doc=stats_pair.__doc__ or "")


def wrong_swapped_outputs() -> Step:
    """The same outputs returned in the wrong order: the sharded ``2 x`` goes out declared replicated over
    ``tensor`` and the replicated sum declared sharded."""
    mesh = mesh_of()
    fn = smap(_stats(True), mesh, P("data", "tensor"), STATS_OUT)
    return Step("wrong-swapped-outputs", fn, _stats_args(mesh), mesh, _stats_reference, False,
                Finding.SWAPPED_OUTPUTS, doc=wrong_swapped_outputs.__doc__ or "")


def _slice_sum(reduce_after: bool) -> Callable:
    def body(x):
        total = psum(x, "tensor")  # (2, 8) on every tensor shard
        mine = jax.lax.dynamic_slice_in_dim(total, axis_index("tensor") * 2, 2, axis=1)  # sharded over tensor
        rows = jnp.sum(mine, axis=1, keepdims=True)  # a partial sum over tensor again
        return psum(rows, "tensor") if reduce_after else rows

    return body


def slice_then_reduce() -> Step:
    """A psum over ``tensor``, each shard keeps its quarter (dynamic_slice at ``axis_index``), sums it, and
    the quarters' sums are summed over ``tensor``: the row sums of the blocks' sum."""
    mesh = mesh_of()
    fn = smap(_slice_sum(True), mesh, P("data", "tensor"), P("data", None))
    return Step("slice-then-reduce", fn, _stats_args(mesh), mesh,
                lambda x: x.reshape(B, 4, D).sum((1, 2))[:, None], True, doc=slice_then_reduce.__doc__ or "")


def wrong_sharded_after_slice() -> Step:
    """The same without the last psum: the sum of one quarter is returned as if it were the whole row."""
    mesh = mesh_of()
    fn = smap(_slice_sum(False), mesh, P("data", "tensor"), P("data", None))
    return Step("wrong-sharded-after-slice", fn, _stats_args(mesh), mesh,
                lambda x: x.reshape(B, 4, D).sum((1, 2))[:, None], False, Finding.SHARDED_AFTER_SLICE,
                doc=wrong_sharded_after_slice.__doc__ or "")


def _scatter_by_slice(shift: int) -> Callable:
    def body(x):
        block = (axis_index("tensor") + shift) % 4 if shift else axis_index("tensor")
        return jax.lax.dynamic_slice_in_dim(psum(x, "tensor"), block * 2, 2, axis=1)

    return body


def slice_reduce_scatter() -> Step:
    """A psum over ``tensor`` and a dynamic_slice at ``axis_index``, declared sharded: a reduce-scatter."""
    mesh = mesh_of()
    fn = smap(_scatter_by_slice(0), mesh, P("data", "tensor"), P("data", "tensor"))
    return Step("slice-reduce-scatter", fn, _stats_args(mesh), mesh, lambda x: x.reshape(B, 4, D).sum(1), True,
                doc=slice_reduce_scatter.__doc__ or "")


def wrong_permuted_slice() -> Step:
    """The same reduce-scatter by slicing, but each device keeps its neighbour's block (``axis_index + 1``):
    sharded over ``tensor`` as declared, in the wrong order."""
    mesh = mesh_of()
    fn = smap(_scatter_by_slice(1), mesh, P("data", "tensor"), P("data", "tensor"))
    return Step("wrong-permuted-slice", fn, _stats_args(mesh), mesh, lambda x: x.reshape(B, 4, D).sum(1), False,
                Finding.PERMUTED_SLICE, doc=wrong_permuted_slice.__doc__ or "")


# ---------------------------------------------------------------- collectives hidden from StableHLO


@custom_partitioning
def column_sum(x):
    """``sum(x, axis=0)``; partitioned by hand: a local sum and a psum over ``data``, invisible in StableHLO."""
    return jnp.sum(x, axis=0)


def _column_sum_partition(mesh, arg_shapes, result_shape):
    del arg_shapes, result_shape
    return (mesh, lambda x: psum(jnp.sum(x, axis=0), "data"), NamedSharding(mesh, P()),
            (NamedSharding(mesh, P("data")),))


column_sum.def_partition(_column_sum_partition, infer_sharding_from_operands=lambda mesh, *_: NamedSharding(mesh, P()),
                         sharding_rule="i j -> j", reduction_factors=("i",))


def _column_args(mesh: Mesh) -> tuple:
    return (put(mesh, distinct((32, D)), P("data")),)


def custom_partitioning_sum() -> Step:
    """A column sum through a ``custom_partitioning`` op whose body runs a psum over ``data`` (correct)."""
    mesh = mesh_of()
    return Step("custom-partitioning-sum", jax.jit(column_sum), _column_args(mesh), mesh, lambda x: x.sum(0),
                True, doc=custom_partitioning_sum.__doc__ or "")


def wrong_hidden_custom_partitioning() -> Step:
    """The custom_partitioning column sum, then a visible psum over ``data`` of its (already summed,
    replicated) result: StableHLO shows one all-reduce, XLA runs two."""
    mesh = mesh_of()
    again = jax.shard_map(lambda v: psum(v, "data"), mesh=mesh, in_specs=P(), out_specs=P(), check_vma=False)
    return Step("wrong-hidden-custom-partitioning", jax.jit(lambda x: again(column_sum(x))), _column_args(mesh),
                mesh, lambda x: x.sum(0), False, Finding.HIDDEN_CUSTOM_PARTITIONING,
                doc=wrong_hidden_custom_partitioning.__doc__ or "")


def gspmd_sum() -> Step:
    """``jnp.sum`` over a dimension sharded over ``data``, no shard_map: GSPMD adds the all-reduce (correct)."""
    mesh = mesh_of()
    fn = jax.jit(lambda x: jnp.sum(x, axis=0), out_shardings=NamedSharding(mesh, P("tensor")))
    return Step("gspmd-sum", fn, (put(mesh, distinct((32, 4 * D)), P("data", "tensor")),), mesh,
                lambda x: x.sum(0), True, doc=gspmd_sum.__doc__ or "")


def wrong_gspmd_inserted() -> Step:
    """A shard_map psum over ``data`` whose result goes out declared sharded over ``data``, then ``jnp.sum``
    over that dimension: GSPMD's all-reduce (compiled HLO only) sums the four copies of the sum again."""
    mesh = mesh_of()
    inner = jax.shard_map(lambda v: psum(v, "data"), mesh=mesh, in_specs=P("data"), out_specs=P("data"),
                          check_vma=False)
    fn = jax.jit(lambda x: jnp.sum(inner(x).reshape(4, -1, 4 * D), axis=0))
    return Step("wrong-gspmd-inserted", fn, (put(mesh, distinct((32, 4 * D)), P("data")),), mesh,
                lambda x: x.reshape(4, -1, 4 * D).sum(0), False, Finding.GSPMD_INSERTED,
                doc=wrong_gspmd_inserted.__doc__ or "")


# ---------------------------------------------------------------- forms XLA prints differently


def data_parallel_bf16() -> Step:
    """Data parallelism in bfloat16 (small integers: exact): a psum over ``data`` of bf16 gradients, which XLA
    on CPU may carry out in float32 between converts."""
    mesh = mesh_of(("data",), (DEVICES,))
    g = jnp.asarray(small_ints((DEVICES * 4, 8), 70, 3), jnp.bfloat16)
    fn = smap(lambda v: psum(v, "data"), mesh, P("data"), P(), True)
    return Step("data-parallel-bf16", fn, (put(mesh, g, P("data")),), mesh,
                lambda v: v.astype(np.float32).reshape(DEVICES, 4, 8).sum(0).astype(v.dtype), True,
                doc=data_parallel_bf16.__doc__ or "")


def all_gather_untiled_sum() -> Step:
    """JAX's default ``all_gather(tiled=False)`` (a new leading axis) over ``gpu``, summed over that axis: a
    psum over ``gpu`` written the long way."""
    mesh = mesh_of(NG)
    fn = smap(lambda x, y: jnp.sum(all_gather(x, "gpu"), axis=0), mesh, (P(NG), P(NG)), P("node"))
    return Step("all-gather-untiled-sum", fn, _ng_args(mesh), mesh,
                lambda x, y: x.reshape(4, 4, -1).sum(1).reshape(-1), True, doc=all_gather_untiled_sum.__doc__ or "")


def _accumulate(sum_inside: bool) -> Callable:
    def body(x):  # x: (micro-batches, n) on each device
        def step(i, acc):
            if sum_inside:
                return psum(acc + x[i], "data")  # the accumulator summed again every micro-batch
            return acc + psum(x[i], "data")
        return jax.lax.fori_loop(0, x.shape[0], step, jnp.zeros(x.shape[1:], x.dtype))

    return body


def _micro_args(mesh: Mesh) -> tuple:
    return (put(mesh, distinct((3, 4 * D)), P(None, "data")),)


def _micro_reference(x):
    return x.reshape(3, 4, D).sum((0, 1))


def grad_accumulation_loop() -> Step:
    """Gradient accumulation: a fori_loop over 3 micro-batches, each one's psum over ``data`` added to the
    accumulator (a collective in a loop of known trip count)."""
    mesh = mesh_of()
    fn = smap(_accumulate(False), mesh, P(None, "data"), P())
    return Step("grad-accumulation-loop", fn, _micro_args(mesh), mesh, _micro_reference, True,
                doc=grad_accumulation_loop.__doc__ or "")


def wrong_accumulator_summed_in_loop() -> Step:
    """The accumulator itself summed over ``data`` each micro-batch: earlier micro-batches counted again."""
    mesh = mesh_of()
    fn = smap(_accumulate(True), mesh, P(None, "data"), P())
    return Step("wrong-accumulator-summed-in-loop", fn, _micro_args(mesh), mesh, _micro_reference, False,
                Finding.DOUBLE_COUNT, doc=wrong_accumulator_summed_in_loop.__doc__ or "")


BUILDERS: dict[str, Callable[[], Step]] = {
    "transformer-dp-tp": transformer_dp_tp,
    "tp-backward-manual": tp_backward_manual,
    "row-parallel-mlp": row_parallel_mlp,
    "tp-dp-linear": tp_dp_linear,
    "data-parallel-pytree": data_parallel_pytree,
    "fsdp": fsdp_step,
    "mixed-node-gpu": mixed_node_gpu,
    "stats-pair": stats_pair,
    "slice-then-reduce": slice_then_reduce,
    "slice-reduce-scatter": slice_reduce_scatter,
    "custom-partitioning-sum": custom_partitioning_sum,
    "gspmd-sum": gspmd_sum,
    "data-parallel-bf16": data_parallel_bf16,
    "all-gather-untiled-sum": all_gather_untiled_sum,
    "grad-accumulation-loop": grad_accumulation_loop,
    "wrong-tp-backward-missing-psum": wrong_tp_backward_missing_psum,
    "wrong-missing-psum-before-nonlinearity": wrong_missing_psum_before_nonlinearity,
    "wrong-psum-after-nonlinearity": wrong_psum_after_nonlinearity,
    "wrong-axis-linear": wrong_axis_linear,
    "wrong-bias-before-psum": wrong_bias_before_psum,
    "wrong-partial-to-output": wrong_partial_to_output,
    "wrong-double-count": wrong_double_count,
    "wrong-accumulator-summed-in-loop": wrong_accumulator_summed_in_loop,
    "wrong-swapped-outputs": wrong_swapped_outputs,
    "wrong-sharded-after-slice": wrong_sharded_after_slice,
    "wrong-permuted-slice": wrong_permuted_slice,
    "wrong-hidden-custom-partitioning": wrong_hidden_custom_partitioning,
    "wrong-gspmd-inserted": wrong_gspmd_inserted,
}
"""Every step by name; a name starting with ``wrong-`` is a step whose numbers are wrong."""


def build(name: str) -> Step:
    return BUILDERS[name]()
