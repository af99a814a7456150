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

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import networkx as nx

from p2smt.errors import P2Error
from p2smt.model.hardware import NcclParams, PhysicalLayout
from p2smt.model.system import System

KIND_RANK = {"nvlink": 0, "nvswitch": 0, "pcie": 1, "smp": 2, "nic": 3}
"""Path classes in NCCL's order (NVL < PCI/PXB < SYS < NET): a route's class is its worst link."""
INTERCONNECT_KIND = {"nvlink": "nvlink", "nvswitch": "nvswitch", "pcie": "pcie", "nic": "nic",
                     "network": "nic", "shm": "smp"}
FABRIC_KINDS = frozenset({"network", "leaf", "spine"})


@dataclass(frozen=True)
class Fabric:
    """A built leaf/spine network: its shape and the naming and routing rules of its switches."""

    unit_level: str
    units: int
    nodes_per_unit: int
    rails: tuple[str, ...]
    rail_leaves: bool
    spines: int
    uplinks: int
    pxn: bool

    @property
    def leaves_per_unit(self) -> int:
        return len(self.rails) if self.rail_leaves else 1

    @property
    def downlinks(self) -> int:
        """NIC ports of one leaf."""
        return self.nodes_per_unit * (1 if self.rail_leaves else len(self.rails))

    def leaf(self, node: int, nic: str) -> str:
        unit = node // self.nodes_per_unit
        if self.rail_leaves:
            return f"{self.unit_level}{unit}.leaf{self.rails.index(nic)}"
        return f"{self.unit_level}{unit}.leaf"

    def port(self, node: int, nic: str) -> int:
        """Port number of a node's NIC on its leaf (node-major within the unit)."""
        local = node % self.nodes_per_unit
        return local if self.rail_leaves else local * len(self.rails) + self.rails.index(nic)

    def spine_towards(self, node: int, nic: str) -> str:
        """Destination-mod-k: the spine every leaf uses to reach this NIC."""
        return f"spine{(self.port(node, nic) % self.uplinks) % self.spines}"

    def uplinks_to(self, spine: int) -> int:
        """Cables between one leaf and spine ``spine`` (uplink p goes to spine p mod spines)."""
        return self.uplinks // self.spines + (1 if spine < self.uplinks % self.spines else 0)


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
    fabric: Fabric | None = None
    _cache: dict = field(default_factory=dict, repr=False, compare=False)
    capacities: tuple[float, ...] = field(default=(), repr=False, compare=False)
    latencies: tuple[float, ...] = field(default=(), repr=False, compare=False)
    kind_ranks: tuple[int, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        data = [self.graph.edges[e] for e in self.edges]
        object.__setattr__(self, "capacities", tuple(d["capacity"] for d in data))
        object.__setattr__(self, "latencies", tuple(d["latency"] for d in data))
        object.__setattr__(self, "kind_ranks", tuple(KIND_RANK[d["kind"]] for d in data))

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
        try:
            return self._cache[key]
        except KeyError:
            value = self._cache[key] = make()
            return value

    def edge_index(self, u: str, v: str) -> int:
        return self._index[(u, v)]

    @property
    def period(self) -> int:
        """Devices per translation symmetry: shifting every device by a multiple of this maps the
        topology onto itself (whole nodes for one switch, whole units for leaf/spine; none if derived)."""
        if self.derived:
            return self.num_devices
        return self.gpus_per_node * (1 if self.fabric is None else self.fabric.nodes_per_unit)

    def capacity(self, e: int) -> float:
        return self.capacities[e]

    def latency(self, e: int) -> float:
        return self.latencies[e]

    def kind_rank(self, e: int) -> int:
        return self.kind_ranks[e]

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        """Edge ids of the route from device ``src`` to device ``dst`` on the idle graph (cached).

        Between nodes the route leaves through the source GPU's own NIC (``nic_of``), except in a
        rail-leaf fabric with ``pxn``: there it leaves through the source node's NIC on the
        destination's rail, which the source reaches over the node's GPU owning that NIC (NCCL's PXN),
        so traffic between nodes of one unit stays on one leaf.
        """
        key = ("route", src, dst)
        if key in self._cache:
            return self._cache[key]
        if self.derived:
            route = self.route_with(src, dst, self.capacity)
        elif self.node_of(src) == self.node_of(dst):
            route = self._shift(self._local_route(src % self.gpus_per_node, dst % self.gpus_per_node),
                                self.node_of(src))
        else:
            route = self._network_route(src, dst)
        if route is None:
            raise P2Error(f"{self.system_name}: no route from device {src} to device {dst}")
        self._cache[key] = route
        return route

    def route_with(self, src: int, dst: int, capacity: Callable[[int], float]) -> tuple[int, ...] | None:
        """Widest path under the given per-edge capacities (e.g. what earlier channels left); None if
        the capacities leave no path (the idle graph always has one, else ``route`` raises P2Error).
        Between nodes: widest to the source GPU's NIC, the network, widest from the destination's NIC."""
        a, b = self.gpu(src), self.gpu(dst)
        if self.derived:
            return self._widest(a, b, capacity)
        ns, nd = self.node_of(src), self.node_of(dst)
        if ns == nd:
            return self._widest(a, b, capacity, ns)
        na, nb = self.nic_of(src), self.nic_of(dst)
        if na is None or nb is None:
            raise P2Error(f"{self.system_name}: device {src if na is None else dst} reaches no NIC")
        up, down = self._widest(a, na, capacity, ns), self._widest(nb, b, capacity, nd)
        middle = self._fabric_route(na, nb)
        if up is None or down is None or min(capacity(e) for e in middle) <= 0:
            return None
        return up + middle + down

    def _widest(self, a: str, b: str, capacity: Callable[[int], float],
                node: int | None = None) -> tuple[int, ...] | None:
        nodes = self.graph.nodes
        allowed = None if node is None else (lambda v: nodes[v]["node"] == node)
        path = widest_path(self.graph, a, b, lambda u, v: capacity(self._index[(u, v)]), allowed)
        if path is None:
            return None
        return tuple(self._index[(path[i], path[i + 1])] for i in range(len(path) - 1))

    def _local_route(self, i: int, j: int) -> tuple[int, ...] | None:
        """Route between local GPUs i and j (or ``j`` a local box name) on node 0."""
        def make():
            b = f"n0.gpu{j}" if isinstance(j, int) else f"n0.{j}"
            return self._widest(f"n0.gpu{i}", b, self.capacity, 0)
        return self.memo(("local", i, j), make)

    def _shift(self, route: tuple[int, ...] | None, node: int) -> tuple[int, ...] | None:
        """A node-0 route moved to the same boxes of ``node``."""
        if route is None or node == 0:
            return route
        table = self.memo(("shift", node), dict)
        out = []
        for e in route:
            f = table.get(e)
            if f is None:
                u, v = self.edges[e]
                f = table[e] = self._index[(f"n{node}.{u[3:]}", f"n{node}.{v[3:]}")]
            out.append(f)
        return tuple(out)

    def _network_route(self, src: int, dst: int) -> tuple[int, ...] | None:
        gpn = self.gpus_per_node
        ns, nd = self.node_of(src), self.node_of(dst)
        nb = self.nic_of(dst)
        if nb is None:
            raise P2Error(f"{self.system_name}: device {dst} reaches no NIC")
        fab = self.fabric
        if fab is not None and fab.rail_leaves and fab.pxn:
            nic = nb.split(".", 1)[1]
            owner = self._nic_owner(nic)
            na = f"n{ns}.{nic}"
            if owner is None or owner == src % gpn:
                up = self._shift(self._local_route(src % gpn, nic), ns)
            else:
                hop, out = self._local_route(src % gpn, owner), self._local_route(owner, nic)
                up = None if hop is None or out is None else self._shift(hop + out, ns)
        else:
            na = self.nic_of(src)
            if na is None:
                raise P2Error(f"{self.system_name}: device {src} reaches no NIC")
            up = self._shift(self._local_route(src % gpn, na.split(".", 1)[1]), ns)
        down = self._shift(self._local_from_nic(nb.split(".", 1)[1], dst % gpn), nd)
        if up is None or down is None:
            return None
        return up + self._fabric_route(na, nb) + down

    def _local_from_nic(self, nic: str, j: int) -> tuple[int, ...] | None:
        return self.memo(("local_in", nic, j),
                         lambda: self._widest(f"n0.{nic}", f"n0.gpu{j}", self.capacity, 0))

    def _nic_owner(self, nic: str) -> int | None:
        """The first local GPU that uses ``nic`` as its own NIC (PXN proxy for that rail)."""
        def make():
            return next((i for i in range(self.gpus_per_node) if self.nic_of(i) == f"n0.{nic}"), None)
        return self.memo(("owner", nic), make)

    def _fabric_route(self, na: str, nb: str) -> tuple[int, ...]:
        """Edges from NIC ``na`` to NIC ``nb`` through the network (see the module docstring)."""
        idx = self._index
        fab = self.fabric
        if fab is None:
            return (idx[(na, "network")], idx[("network", nb)])
        node_a, nic_a = na.split(".", 1)
        node_b, nic_b = nb.split(".", 1)
        la, lb = fab.leaf(int(node_a[1:]), nic_a), fab.leaf(int(node_b[1:]), nic_b)
        if la == lb:
            return (idx[(na, la)], idx[(la, nb)])
        spine = fab.spine_towards(int(node_b[1:]), nic_b)
        return (idx[(na, la)], idx[(la, spine)], idx[(spine, lb)], idx[(lb, nb)])

    def nic_of(self, device: int) -> str | None:
        """The NIC a device uses for the network: among its closest NICs (widest, then fewest hops),
        GPUs sharing the same closest set take them in turn (GPU i of a PCIe switch gets NIC i)."""
        local = device % self.gpus_per_node
        nics, peers = self.memo(("nic", local), lambda: self._closest_nics(local))
        if not nics:
            return None
        return f"n{self.node_of(device)}.{nics[peers.index(local) % len(nics)]}"

    def _closest_nics(self, local: int) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """On node 0 (nodes are identical): the local names of a GPU's closest NICs and the local
        GPUs that share exactly that set."""
        g = self.graph
        nics = sorted(v for v, d in g.nodes(data=True) if d["kind"] == "nic" and d["node"] == 0)

        def closest(dev: int) -> tuple[str, ...]:
            labels = {}
            for nic in nics:
                path = widest_path(g, f"n0.gpu{dev}", nic, lambda u, v: g.edges[u, v]["capacity"],
                                   lambda v: g.nodes[v]["node"] == 0)
                if path is not None:
                    bottleneck = min(g.edges[path[i], path[i + 1]]["capacity"] for i in range(len(path) - 1))
                    labels[nic] = (-bottleneck, len(path))
            best = min(labels.values(), default=None)
            return tuple(n for n in nics if labels.get(n) == best)

        mine = closest(local)
        peers = tuple(d for d in range(self.gpus_per_node) if closest(d) == mine)
        return tuple(n.split(".", 1)[1] for n in mine), peers

    def route_latency(self, edges: tuple[int, ...]) -> float:
        """Latency of one hop over a route: the latency of its worst link class (NCCL's path type)."""
        lat = self.latencies
        return max((lat[e] for e in edges), default=0.0)

    def route_class(self, edges: tuple[int, ...]) -> int:
        rank = self.kind_ranks
        return max((rank[e] for e in edges), default=0)

    def nvls_switch(self, devices: tuple[int, ...]) -> str | None:
        """An NVLS-capable NVSwitch that every device links to directly, if any (same node only)."""
        nodes = {self.node_of(d) for d in devices}
        if len(nodes) != 1:
            return None
        node = next(iter(nodes))
        switches = self.memo(("nvls", node), lambda: tuple(
            sw for sw, data in self.graph.nodes(data=True)
            if data["kind"] == "nvswitch" and data.get("nvls_gbps") and data["node"] == node))
        for sw in switches:
            if all(self.graph.has_edge(self.gpu(d), sw) for d in devices):
                return sw
        return None


def widest_path(graph: nx.DiGraph, src: str, dst: str, capacity: Callable[[str, str], float],
                allowed: Callable[[str], bool] | None = None):
    """Max-bottleneck path, ties by fewest hops then lexicographic; GPUs are never transit vertices;
    ``allowed`` (optional) restricts the vertices the path may visit."""
    heap: list[tuple[float, int, tuple[str, ...]]] = [(-math.inf, 0, (src,))]
    done: set[str] = set()
    nodes = graph.nodes
    while heap:
        neg_bottleneck, hops, path = heapq.heappop(heap)
        u = path[-1]
        if u == dst:
            return path
        if u in done:
            continue
        done.add(u)
        if u != src and nodes[u]["kind"] == "gpu":
            continue
        for v in sorted(graph.successors(u)):
            if v in done or (allowed is not None and not allowed(v)):
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


def _build_physical(system: System, layout: PhysicalLayout) -> tuple[nx.DiGraph, int, int, Fabric | None]:
    nodes, gpn = _node_split(system, layout.node_level or system.nodes_level)
    if gpn != layout.gpus_per_node:
        raise P2Error(
            f"{system.name}: physical.gpus_per_node is {layout.gpus_per_node} but the levels below "
            f"{layout.node_level or system.nodes_level!r} hold {gpn} devices"
        )
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
