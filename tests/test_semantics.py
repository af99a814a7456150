"""The concrete interpreter of docs/semantics.md §4's Hoare rules, on hand-computed states."""

from __future__ import annotations

import numpy as np
import pytest

from p2smt.errors import P2Error
from p2smt.model.collectives import Collective
from p2smt.model.failure import Violation
from p2smt.semantics.dense import (
    Defect,
    apply_group,
    execute,
    execute_all,
    goal_state,
    initial_state,
)

AR, RS, AG, R, B = (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER,
                    Collective.REDUCE, Collective.BROADCAST)


def state(k: int, devices: list[dict[int, set[int]]]) -> np.ndarray:
    """Build members' states: one {chunk: contributing devices} per member."""
    out = np.zeros((len(devices), k, k), dtype=bool)
    for d, rows in enumerate(devices):
        for r, cols in rows.items():
            out[d, r, list(cols)] = True
    return out


def as_sets(s: np.ndarray) -> list[dict[int, set[int]]]:
    return [{r: set(np.flatnonzero(s[d, r]).tolist()) for r in range(s.shape[1]) if s[d, r].any()}
            for d in range(s.shape[0])]


def test_initial_and_goal_states():
    s = initial_state(3)
    assert s.shape == (3, 3, 3)
    assert as_sets(s) == [{0: {0}, 1: {0}, 2: {0}}, {0: {1}, 1: {1}, 2: {1}}, {0: {2}, 1: {2}, 2: {2}}]
    g = goal_state(4, [(0, 2), (1, 3)])
    assert as_sets(g)[0] == {r: {0, 2} for r in range(4)}
    assert as_sets(g)[3] == {r: {1, 3} for r in range(4)}


# ---------------------------------------------------------------- the two invalid examples of docs/semantics.md §4


def test_reduce_scatter_then_allreduce_over_the_same_pair_is_rejected():
    run = execute(2, [(RS, [(0, 1)]), (AR, [(0, 1)])], [(0, 1)])
    assert not run.valid and not run.reached_goal
    v = run.violation
    assert isinstance(v, Violation)
    assert (v.step, v.steps, v.instruction) == (2, 2, "AllReduce over [[0, 1]]")
    assert v.group == (0, 1)
    assert set(v.devices) == {0, 1}
    assert v.chunk == 0
    assert v.rule == "AllReduce.same_chunks"
    assert "AllReduce needs every member to hold the same chunks" in v.message
    assert "chunk 0" in v.message
    assert len(run.states) == 2  # initial + after the ReduceScatter


def test_overlapping_allreduces_are_rejected():
    run = execute(4, [(AR, [(0, 1), (2, 3)]), (AR, [(0, 1, 2, 3)])], [(0, 1, 2, 3)])
    assert not run.valid
    v = run.violation
    assert (v.step, v.group, v.devices, v.chunk) == (2, (0, 1, 2, 3), (0, 1), 0)
    assert v.rule == "AllReduce.disjoint"
    assert v.message == (
        "chunk 0 of devices 0 and 1 both contain device 0's contribution: AllReduce would count it twice"
    )
    assert v.to_json() == {
        "step": 2, "steps": 2, "instruction": "AllReduce over [[0, 1, 2, 3]]", "group": [0, 1, 2, 3],
        "devices": [0, 1], "chunk": 0, "rule": "AllReduce.disjoint", "message": v.message,
        "facts": {"pair": [0, 1], "contribution": 0, "counted_twice": [0, 1, 2, 3], "chunk": 0},
    }


def test_the_same_allreduce_twice_is_rejected():
    run = execute(2, [(AR, [(0, 1)]), (AR, [(0, 1)])], [(0, 1)])
    assert run.violation.rule == "AllReduce.disjoint"
    assert "count it twice" in run.violation.message


def test_disjoint_allreduces_are_valid():
    run = execute(4, [(AR, [(0, 1), (2, 3)]), (AR, [(0, 2), (1, 3)])], [(0, 1, 2, 3)], require_progress=True)
    assert run.valid
    assert run.violation is None and run.defects == ()
    assert np.array_equal(run.states[-1], goal_state(4, [(0, 1, 2, 3)]))


