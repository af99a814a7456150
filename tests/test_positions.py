"""The positions interpreter (issue 16): XLA/NCCL layout rules for explicit plans, and the published schemes."""

from __future__ import annotations

import json

import pytest

from p2smt.cli.main import main
from p2smt.model.collectives import Collective
from p2smt.semantics.positions import Cell, execute_positions

AR, RS, AG, RED, BC = Collective
ALL16 = tuple(range(16))
V100 = ["--system", "v100-2x8", "--axes", "16", "--reduce", "0", "--matrix", "[[2,8]]"]
A100 = ["--system", "a100-4x16", "--axes", "64", "--reduce", "0", "--matrix", "[[4,16]]"]


def grid(shape, vary):
    """Groups of a row-major device grid that vary the listed dimensions (in that order)."""
    import numpy as np

    cube = np.arange(int(np.prod(shape))).reshape(shape)
    fixed = [i for i in range(len(shape)) if i not in vary]
    rows = cube.transpose(fixed + list(vary)).reshape(-1, int(np.prod([shape[i] for i in vary])))
    return [[int(v) for v in r] for r in rows]


def test_reduce_scatter_gives_member_i_block_i_and_all_gather_concatenates():
    run = execute_positions(2, [(RS, [(1, 0)])], [(0, 1)], 2)
    assert run.buffers[1] == (Cell(0, frozenset({0, 1})),)
    assert run.buffers[0] == (Cell(1, frozenset({0, 1})),)
    run = execute_positions(2, [(RS, [(1, 0)]), (AG, [(1, 0)])], [(0, 1)], 2)
    assert run.valid


def test_reversed_all_gather_is_a_counterexample_naming_device_position_block():
    run = execute_positions(16, [(RS, [ALL16]), (AG, [ALL16[::-1]])], [ALL16], 16)
    assert not run.valid and run.violation is None
    first = run.misplaced[0]
    assert (first.device, first.position, first.found_block, first.expected_block) == (0, 0, 15, 0)
    assert len(run.misplaced) == 16 * 16
    assert "permuted" in run.message()


