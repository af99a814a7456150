"""Physical topologies: vertex/edge counts of every shipped system, routes, NICs, --nodes, drawing."""

from __future__ import annotations

import pytest
import yaml

from p2smt.errors import P2Error
from p2smt.model.draw import draw_topology
from p2smt.model.hardware import expand_names
from p2smt.model.system import load_system, parse_system, shipped_systems, topologies_dir
from p2smt.model.topology import build_topology

# Hand counts per node: (GPUs + boxes, undirected links inside one node, NICs); plus one network
# vertex and one uplink per NIC when there are several nodes. Every link is two directed edges.
PER_NODE = {
    "a100-2x16": (16 + 1 + 4 + 2 + 1, 16 + 16 + 4 + 1 + 1, 1),  # NVSwitch, 4 PCIe, 2 CPU, NIC
    "a100-4x16": (16 + 1 + 4 + 2 + 1, 16 + 16 + 4 + 1 + 1, 1),
    "v100-2x8": (8 + 4 + 2 + 1, 8 + 8 + 4 + 1 + 1, 1),  # NVLink ring of 8 + PCIe tree
    "v100-4x8": (8 + 4 + 2 + 1, 8 + 8 + 4 + 1 + 1, 1),
    "fig2-16gpu": (8 + 2 + 2 + 1, 6 + 6 + 8 + 2 + 1 + 1, 1),
    "dgx1-v100": (8 + 4 + 2 + 4, 8 + 8 + 8 + 4 + 4 + 1, 4),  # two NVLink Hamiltonian cycles
    "dgx-a100": (8 + 1 + 4 + 2 + 8, 8 + 8 + 8 + 4 + 1, 8),
    "dgx-h100": (8 + 1 + 4 + 2 + 8, 8 + 8 + 8 + 4 + 1, 8),
    "dgx-h200": (8 + 1 + 4 + 2 + 8, 8 + 8 + 8 + 4 + 1, 8),
    "dgx-b200": (8 + 1 + 4 + 2 + 8, 8 + 8 + 8 + 4 + 1, 8),
    # per rack: 72 GPUs, one NVLink switch system, 36 PCIe switches, 36 Grace, 72 NICs
    "gb200-nvl72": (72 + 1 + 36 + 36 + 72, 72 + 72 + 72 + 36, 72),
}


LEAF_SPINE = {"h100-superpod"}  # counted in test_superpod.py


def test_every_shipped_system_is_counted():
    assert set(shipped_systems()) == set(PER_NODE) | LEAF_SPINE


@pytest.mark.parametrize("name", sorted(PER_NODE))
def test_single_switch_networks_stay_single_switch(name):
    topo = build_topology(load_system(name, nodes=3))
    assert topo.fabric is None and topo.period == topo.gpus_per_node
    assert not any(d["kind"] in ("leaf", "spine") for _, d in topo.graph.nodes(data=True))


@pytest.mark.parametrize("name", sorted(PER_NODE))
@pytest.mark.parametrize("nodes", [None, 3])
def test_vertex_and_edge_counts(name, nodes):
    system = load_system(name, nodes=nodes)
    topo = build_topology(system)
    boxes, links, nics = PER_NODE[name]
    n = topo.num_nodes
    assert topo.num_devices == system.num_devices
    network = 1 if n > 1 else 0
    assert topo.graph.number_of_nodes() == n * boxes + network
    assert topo.graph.number_of_edges() == 2 * (n * links + (n * nics if n > 1 else 0))
    assert not topo.derived


@pytest.mark.parametrize("name", ["v100-2x8", "dgx1-v100", "dgx-a100", "a100-2x16"])
def test_routes_never_pass_through_a_gpu(name):
    topo = build_topology(load_system(name))
    for src in range(topo.num_devices):
        for dst in (0, topo.num_devices - 1, (src + 3) % topo.num_devices):
            if src == dst:
                continue
            route = topo.route(src, dst)
            inner = [topo.edges[e][1] for e in route[:-1]]
            assert all(topo.graph.nodes[v]["kind"] != "gpu" for v in inner)
            assert topo.edges[route[0]][0] == topo.gpu(src) and topo.edges[route[-1]][1] == topo.gpu(dst)


