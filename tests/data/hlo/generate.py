"""Compile P²'s example reductions (and two wrong ones) with JAX on 16 CPU devices; write HLO and StableHLO.

Run: ``python tests/data/hlo/generate.py OUT_DIR`` (sets ``--xla_force_host_platform_device_count=16``).
``pytree-*`` reduce two buffers at once. Each ``shard_map`` function runs on a (node 4, gpu 4) mesh over ``jax.devices()`` in order; every
device holds a 16-element shard. ``NAME.hlo`` is ``jit(f).lower(x).compile().as_text()`` and
``NAME.mlir`` is ``jit(f).lower(x).as_text()``. ``sum-*`` are plain ``jnp.sum`` reductions partitioned by
XLA's SPMD partitioner (it prints replica groups in its mesh-axes form), compiled HLO only; ``sum-pr``
sums over two axes of a (2, 2, 4) mesh, which XLA prints with ``device_ids``. ``REFUSED`` lists programs
p2smt must not prove.
"""

import os
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=16"

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

try:
    from jax import shard_map
except ImportError:  # older JAX
    from jax.experimental.shard_map import shard_map

ALL = ("node", "gpu")


def psum_all(x):
    return jax.lax.psum(x, ALL)


def two_allreduce(x):
    return jax.lax.psum(jax.lax.psum(x, "gpu"), "node")


def rs_ar_ag(x):
    y = jax.lax.psum_scatter(x, "gpu", scatter_dimension=0, tiled=True)
    return jax.lax.all_gather(jax.lax.psum(y, "node"), "gpu", axis=0, tiled=True)


def blueconnect(x):
    y = jax.lax.psum_scatter(x, "gpu", scatter_dimension=0, tiled=True)
    y = jax.lax.psum_scatter(y, "node", scatter_dimension=0, tiled=True)
    y = jax.lax.all_gather(y, "node", axis=0, tiled=True)
    return jax.lax.all_gather(y, "gpu", axis=0, tiled=True)


def pytree_psum(x):
    a, b = jax.lax.psum((x, 2.0 * x), ALL)  # StableHLO: one all_reduce per leaf; XLA combines them
    return a - b


def pytree_two_steps(x):
    a, b = jax.lax.psum(jax.lax.psum((x, 2.0 * x), "gpu"), "node")
    return a - b


def wrong_double_count(x):
    return jax.lax.psum(jax.lax.psum(x, "gpu"), ALL)


def wrong_gather_across(x):
    y = jax.lax.psum_scatter(x, "gpu", scatter_dimension=0, tiled=True)
    return jax.lax.all_gather(y, "node", axis=0, tiled=True)


def loop_psum(x):
    return jax.lax.fori_loop(0, 2, lambda i, v: jax.lax.psum(v, ALL), x)


def cond_psum(x):
    return jax.lax.cond(x[0] > 0, lambda v: jax.lax.psum(v, ALL), lambda v: v, x)


_psum_call = jax.jit(psum_all)


def call_twice(x):
    return _psum_call(_psum_call(x))


def psum_pmax(x):
    return jax.lax.pmax(jax.lax.psum(x, "gpu"), "node")


def independent(x):
    return jax.lax.psum(x, "gpu") + jax.lax.psum(x, "node")


def mixed_with_input(x):
    return jax.lax.psum(jax.lax.psum(x, "gpu") + x, "node")


def reversed_between(x):
    y = jax.lax.psum_scatter(x, "gpu", scatter_dimension=0, tiled=True)  # four values a device: reversing moves them
    return jax.lax.all_gather(jax.lax.psum(y, "node")[::-1], "gpu", axis=0, tiled=True)


_psum_node_plus = jax.jit(lambda x, y: jax.lax.psum(x, "node") + y)


def independent_via_call(x):
    return _psum_node_plus(x, jax.lax.psum(x, "gpu"))


def nested_cond(x):
    a = jax.lax.psum(x, ALL)
    p = x[0] > -1e30
    v = jax.lax.cond(p, lambda: jax.lax.cond(p, lambda: a, lambda: 2.0 * a), lambda: x)
    return jax.lax.psum(v, ALL)  # reads a (a double count) through a branch nested in a branch