def test_reversed_all_gather_on_the_cli(tmp_path, capsys):
    path = tmp_path / "rev.json"
    path.write_text(json.dumps([{"collective": "ReduceScatter", "replica_groups": [list(ALL16)]},
                                {"collective": "AllGather", "replica_groups": [list(ALL16[::-1])]}]))
    assert main(["verify", *V100, "--plan", str(path), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "counterexample" and out["rule"] == "positions.goal"
    assert (out["device"], out["position"], out["block"], out["expected_block"]) == (0, 0, 15, 0)
    assert main(["verify", *V100, "--plan", str(path)]) == 1
    text = capsys.readouterr().out
    assert "device 0 position 0 holds block 15" in text
    assert main(["check", *V100, "--plan", str(path), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["positions"]["misplaced"][0]["found_block"] == 15


def test_rules_with_step_and_position():
    run = execute_positions(4, [(RS, [(0, 1)]), (AR, [(0, 1)])], [(0, 1)], 2)
    assert (run.violation.step, run.violation.rule) == (2, "AllReduce.same_blocks")
    run = execute_positions(2, [(AR, [(0, 1)]), (AR, [(0, 1)])], [(0, 1)], 2)
    assert (run.violation.step, run.violation.rule, run.violation.position) == (2, "AllReduce.disjoint", 0)
    run = execute_positions(2, [(RED, [(0, 1)]), (AR, [(0, 1)])], [(0, 1)], 2)
    assert (run.violation.rule, run.violation.device) == ("AllReduce.undefined", 1)
    run = execute_positions(3, [(RS, [(0, 1, 2)])], [(0, 1, 2)], 4)
    assert run.violation.rule == "ReduceScatter.divisible"
    run = execute_positions(4, [(RS, [(0, 1)]), (AG, [(0, 2)])], [(0, 1, 2, 3)], 2)
    assert run.violation.rule == "AllGather.shapes"


NODES = grid((4, 16), [1])
CROSS = grid((4, 16), [0])
PUBLISHED = {
    # P²'s four example programs (P² §3) as explicit plans, node = 16 GPUs
    "allreduce": [(AR, [list(range(64))])],
    "two-allreduce": [(AR, NODES), (AR, CROSS)],
    "reduce-allreduce-broadcast": [(RED, NODES), (AR, [[0, 16, 32, 48]]), (BC, NODES)],
    "rs-ar-ag": [(RS, NODES), (AR, CROSS), (AG, NODES)],
    # Horovod's hierarchical allreduce (NCCL reduce / cross-node allreduce among local roots / NCCL bcast)
    "horovod": [(RED, NODES), (AR, [[0, 16, 32, 48]] + [[d] for d in range(64) if d % 16]), (BC, NODES)],
    # 2D-torus allreduce on an 8 × 8 grid: reduce-scatter along rows, allreduce along columns, allgather rows
    "2d-torus": [(RS, grid((8, 8), [1])), (AR, grid((8, 8), [0])), (AG, grid((8, 8), [1]))],
    # BlueConnect: reduce-scatter down the levels, all-gather back up
    "blueconnect-2": [(RS, NODES), (RS, CROSS), (AG, CROSS), (AG, NODES)],
    "blueconnect-3": [(RS, grid((4, 4, 4), [2])), (RS, grid((4, 4, 4), [1])), (RS, grid((4, 4, 4), [0])),
                      (AG, grid((4, 4, 4), [0])), (AG, grid((4, 4, 4), [1])), (AG, grid((4, 4, 4), [2]))],
}


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_schemes_as_explicit_plans_stay_proved(name, tmp_path, capsys):
    steps = [{"collective": c.value, "replica_groups": g} for c, g in PUBLISHED[name]]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(steps))
    assert main(["verify", *A100, "--plan", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "proved"
    run = execute_positions(64, [(c, [tuple(x) for x in g if len(x) > 1]) for c, g in PUBLISHED[name]],
                            [tuple(range(64))], 64)
    assert run.valid, run.message()


def test_blueconnect_with_levels_gathered_in_the_wrong_order_is_permuted():
    wrong = [(RS, NODES), (RS, CROSS), (AG, NODES), (AG, CROSS)]
    run = execute_positions(64, [(c, [tuple(x) for x in g]) for c, g in wrong], [tuple(range(64))], 64)
    assert not run.valid and run.misplaced and run.misplaced[0].found_block != run.misplaced[0].expected_block


def test_lower_refuses_an_invalid_program_unless_allowed(tmp_path, capsys):
    argv = ["lower", "--backend", "jax", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "1",
            "--matrix", "[[1,4],[4,4]]", "--program", "(node, InsideGroup, AllReduce)"]
    assert main(argv) == 1
    assert "goal is not reached" in capsys.readouterr().err
    out = tmp_path / "m.py"
    assert main([*argv, "--allow-invalid", "--out", str(out)]) == 0
    head = out.read_text().split('"""')[1]
    assert "WARNING: emitted with --allow-invalid" in head and "does NOT compute" in head
    capsys.readouterr()
    path = tmp_path / "rev.json"
    path.write_text(json.dumps([{"collective": "ReduceScatter", "replica_groups": [list(ALL16)]},
                                {"collective": "AllGather", "replica_groups": [list(ALL16[::-1])]}]))
    assert main(["lower", "--backend", "torch", *V100, "--plan", str(path)]) == 1
    assert "positions" in capsys.readouterr().err


def test_run_refuses_what_lower_refuses_unless_allowed(tmp_path, capsys, monkeypatch):
    """p2smt's lowering places chunks by P²'s semantics, so a plan the positions check rejects could run
    with exact sums: ``run`` refuses it as ``lower`` does, and with --allow-invalid says why it exits 1."""
    import p2smt.lower.run as running
    from p2smt.lower.run import RunReport

    path = tmp_path / "rev.json"
    path.write_text(json.dumps([{"collective": "ReduceScatter", "replica_groups": [list(ALL16)]},
                                {"collective": "AllGather", "replica_groups": [list(ALL16[::-1])]}]))
    argv = ["run", "--backend", "jax", *V100, "--plan", str(path)]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "position 0 holds block 15" in captured.err and "--allow-invalid" in captured.err
    ran = []

    def exact(backend, plan, target, **kwargs):
        ran.append(backend)
        return RunReport(backend, "plan", 16, 16, 4096, True)

    monkeypatch.setattr(running, "run_program", exact)
    assert main([*argv, "--allow-invalid", "--json"]) == 1 and ran == ["jax"]
    payload = json.loads(capsys.readouterr().out)
    assert payload["ok"] is True and payload["check"]["valid"] is False and "block 15" in payload["check"]["message"]
    assert main([*argv, "--allow-invalid"]) == 1
    assert capsys.readouterr().out.startswith("WARNING: run with --allow-invalid")
