"""The physical topology of a system as a networkx directed graph, plus routes between GPUs.

Vertices are GPUs (``n3.gpu5``), per-node boxes (``n3.nvswitch``, ``n3.pcie0``, ``n3.cpu1``, ``n3.nic0``)
and one ``network`` (a non-blocking fabric). Every physical link becomes two directed edges, each with
``capacity`` (bytes/s, spec × efficiency × bonded links), ``latency`` (s) and ``kind``. Systems without a
``physical:`` section get a switch tree derived from their coarse interconnects. Routes never pass
through a GPU (NCCL does not forward through GPUs): between two GPUs the route is the widest path
(largest bottleneck capacity), then the one with fewest hops, then the lexicographically first.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import networkx as nx

from .errors import P2Error
from .layout import NcclParams, PhysicalLayout
from .system import System

KIND_RANK = {"nvlink": 0, "nvswitch": 0, "pcie": 1, "smp": 2, "nic": 3}
"""Path classes in NCCL's order (NVL < PCI/PXB < SYS < NET): a route's class is its worst link."""
INTERCONNECT_KIND = {"nvlink": "nvlink", "nvswitch": "nvswitch", "pcie": "pcie", "nic": "nic",
                     "network": "nic", "shm": "smp"}


@dataclass(frozen=True)
class Topology:
    """A built physical graph. Edges are also numbered (``edges[i]``) so costs can use arrays."""

    system_name: str
    graph: nx.DiGraph
    num_nodes: int
    gpus_per_node: int
    nccl: NcclParams
    derived: bool
    edges: tuple[tuple[str, str], ...]
    _index: dict[tuple[str, str], int] = field(repr=False, compare=False)
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_devices(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def gpu(self, device: int) -> str:
        """Vertex name of a physical device id (mixed-radix numbering: node-major)."""
        if not 0 <= device < self.num_devices:
            raise P2Error(f"device {device} is outside 0..{self.num_devices - 1}")
        return f"n{device // self.gpus_per_node}.gpu{device % self.gpus_per_node}"

    def node_of(self, device: int) -> int:
        return device // self.gpus_per_node

    def memo(self, key, make):
        """Per-topology memo for derived values (routes, rings, channels, step costs): pure results only."""
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def edge_index(self, u: str, v: str) -> int:
        return self._index[(u, v)]

    def capacity(self, e: int) -> float:
        u, v = self.edges[e]
        return self.graph.edges[u, v]["capacity"]

    def latency(self, e: int) -> float:
        u, v = self.edges[e]
        return self.graph.edges[u, v]["latency"]

    def kind_rank(self, e: int) -> int:
        u, v = self.edges[e]
        return KIND_RANK[self.graph.edges[u, v]["kind"]]

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        """Edge ids of the route from device ``src`` to device ``dst`` on the idle graph (cached)."""
        route = self.memo(("route", src, dst), lambda: self.route_with(src, dst, self.capacity))
        if route is None:
            raise P2Error(f"{self.system_name}: no route from device {src} to device {dst}")
        return route

    def route_with(self, src: int, dst: int, capacity: Callable[[int], float]) -> tuple[int, ...] | None:
        """Widest path under the given per-edge capacities (e.g. what earlier channels left); None if
        the capacities leave no path (the idle graph always has one, else ``route`` raises P2Error).

        Between nodes the route leaves through the source GPU's NIC and enters through the
        destination GPU's NIC (``nic_of``), as NCCL pairs each GPU with its closest NIC.
        """
        a, b = self.gpu(src), self.gpu(dst)
        if self.node_of(src) != self.node_of(dst) and "network" in self.graph:
            na, nb = self.nic_of(src), self.nic_of(dst)
            if na is None or nb is None:
                raise P2Error(f"{self.system_name}: device {src if na is None else dst} reaches no NIC")
            up, down = self._widest(a, na, capacity), self._widest(nb, b, capacity)
            middle = (self._index[(na, "network")], self._index[("network", nb)])
            if up is None or down is None or min(capacity(e) for e in middle) <= 0:
                return None
            return up + middle + down
        return self._widest(a, b, capacity)

    def _widest(self, a: str, b: str, capacity: Callable[[int], float]) -> tuple[int, ...] | None:
        path = widest_path(self.graph, a, b, lambda u, v: capacity(self._index[(u, v)]))
        if path is None:
            return None
        return tuple(self._index[(path[i], path[i + 1])] for i in range(len(path) - 1))

    def nic_of(self, device: int) -> str | None:
        """The NIC a device uses for the network: among its closest NICs (widest, then fewest hops),
        GPUs sharing the same closest set take them in turn (GPU i of a PCIe switch gets NIC i)."""
        nics, peers = self.memo(("nic", device), lambda: self._closest_nics(device))
        if not nics:
            return None
        return nics[peers.index(device) % len(nics)]

    def _closest_nics(self, device: int) -> tuple[tuple[str, ...], tuple[int, ...]]:
        node = self.node_of(device)
        nics = sorted(v for v, d in self.graph.nodes(data=True) if d["kind"] == "nic" and d["node"] == node)

        def closest(dev: int) -> tuple[str, ...]:
            labels = {}
            for nic in nics:
                path = widest_path(self.graph, self.gpu(dev), nic, lambda u, v: self.graph.edges[u, v]["capacity"])
                if path is not None:
                    bottleneck = min(self.graph.edges[path[i], path[i + 1]]["capacity"]
                                     for i in range(len(path) - 1))
                    labels[nic] = (-bottleneck, len(path))
            best = min(labels.values(), default=None)
            return tuple(n for n in nics if labels.get(n) == best)

        mine = closest(device)
        base = node * self.gpus_per_node
        peers = tuple(d for d in range(base, base + self.gpus_per_node) if closest(d) == mine)
        return mine, peers

    def route_latency(self, edges: tuple[int, ...]) -> float:
        """Latency of one hop over a route: the latency of its worst link class (NCCL's path type)."""
        return max((self.latency(e) for e in edges), default=0.0)

    def route_class(self, edges: tuple[int, ...]) -> int:
        return max((self.kind_rank(e) for e in edges), default=0)

    def nvls_switch(self, devices: tuple[int, ...]) -> str | None:
        """An NVLS-capable NVSwitch that every device links to directly, if any (same node only)."""
        nodes = {self.node_of(d) for d in devices}
        if len(nodes) != 1:
            return None
        for sw, data in self.graph.nodes(data=True):
            if (data["kind"] == "nvswitch" and data.get("nvls_gbps") and data["node"] in nodes
                    and all(self.graph.has_edge(self.gpu(d), sw) for d in devices)):
                return sw
        return None


def widest_path(graph: nx.DiGraph, src: str, dst: str, capacity: Callable[[str, str], float]):
    """Max-bottleneck path, ties by fewest hops then lexicographic; GPUs are never transit vertices."""
    heap: list[tuple[float, int, tuple[str, ...]]] = [(-math.inf, 0, (src,))]
    done: set[str] = set()
    while heap:
        neg_bottleneck, hops, path = heapq.heappop(heap)
        u = path[-1]
        if u == dst:
            return path
        if u in done:
            continue
        done.add(u)
        if u != src and graph.nodes[u]["kind"] == "gpu":
            continue
        for v in sorted(graph.successors(u)):
            if v in done:
                continue
            c = capacity(u, v)
            if c <= 0:
                continue
            heapq.heappush(heap, (-min(-neg_bottleneck, c), hops + 1, path + (v,)))
    return None


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


def _build_physical(system: System, layout: PhysicalLayout) -> tuple[nx.DiGraph, int, int]:
    nodes, gpn = _node_split(system, layout.node_level or system.nodes_level)
    if gpn != layout.gpus_per_node:
        raise P2Error(
            f"{system.name}: physical.gpus_per_node is {layout.gpus_per_node} but the levels below "
            f"{layout.node_level or system.nodes_level!r} hold {gpn} devices"
        )
    g = nx.DiGraph(name=system.name)
    if nodes > 1 and any(c.kind == "nic" for c in layout.components):
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
    return g, nodes, gpn


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
    if layout is not None:
        graph, nodes, gpn = _build_physical(system, layout)
        nccl = layout.nccl
    else:
        graph, nodes, gpn = _build_derived(system)
        nccl = NcclParams()
    edges = tuple(sorted(graph.edges()))
    return Topology(system.name, graph, nodes, gpn, nccl, layout is None, edges,
                    {e: i for i, e in enumerate(edges)})


@lru_cache(maxsize=32)
def _cached(key: str) -> Topology:
    return _make(System.model_validate_json(key))


def build_topology(system: System) -> Topology:
    """The physical graph of ``system`` (cached by the system's content)."""
    return _cached(system.model_dump_json())
