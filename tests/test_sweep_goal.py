"""``sweep --goal/--shard-axes``: each point of a grid sweep under a sharded goal is what ``synth``/``rank --goal``
give on that point; refusals are synth's, in one line; the AllReduce sweep's tasks and keys are unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from p2smt.errors import P2Error
from p2smt.model.goal import Goal, GoalKind
from p2smt.runs.gridfile import load_grid, with_goal
from p2smt.runs.gridsweep import sweep
from p2smt.runs.store import read_rows
from p2smt.runs.tasks import Task, expand, task_key

GRID = """
systems: [fig2-16gpu]
axes: [[4, 4]]
reductions: [[0], [1]]
algorithms: [ring, tree]
max_len: 3
timeout_s: 120
"""
GOALS = ("reduce-scatter", "all-gather")


def refused(rc: int, out: str, err: str, fragment: str) -> bool:
    lines = err.splitlines()
    return rc == 2 and out == "" and len(lines) == 1 and lines[0].startswith("p2smt: error: ") and fragment in lines[0]


@pytest.fixture(scope="module")
def grid_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("grid") / "grid.yaml"
    path.write_text(GRID)
    return path


@pytest.fixture(scope="module")
def swept(grid_file, tmp_path_factory) -> tuple[Path, list[dict]]:
    """Both sharded goals swept into one file through the CLI, then the reduce-scatter sweep again: (file,
    the three summaries)."""
    out = tmp_path_factory.mktemp("out") / "sweep.jsonl"
    summaries = [cli_json("sweep", "--grid", str(grid_file), "--out", str(out), "--goal", goal, "--workers", "2")
                 for goal in (*GOALS, GOALS[0])]
    return out, summaries


def cli_json(*argv: str) -> dict:
    import contextlib
    import io

    from p2smt.cli.main import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main([*argv, "--json"]) == 0
    return json.loads(buf.getvalue())


def point(task: dict) -> list[str]:
    """The synth/rank options of a sweep line's task."""
    goal = task["goal"]
    return ["--system", task["system"], "--axes", ",".join(map(str, task["axes"])),
            "--reduce", ",".join(map(str, task["reduce"])), "--max-len", str(task["max_len"]),
            "--engine", task["engine"], "--goal", goal["kind"], "--shard-axes", ",".join(map(str, goal["shard_axes"]))]


def test_every_point_is_what_synth_and_rank_give_with_the_goal(swept):
    rows = read_rows(swept[0])
    assert sorted((r["task"]["goal"]["kind"], tuple(r["task"]["reduce"]), r["task"]["algo"]) for r in rows) == sorted(
        (g, (a,), algo) for g in GOALS for a in (0, 1) for algo in ("ring", "tree"))
    for r in rows:
        assert r["status"] == "ok" and r["certified"] is True
        args = point(r["task"])
        synth = cli_json("synth", *args)
        rank = cli_json("rank", *args, "--algo", r["task"]["algo"])
        assert synth["goal"] == rank["goal"] == r["task"]["goal"]
        assert [m["programs"] for m in r["per_matrix"]] == [len(m["programs"]) for m in synth["matrices"]]
        assert r["programs"] == sum(len(m["programs"]) for m in synth["matrices"]) > 0
        for m, ranked in zip(r["per_matrix"], rank["matrices"], strict=True):
            assert m["matrix"] == ranked["matrix"]
            assert sorted(p["program"] for p in ranked["programs"]) == sorted(
                next(s["programs"] for s in synth["matrices"] if s["matrix"] == m["matrix"]))
            top = ranked["programs"][0]
            assert (m["best_program"], m["best_seconds"]) == (top["program"], top["seconds"])
            assert (m["flat_collective"], m["flat_seconds"]) == (ranked["flat_collective"], ranked["flat_seconds"])
            assert m["faster_than_flat"] == sum(p["seconds"] < ranked["flat_seconds"] * (1 - 1e-3)
                                                for p in ranked["programs"])
        assert r["best"]["program"] == rank["best"]["program"] and r["best"]["matrix"] == rank["best"]["matrix"]
        assert r["best"]["seconds"] == rank["best"]["seconds"]


