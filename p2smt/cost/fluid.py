"""Contention: channels as fluid flows sharing link bandwidth by max-min fairness (progressive filling)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from p2smt.cost.channels import Channel, EdgeKey
from p2smt.errors import P2Error
from p2smt.model.topology import Topology


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


def _flow_times(topo: Topology, channels: Sequence[tuple[Channel, ...]], sizes: Sequence[float]):
    """(channel, fluid finish time) of every channel of every group, all groups sharing the links.

    The entries are listed flow by flow in each channel's load order (as ``fluid_finish_times`` lists
    them), so the sums per resource, and the finish times, are the same floats; only the resources'
    numbering differs (edge ids ascending, then the named ones in order of appearance)."""
    flows = [ch for chans in channels for ch in chans]
    if not flows:
        return []
    parts = [ch.edges for ch in flows]
    lengths = np.array([len(keys) for keys, _, _ in parts], dtype=np.intp)
    keys = np.concatenate([k for k, _, _ in parts])
    edges = len(topo.capacities)
    named: dict[EdgeKey, int] = {}
    if any(n for _, _, n in parts):
        start = 0
        for (_, _, n), length in zip(parts, lengths.tolist()):
            for key, i in n:
                keys[start + i] = edges + named.setdefault(key, len(named))
            start += length
    used, col_of = np.unique(keys, return_inverse=True)
    capacities = topo.memo(("capacity-array",), lambda: np.array(topo.capacities, dtype=float))
    extra = np.array([_capacity(topo, key) for key in named], dtype=float)
    cap = np.concatenate([capacities, extra])[used]
    scale = np.repeat(np.repeat(np.asarray(sizes, dtype=float), [len(c) for c in channels]), lengths)
    amount = np.concatenate([a for _, a, _ in parts]) * scale
    flow_of = np.repeat(np.arange(len(flows), dtype=np.intp), lengths)
    finish = _fill(len(flows), flow_of, col_of.astype(np.intp, copy=False), amount, cap)
    return list(zip(flows, finish.tolist()))
