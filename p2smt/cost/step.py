"""Time of one step (concurrent groups running one collective), of explicit plans, and of flat collectives."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from p2smt.cost.channels import ALGOS, Channel, _coef, available_algos, group_channels
from p2smt.cost.fluid import _flow_times
from p2smt.cost.tuner import (
    HOP_CLASSES,
    PROTOCOLS_OF,
    RAMP_PROTOCOLS,
    GroupShape,
    Protocol,
    bus_bandwidth,
    channels,
    latency_us,
    multi_node_latency_factor,
    tree_correction,
)
from p2smt.cost.volumes import message_bytes
from p2smt.errors import P2Error
from p2smt.model.collectives import Collective, ExplicitPlan, Group
from p2smt.model.system import System
from p2smt.model.topology import Topology, build_topology


@dataclass(frozen=True)
class Choice:
    """The (algorithm, protocol) one group runs, its predicted seconds on its own, and NCCL's estimate.

    ``estimate`` is NCCL's tuner's own time (its latency constants, no start-up ramp): what NCCL
    compares to pick the pair. ``seconds`` is the model's prediction of that pair (with the ramp).
    """

    algo: str
    protocol: Protocol
    seconds: float
    estimate: float = 0.0


def plateau_latency(topo: Topology, channel: Channel, proto: Protocol, bandwidth_seconds: float,
                    factor: float = 1.0, ramp: bool = True, ramp_factor: float | None = None) -> float:
    """A channel's α (seconds) under ``proto``, after the pipeline start-up: α + (P−1)·A·w, w = kβ/(kβ + A).

    α is NCCL's tuner latency (times ``factor``, NCCL's multi-node ring plateau); P is
    ``nccl.allreduce_plateau``, paid by the chunked protocols (LL128, Simple, NVLS) only. A and k place the
    channel against the AllReduce over the same hops: an AllReduce pays P times its own α once
    bandwidth-bound (A = α, k = 1); a ReduceScatter or Reduce pays the start-up of the AllReduce over the
    same hops, with that AllReduce's plateau factor (``ramp_factor``; default ``factor``), since NCCL's ring
    AllReduce is that reduction fused with its AllGather; AllGather and Broadcast pay none.
    ``ramp=False``: NCCL's α alone.
    """
    nccl = topo.nccl
    alpha = (channel.fixed_us + latency_us(nccl, channel.algo, proto, channel.hops)) * factor * 1e-6
    plateau, scale = nccl.allreduce_plateau, channel.plateau_scale
    if not ramp or plateau == 1.0 or scale <= 0.0 or proto not in RAMP_PROTOCOLS:
        return alpha
    hops = tuple((c, w * scale) for c, w in channel.hops)
    a_factor = factor if ramp_factor is None else ramp_factor
    a = (channel.fixed_us + latency_us(nccl, channel.algo, proto, hops)) * a_factor * 1e-6
    kb = channel.plateau_volume * bandwidth_seconds
    return alpha + (plateau - 1.0) * a * kb / (kb + a)


def _group_shape(topo: Topology, collective: Collective, group: Group, simple_busbw: float) -> GroupShape:
    nodes = len({topo.node_of(d) for d in group})
    return GroupShape(collective, len(group), nodes, channels(topo.nccl, simple_busbw))


def _group_seconds(topo: Topology, collective: Collective, group: Group, flows, size: float,
                   proto: Protocol, ramp: bool = True) -> float:
    """One group's time under ``proto`` from its channels' Simple bandwidth times per byte (``flows``);
    ``ramp=False`` gives NCCL's own estimate (no start-up ramp)."""
    algo = flows[0][0].algo
    beta = size * max(f for _, f in flows)
    if beta <= 0:
        return 0.0
    volume = 2.0 if algo == "tree" else (1.0 if algo == "nvls" else _coef(collective, len(group)))
    busbw = volume * size / beta / 1e9
    shape = _group_shape(topo, collective, group, busbw)
    ratio = busbw / bus_bandwidth(topo.nccl, algo, proto, shape, busbw)
    if algo == "tree":
        ratio /= tree_correction(topo.nccl, proto, size, smooth=ramp)  # NCCL's steps steer, the time is smooth
    factor = multi_node_latency_factor(topo.nccl, algo, proto, shape, size)
    fused = factor if collective is Collective.ALL_REDUCE else multi_node_latency_factor(
        topo.nccl, algo, proto, replace(shape, collective=Collective.ALL_REDUCE), size)
    return max(plateau_latency(topo, ch, proto, size * f * ratio, factor, ramp, fused) + size * f * ratio
               for ch, f in flows)


