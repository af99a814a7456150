"""``p2smt placements``: the parallelism matrices of axes on a system, or one matrix's device order."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from p2smt.cli.options import add_json, add_system, int_list, matrix_of, system_of
from p2smt.cli.output import ExitCode, emit
from p2smt.errors import P2Error


def register(sub) -> None:
    p = sub.add_parser("placements", help="enumerate the parallelism matrices of axes on a system")
    add_system(p)
    p.add_argument("--axes", required=True, help="comma-separated parallelism axis sizes, e.g. 4,16")
    p.add_argument("--matrix", help="one placement, as JSON rows (one per axis): what --export realizes")
    p.add_argument("--export", choices=["jax-mesh", "torch-mesh"],
                   help="print the device order (jax-mesh) or rank tensor (torch-mesh) realizing --matrix")
    p.add_argument("--axis-names", help="comma-separated mesh axis names of the export (default axis0,axis1,…)")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from p2smt.model.placement import matrices

    system = system_of(args)
    axes = int_list(args.axes)
    if args.export == "jax-mesh":
        return export_jax_mesh(args, system, axes)
    if args.export == "torch-mesh":
        return export_torch_mesh(args, system, axes)
    if args.matrix or args.axis_names:
        flag = "--matrix" if args.matrix else "--axis-names"
        raise P2Error(f"{flag} is read with --export only: without it, placements lists every matrix")
    found = matrices(system.sizes, axes)
    payload = {
        "system": system.name,
        "levels": [[lv.name, lv.size] for lv in system.levels],
        "axes": list(axes),
        "matrices": [[list(r) for r in m] for m in found],
    }

    def render(c: Console) -> None:
        t = Table(title=f"{len(found)} placements of axes {list(axes)} on {system.name}")
        t.add_column("#", justify="right")
        for lv in system.levels:
            t.add_column(f"{lv.name} ({lv.size})", justify="center")
        for n, m in enumerate(found):
            t.add_row(str(n), *(" × ".join(str(m[i][j]) for i in range(len(axes)))
                                for j in range(len(system.levels))))
        c.print(t)
        c.print("each cell: parts of axis 0 × axis 1 × … at that level")

    emit(args, payload, render)
    return ExitCode.OK


def _axis_names(args: argparse.Namespace, axes: tuple[int, ...]) -> list[str]:
    names = args.axis_names.split(",") if args.axis_names else [f"axis{i}" for i in range(len(axes))]
    if len(names) != len(axes) or not all(n.isidentifier() for n in names) or len(set(names)) != len(names):
        raise P2Error(f"--axis-names needs {len(axes)} distinct identifiers, got {args.axis_names!r}")
    return names


def _print_code(args: argparse.Namespace, payload: dict, code: str) -> int:
    """``payload`` under --json, else ``code``: a Python snippet with its imports, never wrapped (the JAX
    one runs as printed; the torch one inside a torch.distributed job, as its comment says)."""
    emit(args, payload, lambda c: c.print(code, soft_wrap=True, markup=False))
    return ExitCode.OK


def export_jax_mesh(args: argparse.Namespace, system, axes: tuple[int, ...]) -> int:
    """The device order whose ``jax.sharding.Mesh`` realizes --matrix (``device_order``: mesh position i is
    system device ``order[i]``, the file ``verify --device-order`` reads)."""
    from p2smt.model.placement import Placement

    if not args.matrix:
        raise P2Error("--export jax-mesh needs --matrix")
    placement = Placement(system.sizes, axes, matrix_of(args.matrix))
    order = list(placement.mesh_order())
    names = _axis_names(args, axes)
    payload = {"matrix": [list(r) for r in placement.matrix], "axes": list(axes), "axis_names": names,
               "device_order": order}
    return _print_code(args, payload, "import jax\nimport numpy as np\nfrom jax.sharding import Mesh\n\n"
                       f"mesh = Mesh(np.array(jax.devices())[{order}].reshape({tuple(axes)}), {tuple(names)})")


def export_torch_mesh(args: argparse.Namespace, system, axes: tuple[int, ...]) -> int:
    """The rank tensor and dim names that ``DeviceMesh(device_type, mesh=…, mesh_dim_names=…)`` needs."""
    import numpy as np

    from p2smt.model.placement import Placement

    if not args.matrix:
        raise P2Error("--export torch-mesh needs --matrix")
    placement = Placement(system.sizes, axes, matrix_of(args.matrix))
    names = _axis_names(args, axes)
    mesh = np.array(placement.mesh_order()).reshape(axes).tolist()
    payload = {"matrix": [list(r) for r in placement.matrix], "axes": list(axes), "mesh_dim_names": names,
               "mesh": mesh}
    return _print_code(args, payload, "import torch\nfrom torch.distributed.device_mesh import DeviceMesh\n\n"
                       f"# in each of the {placement.num_devices} ranks of a torch.distributed job (torchrun), "
                       "with 'cuda' on GPUs\n"
                       f"mesh = DeviceMesh('cpu', mesh=torch.tensor({mesh}), mesh_dim_names={tuple(names)})")
