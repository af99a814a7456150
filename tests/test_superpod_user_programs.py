"""User programs on systems above the dense interpreter's size: check, verify, lower and rank --program on the
1,024-device superpod, and the split and compressed verdicts against the dense one where both run."""

from __future__ import annotations

import json
import random

import pytest

from p2smt.errors import P2Error
from p2smt.model.collectives import Collective
from p2smt.model.components import split_plan
from p2smt.semantics import split as large
from p2smt.semantics.dense import execute
from p2smt.semantics.verdict import explain, judge

SUPERPOD = ("--system", "h100-superpod", "--axes", "8,128", "--matrix", "[[1,1,4,2],[4,32,1,1]]")
ISSUE = (*SUPERPOD, "--reduce", "0")  # issue 35's request
BY_NODE = (*SUPERPOD, "--reduce", "1")  # 8 reduction groups of 128 devices: the split route
RS_AR_AG = "(su, InsideGroup, ReduceScatter); (su, Parallel(root), AllReduce); (su, InsideGroup, AllGather)"


def _json(run_cli, *argv):
    rc, out, err = run_cli(*argv, "--json")
    return rc, json.loads(out), err


def test_issue_request_verify_proves_it(run_cli):
    rc, out, _ = _json(run_cli, "verify", *ISSUE, "--program", "(root, InsideGroup, AllReduce)")
    assert rc == 0 and out["status"] == "proved"
    assert out["rests_on"].startswith("Z3 at the real size (1024 devices)")


def test_issue_request_check_lower_rank(run_cli, tmp_path):
    program = "(root, InsideGroup, AllReduce)"
    rc, out, _ = _json(run_cli, "check", *ISSUE, "--program", program)
    assert rc == 0 and out["valid"] is True
    target = tmp_path / "gen.py"
    rc, _, _ = run_cli("lower", "--backend", "torch", *ISSUE, "--program", program, "--out", target)
    assert rc == 0 and "def reduce(" in target.read_text()
    rc, out, _ = _json(run_cli, "rank", *ISSUE, "--program", program, "--engine", "pieces", "--max-len", "2")
    assert rc == 0 and out["yours"]["rank"] >= 1 and out["yours"]["seconds"] > 0


def test_issue_request_invalid_program_refused_everywhere(run_cli):
    program = "(pcie, InsideGroup, AllReduce)"  # reduces 2 of the 8 GPUs of a node
    rc, out, _ = _json(run_cli, "check", *ISSUE, "--program", program)
    assert rc == 1 and out["violation"]["rule"] == "goal"
    rc, out, _ = _json(run_cli, "verify", *ISSUE, "--program", program)
    assert rc == 1 and out["status"] == "counterexample" and out["rule"] == "goal"
    rc, _, err = run_cli("lower", "--backend", "jax", *ISSUE, "--program", program)
    assert rc == 1 and "INVALID" in err
    rc, _, err = run_cli("rank", *ISSUE, "--program", program, "--engine", "pieces", "--max-len", "2")
    assert rc == 1 and "INVALID" in err and len(err.strip().splitlines()) == 1


def test_split_route_verify_agrees_with_z3_at_the_real_size(run_cli):
    """128-device reduction groups: the interpreter splits, Z3 proves the whole 1,024 devices, and for a
    counterexample the split's facts in real ids must equal Z3's sentence (verify raises otherwise)."""
    rc, out, _ = _json(run_cli, "verify", *BY_NODE, "--program", RS_AR_AG)
    assert rc == 0 and out["status"] == "proved" and "one reduction group shape at a time" in out["rests_on"]
    rc, out, _ = _json(run_cli, "verify", *BY_NODE, "--program",
                       "(su, InsideGroup, AllReduce); (su, InsideGroup, AllReduce)")
    assert rc == 1 and out["failing_step"] == 2 and out["rule"] == "AllReduce.disjoint"
    assert "devices 0 and 8" in out["message"]


def test_verify_above_the_z3_size_proves_each_shape(run_cli, monkeypatch):
    import p2smt.smt.verify as smt_verify

    monkeypatch.setattr(smt_verify, "Z3_PLAN_DEVICES", 512)
    rc, out, _ = _json(run_cli, "verify", *ISSUE, "--program", "(root, InsideGroup, AllReduce)")
    assert rc == 0 and out["status"] == "proved" and out["rests_on"].startswith("Z3 on each reduction group shape")
    assert out["stats"]["shapes_proved_apart"] == 1 and out["stats"]["devices_per_shape"] == 8
    rc, out, _ = _json(run_cli, "verify", *BY_NODE, "--program",
                       "(su, InsideGroup, AllReduce); (su, InsideGroup, AllReduce)")
    assert rc == 1 and out["failing_step"] == 2 and out["violation"]["group"][:2] == [0, 8]
    # the goal: Z3's facts of one reduction group, made real, must equal the interpreter's sentence
    rc, out, _ = _json(run_cli, "verify", *ISSUE, "--program", "(pcie, InsideGroup, AllReduce)")
    assert rc == 1 and out["rule"] == "goal" and "(1024 devices are off the goal)" in out["message"]
    assert out["states"]["0"][0] == [0, 1] and out["defects"][0]["missing"] == [2, 3, 4, 5, 6, 7]


