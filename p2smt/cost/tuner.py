"""NCCL's tuner per algorithm × protocol: latencies, protocol bandwidth factors and caps, channel counts.

NCCL (src/graph/tuning.cc) estimates ``time = latency + bytes / algBw`` for every (algorithm, protocol)
and runs the cheapest. The constants are versioned data files (``data/nccl-<version>.yaml``), each
naming its source; a system's ``nccl.version`` and ``nccl.arch`` select the set and its rows. The
Simple-protocol bandwidth itself comes from the topology's channels and contention model; a protocol
scales it (LL ≈ ¼ of Simple capped at ``llMaxBw``, LL128 0.92× capped per channel, …) as NCCL does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from p2smt.errors import P2Error
from p2smt.model.collectives import Collective
from p2smt.model.hardware import NcclParams

DATA = Path(__file__).with_name("data")
HOP_CLASSES = ("nvlink", "pci", "pci", "net")
"""NCCL's latency class of a route class (NVL, PCI, SYS, NET): SYS paths count as PCI hops."""


class Protocol(str, Enum):
    """NCCL's wire protocols: LL (8-byte flag+data lines), LL128 (128-byte lines), Simple (bulk)."""

    LL = "ll"
    LL128 = "ll128"
    SIMPLE = "simple"


PROTOCOLS_OF = {"ring": (Protocol.LL, Protocol.LL128, Protocol.SIMPLE),
                "tree": (Protocol.LL, Protocol.LL128, Protocol.SIMPLE),
                "nvls": (Protocol.SIMPLE,)}
RAMP_PROTOCOLS = frozenset({Protocol.LL128, Protocol.SIMPLE})
"""Protocols whose chunked pipelines pay the fitted start-up ramp (``nccl.allreduce_plateau``)."""


@cache
def constants(version: str) -> dict[str, Any]:
    """The constant set of one NCCL release (``data/nccl-<version>.yaml``)."""
    path = DATA / f"nccl-{version}.yaml"
    if not path.is_file():
        known = sorted(p.stem.removeprefix("nccl-") for p in DATA.glob("nccl-*.yaml"))
        raise P2Error(f"no NCCL constant set {version!r}; known: {', '.join(known)}")
    return yaml.safe_load(path.read_text())


def versions() -> tuple[str, ...]:
    """NCCL releases with a constant set."""
    return tuple(sorted(p.stem.removeprefix("nccl-") for p in DATA.glob("nccl-*.yaml")))


def _row(nccl: NcclParams) -> str:
    """The per-architecture row: Blackwell uses Hopper's (the releases read here predate Blackwell rows)."""
    return "hopper" if nccl.arch == "blackwell" else nccl.arch


def _by_nodes(values: list[float], nodes: int) -> float:
    return values[min(nodes, 3) - 1]


def _ll_max(nccl: NcclParams, c: dict, nodes: int) -> float:
    """LL's bandwidth cap (``llMaxBws``): on one node the GPU's row; across nodes NCCL reads the row by the
    CPU vendor, and its table's first two rows double as the Intel and AMD rows (tuning.cc)."""
    row = _row(nccl) if nodes == 1 else ("ampere" if nccl.cpu_vendor == "amd" else "volta")
    return _by_nodes(c["ll_max_gbps"][row], nodes)


@dataclass(frozen=True)
class GroupShape:
    """What NCCL's tuner knows of a communicator: ranks, nodes, channels, its Simple bus bandwidth."""

    collective: Collective
    ranks: int
    nodes: int
    channels: int


def latency_us(nccl: NcclParams, algo: str, proto: Protocol, hops: tuple[tuple[str, float], ...]) -> float:
    """Base latency of (algo, proto) plus the weighted per-hop latencies of ``hops`` (class, count)."""
    c = constants(nccl.version)
    base = c["base_latency_us"][algo].get(proto.value, 0.0)
    table = "tree" if algo == "tree" else "ring"
    return base + sum(w * c["hop_latency_us"][cls][table][proto.value] for cls, w in hops)