# ---------------------------------------------------------------- each rule on small hand-computed states


def test_allreduce_post():
    out = apply_group(0, AR, (0, 1), initial_state(2))
    assert as_sets(out) == [{0: {0, 1}, 1: {0, 1}}] * 2


def test_allreduce_on_partial_chunks():
    members = state(4, [{0: {0}, 1: {0}}, {0: {2}, 1: {2}}])
    out = apply_group(0, AR, (0, 2), members)
    assert as_sets(out) == [{0: {0, 2}, 1: {0, 2}}] * 2


def test_reduce_scatter_post_whole_group():
    out = apply_group(0, RS, (0, 1, 2, 3), initial_state(4))
    assert as_sets(out) == [{i: {0, 1, 2, 3}} for i in range(4)]


def test_reduce_scatter_blocks_are_contiguous_in_row_order():
    members = initial_state(4)[[0, 1]]
    out = apply_group(0, RS, (0, 1), members)
    assert as_sets(out) == [{0: {0, 1}, 1: {0, 1}}, {2: {0, 1}, 3: {0, 1}}]
    # only the non-empty rows are cut: rows 1 and 3 → device 0 gets row 1, device 1 row 3
    members = state(4, [{1: {0}, 3: {0}}, {1: {1}, 3: {1}}])
    assert as_sets(apply_group(0, RS, (0, 1), members)) == [{1: {0, 1}}, {3: {0, 1}}]


@pytest.mark.parametrize("k, group", [(3, (0, 1)), (4, (0, 1, 2)), (6, (0, 1, 2, 3))])
def test_reduce_scatter_divisibility(k, group):
    run = execute(k, [(RS, [group])], [tuple(range(k))])
    v = run.violation
    assert v.rule == "ReduceScatter.divisible"
    assert v.step == 1 and v.group == group and v.chunk is None
    assert f"({k})" in v.message and f"divisible by {len(group)}" in v.message


def test_reduce_scatter_preconditions_are_allreduces():
    members = state(2, [{0: {0}}, {1: {1}}])
    assert apply_group(0, RS, (0, 1), members).rule == "ReduceScatter.same_chunks"
    members = state(2, [{0: {0, 1}, 1: {0, 1}}, {0: {1}, 1: {1}}])
    assert apply_group(0, RS, (0, 1), members).rule == "ReduceScatter.disjoint"


def test_allgather_post():
    members = state(2, [{0: {0, 1}}, {1: {0, 1}}])
    out = apply_group(0, AG, (0, 1), members)
    assert as_sets(out) == [{0: {0, 1}, 1: {0, 1}}] * 2


def test_allgather_needs_disjoint_chunks():
    v = apply_group(3, AG, (5, 7), initial_state(2))
    assert v.rule == "AllGather.disjoint_chunks"
    assert (v.step, v.group, v.devices, v.chunk) == (3, (5, 7), (5, 7), 0)
    assert "disjoint" in v.message


def test_allgather_needs_equal_sizes():
    members = state(3, [{0: {0}, 1: {0}}, {2: {1}}])
    v = apply_group(0, AG, (0, 1), members)
    assert v.rule == "AllGather.equal_sizes"
    assert "holds 2 chunks" in v.message and "holds 1" in v.message and "equal numbers" in v.message


def test_reduce_post():
    out = apply_group(0, R, (0, 1, 2), initial_state(3))
    assert as_sets(out) == [{r: {0, 1, 2} for r in range(3)}, {}, {}]


def test_reduce_preconditions():
    members = state(2, [{0: {0}, 1: {0}}, {0: {0, 1}, 1: {1}}])
    v = apply_group(0, R, (0, 1), members)
    assert v.rule == "Reduce.disjoint" and v.chunk == 0


def test_broadcast_post():
    members = state(2, [{0: {0, 1}, 1: {0, 1}}, {}])
    out = apply_group(0, B, (0, 1), members)
    assert as_sets(out) == [{0: {0, 1}, 1: {0, 1}}] * 2


