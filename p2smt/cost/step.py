"""Time of one step (concurrent groups running one collective), of explicit plans, and of flat collectives."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from p2smt.cost.channels import ALGOS, Channel, _coef, group_channels
from p2smt.cost.fluid import _flow_times
from p2smt.cost.volumes import message_bytes
from p2smt.errors import P2Error
from p2smt.model.collectives import Collective, ExplicitPlan, Group
from p2smt.model.system import System
from p2smt.model.topology import Topology, build_topology


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