def test_the_goal_is_part_of_each_key_so_a_resumed_sweep_repeats_nothing(swept, grid_file):
    out, summaries = swept
    rows = read_rows(out)
    assert len(rows) == len({r["key"] for r in rows}) == 8
    assert [(s["submitted"], s["skipped_existing"]) for s in summaries] == [(4, 0), (4, 0), (0, 4)]
    assert [s["goal"] for s in summaries] == [{"kind": g, "shard_axes": None} for g in (*GOALS, GOALS[0])]
    for goal in GOALS:
        keys = [task_key(t) for t in expand(with_goal(load_grid(grid_file), goal))]
        assert sorted(keys) == sorted(r["key"] for r in rows if r["task"]["goal"]["kind"] == goal)
        assert [t.goal for t in expand(with_goal(load_grid(grid_file), goal))] == [
            Goal.of(goal, None, (a,)) for a in (0, 0, 1, 1)]


def test_the_summary_names_the_goal_and_an_allreduce_sweep_is_unchanged(grid_file, run_cli, tmp_path):
    grid = load_grid(grid_file)
    plain = expand(grid)
    assert [t.to_json() for t in plain] == [t.to_json() for t in expand(with_goal(grid, "allreduce"))]
    assert all("goal" not in t.to_json() for t in plain)
    assert plain[0].to_json() == {  # the fields, hence the key, of a task written before sweeps took a goal
        "system": "fig2-16gpu", "nodes": plain[0].nodes, "axes": [4, 4], "reduce": [0], "algo": "ring",
        "bytes": "default", "engine": "certified", "encoding": None, "max_len": 3, "timeout_s": 120.0,
        "proof_budget": plain[0].proof_budget}
    assert Task.from_json(expand(with_goal(grid, "all-gather"))[0].to_json()).goal == Goal(GoalKind.ALL_GATHER, (0,))
    skipped = tmp_path / "skip.yaml"
    skipped.write_text(GRID.replace("[[4, 4]]", "[[4, 8]]"))  # 32 devices: every task skipped, none run
    rc, out, _ = run_cli("sweep", "--grid", skipped, "--out", tmp_path / "s.jsonl", "--json", "--goal",
                         "all-gather")
    assert rc == 0 and json.loads(out)["goal"] == {"kind": "all-gather", "shard_axes": None}
    rc, out, _ = run_cli("sweep", "--grid", skipped, "--out", tmp_path / "a.jsonl", "--json")
    assert rc == 0 and "goal" not in json.loads(out)
    assert all("goal" not in r["task"] for r in read_rows(tmp_path / "a.jsonl"))


@pytest.mark.parametrize(("extra", "in_grid"), [
    (["--goal", "reduce-scatter", "--engine", "symmetric"], ""),
    (["--goal", "all-gather", "--engine", "z3", "--encoding", "representative"],
     "engine: z3\nencoding: representative\n"),  # a grid's encoding: no sweep option
    (["--goal", "all-gather", "--shard-axes", "1"], ""),
    (["--shard-axes", "0"], ""),
    (["--goal", "reduce-scatter", "--shard-axes", "0,0"], ""),
])
def test_refused_combinations_are_synths_one_line_before_anything_runs(grid_file, run_cli, tmp_path, extra,
                                                                        in_grid):
    """The sweep refuses what synth refuses on the grid's first point, with synth's line, and writes nothing."""
    rc, stdout, err = run_cli("synth", "--system", "fig2-16gpu", "--axes", "4,4", "--reduce", "0", *extra)
    assert refused(rc, stdout, err, "")
    if in_grid:
        grid_file = tmp_path / "grid.yaml"
        grid_file.write_text(GRID + in_grid)
        extra = extra[:2]
    out = tmp_path / "never.jsonl"
    assert refused(*run_cli("sweep", "--grid", grid_file, "--out", out, *extra), err.strip())
    assert not out.exists()


