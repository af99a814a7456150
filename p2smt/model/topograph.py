"""The topology graph of a system (``Topology``): vertices, links, and routes between GPUs.

Built by ``p2smt.model.topology.build_topology``; see that module for the vertex names and route rules.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import networkx as nx

from p2smt.errors import P2Error
from p2smt.model.hardware import NcclParams

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
        mine = self._closest(local)
        peers = tuple(d for d in range(self.gpus_per_node) if self._closest(d) == mine)
        return tuple(n.split(".", 1)[1] for n in mine), peers

    def _closest(self, dev: int) -> tuple[str, ...]:
        """Node 0's NICs closest to its local GPU ``dev`` (widest path, then fewest hops), computed once per
        GPU: every GPU's peers are found by comparing these sets (72 GPUs × 72 NICs on a GB200 rack)."""
        def make() -> tuple[str, ...]:
            g = self.graph
            nics = self.memo(("nics",), lambda: sorted(
                v for v, d in g.nodes(data=True) if d["kind"] == "nic" and d["node"] == 0))
            labels = {}
            for nic in nics:
                path = widest_path(g, f"n0.gpu{dev}", nic, lambda u, v: g.edges[u, v]["capacity"],
                                   lambda v: g.nodes[v]["node"] == 0)
                if path is not None:
                    bottleneck = min(g.edges[path[i], path[i + 1]]["capacity"] for i in range(len(path) - 1))
                    labels[nic] = (-bottleneck, len(path))
            best = min(labels.values(), default=None)
            return tuple(n for n in nics if labels.get(n) == best)
        return self.memo(("closest", dev), make)

    @property
    def gpus_behind_cpu(self) -> frozenset[int]:
        """Local indices of the GPUs that reach the network through a CPU (NCCL's PHB or SYS path type, past
        PXB): the vertices of their route to another node before its first NIC (nodes are identical)."""
        def make() -> frozenset[int]:
            if self.num_nodes < 2:
                return frozenset()
            behind = set()
            for local in range(self.gpus_per_node):
                for e in self.route(local, local + self.gpus_per_node):
                    kind = self.graph.nodes[self.edges[e][1]]["kind"]
                    if kind in ("nic", "cpu"):
                        if kind == "cpu":
                            behind.add(local)
                        break
            return frozenset(behind)
        return self.memo(("gpus behind cpu",), make)

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
