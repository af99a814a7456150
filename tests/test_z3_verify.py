"""Plan proofs with Z3 (issue 3 item 4): PROVED or the first failing step, group, devices and defects,
checked against the interpreter."""

from __future__ import annotations

import json
import random

import pytest

from p2smt.errors import P2Error, PlanSyntaxError
from p2smt.model.collectives import Collective
from p2smt.model.dsl import instruction_groups, lower_program, parse_explicit_plan, parse_program
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement, matrices
from p2smt.model.system import load_system
from p2smt.semantics.dense import execute
from p2smt.semantics.verdict import explain
from p2smt.smt.verify import PlanProof, prove_plan

AR, RS, AG, R, B = (
    Collective.ALL_REDUCE,
    Collective.REDUCE_SCATTER,
    Collective.ALL_GATHER,
    Collective.REDUCE,
    Collective.BROADCAST,
)

WELL_KNOWN = [
    "(root, InsideGroup, AllReduce)",
    "(node, InsideGroup, AllReduce); (node, Parallel(root), AllReduce)",
    "(node, InsideGroup, Reduce); (node, Master(root), AllReduce); (node, InsideGroup, Broadcast)",
    "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); (node, InsideGroup, AllGather)",
]


def agrees_with_interpreter(k, steps, goals, require_progress=False, chunks=None) -> PlanProof:
    proof = prove_plan(k, steps, goals, require_progress=require_progress, chunks=chunks)
    run = execute(k, steps, goals, require_progress, chunks)
    assert proof.proved == run.valid
    v = explain(run, steps, goals)
    if v is not None:
        assert proof.violation.to_json() == v.to_json()
    if v is not None and v.rule == "goal":
        bad = {(d.device, d.chunk): (list(d.missing), list(d.foreign)) for d in run.defects}
        mine = {(d["device"], d["chunk"]): (d["missing"], d["foreign"]) for d in proof.defects}
        assert mine == {key: bad[key] for key in mine} and (proof.defects_truncated or mine == bad)
    return proof


def placements_4x16():
    system = load_system("a100-4x16")
    for m in matrices(system.sizes, (4, 16)):
        for red in ((0,), (1,)):
            placement = Placement(system.sizes, (4, 16), m)
            yield placement, red, synthesis_hierarchy(placement, red, system.level_names)


def applies(h, text) -> bool:
    try:
        program = parse_program(text, h)
    except PlanSyntaxError:
        return False
    return all(instruction_groups(h, ins) for ins in program.instructions)


@pytest.mark.parametrize("text", WELL_KNOWN)
def test_section3_examples_are_proved_on_every_4x16_placement(text):
    proved = 0
    for placement, red, h in placements_4x16():
        if not applies(h, text):
            continue
        plan = lower_program(h, parse_program(text, h))
        goals = placement.reduction_groups(red)
        steps = [(s.collective, s.groups) for s in plan]
        proof = prove_plan(placement.num_devices, steps, goals, require_progress=True, chunks=len(goals[0]))
        assert proof.status == "proved", (placement.matrix, red, proof.message)
        assert proof.to_json()["status"] == "proved"
        proved += 1
    assert proved >= 1


def test_reduce_scatter_then_allreduce_is_a_counterexample():
    proof = agrees_with_interpreter(2, [(RS, [(0, 1)]), (AR, [(0, 1)])], [(0, 1)])
    assert proof.status == "counterexample"
    v = proof.violation
    assert (proof.failing_step, v.rule, v.chunk) == (2, "AllReduce.same_chunks", 0)
    assert proof.states == {0: [[0, 1], []], 1: [[], [0, 1]]} and proof.states_after == 1
    data = proof.to_json()
    assert data["failing_step"] == 2 and data["violation"]["group"] == [0, 1] and data["states_after_steps"] == 1
    json.dumps(data)


def test_overlapping_allreduces_report_double_counting():
    proof = agrees_with_interpreter(4, [(AR, [(0, 1), (2, 3)]), (AR, [(0, 1, 2, 3)])], [(0, 1, 2, 3)])
    v = proof.violation
    assert v.rule == "AllReduce.disjoint" and v.devices == (0, 1)
    assert v.facts["counted_twice"] == [0, 1, 2, 3] and v.facts["contribution"] == 0
    assert proof.defects == ()  # a failed precondition is measured against its rule, not the goal
    assert proof.witness["chunk"] in range(4)


def test_lowered_invalid_examples_from_files(data_dir):
    for name in ("plan_rs_then_ar.json", "plan_double_count.json", "plan_incomplete.json"):
        plan = parse_explicit_plan(json.loads((data_dir / name).read_text()), name)
        steps = [(s.collective, s.groups) for s in plan]
        goals = [(0, 4), (1, 5), (2, 6), (3, 7)]
        proof = agrees_with_interpreter(8, steps, goals, chunks=2)
        assert proof.status == "counterexample"


def test_groups_crossing_goal_groups_and_idle_devices():
    goals = [(0, 1), (2, 3)]
    agrees_with_interpreter(4, [(AR, [(0, 2)]), (AR, [(0, 1), (2, 3)])], goals)
    agrees_with_interpreter(4, [(AR, [(0, 1)])], goals)
    proof = agrees_with_interpreter(4, [(AR, [(0, 1)])], [(0, 1)])  # devices 2, 3 in no goal group end empty
    assert proof.violation.rule == "goal" and set(proof.violation.devices) == {2, 3}
    mixed = agrees_with_interpreter(4, [(AR, [(0, 2)]), (AR, [(0, 1), (2, 3)])], goals).violation
    assert (mixed.step, mixed.rule, mixed.devices) == (1, "goal.mixes_groups", (0, 2))


@pytest.mark.parametrize("seed", range(6))
def test_random_plans_agree_with_the_interpreter(seed):
    rng = random.Random(seed)
    for _ in range(12):
        k = rng.choice([2, 3, 4, 6])
        goals = [tuple(range(k))] if rng.random() < 0.7 else [tuple(range(0, k, 2)), tuple(range(1, k, 2))]
        steps = []
        for _ in range(rng.randint(1, 4)):
            devices = list(range(k))
            rng.shuffle(devices)
            size = rng.randint(2, k)
            groups = [tuple(devices[i : i + size]) for i in range(0, k - size + 1, size)]
            steps.append((rng.choice(list(Collective)), groups[: rng.randint(1, len(groups))]))
        chunks = rng.choice([None, 1, 2, k])
        agrees_with_interpreter(k, steps, goals, require_progress=rng.random() < 0.5, chunks=chunks)


def test_bad_plans_are_bad_input():
    with pytest.raises(P2Error, match="does not exist"):
        prove_plan(2, [(AR, [(0, 2)])], [(0, 1)])
    with pytest.raises(P2Error, match="appears in two groups"):
        prove_plan(3, [(AR, [(0, 1), (1, 2)])], [(0, 1, 2)])
    with pytest.raises(P2Error, match="at least one step"):
        prove_plan(2, [], [(0, 1)])
    with pytest.raises(P2Error, match="two goal groups"):
        prove_plan(2, [(AR, [(0, 1)])], [(0, 1), (1,)])
    with pytest.raises(P2Error, match="cannot prove plans"):
        prove_plan(2, [(AR, [(0, 1)])], [(0, 1)], encoding="values")


def test_timeout_gives_unknown_or_the_truth():
    steps = [(RS, [tuple(range(16))]), (AG, [tuple(range(16))])]
    proof = prove_plan(16, steps, [tuple(range(16))], timeout_ms=1)
    assert proof.status in ("unknown", "proved")
