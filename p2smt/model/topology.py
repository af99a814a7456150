"""The physical topology of a system as a networkx directed graph, plus routes between GPUs.

Vertices are GPUs (``n3.gpu5``), per-node boxes (``n3.nvswitch``, ``n3.pcie0``, ``n3.cpu1``, ``n3.nic0``)
and the network between nodes: one ideal ``network`` switch, or, when the file has a ``network:``
entry, a leaf/spine fabric (leaves ``su2.leaf5`` per scalable unit and rail, spines ``spine7``). Every
physical link becomes two directed edges, each with ``capacity`` (bytes/s, spec × efficiency × bonded
links), ``latency`` (s) and ``kind``. Systems without a ``physical:`` section get a switch tree derived
from their coarse interconnects.

Routes (deterministic): inside a node, the widest path (largest bottleneck capacity) through that
node's own boxes, then the one with fewest hops, then the lexicographically first; it never passes
through a GPU (NCCL does not forward through GPUs). Nodes are identical, so a route is computed once
on node 0 and shifted. Between nodes a route leaves through a NIC of the source node (its own, or with
PXN in a rail fabric the one on the destination's rail, reached through the GPU owning it: the only
GPU transit), crosses the network and enters through the destination GPU's NIC (``nic_of``).
In a leaf/spine fabric NIC -> leaf -> NIC when both NICs hang off one leaf, else NIC -> leaf -> spine
-> leaf -> NIC with the spine chosen by InfiniBand's static destination-mod-k rule: the destination
NIC's port number p on its leaf picks the leaf's uplink ``p mod uplinks``, which goes to spine
``(p mod uplinks) mod spines`` (uplinks are dealt round-robin to the spines).
"""

from __future__ import annotations

import math
from functools import lru_cache

import networkx as nx

from p2smt.errors import P2Error
from p2smt.model.hardware import NcclParams, PhysicalLayout
from p2smt.model.system import System
from p2smt.model.topograph import FABRIC_KINDS, INTERCONNECT_KIND, KIND_RANK, Fabric, Topology, widest_path

__all__ = [
    "FABRIC_KINDS", "INTERCONNECT_KIND", "KIND_RANK", "Fabric", "Topology", "build_topology", "unpriceable",
    "widest_path",
]


def _node_split(system: System, node_level: str) -> tuple[int, int]:
    """(number of nodes, GPUs per node) when the layout describes one instance of ``node_level``."""
    if node_level not in system.level_names:
        raise P2Error(f"{system.name}: physical.node_level {node_level!r} is not a level {system.level_names}")
    cut = system.level_names.index(node_level) + 1
    nodes = math.prod(system.sizes[:cut])
    return nodes, math.prod(system.sizes[cut:])


def _add_link(g: nx.DiGraph, u: str, v: str, kind: str, type_name: str, capacity_gbps: float,
              latency_us: float, count: int = 1) -> None:
    for a, b in ((u, v), (v, u)):
        if g.has_edge(a, b):
            raise P2Error(f"duplicate link between {a} and {b}; use count for bonded links")
        g.add_edge(a, b, kind=kind, type=type_name, count=count,
                   capacity=capacity_gbps * count * 1e9, latency=latency_us * 1e-6)


def _fabric(system: System, layout: PhysicalLayout, nodes: int) -> Fabric | None:
    """The leaf/spine shape of a layout's ``network`` entry instantiated on ``system``'s levels."""
    net = layout.network
    if net is None or nodes <= 1:
        return None
    names = system.level_names
    node_level = layout.node_level or system.nodes_level
    if net.unit_level not in names or names.index(net.unit_level) >= names.index(node_level):
        raise P2Error(f"{system.name}: physical.network.unit_level {net.unit_level!r} must be a level above "
                      f"{node_level!r} (levels {', '.join(names)})")
    units = math.prod(system.sizes[: names.index(net.unit_level) + 1])
    rail_leaves = net.leaves == "rail"
    per_unit = nodes // units
    downlinks = per_unit * (1 if rail_leaves else len(layout.rails))
    uplinks = max(1, math.ceil(downlinks / net.oversubscription - 1e-9))
    # Uplinks are dealt round-robin, so with fewer uplinks than spines the last spines get no cable.
    return Fabric(net.unit_level, units, per_unit, layout.rails, rail_leaves, min(net.spines, uplinks), uplinks,
                  net.pxn and rail_leaves)


def unpriceable(system: System) -> str | None:
    """Why ``system`` has no physical graph to price on (levels inside a node resized), or None; cheap."""
    layout = system.physical
    if layout is None:
        return None
    if not isinstance(layout, PhysicalLayout):
        layout = PhysicalLayout.model_validate(layout)
    node_level = layout.node_level or system.nodes_level
    gpn = _node_split(system, node_level)[1]
    if gpn == layout.gpus_per_node:
        return None
    inside = system.level_names[system.level_names.index(node_level) + 1:]
    return (f"{system.name}: physical.gpus_per_node is {layout.gpus_per_node} (GPUs per {node_level!r}) but the "
            f"levels below it ({', '.join(inside)}) hold {gpn}; a node's wiring cannot be resized, so pricing "
            f"(rank, best, plan) needs the levels inside a node at the sizes its physical description wires")