def test_broadcast_needs_members_below_the_root():
    v = apply_group(0, B, (0, 1), initial_state(2))
    assert v.rule == "Broadcast.below_root"
    assert v.devices == (1, 0)
    assert "lose" in v.message


def test_broadcast_information_increase():
    full = state(2, [{0: {0, 1}, 1: {0, 1}}, {0: {0, 1}, 1: {0, 1}}])
    v = apply_group(0, B, (0, 1), full)
    assert v.rule == "Broadcast.information_increase"
    # one member equal to the root and one strictly below is an increase
    three = state(3, [{0: {0, 1, 2}}, {0: {0, 1, 2}}, {}])
    out = apply_group(0, B, (0, 1, 2), three)
    assert as_sets(out) == [{0: {0, 1, 2}}] * 3
    # a member with a strict subset of the root's contributions is also below the root
    partial = state(3, [{0: {0, 1, 2}}, {0: {1}}])
    assert as_sets(apply_group(0, B, (0, 1), partial)) == [{0: {0, 1, 2}}] * 2


def test_reduce_broadcast_after_reduce():
    run = execute(2, [(R, [(0, 1)]), (B, [(0, 1)])], [(0, 1)], require_progress=True)
    assert run.valid
    run = execute(2, [(AR, [(0, 1)]), (B, [(0, 1)])], [(0, 1)])
    assert run.violation.rule == "Broadcast.information_increase"


def test_rs_ar_ag_states_by_hand():
    # two nodes of two GPUs: (node, InsideGroup, RS); (node, Parallel(root), AR); (node, InsideGroup, AG)
    steps = [(RS, [(0, 1), (2, 3)]), (AR, [(0, 2), (1, 3)]), (AG, [(0, 1), (2, 3)])]
    run = execute(4, steps, [(0, 1, 2, 3)], require_progress=True)
    assert run.valid
    assert as_sets(run.states[1]) == [
        {0: {0, 1}, 1: {0, 1}}, {2: {0, 1}, 3: {0, 1}}, {0: {2, 3}, 1: {2, 3}}, {2: {2, 3}, 3: {2, 3}},
    ]
    assert as_sets(run.states[2]) == [
        {0: {0, 1, 2, 3}, 1: {0, 1, 2, 3}}, {2: {0, 1, 2, 3}, 3: {0, 1, 2, 3}},
        {0: {0, 1, 2, 3}, 1: {0, 1, 2, 3}}, {2: {0, 1, 2, 3}, 3: {0, 1, 2, 3}},
    ]
    assert len(run.states) == 4


def test_devices_in_no_group_keep_their_state():
    run = execute(4, [(AR, [(0, 1)])], [(0, 1), (2, 3)])
    assert np.array_equal(run.states[1][2:], initial_state(4)[2:])
    assert as_sets(run.states[1])[:2] == [{r: {0, 1} for r in range(4)}] * 2


def test_defects_when_the_goal_is_not_reached():
    run = execute(4, [(AR, [(0, 1)])], [(0, 1, 2, 3)])
    assert run.violation is None and not run.reached_goal and not run.valid
    assert Defect(0, 0, (2, 3), ()) in run.defects
    assert Defect(3, 2, (0, 1, 2), ()) in run.defects
    assert len(run.defects) == 16  # every chunk of every device misses something
    over = execute(4, [(AR, [(0, 1, 2, 3)])], [(0, 1), (2, 3)])
    assert over.violation is None and not over.valid
    assert Defect(0, 1, (), (2, 3)) in over.defects
    assert len(over.defects) == 16


def test_require_progress():
    steps = [(R, [(0, 1), (2, 3)]), (AR, [(1, 3)])]
    assert execute(4, steps, [(0, 1, 2, 3)]).violation is None
    run = execute(4, steps, [(0, 1, 2, 3)], require_progress=True)
    assert run.violation.rule == "progress"
    assert (run.violation.step, run.violation.group) == (2, (1, 3))
    assert run.violation.message == "AllReduce over devices [1, 3] changes no member's state"


