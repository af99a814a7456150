"""Predicted time of collectives, explicit plans and programs on a physical topology.

COST_MODEL (the block the README quotes):

- One step (instruction) = one collective over disjoint groups that run at the same time; its time is
  the time of the slowest group. A program's time is the sum of its steps (no overlap, as in P²).
- A group runs NCCL's algorithm as *channels*: rings (Ring), chain + double binary tree (Tree), or
  NVLink SHARP through an NVSwitch (``nvls``). Inside one node the rings are packed greedily: the ring
  with the widest bottleneck, then the next one in the capacity left, while it has the same path class
  (NVLink, PCIe, cross-socket, network), up to ``nccl.max_channels``. Across nodes each channel
  visits the nodes in order and enters/leaves each node through a GPU chosen so that the channels
  spread over the nodes' NICs. Hops between consecutive ranks follow the topology's routes (in a
  rail-optimized leaf/spine fabric with PXN a hop to another node first moves, over NVLink, to the
  GPU on the destination's rail, so it stays on one leaf inside a scalable unit; see topology.py).
- Data (per message byte S, nccl-tests convention): Ring AllReduce sends 2(p-1)/p·S over every
  ring hop, ReduceScatter/AllGather (p-1)/p·S, Reduce/Broadcast S over the p-1 hops of the ring
  rotated to end/start at the root. Tree AllReduce sends S up and S down every chain hop and S/2
  each way on every edge of each of the two inter-node trees, divided by ``nccl.tree_efficiency``;
  Tree applies to AllReduce only (NCCL runs the other collectives as rings). NVLS sends S to the
  switch and receives S from it, limited by the switch's per-GPU ``nvls_gbps``.
- Contention: every channel is one fluid flow that advances all its transfers in lockstep. Link
  bandwidth is shared by max-min fairness (progressive filling) over the flows' byte rates, each
  flow weighted on a link by its bytes there relative to its busiest link; rates are recomputed
  whenever a flow finishes. A group's data is split over its channels in proportion to their
  stand-alone rates (equally across nodes).
- Latency (α): ``nccl.base_latency_us[algo]`` plus, per hop, the latency of the worst link on its
  route (NCCL's path-type latency): Ring AllReduce pays 2(p-1)/p times the sum over the ring's hops,
  ReduceScatter/AllGather (p-1)/p times, Reduce/Broadcast the chain's hops; Tree pays twice the
  longest intra-node chain plus ceil(log2 nodes) network hops; NVLS the switch's ``nvls_latency_us``.
  Latency adds to the bandwidth time (β); no protocol switching (Simple protocol throughout).
- Plateau: a bandwidth-bound AllReduce pays more start-up than NCCL's small-message latency constants,
  which NCCL's own tuner models as its ring "plateau effect" (latency ×1.4 across nodes). Here an
  AllReduce channel's α becomes α·(1 + (P−1)·β/(α+β)), P = ``nccl.allreduce_plateau``: the full multiple
  once β dominates, none for latency-bound messages. A ReduceScatter or Reduce pays the extra of the
  AllReduce over the same hops (NCCL's AllReduce is that reduction fused with its AllGather, so the
  pair never undercuts the AllReduce); AllGather and Broadcast pay none. P is one global constant
  estimated from COSTS.md's calibration points (``benchmarks/cost.py``: fit and leave-one-out errors).
- Data volume follows the state: before each step a device holds (non-empty rows of its state / k)
  of the full per-device bytes; ``message_bytes`` turns the members' holdings into the collective's
  message size (the one place where that is computed). Above ``INTERPRETED_DEVICES`` synthesis
  devices the rows come from the interpreter's row abstraction (``apply_rows``): the same volumes.

Scale (results unchanged): a step's time is memoized per (instruction, message sizes); channel orders
per group shape (local members per node); a group's stand-alone time per translate by
``Topology.period``; the fluid model runs on sparse (flow, resource) entries.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np

from p2smt.errors import P2Error
from p2smt.model.collectives import Collective, ExplicitPlan, Group
from p2smt.model.dsl import Program, instruction_groups, lower_program
from p2smt.model.hierarchy import SynthesisHierarchy
from p2smt.model.system import System
from p2smt.model.topology import Topology, build_topology
from p2smt.semantics.dense import Violation, apply_step, initial_state

Algo = Literal["ring", "tree", "nvls", "auto"]
ALGOS: tuple[str, ...] = ("ring", "tree", "nvls", "auto")
FLOAT32_BYTES = 4
INTERPRETED_DEVICES = 256
"""Up to this many synthesis devices, volumes come from the interpreter's k³ state (which also rechecks
every precondition); above, from its row abstraction (k² state, ``apply_rows``): the same volumes."""
EdgeKey = int | tuple[str, str]


@dataclass(frozen=True)
class Channel:
    """One pipeline of a group's collective: bytes on each resource per message byte, and its latency.

    ``plateau_latency`` and ``plateau_volume`` place it against the AllReduce over the same hops, whose
    start-up it shares (see ``plateau_latency``): that AllReduce's α, and its β over this channel's β.
    """

    load: tuple[tuple[EdgeKey, float], ...]
    latency: float
    plateau_latency: float = 0.0
    plateau_volume: float = 1.0


@dataclass(frozen=True)
class ProgramCost:
    """Predicted time of a program: total seconds and one entry per step."""

    seconds: float
    step_seconds: tuple[float, ...]


def default_bytes_per_device(system: System) -> int:
    """P²'s message size: 2^29 × nodes float32 values per GPU (P2.md §6)."""
    nodes = build_topology(system).num_nodes
    return FLOAT32_BYTES * 2**29 * nodes