def test_an_unknown_goal_is_refused(grid_file, run_cli, tmp_path):
    assert refused(*run_cli("sweep", "--grid", grid_file, "--out", tmp_path / "o", "--goal", "gather"),
                   "argument --goal: unknown goal 'gather'; choose from allreduce, reduce-scatter, all-gather")


def test_a_point_synth_refuses_is_an_error_line_with_synths_words(run_cli, tmp_path):
    """Hierarchy (d) over two reduction axes split over one level: synth refuses the request (give --hierarchy c,
    which a grid does not take), so the sweep writes that task as an error line with the same words."""
    path = tmp_path / "two.yaml"
    path.write_text(GRID.replace("[[0], [1]]", "[[0, 1]]").replace("[ring, tree]", "[ring]"))
    rc, _, err = run_cli("synth", "--system", "fig2-16gpu", "--axes", "4,4", "--reduce", "0,1", "--max-len", "3",
                         "--goal", "reduce-scatter", "--shard-axes", "1")
    assert rc == 2
    rc, _, _ = run_cli("sweep", "--grid", path, "--out", tmp_path / "o.jsonl", "--goal", "reduce-scatter",
                       "--shard-axes", "1", "--json")
    (line,) = read_rows(tmp_path / "o.jsonl")
    assert rc == 1 and line["status"] == "error" and "p2smt: error: " + line["error"] == err.strip()
    assert line["task"]["goal"] == {"kind": "reduce-scatter", "shard_axes": [1]}


def test_paper_sweeps_refuse_a_goal(run_cli, tmp_path, grid_file):
    """P²'s grid and its headline numbers are AllReduce speedups: the option and the API refuse a goal."""
    from p2smt.runs.paper import paper_sweep

    assert refused(*run_cli("sweep", "--paper", "--goal", "reduce-scatter", "--out", tmp_path / "p"), "--goal")
    with pytest.raises(P2Error, match="not the all-gather goal"):
        paper_sweep(tmp_path / "p", grid=with_goal(load_grid(grid_file), "all-gather"))
    assert not (tmp_path / "p").exists()


def test_the_api_mirrors_the_options(grid_file, tmp_path):
    with pytest.raises(P2Error, match="representative encoding does not take the all-gather goal"):
        sweep(load_grid(grid_file).model_copy(update={"engine": "z3", "encoding": "representative"}),
              tmp_path / "o.jsonl", goal=GoalKind.ALL_GATHER)
    with pytest.raises(P2Error, match="--shard-axes"):
        sweep(grid_file, tmp_path / "o.jsonl", goal="reduce-scatter", shard_axes=[-1])
    assert not (tmp_path / "o.jsonl").exists()


def test_a_grid_file_names_its_goal_and_the_option_replaces_it(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(GRID + "goal: all-gather\n")
    grid = load_grid(path)
    assert {t.goal.kind for t in expand(grid)} == {GoalKind.ALL_GATHER}
    assert {t.goal.kind for t in expand(with_goal(grid, "reduce-scatter"))} == {GoalKind.REDUCE_SCATTER}
    path.write_text(GRID.replace("[[0], [1]]", "[[0, 1]]") + "goal: reduce-scatter\nshard_axes: [1]\n")
    assert next(t.goal for t in expand(load_grid(path))) == Goal(GoalKind.REDUCE_SCATTER, (1,))
    path.write_text(GRID + "goal: reduce-scatter\nshard_axes: [1]\n")
    with pytest.raises(P2Error, match=r"g\.yaml: shard axis 1 is not a reduction axis \(\[0\]\)"):
        load_grid(path)
    path.write_text(GRID + "goal: scatter\n")
    with pytest.raises(P2Error, match=r"field goal: Value error, unknown goal 'scatter'; choose from allreduce, reduce-scatter, all-gather"):
        load_grid(path)