def _protocols(topo: Topology, algo: str, group: Group, flows) -> tuple[Protocol, ...]:
    allowed = {Protocol(p) for p in topo.nccl.protocols}
    if Protocol.LL128 in allowed and not _ll128_enabled(topo, group, flows):
        allowed.discard(Protocol.LL128)
    return tuple(p for p in PROTOCOLS_OF[algo] if p in allowed) or (Protocol.SIMPLE,)


def _ll128_enabled(topo: Topology, group: Group, flows) -> bool:
    """NCCL enables LL128 by default only when the paths inside nodes are NVLink and, across nodes, every
    GPU reaches its NIC through PCIe switches alone (path types NVL and at most PXB, ``tuning.cc``)."""
    if any(cls == "pci" for ch, _ in flows for cls, _ in ch.hops):
        return False
    behind = topo.gpus_behind_cpu
    if not behind:  # every shipped system but P²'s: no per-device look at the group
        return True
    n = topo.gpus_per_node
    return len({topo.node_of(d) for d in group}) == 1 or not any(d % n in behind for d in group)


def _best(topo: Topology, collective: Collective, group: Group, flows, size: float) -> Choice:
    """The protocol NCCL's own estimate picks (first in LL, LL128, Simple order on ties), with the
    model's time of it: the start-up ramp is what NCCL's tuner does not see, so it does not steer."""
    algo = flows[0][0].algo
    proto = min(_protocols(topo, algo, group, flows),
                key=lambda p: _group_seconds(topo, collective, group, flows, size, p, ramp=False))
    return Choice(algo, proto, _group_seconds(topo, collective, group, flows, size, proto),
                  _group_seconds(topo, collective, group, flows, size, proto, ramp=False))


def _orbit(topo: Topology, group: Group) -> Group:
    """The representative of a group's orbit under the translations ``_solo`` describes."""
    period = topo.period
    if not topo.derived and min(group) // topo.gpus_per_node == max(group) // topo.gpus_per_node:
        period = topo.gpus_per_node
    shift = min(group) // period * period
    return tuple(d - shift for d in group)


def _solo(topo: Topology, collective: Collective, group: Group, algo: str, size: float) -> Choice:
    """A group's best protocol on the idle topology, priced once per orbit of groups: translates by
    ``topo.period`` share it (an automorphism), and so do translates by whole nodes of a group inside one
    node (its routes never leave the node). Node translates across nodes are not automorphisms of a
    leaf/spine fabric (destination-mod-k picks the spine by the node's port), and a derived topology
    has no translation at all (``period`` is every device)."""
    canon = _orbit(topo, group)

    def price() -> Choice:
        flows = topo.memo(("solo", algo, collective, canon),
                          lambda: _flow_times(topo, [group_channels(topo, collective, canon, algo)], [1.0]))
        return _best(topo, collective, canon, flows, size)

    return topo.memo(("solo-choice", algo, collective, canon, size), price)


def choose(topo: Topology, collective: Collective, group: Group, algo: str, size: float) -> Choice:
    """``auto`` takes the (algorithm, protocol) NCCL's tuner estimates fastest on its own; a forced
    algorithm takes its protocol so chosen."""
    candidates = available_algos(topo, collective, group) if algo == "auto" else (algo,)
    return min((_solo(topo, collective, group, a, size) for a in candidates), key=lambda c: c.estimate)


def step_choices(topo: Topology, collective: Collective, groups: Sequence[Group], sizes: Sequence[float],
                 algo: str = "ring") -> tuple[float, tuple[Choice, ...]]:
    """Seconds for one step (``groups`` run ``collective`` at once, group i with ``sizes[i]``) and each
    live group's (algorithm, protocol), under contention between the groups."""
    if algo not in ALGOS:
        raise P2Error(f"unknown algorithm {algo!r}; choose one of {', '.join(ALGOS)}")
    live = tuple((tuple(g), s) for g, s in zip(groups, sizes) if len(g) > 1 and s > 0)
    return topo.memo(("step-choices", algo, collective, live), lambda: _step_choices(topo, collective, live, algo))


