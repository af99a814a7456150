"""Print chains of JAX's tiled ``psum_scatter``/``all_gather`` (16 CPU devices, mesh node=4 × gpu=4) as StableHLO
and compiled HLO, with the ground truth the audit's sharded goals are judged against.

Run: ``python tests/data/audit-sharded/generate.py [OUT_DIR]`` (default: this directory). Each chain is run on the
devices beside one flat collective over the shard axes ``flat`` (JAX's own definition of the sharded result:
``psum_scatter(x, flat, tiled=True)``, ``all_gather(x, flat, tiled=True)``, after a ``psum`` over the replicated
axes for HSDP), both with the same ``out_specs``; ``manifest.json`` records whether the two agree exactly on every
device (``matches_flat``), so the shard axes the audit reads off the chain can be checked against the numbers.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/

import jax_steps as js
from jax_steps import P, jax

Op = tuple[str, tuple[str, ...]]
# name: (the chain's ops, the flat reference's ops, in_specs, out_specs, what it is)
CASES: dict[str, tuple[tuple[Op, ...], tuple[Op, ...], P, P, str]] = {
    "rs-node-then-gpu": ((("rs", ("node",)), ("rs", ("gpu",))), (("rs", ("node", "gpu")),),
                         P(("node", "gpu")), P(("node", "gpu")), "reduce-scatter across nodes, then inside each"),
    "rs-gpu-then-node": ((("rs", ("gpu",)), ("rs", ("node",))), (("rs", ("gpu", "node")),),
                         P(("node", "gpu")), P(("gpu", "node")), "reduce-scatter inside each node, then across"),
    "hsdp-rs-gpu-psum-node": ((("rs", ("gpu",)), ("ar", ("node",))), (("ar", ("node",)), ("rs", ("gpu",))),
                              P(("node", "gpu")), P("gpu"), "HSDP: shard over gpu, replicate over node"),
    "ag-gpu-then-node": ((("ag", ("gpu",)), ("ag", ("node",))), (("ag", ("node", "gpu")),),
                         P(("node", "gpu")), P(), "all-gather inside each node, then across (FSDP's parameters)"),
    "ag-node-then-gpu": ((("ag", ("node",)), ("ag", ("gpu",))), (("ag", ("gpu", "node")),),
                         P(("gpu", "node")), P(), "all-gather across nodes, then inside each"),
    "rs-node-ag-gpu": ((("rs", ("node",)), ("ag", ("gpu",))), (), P(("node", "gpu")), P("node"),
                       "a gather of shards the chain did not scatter: no goal of p2smt's"),
}


COLLECTIVES: dict[str, Callable] = {
    "rs": lambda v, over: jax.lax.psum_scatter(v, over, scatter_dimension=0, tiled=True),
    "ag": lambda v, over: jax.lax.all_gather(v, over, axis=0, tiled=True),
    "ar": lambda v, over: jax.lax.psum(v, over),
}


def body(ops: tuple[Op, ...]) -> Callable:
    """The chain of ``ops``; a reduction first sums the device's rows (a partial sum over the mesh, as a gradient
    is)."""
    def f(v):
        v = v if ops[0][0] == "ag" else v.sum(axis=0)
        for op, over in ops:
            v = COLLECTIVES[op](v, over)
        return v
    return f


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    mesh = js.mesh_of(("node", "gpu"), (4, 4))
    manifest = {}
    for name, (ops, flat, in_spec, out_spec, doc) in CASES.items():
        gather = ops[0][0] == "ag"
        x = js.put(mesh, js.distinct((16,) if gather else (32, 16)), in_spec)
        fn = js.smap(body(ops), mesh, in_spec, out_spec)
        lowered = fn.lower(x)
        (out / f"{name}.mlir").write_text(lowered.as_text())
        (out / f"{name}.hlo").write_text(lowered.compile().as_text())
        flat_fn = js.smap(body(flat), mesh, in_spec, out_spec)
        matches = js.same(jax.tree.map(js.np.asarray, fn(x)), jax.tree.map(js.np.asarray, flat_fn(x))) if flat else None
        manifest[name] = {"ops": [[op, list(over)] for op, over in ops], "flat": [[op, list(over)] for op, over in flat],
                          "matches_flat": matches, "doc": doc,
                          "mesh": {"axis_names": ["node", "gpu"], "shape": [4, 4], "device_ids": list(range(16))}}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    bad = [n for n, e in manifest.items() if e["matches_flat"] is False]
    if bad:
        print(f"generate.py: the chain differs from its flat collective in {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent))