def test_verify_where_z3_does_not_prove_says_so(run_cli, monkeypatch):
    import p2smt.smt.verify as smt_verify

    monkeypatch.setattr(smt_verify, "Z3_PLAN_DEVICES", 64)
    rc, out, _ = _json(run_cli, "verify", *BY_NODE, "--program", RS_AR_AG)
    assert rc == 0 and out["status"] == "valid"
    assert "Z3 proof skipped above 64 devices (one reduction group has 128 devices)" in out["rests_on"]
    rc, out, _ = _json(run_cli, "verify", *BY_NODE, "--program", "(su, InsideGroup, AllReduce)")
    assert rc == 1 and out["status"] == "counterexample" and out["rule"] == "goal"
    rc, _, err = run_cli("verify", *BY_NODE, "--program", RS_AR_AG, "--values")
    assert rc == 2 and "at most 64 devices" in err


# The split and compressed routes against the dense interpreter on random plans inside reduction groups.

COLLECTIVES = list(Collective)


def _random_plan(rng: random.Random, goal: list[tuple[int, ...]], steps: int):
    """Random steps whose groups stay inside reduction groups (sizes 2 or 4), the same in every group or not."""
    plan = []
    for _ in range(steps):
        coll = rng.choice(COLLECTIVES)
        size = rng.choice([2, 4])
        groups = []
        alike = rng.random() < 0.7
        order = list(range(len(goal[0])))
        rng.shuffle(order)
        for g in goal:
            if not alike:
                rng.shuffle(order)
            groups += [tuple(g[i] for i in order[j:j + size]) for j in range(0, len(order), size)]
        plan.append((coll, groups))
    return plan


def _goal(k: int, m: int, interleaved: bool) -> list[tuple[int, ...]]:
    """``k // m`` reduction groups of ``m`` devices: contiguous ids, or ``k // m`` apart."""
    if interleaved:
        return [tuple(b + k // m * i for i in range(m)) for b in range(k // m)]
    return [tuple(range(b, b + m)) for b in range(0, k, m)]


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_split_verdict_equals_dense(seed, interleaved):
    rng = random.Random(seed)
    k, m = 32, 8
    goal = _goal(k, m, interleaved)
    assert sorted(d for g in goal for d in g) == list(range(k))
    steps = _random_plan(rng, goal, rng.randint(1, 4))
    progress = rng.random() < 0.5
    dense = judge(k, steps, goal, m, progress, layout=False)
    parts = split_plan(k, steps, goal)
    assert parts is not None
    split = large.judge_split(parts, steps, m, progress)
    assert split.valid == dense.valid
    assert split.violation == dense.violation
    assert split.execution.defects == dense.execution.defects[:large.MAX_DEFECTS]
    assert split.execution.devices_off == dense.execution.devices_off
    if dense.violation is not None:
        shown = list(dict.fromkeys((*dense.violation.devices, *(dense.violation.group or ()))))
        assert split.device_rows(shown) == dense.device_rows(shown)


def test_split_valid_programs_and_shapes():
    goal = [tuple(range(b, b + 4)) for b in range(0, 16, 4)]
    steps = [(Collective.REDUCE_SCATTER, [g for g in goal]), (Collective.ALL_GATHER, [g for g in goal])]
    parts = split_plan(16, steps, goal)
    assert len(parts.shapes) == 1 and parts.size == 4
    assert large.judge_split(parts, steps, 4, True).valid
    crossing = [(Collective.ALL_REDUCE, [(0, 4)])]
    assert split_plan(16, crossing, goal) is None


@pytest.mark.parametrize("seed", range(10))
def test_compressed_verdict_names_the_dense_step_group_and_rule(seed):
    rng = random.Random(100 + seed)
    k = 16
    goal = [tuple(range(k))]
    steps = _random_plan(rng, goal, rng.randint(1, 4))
    run = execute(k, steps, goal, True, k)
    dense = explain(run, steps, goal)
    lite = large.judge_compressed(k, steps, True)
    assert lite.valid == run.valid
    if run.valid:
        return
    if run.violation is not None:  # no reduction mixes groups here: there is one
        assert (lite.violation.step, lite.violation.rule, lite.violation.group) == (
            dense.step, dense.rule, dense.group)
    else:
        assert lite.violation.step is None and str(lite.violation.rule) == "goal"


def test_crossing_plan_too_large_is_refused_in_one_line(monkeypatch):
    from p2smt.semantics import verdict

    monkeypatch.setattr(verdict, "MAX_STATE_BYTES", 1 << 15)
    monkeypatch.setattr(verdict, "SPLIT_ABOVE", 1 << 10)
    goal = [tuple(range(b, b + 8)) for b in range(0, 64, 8)]
    steps = [(Collective.ALL_REDUCE, [tuple(range(0, 64, 8))])]
    with pytest.raises(P2Error, match="cross reduction groups.*above the 0.03125 MiB bound"):
        judge(64, steps, goal, 8, True, layout=False)


@pytest.mark.parametrize("seed", range(8))
def test_split_proof_equals_the_whole_proof(seed):
    """Z3 on each reduction group shape, made real, says what Z3 on the whole plan says: status, failing step,
    rule, group and sentence (the goal's devices off counted over every group)."""
    from p2smt.smt.verify import prove_plan, prove_split

    rng = random.Random(200 + seed)
    k, m = 32, 8
    goal = _goal(k, m, seed % 2 == 1)
    steps = _random_plan(rng, goal, rng.randint(1, 3))
    whole = prove_plan(k, steps, goal, require_progress=True, chunks=m)
    parts = prove_split(split_plan(k, steps, goal), steps, len(steps), chunks=m, require_progress=True)
    assert parts.status == whole.status
    if whole.violation is not None:
        a, b = parts.violation, whole.violation
        assert (a.step, a.rule, a.group, a.devices, a.message) == (b.step, b.rule, b.group, b.devices, b.message)
        common = parts.states.keys() & whole.states.keys()  # each shows the first devices of its own reading
        assert common and all(parts.states[d] == whole.states[d] for d in common)