def message_bytes(collective: Collective, held: Sequence[float]) -> float:
    """The NCCL message size of one group from the bytes each member holds before the step.

    AllReduce, ReduceScatter and Reduce take the (equal) buffer every member holds; AllGather's
    message is the gathered output (sum of the members' pieces); Broadcast sends the root's buffer.
    This is the only place where a collective's data volume is decided.
    """
    if not held:
        return 0.0
    if collective is Collective.ALL_GATHER:
        return float(sum(held))
    if collective is Collective.BROADCAST:
        return float(held[0])
    return float(max(held))


def held_fractions(states: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per state, the share of the full buffer every device holds: non-empty rows / rows."""
    return [s.any(axis=2).sum(axis=1) / s.shape[1] for s in states]


# ----------------------------------------------------------------------------- channels of one group


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
    """A channel's load in a fixed order: edge ids ascending, then the named resources."""
    return tuple(sorted(load.items(), key=lambda kv: (1, 0, kv[0]) if isinstance(kv[0], tuple) else (0, kv[0], ())))


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
    latency = 0.0
    for a, b in hops:
        route = topo.route(a, b)
        _add(load, route, coef * share)
        latency += topo.route_latency(route)
    base = topo.nccl.base_latency_us["ring"] * 1e-6
    alpha = base + lat_factor * latency
    if collective is Collective.ALL_REDUCE:
        return Channel(_sorted(load), alpha, alpha, 1.0)
    if collective in (Collective.REDUCE_SCATTER, Collective.REDUCE):
        # The AllReduce over these hops is this reduction plus its mirror (AllGather / Broadcast).
        return Channel(_sorted(load), alpha, 2 * alpha - base, _coef(Collective.ALL_REDUCE, p) / coef)
    return Channel(_sorted(load), alpha)


def _tree_channel(topo: Topology, seqs, share: float) -> Channel:
    """NCCL Tree AllReduce: intra-node chains headed by the node's entry GPU, two binary trees over nodes."""
    eff = topo.nccl.tree_efficiency
    load: dict[EdgeKey, float] = {}
    chain_lat = 0.0
    for seq in seqs:
        lat = 0.0
        for j in range(len(seq) - 1):
            up, down = topo.route(seq[j + 1], seq[j]), topo.route(seq[j], seq[j + 1])
            _add(load, up, share / eff)
            _add(load, down, share / eff)
            lat += topo.route_latency(up)
        chain_lat = max(chain_lat, lat)
    n = len(seqs)
    net_lat = 0.0
    if n > 1:
        leaders = [s[0] for s in seqs]
        for tree in (list(range(n)), list(range(n - 1, -1, -1))):
            for pos in range(1, n):
                child, parent = leaders[tree[pos]], leaders[tree[(pos - 1) // 2]]
                up, down = topo.route(child, parent), topo.route(parent, child)
                _add(load, up, share / 2 / eff)
                _add(load, down, share / 2 / eff)
                net_lat = max(net_lat, topo.route_latency(up))
    depth = math.ceil(math.log2(n)) if n > 1 else 0
    latency = topo.nccl.base_latency_us["tree"] * 1e-6 + 2 * (chain_lat + depth * net_lat)
    return Channel(_sorted(load), latency, latency, 1.0)


def _nvls_channel(topo: Topology, group: Group, switch: str) -> Channel:
    data = topo.graph.nodes[switch]
    load: dict[EdgeKey, float] = {}
    for d in group:
        g = topo.gpu(d)
        _add(load, (topo.edge_index(g, switch), topo.edge_index(switch, g)), 1.0)
        load[("nvls", switch, g)] = 1.0
    latency = topo.nccl.base_latency_us["nvls"] * 1e-6 + data["nvls_latency_us"] * 1e-6
    return Channel(_sorted(load), latency, latency, 1.0)


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


# ----------------------------------------------------------------------------- contention (fluid model)


def _capacity(topo: Topology, key: EdgeKey) -> float:
    if isinstance(key, tuple):
        return topo.graph.nodes[key[1]]["nvls_gbps"] * 1e9 if key[0] == "nvls" else math.inf
    return topo.capacities[key]


def fluid_finish_times(loads: Sequence[Mapping[EdgeKey, float]], capacity) -> list[float]:
    """Finish time of each flow (bytes per resource) under max-min fair sharing, recomputed on exits.

    A flow's rate r is the byte rate on its busiest resource; on a resource where it moves the
    fraction w of that amount it uses w·r. Rates come from progressive filling: all unfrozen flows
    rise together until some resource is full, whose flows then freeze.
    """
    col: dict = {}
    flow_of: list[int] = []
    col_of: list[int] = []
    amount: list[float] = []
    for i, load in enumerate(loads):
        for k, v in load.items():
            flow_of.append(i)
            col_of.append(col.setdefault(k, len(col)))
            amount.append(v)
    cap = np.array([capacity(k) for k in col], dtype=float)
    return _fill(len(loads), np.array(flow_of, dtype=np.intp), np.array(col_of, dtype=np.intp),
                 np.array(amount, dtype=float), cap).tolist()


def _fill(n: int, flow_of: np.ndarray, col_of: np.ndarray, amount: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """``fluid_finish_times`` on sparse entries (flow, resource, bytes), listed flow by flow.

    Sparse so that a step with thousands of flows costs its entries, not flows × resources; sums over
    flows run in flow order, as a dense column sum would.
    """
    if n == 0:
        return np.zeros(0)
    peak = np.zeros(n)
    np.maximum.at(peak, flow_of, amount)
    w = np.where(peak[flow_of] > 0, amount / np.where(peak[flow_of] > 0, peak[flow_of], 1.0), 0.0)
    used = w > 0
    flow_of, col_of, w = flow_of[used], col_of[used], w[used]
    ncols = len(cap)
    floor = 1e-9 * np.maximum(cap, 1.0)
    remaining = peak.copy()
    finish = np.zeros(n)
    active = remaining > 0
    now = 0.0
    while active.any():
        rate = np.zeros(n)
        left = cap.copy()
        free = active.copy()
        while free.any():
            sel = free[flow_of]
            demand = np.bincount(col_of[sel], weights=w[sel], minlength=ncols)
            with np.errstate(divide="ignore", invalid="ignore"):
                room = np.where(demand > 0, left / demand, np.inf)
            step = room.min()
            if not math.isfinite(step):
                raise P2Error("a flow uses no finite resource")
            rate[free] += step
            left -= step * demand
            full = (demand > 0) & (left <= floor)
            hit = np.zeros(n, dtype=bool)
            hit[flow_of[full[col_of]]] = True
            free &= ~hit
        with np.errstate(divide="ignore", invalid="ignore"):
            until = np.where(active, remaining / rate, np.inf)
        dt = until.min()
        now += dt
        remaining = np.where(active, remaining - rate * dt, remaining)
        done = active & (remaining <= 1e-9 * np.maximum(peak, 1.0))
        finish[done] = now
        active &= ~done
    return finish


# ----------------------------------------------------------------------------- steps, plans, programs


def _flow_times(topo: Topology, channels: Sequence[tuple[Channel, ...]], sizes: Sequence[float]):
    """(channel, fluid finish time) of every channel of every group, all groups sharing the links."""
    col: dict = {}
    flow_of: list[int] = []
    col_of: list[int] = []
    amount: list[float] = []
    flows: list[Channel] = []
    scale: list[float] = []
    for chans, size in zip(channels, sizes):
        for ch in chans:
            i = len(flows)
            for k, v in ch.load:
                flow_of.append(i)
                col_of.append(col.setdefault(k, len(col)))
                amount.append(v)
                scale.append(size)
            flows.append(ch)
    cap = np.array([_capacity(topo, k) for k in col], dtype=float)
    finish = _fill(len(flows), np.array(flow_of, dtype=np.intp), np.array(col_of, dtype=np.intp),
                   np.array(amount, dtype=float) * np.array(scale, dtype=float), cap)
    return list(zip(flows, finish.tolist()))


def plateau_latency(topo: Topology, channel: Channel, bandwidth_seconds: float) -> float:
    """A channel's α after NCCL's plateau effect: α + (P−1)·A·w, w = kβ/(kβ + A), P = ``nccl.allreduce_plateau``.

    A and k are the channel's ``plateau_latency`` and ``plateau_volume``: an AllReduce pays P times its own
    α once bandwidth-bound (A = α, k = 1); a ReduceScatter or Reduce pays the start-up of the AllReduce over
    the same hops (NCCL's ring AllReduce is that reduction fused with its AllGather, so the two together
    never undercut the AllReduce); AllGather and Broadcast pay none (COSTS.md's C2 AllGather shows none).
    """
    plateau, a = topo.nccl.allreduce_plateau, channel.plateau_latency
    if plateau == 1.0 or a <= 0.0:
        return channel.latency
    kb = channel.plateau_volume * bandwidth_seconds
    return channel.latency + (plateau - 1.0) * a * kb / (kb + a)


def _channel_seconds(topo: Topology, channel: Channel, bandwidth_seconds: float) -> float:
    return plateau_latency(topo, channel, bandwidth_seconds) + bandwidth_seconds


def _solo_seconds(topo: Topology, collective: Collective, group: Group, algo: str, size: float) -> float:
    """A group's time on the idle topology; translates by ``topo.period`` share it (an automorphism)."""
    shift = min(group) // topo.period * topo.period
    canon = tuple(d - shift for d in group)
    flows = topo.memo(("solo", algo, collective, canon),
                      lambda: _flow_times(topo, [group_channels(topo, collective, canon, algo)], [1.0]))
    return max(_channel_seconds(topo, ch, size * f) for ch, f in flows)


def _choose(topo: Topology, collective: Collective, group: Group, algo: str, size: float) -> str:
    """``auto`` takes, per group, the algorithm that is fastest on its own (as NCCL's tuner does)."""
    if algo != "auto":
        return algo
    return min(("ring", "tree", "nvls"), key=lambda a: _solo_seconds(topo, collective, group, a, size))


def step_time(topo: Topology, collective: Collective, groups: Sequence[Group], sizes: Sequence[float],
              algo: str = "ring") -> float:
    """Seconds for one step: ``groups`` run ``collective`` at once, group i with message ``sizes[i]``."""
    if algo not in ALGOS:
        raise P2Error(f"unknown algorithm {algo!r}; choose one of {', '.join(ALGOS)}")
    live = [(tuple(g), s) for g, s in zip(groups, sizes) if len(g) > 1 and s > 0]
    if not live:
        return 0.0
    top = max(s for _, s in live)
    algos = tuple(_choose(topo, collective, g, algo, s) for g, s in live)
    key = ("step", algos, collective, tuple(g for g, _ in live), tuple(round(s / top, 12) for _, s in live))

    def make():
        # Bandwidth time scales with the message, so the entry is kept per byte of the largest message.
        chans = [group_channels(topo, collective, g, a) for (g, _), a in zip(live, algos)]
        return _flow_times(topo, chans, [s / top for _, s in live])

    return max(_channel_seconds(topo, ch, top * f) for ch, f in topo.memo(key, make))


def collective_time(topology: Topology, collective: Collective, groups: Sequence[Group],
                    bytes_per_device: float, algo: str = "ring") -> float:
    """Seconds for ``collective`` over concurrent ``groups`` when every member holds ``bytes_per_device``."""
    sizes = [message_bytes(collective, [bytes_per_device] * len(g)) for g in groups]
    return step_time(topology, collective, groups, sizes, algo)


def plan_time(topology: Topology, plan: ExplicitPlan, volumes: Sequence[Mapping[int, float]],
              algo: str = "ring") -> list[float]:
    """Seconds per step of an explicit plan; ``volumes[t][device]`` = bytes it holds before step t."""
    if len(volumes) < len(plan):
        raise P2Error(f"{len(plan)} steps but volumes for {len(volumes)}")
    out = []
    for step, held in zip(plan, volumes):
        sizes = [message_bytes(step.collective, [held[d] for d in g]) for g in step.groups]
        out.append(step_time(topology, step.collective, step.groups, sizes, algo))
    return out


def held_fractions_of_programs(hierarchy: SynthesisHierarchy,
                               programs: Sequence[Program]) -> dict[Program, list[np.ndarray]]:
    """For each program, the share of the full buffer every synthesis device holds before each step.

    States come from the interpreter (``semantics.initial_state``/``apply_step``); programs are walked
    in prefix order so a shared prefix is interpreted once. Results are memoized (pure function).
    """
    return _held_fractions(hierarchy, tuple(sorted(set(programs), key=lambda p: tuple(map(str, p.instructions)))))


@lru_cache(maxsize=64)
def _held_fractions(hierarchy: SynthesisHierarchy, programs: tuple[Program, ...]) -> dict[Program, list[np.ndarray]]:
    k = hierarchy.num_devices
    if k > INTERPRETED_DEVICES:
        return _held_fractions_by_rows(hierarchy, programs)
    out: dict[Program, list[np.ndarray]] = {}
    stack: list[tuple[tuple, np.ndarray, np.ndarray]] = [((), initial_state(k), None)]
    stack[0] = ((), stack[0][1], held_fractions([stack[0][1]])[0])
    for prog in programs:
        instrs = prog.instructions
        while stack[-1][0] != instrs[: len(stack[-1][0])]:
            stack.pop()
        while len(stack[-1][0]) < len(instrs):
            prefix, state, _ = stack[-1]
            ins = instrs[len(prefix)]
            nxt = apply_step(state, len(prefix), ins.collective, instruction_groups(hierarchy, ins), False)
            if isinstance(nxt, Violation):
                raise P2Error(f"program {prog} is invalid here: {nxt.message}")
            stack.append((prefix + (ins,), nxt, held_fractions([nxt])[0]))
        out[prog] = [frac for _, _, frac in stack[: len(instrs)]]
    return out


def _held_fractions_by_rows(hierarchy: SynthesisHierarchy,
                            programs: tuple[Program, ...]) -> dict[Program, list[np.ndarray]]:
    """As ``_held_fractions`` on the row abstraction (``rows[d, r]``: device d's chunk r is non-empty)."""
    k = hierarchy.num_devices
    out: dict[Program, list[np.ndarray]] = {}
    start = np.ones((k, k), dtype=bool)
    stack: list[tuple[tuple, np.ndarray]] = [((), start)]
    for prog in programs:
        instrs = prog.instructions
        while stack[-1][0] != instrs[: len(stack[-1][0])]:
            stack.pop()
        while len(stack[-1][0]) < len(instrs):
            prefix, rows = stack[-1]
            ins = instrs[len(prefix)]
            nxt = apply_rows(rows, ins.collective, instruction_groups(hierarchy, ins))
            if isinstance(nxt, str):
                raise P2Error(f"program {prog} is invalid here: step {len(prefix)}: {nxt}")
            stack.append((prefix + (ins,), nxt))
        out[prog] = [rows.sum(axis=1) / k for _, rows in stack[: len(instrs)]]
    return out


def apply_rows(rows: np.ndarray, collective: Collective, groups: Sequence[Group]) -> np.ndarray | str:
    """One step of the interpreter's row abstraction: which chunks each device holds afterwards.

    It follows ``semantics.apply_group`` on rows only (AllReduce/AllGather: the union; Reduce: the
    union at the root; ReduceScatter: member i keeps the i-th block of the union; Broadcast: the
    root's), and checks the row-level preconditions (same chunks, divisibility, disjoint equal pieces);
    the contribution-level ones need the full state. Returns the new rows or a violation message.
    """
    new = rows.copy()
    by_size: dict[int, list[Group]] = {}
    for g in groups:
        by_size.setdefault(len(g), []).append(g)
    for m, gs in by_size.items():
        idx = np.array(gs)
        members = rows[idx]
        union = members.any(axis=1)
        if collective is Collective.ALL_GATHER:
            counts = members.sum(axis=2)
            if (members.sum(axis=1) > 1).any() or (counts != counts[:, :1]).any():
                return "AllGather needs members to hold disjoint chunks of equal number"
            new[idx] = union[:, None, :]
        elif collective is Collective.BROADCAST:
            new[idx] = members[:, :1, :]
        else:
            if (members != members[:, :1, :]).any():
                return f"{collective.value} needs every member to hold the same chunks"
            if collective is Collective.ALL_REDUCE:
                new[idx] = union[:, None, :]
            elif collective is Collective.REDUCE:
                new[idx] = False
                new[idx[:, 0]] = union
            else:
                count = union.sum(axis=1)
                if (count % m).any():
                    return f"ReduceScatter over {m} devices needs the non-empty chunks to divide by {m}"
                owner = (np.cumsum(union, axis=1) - 1) // np.maximum(count // m, 1)[:, None]
                new[idx] = union[:, None, :] & (owner[:, None, :] == np.arange(m)[None, :, None])
    return new


def _physical_volumes(hierarchy: SynthesisHierarchy, fractions: Sequence[np.ndarray],
                      bytes_per_device: float) -> list[dict[int, float]]:
    return [{rep[i]: float(f[i]) * bytes_per_device for rep in hierarchy.replicas for i in range(len(rep))}
            for f in fractions]


def program_volumes(hierarchy: SynthesisHierarchy, program: Program, bytes_per_device: float) -> list[dict[int, float]]:
    """Bytes each physical device holds before each step of ``program`` (from the interpreter's states)."""
    fractions = held_fractions_of_programs(hierarchy, [program])[program]
    return _physical_volumes(hierarchy, fractions, bytes_per_device)


def program_time(system: System, hierarchy: SynthesisHierarchy, program: Program, *, algo: str = "ring",
                 bytes_per_device: float | None = None, fractions: Sequence[np.ndarray] | None = None) -> ProgramCost:
    """Predicted time of a synthesized program lowered onto ``system`` (sum of its steps).

    ``fractions`` (from ``held_fractions_of_programs``) skips re-running the interpreter. A step's
    time is kept per (instruction, message sizes of its synthesis groups), which is all it depends
    on: every replica of a synthesis group holds the same share, so programs sharing a step share it.
    """
    topo = build_topology(system)
    b = default_bytes_per_device(system) if bytes_per_device is None else bytes_per_device
    if fractions is None:
        fractions = held_fractions_of_programs(hierarchy, [program])[program]
    steps = []
    for ins, frac in zip(program.instructions, fractions):
        groups, lowered = _lowered(hierarchy, ins)
        sizes = tuple(message_bytes(ins.collective, [float(frac[i]) * b for i in g]) for g in groups)
        key = ("instruction", hierarchy, ins, algo, sizes)
        steps.append(topo.memo(key, lambda c=ins.collective, lw=lowered, sz=sizes: step_time(
            topo, c, lw, sz * len(hierarchy.replicas), algo)))
    return ProgramCost(sum(steps), tuple(steps))


@lru_cache(maxsize=4096)
def _lowered(hierarchy: SynthesisHierarchy, instruction) -> tuple[tuple[Group, ...], tuple[Group, ...]]:
    """An instruction's groups in synthesis indices, and lowered onto every replica (``lower_program``)."""
    (step,) = lower_program(hierarchy, Program((instruction,)))
    return instruction_groups(hierarchy, instruction), step.groups


def flat_collective_time(system: System, collective: Collective | str, nbytes: float, algo: str = "ring") -> float:
    """One collective over all GPUs of ``system``; ``nbytes`` in nccl-tests convention (AllGather and
    ReduceScatter: the total buffer, n × per-rank bytes)."""
    coll = collective if isinstance(collective, Collective) else Collective.parse(collective)
    if nbytes <= 0:
        raise P2Error(f"--bytes must be positive, got {nbytes}")
    topo = build_topology(system)
    group = tuple(range(topo.num_devices))
    return step_time(topo, coll, [group], [float(nbytes)], algo)


def bus_bandwidth_gbps(collective: Collective | str, ranks: int, nbytes: float, seconds: float) -> float:
    """nccl-tests bus bandwidth (GB/s) of a measured or predicted time: algbw × 2(n-1)/n for AllReduce,
    (n-1)/n for ReduceScatter/AllGather, 1 for Broadcast/Reduce (COSTS.md)."""
    coll = collective if isinstance(collective, Collective) else Collective.parse(collective)
    if seconds <= 0 or ranks < 1:
        raise P2Error("bus bandwidth needs a positive time and at least one rank")
    return nbytes / seconds / 1e9 * _coef(coll, ranks)
