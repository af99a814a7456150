"""Grid files, task expansion and keys, the task runner (incl. the hard timeout) and the resumable driver."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from p2smt import __version__
from p2smt.cost.rank import rank_result
from p2smt.errors import P2Error
from p2smt.model.request import Request
from p2smt.model.system import load_system
from p2smt.runs.executors import run_task
from p2smt.runs.gridfile import Grid, load_grid, shipped_grids
from p2smt.runs.gridsweep import sweep
from p2smt.runs.store import ResultStore
from p2smt.runs.store import read_rows as read_results
from p2smt.runs.tasks import Task, evaluate, expand, task_key
from p2smt.synth.config import EngineConfig
from p2smt.synth.driver import synthesize

TINY = """
systems: [a100-2x16, v100-2x8]
axes: [[2, auto], [4, 8]]
reductions: [[0], [1]]
algorithms: [ring, tree]
engine: enumerative
max_len: 3
timeout_s: 60
"""


def write(tmp_path: Path, text: str, name: str = "grid.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def keys_of(path: Path) -> list[str]:
    return [r["key"] for r in read_results(path)]


def test_expansion_order_is_documented_nesting_and_deterministic(tmp_path):
    grid = load_grid(write(tmp_path, """
systems: [a100-2x16, dgx-a100]
nodes: [2, 4]
axes: [[auto, 8], [4, 4]]
reductions: [[1, 0], [1]]
algorithms: [ring, tree]
bytes: [default, 1.0e9, 5]
max_len: 3
"""))
    tasks = expand(grid)
    assert [task_key(t) for t in tasks] == [task_key(t) for t in expand(load_grid(tmp_path / "grid.yaml"))]
    assert len(tasks) == 2 * 2 * 2 * 2 * 2 * 3
    first = tasks[:7]
    assert [(t.system, t.nodes, t.axes, t.reduce, t.algo, t.bytes) for t in first] == [
        ("a100-2x16", 2, (4, 8), (0, 1), "ring", "default"),
        ("a100-2x16", 2, (4, 8), (0, 1), "ring", 1e9),
        ("a100-2x16", 2, (4, 8), (0, 1), "ring", 5.0),
        ("a100-2x16", 2, (4, 8), (0, 1), "tree", "default"),
        ("a100-2x16", 2, (4, 8), (0, 1), "tree", 1e9),
        ("a100-2x16", 2, (4, 8), (0, 1), "tree", 5.0),
        ("a100-2x16", 2, (4, 8), (1,), "ring", "default"),
    ]
    assert [t.nodes for t in tasks[::24]] == [2, 4, 2, 4]
    assert tasks[24].axes == (8, 8)  # "auto" is the remaining devices: 64 / 8 on 4 nodes
    skipped = {(t.system, t.nodes, t.axes) for t in tasks if t.skip}
    assert skipped == {("a100-2x16", 2, (4, 4)), ("a100-2x16", 4, (4, 4)), ("dgx-a100", 4, (4, 4))}


def test_task_key_is_sha256_of_canonical_json_and_version_and_stable_across_processes(tmp_path):
    task = Task("a100-2x16", 2, (2, 16), (0,), "ring", "default", "enumerative", None, 3, 60.0)
    canonical = json.dumps({"p2smt": __version__, "task": task.to_json()}, sort_keys=True,
                           separators=(",", ":"))
    assert task_key(task) == hashlib.sha256(canonical.encode()).hexdigest()
    code = ("from p2smt.runs.tasks import Task, task_key; "
            "print(task_key(Task('a100-2x16', 2, (2, 16), (0,), 'ring', 'default', 'enumerative', None, 3, "
            "60.0)))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert other.stdout.strip() == task_key(task)
    tree = Task("a100-2x16", 2, (2, 16), (0,), "tree", "default", "enumerative", None, 3, 60.0)
    assert task_key(tree) != task_key(task)
    assert task_key(Task("a100-2x16", 2, (2, 16), (0,), "ring", "default", "enumerative", None, 3, 60.0,
                         skip="not part of the key")) == task_key(task)


def test_equivalent_grid_spellings_give_the_same_keys(tmp_path):
    a = expand(load_grid(write(tmp_path, """
