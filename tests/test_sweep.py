"""The paper sweep: rows per unit, aggregates beside P²'s numbers, files and plots (on a tiny grid)."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass

import pytest

from p2smt.model.system import load_system
from p2smt.runs.paper import P2_HEADLINE, SweepRow, _algorithms, aggregate, paper_sweep, render_sweep


@dataclass(frozen=True)
class Config:
    system: str
    axes: tuple[int, ...]
    reduction_axes: tuple[int, ...]


TINY = [Config("a100-2x16", (2, 16), (1,)), Config("v100-2x8", (4, 4), (0,)), Config("v100-4x8", (2, 2, 8), (2,))]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    return out, paper_sweep(out, configs=TINY)


def test_rows_cover_every_unit(swept):
    _, summary = swept
    rows = summary["rows"]
    # a100-2x16 [2,16]: 2 matrices x ring/tree; v100-2x8 [4,4]: 2 x 2; v100-4x8 3-axis: Ring only, 4 matrices.
    assert len(rows) == 2 * 2 + 2 * 2 + 4 * 1
    assert {r["algo"] for r in rows if r["system"] == "v100-4x8"} == {"ring"}
    for r in rows:
        assert r["programs"] >= 1 and r["best_seconds"] > 0
        assert r["speedup"] == pytest.approx(r["allreduce_seconds"] / r["best_seconds"])
        assert 0 <= r["faster_than_allreduce"] <= r["programs"]
        assert (r["faster_than_allreduce"] > 0) == (r["speedup"] > 1 + 1e-9)


def test_files_are_written(swept):
    out, summary = swept
    with open(out / "sweep.csv") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == len(summary["rows"]) and set(table[0]) == set(SweepRow.__dataclass_fields__)
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["aggregate"]["units"] == len(summary["rows"]) and doc["p2"] == P2_HEADLINE
    assert len(summary["files"]["plots"]) == len(TINY)
    for name in summary["files"]["plots"]:
        assert (out / name).read_bytes()[:4] == b"\x89PNG"


def test_aggregate_matches_the_rows(swept):
    _, summary = swept
    agg, rows = summary["aggregate"], summary["rows"]
    beaten = [r for r in rows if r["best_seconds"] < r["allreduce_seconds"] * (1 - 1e-9)]
    assert agg["units_beaten"] == len(beaten)
    assert agg["share_beating_allreduce"] == pytest.approx(len(beaten) / len(rows))
    assert agg["max_speedup"] == pytest.approx(max(r["speedup"] for r in beaten))
    assert agg["max_allreduce_spread"] >= 1


def test_aggregate_by_hand():
    def row(matrix, ar, best, algo="ring"):
        return SweepRow("s", "[4,4]", "[0]", matrix, algo, 0.1, 3, int(best < ar), ar, "p", best, ar / best)

    agg = aggregate([row("a", 2.0, 1.0), row("b", 10.0, 10.0), row("c", 3.0, 2.0), row("a", 4.0, 4.0, "tree")])
    assert agg["units"] == 4 and agg["units_beaten"] == 2 and agg["share_beating_allreduce"] == 0.5
    assert agg["mean_speedup"] == pytest.approx((2.0 + 1.5) / 2) and agg["max_speedup"] == 2.0
    assert agg["max_allreduce_spread"] == pytest.approx(5.0)
    assert math.isnan(aggregate([row("a", 1.0, 1.0)])["mean_speedup"])


def test_three_axis_v100_configurations_run_ring_only():
    assert _algorithms(Config("v100-4x8", (8, 2, 2), (0,)), load_system("v100-4x8")) == ("ring",)
    assert _algorithms(Config("a100-4x16", (8, 2, 4), (0,)), load_system("a100-4x16")) == ("ring", "tree")


def test_render(swept):
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(render_sweep(swept[1]))
    assert "448.5x" in console.export_text()