def return_intermediate(x):
    a = jax.lax.psum(x, "node")
    return jax.lax.psum(a, "gpu") - a  # the partial sum a escapes to the output


def tuple_partial(x):
    a, b = jax.lax.psum((x, 2.0 * x), "node")  # XLA: one tuple all-reduce
    return jax.lax.psum(a, "gpu") - b  # b is summed over node only


_hidden = jax.lax.composite(lambda v: jax.lax.psum(v, "node"), name="p2smt.hidden")


def composite_psum(x):
    return jax.lax.psum(jax.lax.psum(_hidden(x), "node"), "gpu")  # the composite's psum runs: a double count


SHARD_MAP = {"allreduce": psum_all, "two-allreduce": two_allreduce, "rs-ar-ag": rs_ar_ag,
             "blueconnect": blueconnect, "pytree-psum": pytree_psum, "pytree-two-steps": pytree_two_steps,
             "wrong-double-count": wrong_double_count, "wrong-composite": composite_psum,
             "wrong-gather-across": wrong_gather_across}
REFUSED = {"loop-psum": loop_psum, "cond-psum": cond_psum, "psum-pmax": psum_pmax, "independent": independent,
           "call-twice": call_twice, "mixed-with-input": mixed_with_input, "reversed-between": reversed_between,
           "independent-via-call": independent_via_call, "nested-cond": nested_cond,
           "return-intermediate": return_intermediate, "tuple-partial": tuple_partial}
"""Programs p2smt must not prove: a collective in a loop or a branch, a maximum, two reductions of one input
(also through a call), a result mixed with the input (also through nested branches) or reversed between
collectives, a partial sum that reaches the output (also as one buffer of a tuple all-reduce), and a sum
called twice (a double count, refuted)."""


def write(out: Path, name: str, lowered, stablehlo: bool = True) -> None:
    if stablehlo:
        (out / f"{name}.mlir").write_text(lowered.as_text())
    (out / f"{name}.hlo").write_text(lowered.compile().as_text())


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    mesh = Mesh(np.array(jax.devices()).reshape(4, 4), ALL)
    x = jnp.zeros((16 * 16,), jnp.float32)
    for name, fn in {**SHARD_MAP, **REFUSED}.items():
        # JAX's varying-axes check rejects the double count at trace time; the wrong ones skip it
        f = shard_map(fn, mesh=mesh, in_specs=P(ALL), out_specs=P(ALL),
                      check_vma=not (name.startswith("wrong") or name in REFUSED))
        write(out, name, jax.jit(f).lower(x))
        if name == "blueconnect":  # with locations: ``loc(…)`` trailers, ``#loc`` aliases, in block arguments too
            (out / f"{name}-debug.mlir").write_text(jax.jit(f).lower(x).as_text(debug_info=True))
        if name in ("blueconnect", "pytree-psum"):  # HLO before partitioning: the body a call, no num_partitions
            (out / f"{name}-unpartitioned.hlo").write_text(jax.jit(f).lower(x).as_text(dialect="hlo"))
    cube = jax.device_put(jnp.zeros((4, 4, 16), jnp.float32), NamedSharding(mesh, P("node", "gpu")))
    for name, axis, keep in (("sum-gpu", 1, P("node")), ("sum-node", 0, P("gpu"))):
        f = jax.jit(lambda c, a=axis: jnp.sum(c, axis=a), out_shardings=NamedSharding(mesh, keep))
        write(out, name, f.lower(cube), stablehlo=False)  # partitioned only when compiled
    # a sum over two of three mesh axes: XLA prints its groups in the mesh form with device_ids=(…)
    cube3 = Mesh(np.array(jax.devices()).reshape(2, 2, 4), ("p", "q", "r"))
    rows = jax.device_put(jnp.zeros((16, 16), jnp.float32), NamedSharding(cube3, P(("p", "r"), "q")))
    write(out, "sum-pr", jax.jit(lambda v: jnp.sum(v, axis=0)).lower(rows), stablehlo=False)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent))