def test_a_step_of_single_device_groups_is_xla_s_no_op():
    """XLA's all-reduce over a mesh axis of size 1: every group has one device; the state is unchanged."""
    run = execute(4, [(AR, [(0, 1)]), (AR, [(2,), (3,)])], [(0, 1), (2, 3)], require_progress=True)
    assert run.violation is None and not run.reached_goal


def test_violation_stops_execution():
    run = execute(2, [(AR, [(0, 1)]), (AR, [(0, 1)]), (AG, [(0, 1)])], [(0, 1)])
    assert run.violation.step == 2
    assert len(run.states) == 2


def test_groups_must_name_existing_devices_once():
    with pytest.raises(P2Error, match="does not exist"):
        execute(4, [(AR, [(0, 4)])], [(0, 1, 2, 3)])
    with pytest.raises(P2Error, match=r"step 1: device 1 appears in two groups, \[0, 1\] and \[1, 2\]"):
        execute(4, [(AR, [(0, 1), (1, 2)])], [(0, 1, 2, 3)])
    with pytest.raises(P2Error, match=r"device 3 appears twice in group \[3, 3\]"):
        execute(4, [(AR, [(3, 3)])], [(0, 1, 2, 3)])
    with pytest.raises(P2Error, match="does not exist"):
        execute(4, [(AR, [(-1, 0)])], [(0, 1, 2, 3)])


def test_chunks_differ_from_devices():
    # a whole-system plan: 4 devices in 2 reduction pairs, chunks = size of one reduction group
    steps = [(RS, [(0, 2), (1, 3)]), (AG, [(0, 2), (1, 3)])]
    run = execute(4, steps, [(0, 2), (1, 3)], require_progress=True, chunks=2)
    assert run.valid
    assert run.states[0].shape == (4, 2, 4)
    bad = execute(4, [(RS, [(0, 1, 2)])], [(0, 1, 2, 3)], chunks=4)
    assert bad.violation.rule == "ReduceScatter.divisible"


def test_execution_is_deterministic():
    steps = [(R, [(0, 1), (2, 3)]), (AR, [(0, 2)]), (B, [(0, 1), (2, 3)])]
    a = execute(4, steps, [(0, 1, 2, 3)], require_progress=True)
    b = execute(4, steps, [(0, 1, 2, 3)], require_progress=True)
    assert a.valid and b.valid
    assert all(np.array_equal(x, y) for x, y in zip(a.states, b.states))


def test_execute_all_equals_execute_program_by_program():
    """Prefix sharing must not change any verdict, violation or state (valid, invalid, unfinished)."""
    pairs, whole = ((0, 1), (2, 3)), ((0, 1, 2, 3),)
    progs = [
        [(RS, pairs), (AR, ((0, 2), (1, 3))), (AG, pairs)],
        [(RS, pairs), (AR, ((0, 2), (1, 3)))],
        [(RS, pairs), (AR, pairs)],
        [(AR, whole)],
        [(AR, whole), (AR, whole)],
        [(R, pairs), (AR, ((0, 2),)), (B, pairs)],
        [],
    ]
    goal = (tuple(range(4)),)
    batch = execute_all(4, progs, goal, require_progress=True)
    for prog, got in zip(progs, batch, strict=True):
        one = execute(4, prog, goal, require_progress=True)
        assert (got.valid, got.reached_goal, got.violation, got.defects) == (
            one.valid, one.reached_goal, one.violation, one.defects)
        assert len(got.states) == len(one.states)
        assert all(np.array_equal(a, b) for a, b in zip(got.states, one.states, strict=True))
    assert [g.valid for g in batch] == [True, False, False, True, False, True, False]
    # interleaved prefixes and keep_states=False (the driver's bounded-memory re-check): the same verdicts
    mixed = [progs[i] for i in (2, 0, 4, 1, 6, 3, 5, 0)]
    lean = execute_all(4, mixed, goal, require_progress=True, keep_states=False)
    assert all(r.states == [] for r in lean)
    assert [(r.valid, r.violation, r.defects) for r in lean] == [
        (batch[i].valid, batch[i].violation, batch[i].defects) for i in (2, 0, 4, 1, 6, 3, 5, 0)]