def _build_physical(system: System, layout: PhysicalLayout) -> tuple[nx.DiGraph, int, int, Fabric | None]:
    if (why := unpriceable(system)) is not None:
        raise P2Error(why)
    nodes, gpn = _node_split(system, layout.node_level or system.nodes_level)
    fabric = _fabric(system, layout, nodes)
    g = nx.DiGraph(name=system.name)
    if fabric is None and nodes > 1 and any(c.kind == "nic" for c in layout.components):
        g.add_node("network", kind="network", node=None, label="network")
    for n in range(nodes):
        for i in range(gpn):
            g.add_node(f"n{n}.gpu{i}", kind="gpu", node=n, device=n * gpn + i, label=f"gpu{i}")
        for c in layout.components:
            g.add_node(f"n{n}.{c.name}", kind=c.kind, node=n, label=c.name,
                       nvls_gbps=c.nvls_gbps, nvls_latency_us=c.nvls_latency_us)
        for link in layout.links:
            lt = layout.link_types[link.type]
            for a, b in link.pairs():
                _add_link(g, f"n{n}.{a}", f"n{n}.{b}", lt.kind, link.type, lt.effective_gbps,
                          lt.latency_us, link.count)
        if "network" in g:
            for c in layout.components:
                if c.kind == "nic":
                    lt = layout.link_types[c.uplink]
                    _add_link(g, f"n{n}.{c.name}", "network", lt.kind, c.uplink, lt.effective_gbps,
                              lt.latency_us)
    if fabric is not None:
        _build_fabric(g, layout, fabric, nodes)
    return g, nodes, gpn, fabric


def _build_fabric(g: nx.DiGraph, layout: PhysicalLayout, fabric: Fabric, nodes: int) -> None:
    """Leaves per unit (per rail or one), every NIC to its leaf, every leaf to the spines."""
    net = layout.network
    up = layout.link_types[net.uplink]
    for s in range(fabric.spines):
        g.add_node(f"spine{s}", kind="spine", node=None, unit=None, label=f"spine{s}")
    for u in range(fabric.units):
        for r in range(fabric.leaves_per_unit):
            leaf = fabric.leaf(u * fabric.nodes_per_unit, fabric.rails[r])
            g.add_node(leaf, kind="leaf", node=None, unit=u, label=leaf)
            for s in range(fabric.spines):
                count = fabric.uplinks_to(s)
                if count:
                    _add_link(g, leaf, f"spine{s}", up.kind, net.uplink, up.effective_gbps, up.latency_us, count)
    nic_types = {c.name: c.uplink for c in layout.components if c.kind == "nic"}
    for n in range(nodes):
        for nic in fabric.rails:
            lt = layout.link_types[nic_types[nic]]
            _add_link(g, f"n{n}.{nic}", fabric.leaf(n, nic), lt.kind, nic_types[nic], lt.effective_gbps,
                      lt.latency_us)


def _build_derived(system: System) -> tuple[nx.DiGraph, int, int]:
    """A switch per node of every level joining its children with the fastest interconnect there."""
    nodes, gpn = _node_split(system, system.nodes_level)
    g = nx.DiGraph(name=system.name)
    sizes, names = system.sizes, system.level_names
    depth = len(sizes)
    cut = names.index(system.nodes_level) + 1

    def instances(j: int) -> list[tuple[int, ...]]:
        out: list[tuple[int, ...]] = [()]
        for s in sizes[:j]:
            out = [p + (x,) for p in out for x in range(s)]
        return out

    def device(path: tuple[int, ...]) -> int:
        d = 0
        for s, x in zip(sizes, path):
            d = d * s + x
        return d

    def vertex(path: tuple[int, ...]) -> str:
        if len(path) == depth:
            return f"n{device(path) // gpn}.gpu{device(path) % gpn}"
        return "sw." + ".".join(map(str, path)) if path else "sw"

    for path in instances(depth):
        d = device(path)
        g.add_node(vertex(path), kind="gpu", node=d // gpn, device=d, label=f"gpu{d % gpn}")
    for j in range(depth):
        joining = [ic for ic in system.interconnects if names[j] in ic.joins]
        if not joining and sizes[j] > 1:
            raise P2Error(f"{system.name}: no interconnect joins level {names[j]!r} and there is no "
                          "physical section; the cost model cannot connect its devices")
        # A level of size 1 with no interconnect is a pass-through: one child, an unconstrained link.
        best = max(joining, key=lambda ic: ic.bandwidth_gbps) if joining else None
        kind = INTERCONNECT_KIND[best.kind] if best else "pcie"
        box = {"nvlink": "nvswitch", "nvswitch": "nvswitch", "nic": "network"}.get(kind, "pcie_switch")
        for parent in instances(j):
            sw = vertex(parent)
            node = device(parent + (0,) * (depth - len(parent))) // gpn if len(parent) >= cut else None
            g.add_node(sw, kind=box, node=node, label=sw)
            for x in range(sizes[j]):
                child = vertex(parent + (x,))
                _add_link(g, child, sw, kind, best.name if best else "passthrough",
                          best.bandwidth_gbps if best else 1e6, best.latency_us if best else 0.0)
    return g, nodes, gpn


def _make(system: System) -> Topology:
    layout = system.physical
    if layout is not None and not isinstance(layout, PhysicalLayout):
        layout = PhysicalLayout.model_validate(layout)
    fabric = None
    if layout is not None:
        graph, nodes, gpn, fabric = _build_physical(system, layout)
        nccl = layout.nccl
    else:
        graph, nodes, gpn = _build_derived(system)
        nccl = NcclParams()
    edges = tuple(sorted(graph.edges()))
    return Topology(system.name, graph, nodes, gpn, nccl, layout is None, edges,
                    {e: i for i, e in enumerate(edges)}, fabric)


@lru_cache(maxsize=32)
def _cached(key: str) -> Topology:
    return _make(System.model_validate_json(key))


def build_topology(system: System) -> Topology:
    """The physical graph of ``system`` (cached by the system's content)."""
    return _cached(system.model_dump_json())
