"""A PNG picture of a system's physical topology: one column block per node, boxes layered by kind,
the network (one switch, or leaves and spines) spread above all nodes."""

from __future__ import annotations

import re
from pathlib import Path

from p2smt.errors import P2Error
from p2smt.model.system import System
from p2smt.model.topology import build_topology

LAYER = {"spine": 6.0, "leaf": 5.0, "network": 5.0, "nic": 4.0, "cpu": 3.0, "pcie_switch": 2.0, "nvswitch": 1.0,
         "gpu": 0.0}
FABRIC = ("network", "leaf", "spine")
LABELLED_NODES = 16
"""Above this many nodes vertices are drawn without labels (they would overlap)."""
COLOR = {"nvlink": "#2ca02c", "nvswitch": "#2ca02c", "pcie": "#1f77b4", "smp": "#9467bd", "nic": "#d62728"}
NODE_COLOR = {"gpu": "#76b900", "nvswitch": "#bcbd22", "pcie_switch": "#aec7e8", "cpu": "#c5b0d5",
              "nic": "#ff9896", "network": "#d62728", "leaf": "#e377c2", "spine": "#8c564b"}


def _natural(name: str) -> tuple:
    """Sort key reading digit runs as numbers (su2.leaf10 after su2.leaf9)."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def _positions(topo) -> dict[str, tuple[float, float]]:
    """Deterministic layout: GPUs in a row per node, other boxes spread above them by kind, the
    network's switches spread over the whole width."""
    g = topo.graph
    width = max(topo.gpus_per_node, 4)
    pos: dict[str, tuple[float, float]] = {}
    per_layer: dict[tuple[object, str], list[str]] = {}
    for v in sorted(g.nodes):
        data = g.nodes[v]
        if data["kind"] in FABRIC:
            continue
        node = data.get("node")
        per_layer.setdefault((node if node is not None else -1, data["kind"]), []).append(v)
    for (node, kind), names in per_layer.items():
        x0 = (node if isinstance(node, int) and node >= 0 else 0) * (width + 2)
        names = sorted(names, key=lambda n: (len(n), n))
        for i, v in enumerate(names):
            x = x0 + (i + 0.5) * width / len(names)
            pos[v] = (x, LAYER.get(kind, 2.5) + (0.35 if kind == "gpu" and len(names) > 8 and i % 2 else 0.0))
    xs = [x for x, _ in pos.values()] or [0.0]
    lo, hi = min(xs), max(xs)
    for kind in FABRIC:
        names = sorted((v for v in g.nodes if g.nodes[v]["kind"] == kind), key=_natural)
        for i, v in enumerate(names):
            pos[v] = (lo + (hi - lo) * (i + 0.5) / len(names), LAYER[kind])
    for v in g.nodes:
        pos.setdefault(v, (0.0, 2.5))
    return pos


def _gpu_pair(g, edge) -> bool:
    return g.nodes[edge[0]]["kind"] == "gpu" and g.nodes[edge[1]]["kind"] == "gpu"


def _width(data) -> float:
    return 0.6 + 2.4 * min(data["capacity"] / 300e9, 1.0)


def draw_topology(system: System, path: str | Path) -> Path:
    """Write a PNG of ``system``'s physical graph to ``path`` (links coloured by kind, width by bandwidth)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx
    from matplotlib.patches import PathPatch
    from matplotlib.path import Path as MplPath

    out = Path(path)
    if not out.name.lower().endswith(".png"):
        raise P2Error(f"the topology picture is a PNG; got {str(out)!r}")
    topo = build_topology(system)
    g = topo.graph.to_undirected(as_view=False)
    pos = _positions(topo)
    fig_w = min(4 + 1.6 * topo.num_nodes * max(topo.gpus_per_node, 4) / 4, 40)
    fig, ax = plt.subplots(figsize=(fig_w, 6))
    edges = sorted(g.edges(data=True), key=lambda e: (e[0], e[1]))
    straight = [e for e in edges if not _gpu_pair(g, e)]
    nx.draw_networkx_edges(g, pos, edgelist=[(u, v) for u, v, _ in straight], width=[_width(d) for *_, d in straight],
                           edge_color=[COLOR.get(d["kind"], "#7f7f7f") for *_, d in straight], alpha=0.7, ax=ax)
    for u, v, d in edges:
        if _gpu_pair(g, (u, v, d)):
            (x1, y1), (x2, y2) = pos[u], pos[v]
            depth = 0.3 + 0.35 * abs(x2 - x1)
            curve = MplPath([(x1, y1), ((x1 + x2) / 2, min(y1, y2) - depth), (x2, y2)],
                            [MplPath.MOVETO, MplPath.CURVE3, MplPath.CURVE3])
            ax.add_patch(PathPatch(curve, fill=False, lw=_width(d), color=COLOR.get(d["kind"], "#7f7f7f"),
                                   alpha=0.7))
    nodes = sorted(g.nodes)
    nx.draw_networkx_nodes(g, pos, nodelist=nodes, node_size=[220 if g.nodes[v]["kind"] == "gpu" else 320
                                                               for v in nodes],
                           node_color=[NODE_COLOR.get(g.nodes[v]["kind"], "#cccccc") for v in nodes],
                           edgecolors="#333333", linewidths=0.5, ax=ax)
    if topo.num_nodes <= LABELLED_NODES:
        labels = {v: g.nodes[v].get("label", v) for v in nodes}
        nx.draw_networkx_labels(g, pos, labels=labels, font_size=6, ax=ax)
    kinds = sorted({d["kind"] for _, _, d in edges})
    for kind in kinds:
        best = max(d["capacity"] for _, _, d in edges if d["kind"] == kind) / 1e9
        ax.plot([], [], color=COLOR.get(kind, "#7f7f7f"), label=f"{kind} (up to {best:.0f} GB/s)")
    ax.legend(loc="upper left", fontsize=7, frameon=False)
    fabric = topo.fabric
    network = "" if fabric is None else (
        f", {fabric.units} x {fabric.leaves_per_unit} leaves, {fabric.spines} spines")
    ax.set_title(f"{system.name}: {topo.num_nodes} node(s) x {topo.gpus_per_node} GPUs{network}"
                 + ("  (derived from interconnects)" if topo.derived else ""), fontsize=10)
    ax.set_axis_off()
    ax.autoscale()
    ax.set_ylim(-3.0, max(LAYER[g.nodes[v]["kind"]] for v in nodes if g.nodes[v]["kind"] in LAYER) + 0.5)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out