systems: [a100-2x16]
axes: [[2, auto]]
reductions: [[1, 0]]
bytes: [1.0e9]
""", "a.yaml")))
    b = expand(load_grid(write(tmp_path, """
systems: [a100-2x16]
nodes: [2]
axes: [[2, 16], [auto, 16]]
reductions: [[0, 1]]
algorithms: [ring]
bytes: [1000000000]
""", "b.yaml")))
    assert [task_key(t) for t in a] == [task_key(t) for t in b]
    assert len(b) == 1  # the duplicate (auto resolves to the same axes) keeps its first occurrence


def test_non_factoring_axes_and_out_of_range_reductions_are_skipped_rows(tmp_path):
    grid = load_grid(write(tmp_path, """
systems: [v100-2x8]
axes: [[4, 8], [3, auto], [16]]
reductions: [[0], [1]]
max_len: 3
"""))
    tasks = expand(grid)
    reasons = {(t.axes, t.reduce): t.skip for t in tasks}
    assert "product 32" in reasons[((4, 8), (0,))] and "16 devices" in reasons[((4, 8), (0,))]
    assert "'auto'" in reasons[((3, "auto"), (1,))]
    assert reasons[((16,), (0,))] is None
    assert "reduction axis 1 is out of range" in reasons[((16,), (1,))]
    out = tmp_path / "out.jsonl"
    summary = sweep(grid, out, workers=1, progress=False)
    assert summary.submitted == 1 and summary.by_status == {"ok": 1, "skipped": 5}
    rows = read_results(out)
    assert sorted(r["status"] for r in rows) == ["ok"] + ["skipped"] * 5
    assert all(r["reason"] for r in rows if r["status"] == "skipped")
    # a grid file that names no engine is certified: the line and the summary say Z3 certified the sets
    (done,) = [r for r in rows if r["status"] == "ok"]
    assert grid.engine == "certified" and done["task"]["engine"] == "certified"
    assert done["certified"] is True and all(m["certified"] is True for m in done["per_matrix"])
    assert summary.certified == 1 and summary.to_json()["certified"] == 1


def test_a_grid_files_proof_budget_reaches_every_task(tmp_path, monkeypatch):
    """``proof_budget`` in a grid file is every task's (part of its key); spent, the line says not certified."""
    from p2smt.smt import budget

    grid = load_grid(write(tmp_path, "systems: [a100-2x16]\naxes: [[2, 16]]\nreductions: [[1]]\nproof_budget: 1\n"))
    (task,) = [t for t in expand(grid) if t.algo == "ring"]
    assert grid.proof_budget == 1 and task.proof_budget == 1 and task.engine_config().proof_budget == 1
    default = Task.from_json(task.to_json() | {"proof_budget": budget.DEFAULT_PROOF_BUDGET})
    assert task_key(default) != task_key(task) and Task.from_json(task.to_json()) == task
    monkeypatch.setattr(budget, "UNITS", 10_000)  # so that one budget unit is spent by this small problem
    line = evaluate(task)
    assert line["status"] == "ok" and line["certified"] is False
    assert [m["certified"] for m in line["per_matrix"]] == [False, False]
    with pytest.raises(P2Error, match="proof_budget"):
        load_grid(write(tmp_path, "systems: [a100-2x16]\naxes: [[2, 16]]\nreductions: [[1]]\nproof_budget: -1\n"))


def test_engine_and_max_len_replace_the_grid_files(tmp_path, run_cli):
    """``sweep --grid F --engine E --max-len N`` runs F's tasks with E and N (part of each key); bad values
    are one-line errors; the per-request options of synth are not offered."""
    grid_path = write(tmp_path, TINY)
    out = tmp_path / "out.jsonl"
    rc, text, _ = run_cli("sweep", "--grid", grid_path, "--out", out, "--engine", "auto", "--max-len", "2", "--json")
    summary = json.loads(text)
    assert rc == 0 and summary["certified"] == 0
    rows = read_results(out)
    assert {(r["task"]["engine"], r["task"]["max_len"]) for r in rows} == {("auto", 2)}
    assert all("certified" not in r or r["certified"] is None for r in rows)
    assert not set(keys_of(out)) & {task_key(t) for t in expand(load_grid(grid_path))}
    rc, text, _ = run_cli("sweep", "--grid", grid_path, "--out", tmp_path / "b.jsonl", "--engine", "certified",
                          "--max-len", "2", "--proof-budget", "7", "--json")
    assert rc == 0 and {r["task"]["proof_budget"] for r in read_results(tmp_path / "b.jsonl")} == {7}
    for bad, words in ((("--engine", "magic"), "--engine: unknown engine 'magic'; engines: "),
                       (("--max-len", "0"), "--max-len: Input should be greater than or equal to 1"),
                       (("--proof-budget", "-1"), "--proof-budget: Input should be greater than or equal to 0"),
                       (("--proposer", "pieces"), "unrecognized arguments: --proposer pieces")):
        rc, _, err = run_cli("sweep", "--grid", grid_path, "--out", tmp_path / "x.jsonl", *bad)
        assert rc == 2 and words in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "x.jsonl").exists()


