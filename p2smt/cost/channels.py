"""The channels one group's collective runs as: NCCL's rings, trees or NVLink SHARP over the topology.

A channel carries, per message byte, the bytes it moves over every link (resource) it crosses and its
start-up latency. Rings inside one node are packed greedily by bottleneck; across nodes each channel
visits the nodes in order, entering and leaving each through GPUs chosen to spread over the NICs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from p2smt.cost.tuner import HOP_CLASSES
from p2smt.errors import P2Error
from p2smt.model.collectives import Collective, Group
from p2smt.model.topology import Topology

ALGOS: tuple[str, ...] = ("ring", "tree", "nvls", "auto")
EdgeKey = int | tuple[str, str]


@dataclass(frozen=True)
class Channel:
    """One pipeline of a group's collective: bytes on each resource per message byte, and its hops.

    ``hops`` are (latency class, count) pairs NCCL's tuner charges a per-hop latency for; ``fixed_us``
    is a latency of its own (NVLS's switch). ``plateau_scale`` and ``plateau_volume`` place it against the
    AllReduce over the same hops, whose start-up it shares (see ``step.plateau_latency``): that
    AllReduce's hops are ``plateau_scale`` times these (0: no start-up), its β over this channel's β.
    """

    load: tuple[tuple[EdgeKey, float], ...]
    algo: str
    hops: tuple[tuple[str, float], ...]
    fixed_us: float = 0.0
    plateau_scale: float = 0.0
    plateau_volume: float = 1.0

    @cached_property
    def edges(self) -> tuple[np.ndarray, np.ndarray, tuple[tuple[EdgeKey, int], ...]]:
        """``load`` as arrays for the fluid model, made once per channel: the resource keys with every
        named resource as -1 (its key and position listed last), and the bytes per message byte."""
        keys = np.array([-1 if isinstance(k, tuple) else k for k, _ in self.load], dtype=np.intp)
        named = tuple((k, i) for i, (k, _) in enumerate(self.load) if isinstance(k, tuple))
        return keys, np.array([v for _, v in self.load], dtype=float), named


def _coef(collective: Collective, p: int) -> float:
    if collective is Collective.ALL_REDUCE:
        return 2 * (p - 1) / p
    if collective in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
        return (p - 1) / p
    return 1.0


def _hop_bandwidths(topo: Topology, members: tuple[int, ...], residual: dict[int, float]):
    def cap(e: int) -> float:
        return residual.get(e, topo.capacity(e))

    out = {}
    for a in members:
        for b in members:
            if a != b:
                route = topo.route_with(a, b, cap)
                out[(a, b)] = (0.0, None) if route is None else (min(cap(e) for e in route), route)
    return out


def _hamiltonian(members: tuple[int, ...], ok, budget: int = 20000) -> tuple[int, ...] | None:
    """A cycle through all members using only allowed hops, DFS in member order (None if none found)."""
    p = len(members)
    if p == 2:
        return members if ok(members[0], members[1]) and ok(members[1], members[0]) else None
    path, used, steps = [members[0]], {members[0]}, [0]

    def dfs() -> bool:
        steps[0] += 1
        if steps[0] > budget:
            return False
        if len(path) == p:
            return ok(path[-1], path[0])
        for v in members:
            if v not in used and ok(path[-1], v):
                path.append(v)
                used.add(v)
                if dfs():
                    return True
                path.pop()
                used.discard(v)
        return False

    return tuple(path) if dfs() else None


def _pack_rings(topo: Topology, members: tuple[int, ...]) -> tuple[tuple[tuple[int, ...], float], ...]:
    """Rings through ``members`` (one node) packed greedily: (order, stand-alone rate in bytes/s)."""
    residual: dict[int, float] = {}
    rings: list[tuple[tuple[int, ...], float]] = []
    first_class = None
    while len(rings) < topo.nccl.max_channels:
        hops = _hop_bandwidths(topo, members, residual)
        levels = sorted({bw for bw, _ in hops.values() if bw > 0}, reverse=True)
        order = None
        for theta in levels:
            order = _hamiltonian(members, lambda a, b, t=theta, h=hops: h[(a, b)][0] >= t * (1 - 1e-9))
            if order is not None:
                break
        if order is None:
            break
        routes = [hops[(order[i], order[(i + 1) % len(order)])][1] for i in range(len(order))]
        cls = max(topo.route_class(r) for r in routes)
        if first_class is not None and cls != first_class:
            break
        uses: dict[int, int] = {}
        for r in routes:
            for e in r:
                uses[e] = uses.get(e, 0) + 1
        rate = min(residual.get(e, topo.capacity(e)) / u for e, u in uses.items())
        if rate <= 0 or (rings and rate < 1e-6 * rings[0][1]):
            break
        first_class = cls
        for e, u in uses.items():
            residual[e] = residual.get(e, topo.capacity(e)) - u * rate
        rings.append((order, rate))
    if not rings:
        raise P2Error(f"{topo.system_name}: no ring through devices {list(members)}")
    return tuple(rings)


def _node_rings(topo: Topology, local: tuple[int, ...], node: int) -> tuple[tuple[tuple[int, ...], float], ...]:
    """Packed rings of a node's members, computed once on node 0 and shifted (nodes are identical)."""
    rings = topo.memo(("rings", local), lambda: _pack_rings(topo, local) if len(local) > 1 else (((local[0],), 1.0),))
    shift = node * topo.gpus_per_node
    return tuple((tuple(d + shift for d in order), rate) for order, rate in rings)


def _rotate(order: tuple[int, ...], start: int) -> tuple[int, ...]:
    return order[start:] + order[:start]


def _channel_orders(topo: Topology, group: Group) -> tuple[tuple[tuple[tuple[int, ...], ...], float], ...]:
    """Per channel: the per-node member sequences (in node order) and the channel's share of data.

    They depend only on the group's shape (the local members of each of its nodes, in node order), so
    they are computed once per shape on nodes 0, 1, … and moved onto the group's nodes.
    """
    gpn = topo.gpus_per_node
    by_node: dict[int, list[int]] = {}
    for d in sorted(group):
        by_node.setdefault(d // gpn, []).append(d % gpn)
    nodes = sorted(by_node)
    shape = tuple(tuple(by_node[n]) for n in nodes)
    rel = topo.memo(("orders", shape), lambda: _shape_orders(topo, shape))
    return tuple((tuple(tuple(nodes[i] * gpn + d for d in seq) for i, seq in enumerate(seqs)), share)
                 for seqs, share in rel)


def _shape_orders(topo: Topology, shape: tuple[tuple[int, ...], ...]):
    """``_channel_orders`` of the group with local members ``shape[i]`` on node i (local ids out).

    Inside one node: the packed rings, data split by their rates. Across nodes: one channel per NIC
    the nodes can all use (up to ``max_channels``), each taking ring c mod (rings) of every node,
    rotated so that the channels' exits and entries spread over the nodes' NICs.
    """
    gpn = topo.gpus_per_node
    nodes = range(len(shape))
    packed = {n: _node_rings(topo, shape[n], n) for n in nodes}
    if len(shape) == 1:
        rings = packed[0]
        total = sum(rate for _, rate in rings)
        return tuple(((order,), rate / total) for order, rate in rings)
    nics = min(len({topo.nic_of(n * gpn + d) for d in shape[n]}) for n in nodes)
    channels = max(1, min(topo.nccl.max_channels, nics))
    sends: dict[str, int] = {}
    recvs: dict[str, int] = {}
    out = []
    for c in range(channels):
        seqs = []
        for n in nodes:
            base = packed[n][c % len(packed[n])][0]
            best = min(
                range(len(base)),
                key=lambda r, b=base: (
                    sends.get(topo.nic_of(_rotate(b, r)[-1]), 0) + recvs.get(topo.nic_of(_rotate(b, r)[0]), 0), r
                ),
            )
            seq = _rotate(base, best)
            sends[topo.nic_of(seq[-1])] = sends.get(topo.nic_of(seq[-1]), 0) + 1
            recvs[topo.nic_of(seq[0])] = recvs.get(topo.nic_of(seq[0]), 0) + 1
            seqs.append(tuple(d % gpn for d in seq))
        out.append((tuple(seqs), 1.0 / channels))
    return tuple(out)


def _sorted(load: dict[EdgeKey, float]) -> tuple[tuple[EdgeKey, float], ...]:
    """A channel's load in a fixed order: edge ids ascending, then the named resources (keys are unique,
    so the pairs sort by key alone)."""
    edges = sorted(kv for kv in load.items() if not isinstance(kv[0], tuple))
    named = sorted(kv for kv in load.items() if isinstance(kv[0], tuple))
    return tuple(edges + named)


def _add(load: dict[EdgeKey, float], route: tuple[int, ...], amount: float) -> None:
    for e in route:
        load[e] = load.get(e, 0.0) + amount


def _ring_channel(topo: Topology, collective: Collective, seqs, share: float, root: int) -> Channel:
    order = tuple(d for s in seqs for d in s)
    p = len(order)
    load: dict[EdgeKey, float] = {}
    if collective in (Collective.REDUCE, Collective.BROADCAST):
        i = order.index(root)
        chain = _rotate(order, i + 1) if collective is Collective.REDUCE else _rotate(order, i)
        hops = [(chain[j], chain[j + 1]) for j in range(p - 1)]
        lat_factor = 1.0
    else:
        hops = [(order[j], order[(j + 1) % p]) for j in range(p)]
        lat_factor = _coef(collective, p)
    coef = 1.0 if collective in (Collective.REDUCE, Collective.BROADCAST) else _coef(collective, p)
    counts: dict[str, float] = {}
    for a, b in hops:
        route = topo.route(a, b)
        _add(load, route, coef * share)
        cls = HOP_CLASSES[topo.route_class(route)]
        counts[cls] = counts.get(cls, 0.0) + lat_factor
    weights = tuple(sorted(counts.items()))
    if collective is Collective.ALL_REDUCE:
        return Channel(_sorted(load), "ring", weights, 0.0, 1.0, 1.0)
    if collective in (Collective.REDUCE_SCATTER, Collective.REDUCE):
        # The AllReduce over these hops is this reduction plus its mirror (AllGather / Broadcast).
        return Channel(_sorted(load), "ring", weights, 0.0, 2.0, _coef(Collective.ALL_REDUCE, p) / coef)
    return Channel(_sorted(load), "ring", weights)


def _tree_channel(topo: Topology, seqs, share: float) -> Channel:
    """NCCL Tree AllReduce: intra-node chains headed by the node's entry GPU, two binary trees over nodes."""
    eff = topo.nccl.tree_efficiency
    load: dict[EdgeKey, float] = {}
    chain: tuple[int, int] = (0, 0)
    for seq in seqs:
        worst = 0
        for j in range(len(seq) - 1):
            up, down = topo.route(seq[j + 1], seq[j]), topo.route(seq[j], seq[j + 1])
            _add(load, up, share / eff)
            _add(load, down, share / eff)
            worst = max(worst, topo.route_class(up))
        chain = max(chain, (len(seq) - 1, worst))
    n = len(seqs)
    if n > 1:
        leaders = [s[0] for s in seqs]
        for tree in (list(range(n)), list(range(n - 1, -1, -1))):
            for pos in range(1, n):
                child, parent = leaders[tree[pos]], leaders[tree[(pos - 1) // 2]]
                up, down = topo.route(child, parent), topo.route(parent, child)
                _add(load, up, share / 2 / eff)
                _add(load, down, share / 2 / eff)
    depth = math.ceil(math.log2(n)) if n > 1 else 0
    counts = {HOP_CLASSES[chain[1]]: 2.0 * chain[0]}
    if depth:
        counts["net"] = counts.get("net", 0.0) + 2.0 * depth
    return Channel(_sorted(load), "tree", tuple(sorted((k, v) for k, v in counts.items() if v)), 0.0, 1.0, 1.0)


def _nvls_channel(topo: Topology, group: Group, switch: str) -> Channel:
    data = topo.graph.nodes[switch]
    load: dict[EdgeKey, float] = {}
    for d in group:
        g = topo.gpu(d)
        _add(load, (topo.edge_index(g, switch), topo.edge_index(switch, g)), 1.0)
        load[("nvls", switch, g)] = 1.0
    return Channel(_sorted(load), "nvls", (), data["nvls_latency_us"], 1.0, 1.0)


def available_algos(topo: Topology, collective: Collective, group: Group) -> tuple[str, ...]:
    """The algorithms NCCL can run for ``collective`` over ``group``: Ring always, Tree for AllReduce, NVLS
    for an AllReduce whose members all reach one NVLink-SHARP switch."""
    out = ["ring"]
    if collective is Collective.ALL_REDUCE:
        out.append("tree")
        if topo.nvls_switch(group) is not None:
            out.append("nvls")
    return tuple(out)


def group_channels(topo: Topology, collective: Collective, group: Group, algo: str) -> tuple[Channel, ...]:
    """The channels one group's collective runs as under ``algo`` (ring|tree|nvls; cached per topology)."""
    if algo not in ("ring", "tree", "nvls"):
        raise P2Error(f"unknown algorithm {algo!r}; choose one of {', '.join(ALGOS)}")
    if algo == "tree" and collective is not Collective.ALL_REDUCE:
        algo = "ring"
    switch = None
    if algo == "nvls":
        switch = topo.nvls_switch(group) if collective is Collective.ALL_REDUCE else None
        if switch is None:
            algo = "ring"

    def make() -> tuple[Channel, ...]:
        if algo == "nvls":
            return (_nvls_channel(topo, group, switch),)
        if algo == "tree":
            return tuple(_tree_channel(topo, seqs, share) for seqs, share in _channel_orders(topo, group))
        return tuple(_ring_channel(topo, collective, seqs, share, group[0])
                     for seqs, share in _channel_orders(topo, group))

    return topo.memo(("channels", algo, collective, group), make)
