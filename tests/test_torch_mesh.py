"""placements --export torch-mesh (issue 16): the exported rank tensor builds p2smt's groups under gloo."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from p2smt.cli.main import main
from p2smt.model.placement import Placement
from p2smt.model.system import load_system

WORKER = '''
import json, os, sys
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

def run(rank, size, spec, out, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=size)
    mesh = DeviceMesh("cpu", mesh=torch.tensor(spec["mesh"]), mesh_dim_names=tuple(spec["mesh_dim_names"]))
    groups = {n: dist.get_process_group_ranks(mesh.get_group(n)) for n in spec["mesh_dim_names"]}
    with open(os.path.join(out, f"{rank}.json"), "w") as f:
        json.dump(groups, f)
    dist.destroy_process_group()

if __name__ == "__main__":
    spec = json.load(open(sys.argv[1]))
    size = len(torch.tensor(spec["mesh"]).flatten())
    torch.multiprocessing.spawn(run, args=(size, spec, sys.argv[2], int(sys.argv[3])), nprocs=size)
'''


def test_torch_mesh_export_builds_the_same_groups_under_gloo(tmp_path, data_dir, capsys):
    system = str(data_dir / "custom-2x4.yaml")
    argv = ["placements", "--system", system, "--axes", "2,4", "--matrix", "[[1,2],[2,2]]",
            "--export", "torch-mesh", "--axis-names", "dp,tp", "--json"]
    assert main(argv) == 0
    spec = json.loads(capsys.readouterr().out)
    assert spec["mesh_dim_names"] == ["dp", "tp"]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "worker.py").write_text(WORKER)
    with socket.socket() as probe:  # a port the OS says is free (tests run in parallel under pytest-xdist)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    subprocess.run([sys.executable, str(tmp_path / "worker.py"), str(tmp_path / "spec.json"), str(tmp_path), str(port)],
                   check=True, timeout=600)
    placement = Placement(load_system(system).sizes, (2, 4), ((1, 2), (2, 2)))
    for axis, name in enumerate(["dp", "tp"]):
        want = {d: list(g) for g in placement.reduction_groups((axis,)) for d in g}
        for rank in range(8):
            got = json.loads(Path(tmp_path / f"{rank}.json").read_text())[name]
            assert got == want[rank], (name, rank, got, want[rank])
