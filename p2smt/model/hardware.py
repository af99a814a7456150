"""Pydantic models of the ``physical:`` section of system files: the layout of one node plus link types.

The section describes one node (the unit at ``node_level``, by default the system's scalable level);
the topology builder instantiates it once per node and joins every NIC to one non-blocking network,
or, when a ``network:`` entry is given, to a two-tier leaf/spine fabric (leaves per scalable unit,
one per rail or one per unit, and spines across units).
GPUs are named ``gpu0 … gpu{n-1}`` (local index = device id modulo ``gpus_per_node``). Link endpoints
may use a range pattern, ``gpu[0-3]`` or ``pcie[0,1]``; two lists of equal length pair up element-wise,
a single name pairs with every element of the other list, and ``ring: gpu[0-7]`` closes a cycle.
All parameters (bandwidths, efficiencies, latencies) live here, never in code.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

ComponentKind = Literal["nvswitch", "pcie_switch", "cpu", "nic"]
LinkKind = Literal["nvlink", "nvswitch", "pcie", "smp", "nic"]
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PATTERN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*?)\[([0-9,\- ]+)\]$")
GPU_NAME = re.compile(r"^gpu([0-9]+)$")
MAX_ENDPOINTS = 4096  # names one range may stand for, and GPUs per node: bounds memory before anything is built


def expand_names(pattern: str) -> tuple[str, ...]:
    """``gpu[0-2,5]`` -> (gpu0, gpu1, gpu2, gpu5); a plain name stands for itself."""
    m = PATTERN.match(pattern.strip())
    if m is None:
        if not NAME.match(pattern.strip()):
            raise ValueError(f"bad endpoint {pattern!r}: use a name or a range like gpu[0-7]")
        return (pattern.strip(),)
    prefix, body = m.groups()
    spans = [tuple(int(x) for x in part.split("-", 1)) for part in body.split(",") if "-" in part]
    if sum(max(0, hi - lo + 1) for lo, hi in spans) > MAX_ENDPOINTS:
        raise ValueError(f"range {pattern!r} names more than {MAX_ENDPOINTS:,} endpoints")
    out: list[str] = []
    for part in body.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = (int(x) for x in part.split("-", 1))
            if hi < lo:
                raise ValueError(f"bad range {part!r} in {pattern!r}")
            out.extend(f"{prefix}{i}" for i in range(lo, hi + 1))
        elif part:
            out.append(f"{prefix}{int(part)}")
    return tuple(out)


class LinkType(BaseModel):
    """A kind of physical link: spec bandwidth per direction per link, the fraction achieved, latency."""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid", frozen=True)
    kind: LinkKind
    bandwidth_gbps: float = Field(gt=0, description="spec GB/s per direction of one link")
    efficiency: float = Field(default=1.0, gt=0, le=1, description="achievable share of the spec")
    latency_us: float = Field(ge=0, description="per-hop latency (NCCL Simple protocol hwLat)")
    note: str = ""

    @property
    def effective_gbps(self) -> float:
        return self.bandwidth_gbps * self.efficiency


class Component(BaseModel):
    """A non-GPU box of a node: NVSwitch, PCIe switch, CPU (root complex) or NIC."""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid", frozen=True)
    name: str
    kind: ComponentKind
    uplink: str | None = Field(default=None, description="NIC only: link type from the NIC to the network")
    nvls_gbps: float | None = Field(
        default=None, gt=0, description="NVSwitch only: per-GPU NVLink-SHARP AllReduce rate (algbw, GB/s)"
    )
    nvls_latency_us: float = Field(default=0.0, ge=0)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.match(v) or GPU_NAME.match(v) or v == "network":
            raise ValueError(f"component name {v!r} must be an identifier other than gpuN and network")
        return v

    @model_validator(mode="after")
    def _kind_fields(self) -> Component:
        if (self.kind == "nic") != (self.uplink is not None):
            raise ValueError(f"component {self.name!r}: exactly the NICs need an uplink link type")
        if self.nvls_gbps is not None and self.kind != "nvswitch":
            raise ValueError(f"component {self.name!r}: nvls_gbps only applies to an nvswitch")
        return self


class Link(BaseModel):
    """Links of one type between ``a`` and ``b`` (names or ranges), or around a ``ring``."""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid", frozen=True)
    type: str
    a: str | None = None
    b: str | None = None
    ring: str | None = None
    count: StrictInt = Field(default=1, ge=1, description="bonded links between each pair")

    @model_validator(mode="after")
    def _shape(self) -> Link:
        if (self.ring is None) == (self.a is None or self.b is None) or (
            self.ring is not None and (self.a is not None or self.b is not None)
        ):
            raise ValueError("a link needs either both 'a' and 'b', or 'ring'")
        return self

    def pairs(self) -> tuple[tuple[str, str], ...]:
        """The (a, b) endpoint pairs this entry stands for."""
        if self.ring is not None:
            names = expand_names(self.ring)
            if len(names) < 2:
                raise ValueError(f"ring {self.ring!r} needs at least 2 members")
            if len(names) == 2:
                return ((names[0], names[1]),)
            return tuple((names[i], names[(i + 1) % len(names)]) for i in range(len(names)))
        a, b = expand_names(self.a or ""), expand_names(self.b or "")
        if len(a) == len(b):
            return tuple(zip(a, b))
        if len(a) == 1:
            return tuple((a[0], y) for y in b)
        if len(b) == 1:
            return tuple((x, b[0]) for x in a)
        raise ValueError(f"link {self.a!r} -- {self.b!r}: lists of different lengths ({len(a)}, {len(b)})")


class NcclParams(BaseModel):
    """Which NCCL the system runs and the few NCCL settings the cost model needs.

    ``version`` selects a constant set (``p2smt/cost/data/nccl-<version>.yaml``, NCCL's
    src/graph/tuning.cc of that release); ``arch`` picks its per-architecture rows.
    """

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid", frozen=True)
    version: str = Field(default="2.18", description="NCCL release whose tuner constants apply")
    arch: Literal["volta", "ampere", "hopper", "blackwell"] = Field(default="ampere", description="GPU generation")
    cpu_vendor: Literal["intel", "amd", "other"] = Field(
        default="intel", description="the nodes' CPU vendor: across nodes NCCL caps LL's bandwidth by it (AMD's "
        "row, else Intel's), not by the GPU")
    protocols: tuple[Literal["ll", "ll128", "simple"], ...] = Field(
        default=("ll", "ll128", "simple"), min_length=1, description="protocols NCCL may choose (NCCL_PROTO)")
    tree_efficiency: float = Field(default=0.92, gt=0, le=1, description="NCCL caps tree busbw at ~0.92x")
    max_channels: StrictInt = Field(default=16, ge=1, le=64,
                                    description="most rings/trees one collective runs at once")
    allreduce_plateau: float = Field(
        default=3.47, ge=1,
        description="pipeline start-up of a bandwidth-bound reduction (Simple/LL128/NVLS): it pays this multiple "
        "of its latency. The one constant fitted on the public calibration points "
        "(python benchmarks/cost.py prints the fit and its leave-one-out errors), not fitted per system",
    )


class Network(BaseModel):
    """A two-tier leaf/spine fabric between the nodes' NICs; without it the NICs share one ideal switch.

    Every instance of ``unit_level`` (a scalable unit, SU) gets its own leaves: one per rail (rail ``r``
    = the r-th NIC of the node in file order; the leaf joins that NIC of every node of the unit) or one
    for all NICs of the unit. Each leaf has ``ceil(downlinks / oversubscription)`` uplinks of link type
    ``uplink``, dealt round-robin to the ``spines`` (uplink p goes to spine p mod spines; spines left
    without a cable, when a leaf has fewer uplinks than there are spines, are not built).
    """

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid", frozen=True)
    unit_level: str = Field(description="level whose instances (scalable units) get their own leaves")
    leaves: Literal["rail", "unit"] = Field(default="rail", description="one leaf per rail, or per unit")
    uplink: str = Field(description="link type (kind nic) of one leaf-spine cable")
    spines: StrictInt = Field(ge=1)
    oversubscription: float = Field(default=1.0, gt=0, description="leaf downlink : uplink bandwidth")
    pxn: bool = Field(
        default=True,
        description="rail leaves only: traffic to another node leaves through the NIC on the destination's "
        "rail, reached inside the source node over the GPU that owns that NIC (NCCL's PXN)",
    )
    note: str = ""


class PhysicalLayout(BaseModel):
    """One node's boxes and links, the link types, and NCCL constants; instantiated once per node."""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid", frozen=True)
    node_level: str | None = Field(default=None, description="level one layout describes (default: scalable)")
    gpus_per_node: StrictInt = Field(ge=1, le=MAX_ENDPOINTS)
    link_types: dict[str, LinkType] = Field(min_length=1)
    components: tuple[Component, ...] = ()
    links: tuple[Link, ...] = ()
    network: Network | None = Field(default=None, description="leaf/spine fabric (default: one switch)")
    nccl: NcclParams = Field(default_factory=NcclParams)

    @model_validator(mode="after")
    def _consistent(self) -> PhysicalLayout:
        names = [c.name for c in self.components]
        if len(set(names)) != len(names):
            raise ValueError(f"component names must be distinct, got {names}")
        known = set(names) | {f"gpu{i}" for i in range(self.gpus_per_node)}
        for c in self.components:
            if c.uplink is not None:
                lt = self.link_types.get(c.uplink)
                if lt is None or lt.kind != "nic":
                    raise ValueError(f"NIC {c.name!r}: uplink {c.uplink!r} must name a link type of kind nic")
        for link in self.links:
            if link.type not in self.link_types:
                raise ValueError(f"link type {link.type!r} is not among {sorted(self.link_types)}")
            for a, b in link.pairs():
                for end in (a, b):
                    if end not in known:
                        raise ValueError(f"link endpoint {end!r} is neither a GPU nor a component")
                if a == b:
                    raise ValueError(f"link from {a!r} to itself")
        if self.network is not None:
            lt = self.link_types.get(self.network.uplink)
            if lt is None or lt.kind != "nic":
                raise ValueError(f"network uplink {self.network.uplink!r} must name a link type of kind nic")
            if not any(c.kind == "nic" for c in self.components):
                raise ValueError("a leaf/spine network needs NICs among the components")
        return self

    @property
    def rails(self) -> tuple[str, ...]:
        """The node's NICs in file order; rail r of a node is its r-th NIC."""
        return tuple(c.name for c in self.components if c.kind == "nic")