def _step_choices(topo: Topology, collective: Collective, live: tuple[tuple[Group, float], ...],
                  algo: str) -> tuple[float, tuple[Choice, ...]]:
    if not live:
        return 0.0, ()
    top = max(s for _, s in live)
    if algo == "auto":
        picks = tuple(choose(topo, collective, g, algo, s) for g, s in live)
    else:  # a forced algorithm's choice depends on the group's orbit and size only (``_solo``)
        orbits = [(_orbit(topo, g), s) for g, s in live]
        by_orbit: dict[tuple[Group, float], Choice] = {}
        for (g, s), key in zip(live, orbits):
            if key not in by_orbit:
                by_orbit[key] = _solo(topo, collective, g, algo, s)
        picks = tuple(by_orbit[key] for key in orbits)
    algos = tuple(c.algo for c in picks)
    key = ("step", algos, collective, tuple(g for g, _ in live), tuple(round(s / top, 12) for _, s in live))

    def make():
        # Bandwidth time scales with the message, so the entry is kept per byte of the largest message.
        chans = [group_channels(topo, collective, g, a) for (g, _), a in zip(live, algos)]
        flows = _flow_times(topo, chans, [s / top for _, s in live])
        out, i = [], 0
        for c in chans:
            out.append(tuple(flows[i:i + len(c)]))
            i += len(c)
        return tuple(out)

    per_group = topo.memo(key, make)
    # A finish time f is per byte of the largest message; per byte of group g's own message it is f·top/s.
    # A group's time depends only on the key below, so groups of one orbit under contention that left
    # them equal flows are priced once; wherever the fabric or the contention breaks the symmetry the
    # keys differ and each group is priced on its own.
    priced: dict[tuple, float] = {}
    for (g, s), flows, c in zip(live, per_group, picks):
        scaled = tuple((ch, f * top / s) for ch, f in flows)
        key = (s, c.protocol, len(g), len({topo.node_of(d) for d in g}),
               tuple((ch.algo, ch.hops, ch.fixed_us, ch.plateau_scale, ch.plateau_volume, f) for ch, f in scaled))
        if key not in priced:
            priced[key] = _group_seconds(topo, collective, g, scaled, s, c.protocol)
    return max(priced.values()), picks


def step_time(topo: Topology, collective: Collective, groups: Sequence[Group], sizes: Sequence[float],
              algo: str = "ring") -> float:
    """Seconds for one step: ``groups`` run ``collective`` at once, group i with message ``sizes[i]``."""
    return step_choices(topo, collective, groups, sizes, algo)[0]


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


def link_class(system: System, groups: Sequence[Group]) -> str:
    """The slowest link class a step's groups use: ``net`` if a group spans nodes, else the worst
    route class between its members (``nvlink`` or ``pci``), as NCCL classes paths."""
    topo = build_topology(system)
    worst = max((topo.route_class(topo.route(g[0], d)) for g in groups for d in g[1:]), default=0)
    return HOP_CLASSES[worst]


def flat_collective_choice(system: System, collective: Collective | str, nbytes: float,
                           algo: str = "ring") -> Choice:
    """One collective over all GPUs of ``system`` and the (algorithm, protocol) it runs; ``nbytes`` in
    nccl-tests convention (AllGather and ReduceScatter: the total buffer, n × per-rank bytes). A forced
    algorithm the system cannot run for this collective is an error, not silently another one."""
    coll = collective if isinstance(collective, Collective) else Collective.parse(collective)
    if nbytes <= 0:
        raise P2Error(f"--bytes must be positive, got {nbytes}")
    if algo not in ALGOS:
        raise P2Error(f"unknown algorithm {algo!r}; choose one of {', '.join(ALGOS)}")
    topo = build_topology(system)
    group = tuple(range(topo.num_devices))
    can = available_algos(topo, coll, group)
    if algo != "auto" and algo not in can:
        raise P2Error(f"{system.name} cannot run {coll.value} with {algo}; it can use {', '.join(can)}")
    seconds, (pick,) = step_choices(topo, coll, [group], [float(nbytes)], algo)
    return Choice(pick.algo, pick.protocol, seconds, pick.estimate)


def flat_collective_time(system: System, collective: Collective | str, nbytes: float, algo: str = "ring") -> float:
    """Seconds of ``flat_collective_choice``."""
    return flat_collective_choice(system, collective, nbytes, algo).seconds


def bus_bandwidth_gbps(collective: Collective | str, ranks: int, nbytes: float, seconds: float) -> float:
    """nccl-tests bus bandwidth (GB/s) of a measured or predicted time: algbw × 2(n-1)/n for AllReduce,
    (n-1)/n for ReduceScatter/AllGather, 1 for Broadcast/Reduce (nccl-tests' PERFORMANCE.md)."""
    coll = collective if isinstance(collective, Collective) else Collective.parse(collective)
    if seconds <= 0 or ranks < 1:
        raise P2Error("bus bandwidth needs a positive time and at least one rank")
    return nbytes / seconds / 1e9 * _coef(coll, ranks)