def channels(nccl: NcclParams, busbw_gbps: float) -> int:
    """NCCL's channel count for a ring of Simple bus bandwidth ``busbw_gbps`` (search.cc's speed ladder).

    The search takes the speed that gives the most bandwidth (ties: the faster speed), as many channels
    as fit, and duplicates channels at speeds of 25 GB/s and more, up to ``search_max_channels`` of the
    release. This is NCCL's own count, used for its per-channel caps; it does not depend on how many
    rings a system file models (``max_channels``: P²'s systems model one ring of the links' bandwidth).
    """
    c = constants(nccl.version)
    ladder, most = c["speed_ladder_gbps"][_row(nccl)], c["search_max_channels"]
    best = max(ladder, key=lambda s: (min(most, math.floor(busbw_gbps / s)) * s, s))
    n = max(1, min(most, math.floor(busbw_gbps / best)))
    return min(2 * n, most) if best >= 25 else n


def bus_bandwidth(nccl: NcclParams, algo: str, proto: Protocol, shape: GroupShape, simple_gbps: float) -> float:
    """(factor, cap): the protocol's bus bandwidth is min(factor × Simple's, cap) (tuning.cc refinements)."""
    c = constants(nccl.version)
    row = _row(nccl)
    nch = shape.channels
    if algo == "ring":
        if proto is Protocol.LL:
            reduction = shape.nodes > 1 or shape.collective in (Collective.ALL_REDUCE, Collective.REDUCE)
            f = c["ring_ll_factor"]["allreduce" if reduction else "other"]
            return min(f * simple_gbps, _ll_max(nccl, c, shape.nodes))
        if proto is Protocol.LL128:
            return min(c["ring_ll128_factor"] * simple_gbps, nch * c["ring_ll128_max_per_channel_gbps"][row])
        return simple_gbps
    if algo == "tree":
        tree = min(simple_gbps, nch * _by_nodes(c["tree_max_per_channel_gbps"][row], shape.nodes))
        if proto is Protocol.LL:
            return min(tree * c["tree_ll_factor"], _ll_max(nccl, c, shape.nodes))
        if proto is Protocol.LL128:
            return tree * c["tree_ll128_factor"]["one_node" if shape.nodes == 1 else "multi_node"]
        return tree
    return simple_gbps


def tree_correction(nccl: NcclParams, proto: Protocol, nbytes: float, smooth: bool = False) -> float:
    """Tree's size-dependent bandwidth factor, indexed by log2(bytes / 64) below 2^23 × 64 bytes: NCCL's step
    function, or (``smooth``) linear in log2(bytes) between its entries, the same at every power of two. The
    steps let a time estimate fall as bytes grow (3.5 → 4 MiB on DGX H100: 131.9 → 122.6 µs); NCCL only
    compares estimates at one size, while a predicted time should grow with the bytes."""
    table = constants(nccl.version)["tree_correction"][proto.value]
    x = math.log2(nbytes / 64) if nbytes >= 128 else 0.0
    i = int(x)
    low = table[i] if i < len(table) else 1.0
    if not smooth:
        return low
    high = table[i + 1] if i + 1 < len(table) else 1.0
    return low + (high - low) * (x - i)


def multi_node_latency_factor(nccl: NcclParams, algo: str, proto: Protocol, shape: GroupShape,
                              nbytes: float) -> float:
    """NCCL's ring 'plateau effect': a multi-node Ring/Simple AllReduce with ≥ 64 B per channel per rank."""
    if (algo == "ring" and proto is Protocol.SIMPLE and shape.nodes > 1
            and shape.collective is Collective.ALL_REDUCE and nbytes / (shape.channels * shape.ranks) >= 64):
        return constants(nccl.version)["ring_multi_node_latency_factor"][_row(nccl)]
    return 1.0
