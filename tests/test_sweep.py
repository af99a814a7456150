"""The paper sweep: rows per unit, aggregates beside P²'s numbers, files and plots (on a tiny grid)."""

from __future__ import annotations

import csv
import json
import math

import pytest

from p2smt.runs.grid import paper_grid
from p2smt.runs.gridfile import parse_grid
from p2smt.runs.paper import P2_HEADLINE, SweepRow, aggregate, paper_sweep, render_sweep

TINY = parse_grid({
    "algorithms": ["ring", "tree"], "max_len": 5,
    "grids": [
        {"systems": ["a100-2x16"], "axes": [[2, 16]], "reductions": [[1]]},
        {"systems": ["v100-2x8"], "axes": [[4, 4]], "reductions": [[0]]},
        {"systems": ["v100-4x8"], "axes": [[2, 2, 8]], "reductions": [[2]], "algorithms": ["ring"]},
    ],
}, "tiny")


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "out"
    done: list[str] = []
    summary = paper_sweep(out, grid=TINY, report=done.append)
    return out, summary | {"reported": done}


def test_each_request_is_reported_once_as_it_finishes(swept):
    """The progress hook behind ``sweep --paper``'s display: one report per request, in grid order."""
    _, summary = swept
    assert summary["reported"] == ["a100-2x16 axes [2, 16] reduce [1]", "v100-2x8 axes [4, 4] reduce [0]",
                                   "v100-4x8 axes [2, 2, 8] reduce [2]"]


def test_rows_cover_every_unit(swept):
    _, summary = swept
    rows = summary["rows"]
    # a100-2x16 [2,16]: 2 matrices x ring/tree; v100-2x8 [4,4]: 2 x 2; v100-4x8 3-axis: Ring only, 4 matrices.
    assert len(rows) == 2 * 2 + 2 * 2 + 4 * 1
    assert {r["algo"] for r in rows if r["system"] == "v100-4x8"} == {"ring"}
    for r in rows:
        assert r["programs"] >= 1 and r["best_seconds"] > 0
        assert r["certified"] == "yes"  # a grid that names no engine is certified by Z3
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
    assert len(summary["files"]["plots"]) == 3
    assert sorted(p.name for p in out.parent.iterdir()) == ["out"]  # no partial folder left beside it
    for name in summary["files"]["plots"]:
        assert (out / name).read_bytes()[:4] == b"\x89PNG"


def test_aggregate_matches_the_rows(swept):
    _, summary = swept
    agg, rows = summary["aggregate"], summary["rows"]
    beaten = [r for r in rows if r["best_seconds"] < r["allreduce_seconds"] * (1 - 1e-9)]
    assert agg["units_beaten"] == len(beaten) and agg["units_certified"] == len(rows)
    assert agg["share_beating_allreduce"] == pytest.approx(len(beaten) / len(rows))
    assert agg["max_speedup"] == pytest.approx(max(r["speedup"] for r in beaten))
    assert agg["max_allreduce_spread"] >= 1


def test_aggregate_by_hand():
    def row(matrix, ar, best, algo="ring"):
        return SweepRow("s", "[4,4]", "[0]", matrix, algo, 0.1, 3, "yes" if matrix != "c" else "no", int(best < ar),
                        ar, "p", best, ar / best)

    agg = aggregate([row("a", 2.0, 1.0), row("b", 10.0, 10.0), row("c", 3.0, 2.0), row("a", 4.0, 4.0, "tree")])
    assert agg["units"] == 4 and agg["units_beaten"] == 2 and agg["share_beating_allreduce"] == 0.5
    assert agg["units_certified"] == 3
    assert agg["mean_speedup"] == pytest.approx((2.0 + 1.5) / 2) and agg["max_speedup"] == 2.0
    assert agg["max_allreduce_spread"] == pytest.approx(5.0)
    assert math.isnan(aggregate([row("a", 1.0, 1.0)])["mean_speedup"])
    # a program within 0.1 % of AllReduce ties it (a flat RS; AG over AllReduce's ring is that AllReduce)
    assert aggregate([row("a", 8.590061, 8.590044), row("b", 1.0, 0.998)])["units_beaten"] == 1


def test_the_shipped_paper_grid_is_p2s_grid():
    configs = paper_grid()
    assert len(configs) == 42 and configs[0].label == "a100-2x16 axes [32] reduce [0]"
    three_axis_v100 = [c for c in configs if c.system == "v100-4x8" and len(c.axes) == 3]
    assert three_axis_v100 and all(c.algorithms == ("ring",) for c in three_axis_v100)
    assert all(c.algorithms == ("ring", "tree") for c in configs if c not in three_axis_v100)
    assert {c.reduction_axes for c in configs if len(c.axes) == 3} == {(0, 2)}


def test_a_failed_sweep_leaves_no_folder_and_keeps_an_existing_one(tmp_path, monkeypatch):
    from p2smt.runs import paper

    def boom(tasks):
        raise RuntimeError("synthesis failed")

    monkeypatch.setattr(paper, "sweep_request", boom)
    with pytest.raises(RuntimeError):
        paper_sweep(tmp_path / "new", grid=TINY)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "sweep.csv").write_text("earlier")
    with pytest.raises(RuntimeError):
        paper_sweep(tmp_path / "old", grid=TINY)
    assert [p.name for p in tmp_path.iterdir()] == ["old"]
    assert (tmp_path / "old" / "sweep.csv").read_text() == "earlier"


def test_render(swept):
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(render_sweep(swept[1]))
    assert "448.5x" in console.export_text()