def test_local_sweep_writes_one_line_per_task_and_resumes_only_missing_tasks(tmp_path):
    grid_path = write(tmp_path, TINY)
    tasks = expand(load_grid(grid_path))
    keys = [task_key(t) for t in tasks]
    out = tmp_path / "results.jsonl"
    summary = sweep(grid_path, out, workers=2, progress=False)
    assert (summary.total, summary.skipped_existing, summary.finished) == (len(tasks), 0, len(tasks))
    assert summary.submitted == sum(1 for t in tasks if not t.skip)
    assert sorted(keys_of(out)) == sorted(keys)
    rows = {r["key"]: r for r in read_results(out)}
    assert {r["status"] for r in rows.values()} == {"ok", "skipped"}

    again = sweep(grid_path, out, workers=2, progress=False)
    assert (again.skipped_existing, again.submitted, again.finished) == (len(tasks), 0, 0)

    # Simulate a kill: drop three finished lines and leave a half-written one behind.
    lines = out.read_bytes().splitlines(keepends=True)
    dropped = [json.loads(x)["key"] for x in lines[-3:]]
    out.write_bytes(b"".join(lines[:-3]) + lines[-3][:25])
    resumed = sweep(grid_path, out, workers=2, progress=False)
    expected = [k for k in keys if k in dropped and not tasks[keys.index(k)].skip]
    assert list(resumed.submitted_keys) == expected
    assert resumed.skipped_existing == len(tasks) - 3
    assert sorted(keys_of(out)) == sorted(keys)
    assert out.read_bytes().endswith(b"\n")


def test_result_line_matches_the_cost_model(tmp_path):
    task = Task("a100-2x16", 2, (4, 8), (0,), "tree", 1e8, "enumerative", None, 3, 60.0)
    row = run_task(task)
    system = load_system("a100-2x16")
    result = synthesize(Request.for_system(system, (4, 8), (0,)), EngineConfig(max_len=3))
    report = rank_result(system, result, algo="tree", bytes_per_device=1e8)
    assert row["status"] == "ok" and row["key"] == task_key(task) and row["task"] == task.to_json()
    assert row["matrices"] == len(report["matrices"]) == len(row["per_matrix"])
    assert row["best"]["program"] == report["best"]["program"]
    assert row["best"]["seconds"] == pytest.approx(report["best"]["seconds"])
    best_ar = min(m["allreduce_seconds"] for m in report["matrices"])
    assert row["allreduce_seconds"] == pytest.approx(best_ar)
    assert row["speedup"] == pytest.approx(best_ar / report["best"]["seconds"])
    for mine, theirs in zip(row["per_matrix"], report["matrices"], strict=True):
        assert mine["best_seconds"] == pytest.approx(theirs["programs"][0]["seconds"])
    assert row["programs"] == sum(m["programs"] for m in row["per_matrix"])


def test_runaway_task_is_killed_and_reported_as_timeout_then_the_runner_recovers():
    # 16 GPUs spread 2 x 2 x 2 x 2 over the superpod's four levels: minutes of work at length 8
    slow = Task("h100-superpod", 2, (16, 4), (0,), "ring", "default", "enumerative", None, 8, 0.2)
    row = run_task(slow)
    assert row["status"] == "timeout" and "killed after 1.2 s (solver timeout 0.2 s)" in row["error"]
    quick = run_task(Task("v100-2x8", 2, (2, 8), (0,), "ring", "default", "enumerative", None, 3, 60.0))
    assert quick["status"] == "ok"