def test_dgx1_hybrid_cube_mesh():
    topo = build_topology(load_system("dgx1-v100", nodes=1))
    g = topo.graph
    for i in range(8):
        links = sum(d["count"] for _, v, d in g.out_edges(f"n0.gpu{i}", data=True) if d["kind"] == "nvlink")
        assert links == 6
    assert not g.has_edge("n0.gpu3", "n0.gpu4")  # no NVLink: traffic goes over PCIe/QPI
    assert g.edges["n0.gpu0", "n0.gpu3"]["count"] == 2 and g.edges["n0.gpu0", "n0.gpu1"]["count"] == 1
    kinds = {g.edges[topo.edges[e]]["kind"] for e in topo.route(3, 4)}
    assert "nvlink" not in kinds and "pcie" in kinds


def test_nic_assignment_follows_pcie_switches():
    a100 = build_topology(load_system("dgx-a100"))
    assert [a100.nic_of(d) for d in range(8)] == [f"n0.nic{i}" for i in range(8)]
    dgx1 = build_topology(load_system("dgx1-v100"))
    assert [dgx1.nic_of(d) for d in range(8, 16)] == [f"n1.nic{i // 2}" for i in range(8)]
    gcp = build_topology(load_system("a100-4x16"))
    assert {gcp.nic_of(d) for d in range(16)} == {"n0.nic0"}


def test_p2_parameters_come_from_the_file():
    topo = build_topology(load_system("a100-2x16"))
    g = topo.graph
    assert g.edges["n0.gpu0", "n0.nvswitch"]["capacity"] == pytest.approx(270e9)
    assert g.edges["n0.nic0", "network"]["capacity"] == pytest.approx(8e9)
    ring = build_topology(load_system("v100-2x8")).graph
    assert ring.edges["n0.gpu7", "n0.gpu0"]["capacity"] == pytest.approx(135e9)


def test_system_without_physical_section_gets_a_derived_switch_tree(data_dir):
    system = load_system(data_dir / "custom-2x4.yaml")
    assert system.physical is None
    topo = build_topology(system)
    assert topo.derived and topo.num_devices == system.num_devices
    assert topo.route(0, topo.num_devices - 1)


def test_expand_names():
    assert expand_names("gpu[0-2,5]") == ("gpu0", "gpu1", "gpu2", "gpu5")
    assert expand_names("nvswitch") == ("nvswitch",)
    with pytest.raises(ValueError):
        expand_names("gpu[3-1]")


def _with_physical(physical: dict):
    doc = yaml.safe_load((topologies_dir() / "dgx-a100.yaml").read_text())
    doc["physical"].update(physical)
    return doc


@pytest.mark.parametrize(
    "change, message",
    [
        ({"links": [{"type": "nvlink3", "a": "gpu[0-7]", "b": "nvswitch9"}]}, "neither a GPU nor a component"),
        ({"links": [{"type": "warp", "a": "gpu0", "b": "gpu1"}]}, "link type"),
        ({"links": [{"type": "nvlink3", "a": "gpu[0-2]", "b": "gpu[0-1]"}]}, "different lengths"),
    ],
)
def test_bad_physical_sections_are_one_line_errors(change, message):
    with pytest.raises(P2Error, match=message):
        parse_system(_with_physical(change), "test.yaml")


def test_gpu_count_must_match_the_levels():
    system = parse_system(_with_physical({"gpus_per_node": 4, "links": []}), "test.yaml")
    with pytest.raises(P2Error, match="gpus_per_node"):
        build_topology(system)


def test_draw_writes_a_png(tmp_path):
    out = draw_topology(load_system("dgx1-v100"), tmp_path / "dgx1.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(P2Error):
        draw_topology(load_system("dgx1-v100"), tmp_path / "dgx1.svg")


def test_nvl72_trays_share_the_rack_nvlink_domain_and_only_racks_cross_the_network(tmp_path):
    # A tray (or superchip) boundary is not an NVLink bandwidth boundary: GPUs of different trays reach each
    # other through the rack's switch trays exactly as the two GPUs of one superchip do; the rack is the
    # NICs' boundary.
    system = load_system("gb200-nvl72", nodes=2)
    topo = build_topology(system)
    assert topo.gpus_per_node == 72 and topo.num_nodes == 2
    same_superchip, other_tray, other_rack = topo.route(0, 1), topo.route(0, 5), topo.route(0, 72)
    for route in (same_superchip, other_tray):
        assert topo.route_class(route) == 0 and len(route) == 2
        assert min(topo.capacities[e] for e in route) == pytest.approx(18 * 50e9 * 0.811)
    assert topo.route_class(other_rack) == 3
    assert len({topo.nic_of(d) for d in range(72)}) == 72
    assert draw_topology(load_system("gb200-nvl72"), tmp_path / "nvl72.png").read_bytes()[:4] == b"\x89PNG"
