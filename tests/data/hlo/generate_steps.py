"""Real training-step shapes p2smt's split reading follows, compiled with JAX on 16 CPU devices: HLO and StableHLO.

Run: ``python tests/data/hlo/generate_steps.py OUT_DIR`` (sets ``--xla_force_host_platform_device_count=16``).
Each ``shard_map`` function runs on a (data 4, tensor 4) mesh over ``jax.devices()`` in order. ``NAME.mlir`` is
``jit(f).lower(...).as_text()``, ``NAME.hlo`` is ``.compile().as_text()``, ``NAME-unpartitioned.hlo`` is
``.as_text(dialect="hlo")``.

- ``scan-mlp``: the gradient of a 3-layer MLP whose layers are scanned (``lax.scan``), each a row-parallel matmul
  whose partial sums are ``psum``-ed over ``tensor`` (two ``while`` loops of 3 iterations: forward, and backward
  where JAX's varying-axes rules add a psum over ``tensor`` and one over ``data``), then the stacked gradients
  summed over ``data``;
- ``fori-psum``: ``fori_loop(0, 3, psum over tensor)`` whose result is summed over ``data`` once after the loop;
- ``gather-untiled``: ``psum_scatter`` then JAX's default ``all_gather(tiled=False)`` (a ``broadcast_in_dim``
  adds the gathered dimension) and a reshape: an all-reduce over ``tensor``, then a ``psum`` over ``data``;
- ``bf16-two-psums``: ``psum(psum(x, 'tensor'), 'data')`` on bfloat16, which XLA's CPU compiler promotes to f32
  all-reduces with a convert to bfloat16 and back between them;
- ``f32-rounded-between``: ``psum(psum(x, 'tensor').astype(bf16).astype(f32), 'data')`` on float32: a rounding
  between the steps (narrowing then widening), which p2smt must keep refusing;
- ``partial-manual``: a ``shard_map`` manual over ``tensor`` only (``data`` left to the partitioner) whose
  ``psum_scatter`` + ``all_gather`` over ``tensor`` get a sharding annotation inside their reduction computation
  (HLO before partitioning: ``custom-call`` to ``"Sharding"``); ``partial-manual-gspmd.mlir`` is the same function
  lowered with GSPMD (``custom_call @Sharding`` in the region; XLA's CPU compiler aborts on it, so no HLO).
"""

import os
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=16"

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

try:
    from jax import shard_map
except ImportError:  # older JAX
    from jax.experimental.shard_map import shard_map

AXES = ("data", "tensor")
WIDTH = 8  # features; each tensor shard holds WIDTH // 4 rows of each layer's weights


def scan_mlp(ws, x):
    def loss(ws):
        def layer(h, w):
            mine = jax.lax.dynamic_slice_in_dim(h, jax.lax.axis_index("tensor") * (WIDTH // 4), WIDTH // 4, axis=1)
            return jnp.tanh(jax.lax.psum(mine @ w, "tensor")), None

        h, _ = jax.lax.scan(layer, x, ws)
        return jnp.sum(h)

    return jax.lax.psum(jax.grad(loss)(ws), "data")


def fori_psum(x):
    return jax.lax.psum(jax.lax.fori_loop(0, 3, lambda i, v: jax.lax.psum(v, "tensor"), x), "data")


def gather_untiled(x):
    y = jax.lax.psum_scatter(x, "tensor", scatter_dimension=0, tiled=True)
    return jax.lax.psum(jax.lax.all_gather(y, "tensor").reshape(-1), "data")


def two_psums(x):
    return jax.lax.psum(jax.lax.psum(x, "tensor"), "data")


def rounded_between(x):
    return jax.lax.psum(jax.lax.psum(x, "tensor").astype(jnp.bfloat16).astype(jnp.float32), "data")


def partial_manual(x):
    return jax.lax.all_gather(jax.lax.psum_scatter(x, "tensor", tiled=True), "tensor", tiled=True)


def steps(mesh: Mesh) -> dict:
    """name -> (function under jit, example arguments)."""
    flat = P(AXES)
    return {
        "scan-mlp": (shard_map(scan_mlp, mesh=mesh, in_specs=(P(None, "tensor", None), P("data", None)),
                               out_specs=P(None, "tensor", None)),
                     (jnp.zeros((3, WIDTH, WIDTH), jnp.float32), jnp.zeros((8, WIDTH), jnp.float32))),
        "fori-psum": (shard_map(fori_psum, mesh=mesh, in_specs=flat, out_specs=flat, check_vma=False),
                      (jnp.zeros((256,), jnp.float32),)),
        "gather-untiled": (shard_map(gather_untiled, mesh=mesh, in_specs=flat, out_specs=flat),
                           (jnp.zeros((256,), jnp.float32),)),
        "bf16-two-psums": (shard_map(two_psums, mesh=mesh, in_specs=flat, out_specs=flat),
                           (jnp.zeros((256,), jnp.bfloat16),)),
        "f32-rounded-between": (shard_map(rounded_between, mesh=mesh, in_specs=flat, out_specs=flat),
                                (jnp.zeros((256,), jnp.float32),)),
        "partial-manual": (shard_map(partial_manual, mesh=mesh, in_specs=P("tensor"), out_specs=P("tensor"),
                                     axis_names={"tensor"}), (jnp.zeros((1024,), jnp.float32),)),
    }


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    mesh = Mesh(np.array(jax.devices()).reshape(4, 4), AXES)
    for name, (fn, args) in steps(mesh).items():
        with jax.set_mesh(mesh):  # a shard_map manual over some axes only needs the mesh in context
            lowered = jax.jit(fn).lower(*args)
            (out / f"{name}.mlir").write_text(lowered.as_text())
            (out / f"{name}.hlo").write_text(lowered.compile().as_text())
            (out / f"{name}-unpartitioned.hlo").write_text(lowered.as_text(dialect="hlo"))
    jax.config.update("jax_use_shardy_partitioner", False)
    fn, args = steps(mesh)["partial-manual"]
    with jax.set_mesh(mesh):
        (out / "partial-manual-gspmd.mlir").write_text(jax.jit(fn).lower(*args).as_text())


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent))
