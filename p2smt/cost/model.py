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
- Protocols (NCCL's tuner, ``tuner.py``): every (algorithm, protocol) of LL, LL128 and Simple gets
  ``time = α + bytes / busBw`` with α = ``base_latency_us[algo][proto]`` plus, per hop, NCCL's
  per-protocol latency of the hop's class (NVLink, PCI, network): Ring AllReduce pays 2(p-1)/p times the
  ring's hops, ReduceScatter/AllGather (p-1)/p times, Reduce/Broadcast the chain's hops; Tree pays twice
  the longest intra-node chain plus ceil(log2 nodes) network hops; NVLS the switch's ``nvls_latency_us``.
  busBw is the channels' Simple rate from the fluid model, scaled and capped per protocol as NCCL does
  (LL ¼ or ⅓ of it up to ``llMaxBw``, LL128 0.92× up to a per-channel cap, Tree's size-dependent
  correction, the multi-node ring latency ×1.4). ``auto`` takes the cheapest (algorithm, protocol);
  a forced algorithm takes its cheapest protocol. Constants are versioned sets (``data/nccl-*.yaml``).
- Plateau: a bandwidth-bound AllReduce pays more start-up than NCCL's latency constants, as NCCL's own
  tuner concedes across nodes (its ring "plateau effect", latency ×1.4). Here an AllReduce channel's α
  under a chunked protocol (LL128, Simple, NVLS) becomes α·(1 + (P−1)·β/(α+β)), P =
  ``nccl.allreduce_plateau``: the full multiple once β dominates, none for latency-bound messages. A
  ReduceScatter or Reduce pays the extra of the AllReduce over the same hops, with that AllReduce's
  multi-node factor (NCCL's AllReduce is that reduction fused with its AllGather); AllGather and
  Broadcast pay none. P is one global constant
  fitted on the public calibration points (``benchmarks/cost.py``: fit and leave-one-out errors).
- Data volume follows the state: before each step a device holds (non-empty rows of its state / k)
  of the full per-device bytes; ``message_bytes`` turns the members' holdings into the collective's
  message size (the one place where that is computed). Above ``INTERPRETED_DEVICES`` synthesis
  devices the rows come from the interpreter's row abstraction (``apply_rows``): the same volumes.

Scale (results unchanged): a step's time is memoized per (instruction, message sizes); channel orders
per group shape (local members per node); a group's stand-alone time per translate by
``Topology.period``; the fluid model runs on sparse (flow, resource) entries.
"""

from __future__ import annotations

from typing import Literal

from p2smt.cost.channels import ALGOS, Channel, EdgeKey, group_channels
from p2smt.cost.fluid import fluid_finish_times
from p2smt.cost.program import ProgramCost, program_time, programs_seconds
from p2smt.cost.step import (
    Choice,
    bus_bandwidth_gbps,
    collective_time,
    flat_collective_choice,
    flat_collective_time,
    plan_time,
    plateau_latency,
    step_choices,
    step_time,
)
from p2smt.cost.volumes import (
    FLOAT32_BYTES,
    INTERPRETED_DEVICES,
    _held_fractions,
    _held_fractions_by_rows,
    apply_rows,
    default_bytes_per_device,
    held_fractions,
    held_fractions_of_programs,
    message_bytes,
    program_volumes,
)

Algo = Literal["ring", "tree", "nvls", "auto"]

__all__ = [
    "ALGOS",
    "FLOAT32_BYTES",
    "INTERPRETED_DEVICES",
    "Algo",
    "Channel",
    "Choice",
    "EdgeKey",
    "ProgramCost",
    "_held_fractions",
    "_held_fractions_by_rows",
    "apply_rows",
    "bus_bandwidth_gbps",
    "collective_time",
    "default_bytes_per_device",
    "flat_collective_choice",
    "flat_collective_time",
    "fluid_finish_times",
    "group_channels",
    "held_fractions",
    "held_fractions_of_programs",
    "message_bytes",
    "plan_time",
    "plateau_latency",
    "program_time",
    "program_volumes",
    "programs_seconds",
    "step_choices",
    "step_time",
]