def test_a_conjectured_result_is_its_own_status_not_unknown():
    """On four levels the symmetric engine proves every program valid but not the set complete: the row
    says so (the superpod with 2 nodes: su 4 > node 2 > pcie 4 > gpu 2, one 64-device reduction group)."""
    row = evaluate(Task("h100-superpod", 2, (64,), (0,), "ring", "default", "symmetric", None, 3, 60.0))
    exact = evaluate(Task("h100-superpod", 2, (64,), (0,), "ring", "default", "pieces", None, 3, 60.0))
    assert row["status"] == "conjectured" and exact["status"] == "ok"
    assert row["programs"] == exact["programs"] > 0


def test_task_failure_is_an_error_line_not_an_exception():
    row = run_task(Task("a100-2x16", 2, (2, 16), (0,), "ring", "default", "z3", "no-such-encoding", 3, 5.0))
    assert row["status"] == "error" and "no-such-encoding" in row["error"]
    assert evaluate(Task("a100-2x16", 2, (4, 4), (0,), "ring", "default", "enumerative", None, 3, 5.0,
                         skip="why"))["status"] == "skipped"


@pytest.mark.parametrize("text, field", [
    ("axes: [[2, 16]]\nreductions: [[0]]\n", "field systems: Field required"),
    ("systems: [a100-2x16, nosuch]\naxes: [[2, 16]]\nreductions: [[0]]\n", "field systems.1: unknown system"),
    ("systems: [a100-2x16]\naxes: [[2, 0]]\nreductions: [[0]]\n", "field axes.0.1"),
    ("systems: [a100-2x16]\naxes: [[auto, auto]]\nreductions: [[0]]\n", "field axes"),
    ("systems: [a100-2x16]\naxes: [[2, 16]]\nreductions: [[0, 0]]\n", "field reductions"),
    ("systems: [a100-2x16]\naxes: [[2, 16]]\nreductions: [[0]]\nalgorithms: [fast]\n", "field algorithms"),
    ("systems: [a100-2x16]\naxes: [[2, 16]]\nreductions: [[0]]\nbytes: [-1]\n", "field bytes.0"),
    ("systems: [a100-2x16]\naxes: [[2, 16]]\nreductions: [[0]]\nengine: magic\n", "field engine"),
    ("systems: [a100-2x16]\naxes: [[2, 16]]\nreductions: [[0]]\nmax_len: 99\n", "field max_len"),
    ("systems: [a100-2x16]\naxes: [[2, 16]]\nreductions: [[0]]\nnodes: [0]\n", "field nodes.0"),
    ("systems: [a100-2x16]\naxes: [[2, 16]]\nreductions: [[0]]\ntimeout_s: 0\n", "field timeout_s"),
    ("systems: [a100-2x16]\naxes: [[2, 16]]\nreductions: [[0]]\ncolour: red\n", "field colour"),
    ("grids:\n  - systems: [a100-2x16]\n    axes: [[2, 0]]\n    reductions: [[0]]\n", "field grids.0.axes.0.1"),
    ("axes: [[2, 16]]\nreductions: [[0]]\ngrids:\n  - systems: [nosuch]\n", "field grids.0.systems.0"),
    ("systems: [a100-2x16]\naxes: [[2, 16]]\nreductions: [[0]]\nencoding: bitvec\n", "only with --engine z3"),
    ("systems: [a100-2x16]\naxes: [[2, 16]]\nreductions: [[0]]\nengine: z3\nencoding: nope\n", "nope"),
    ("- just\n- a list\n", "must be a mapping"),
    ("systems: [a100-2x16\n", "malformed YAML"),
])
def test_bad_grid_files_name_the_file_and_field(tmp_path, text, field):
    path = write(tmp_path, text)
    with pytest.raises(P2Error) as err:
        load_grid(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_missing_grid_file_and_system_files_relative_to_the_grid(tmp_path):
    with pytest.raises(P2Error, match="does not exist"):
        load_grid(tmp_path / "nope.yaml")
    sub = tmp_path / "g"
    sub.mkdir()
    (sub / "mine.yaml").write_text(load_system("v100-2x8").model_dump_json())
    grid = load_grid(write(sub, "systems: [mine.yaml]\naxes: [[16]]\nreductions: [[0]]\n"))
    assert grid.blocks[0].systems == (str((sub / "mine.yaml").resolve()),)
    assert isinstance(grid, Grid) and expand(grid)[0].axes == (16,)


def test_shipped_grids_load():
    assert {"small", "clusters"} <= set(shipped_grids())
    for name in shipped_grids():
        assert expand(load_grid(name))


def test_results_file_is_locked_and_corrupt_lines_are_refused(tmp_path):
    out = tmp_path / "r.jsonl"
    with ResultStore(out), pytest.raises(P2Error, match="another run"):
        ResultStore(out)
    out.write_text('{"key": "a", "task": {}}\nnot json\n{"key": "b", "task": {}}\n')
    with pytest.raises(P2Error, match=":2: not a result line"):
        sweep(write(tmp_path, TINY), out, workers=1, progress=False)


def test_sweep_timeout_override_reports_the_runaway_task_and_finishes_the_rest(tmp_path):
    grid = write(tmp_path, """
systems: [h100-superpod]
nodes: [2]
axes: [[16, 4], [2, 32]]
reductions: [[0], [0, 1, 2]]
max_len: 8
""")
    out = tmp_path / "out.jsonl"
    summary = sweep(grid, out, workers=2, progress=False, timeout_s=0.3)
    rows = {tuple(r["task"]["axes"]) + tuple(r["task"]["reduce"]): r for r in read_results(out)}
    assert rows[(16, 4, 0)]["status"] == "timeout"  # 2 x 2 x 2 x 2 over four levels: minutes of work
    assert rows[(2, 32, 0)]["status"] == "ok"  # one level of 2: 3 programs per placement
    assert rows[(16, 4, 0, 1, 2)]["status"] == rows[(2, 32, 0, 1, 2)]["status"] == "skipped"
    assert all(r["task"]["timeout_s"] == 0.3 for r in rows.values())
    assert summary.finished == 4 and summary.by_status["timeout"] >= 1


def test_infrastructure_failures_are_not_recorded_and_are_retried(tmp_path, monkeypatch):
    import p2smt.runs.executors as gs

    grid_path = write(tmp_path, "systems: [v100-2x8]\naxes: [[2, 8]]\nreductions: [[0], [1]]\nmax_len: 3\n")
    tasks = expand(load_grid(grid_path))
    victim = task_key(tasks[1])
    real = gs.run_task

    def flaky(task):
        if task_key(task) == victim:
            raise ConnectionError("worker vanished")
        return real(task)

    monkeypatch.setattr(gs, "run_task", flaky)
    out = tmp_path / "out.jsonl"
    first = sweep(grid_path, out, workers=1, progress=False)
    assert first.by_status == {"lost": 1, "ok": 1} and first.finished == 1
    assert keys_of(out) == [task_key(tasks[0])]
    monkeypatch.setattr(gs, "run_task", real)
    second = sweep(grid_path, out, workers=1, progress=False)
    assert second.submitted_keys == (victim,)
    assert sorted(keys_of(out)) == sorted(task_key(t) for t in tasks)


def test_sweep_rejects_bad_options(tmp_path, monkeypatch):
    import p2smt.runs.executors as gs

    monkeypatch.setattr(gs, "CONNECT_TIMEOUT_S", 1.0)
    grid = write(tmp_path, TINY)
    with pytest.raises(P2Error, match="--workers"):
        sweep(grid, tmp_path / "o.jsonl", workers=0, progress=False)
    with pytest.raises(P2Error, match="--timeout"):
        sweep(grid, tmp_path / "o.jsonl", timeout_s=-1, progress=False)
    pytest.importorskip("distributed")
    with pytest.raises(P2Error, match="cannot connect to the dask scheduler"):
        sweep(grid, tmp_path / "o.jsonl", scheduler="tcp://127.0.0.1:1", progress=False)
    with pytest.raises(P2Error, match="expected an address such as tcp://host:8786"):
        sweep(grid, tmp_path / "o.jsonl", scheduler="not a url", progress=False)
    assert not (tmp_path / "o.jsonl").exists()  # the scheduler is reached before the results file is opened
