"""Counterexamples that explain (issue 17 part 1) and one plan validator (issue 13 item 5), at the CLI."""

from __future__ import annotations

import json

import pytest

from p2smt.cli.main import main

A100 = ["--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--matrix", "[[1,4],[4,4]]"]
DP_ONLY = ["--system", "v100-2x8", "--axes", "2,8", "--reduce", "0", "--matrix", "[[2,1],[1,8]]"]
ALLGATHER_TWICE = "(node, InsideGroup, AllReduce); (node, Parallel(root), AllReduce); (root, InsideGroup, AllGather)"


def run(argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def plan_file(tmp_path, steps) -> str:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(steps))
    return str(path)


def test_the_failing_step_is_counted_from_one_with_its_instruction(capsys):
    rc, out, _ = run(["verify", *A100, "--program", ALLGATHER_TWICE], capsys)
    assert rc == 1
    lines = out.splitlines()
    assert lines[0] == "COUNTEREXAMPLE: failing step 3 of 3: (root, InsideGroup, AllGather)"
    assert lines[1].startswith("  AllGather.disjoint_chunks: chunk 0 is held by both devices 0 and 1")
    assert "double_counted" not in out and "{" not in out  # no Python dumps without --verbose


def test_verbose_labels_the_state_at_the_failure(capsys):
    rc, out, _ = run(["verify", *A100, "--program", ALLGATHER_TWICE, "--verbose"], capsys)
    assert rc == 1
    assert "device 0 before step 3 (the state at the failure):" in out
    assert "final state" not in out


def test_json_numbers_steps_from_one_and_carries_the_violation(capsys):
    rc, out, _ = run(["verify", *A100, "--program", ALLGATHER_TWICE, "--json"], capsys)
    data = json.loads(out)
    assert (rc, data["failing_step"], data["states_after_steps"]) == (1, 3, 2)
    v = data["violation"]
    assert (v["step"], v["steps"], v["instruction"]) == (3, 3, "(root, InsideGroup, AllGather)")
    assert v["facts"]["held_twice"] and data["defects"] == []
    rc, out, _ = run(["check", *A100, "--program", ALLGATHER_TWICE, "--json"], capsys)
    assert json.loads(out)["violation"] == v


def test_summing_shards_of_different_groups_is_named(tmp_path, capsys):
    plan = plan_file(tmp_path, [{"collective": "ReduceScatter", "replica_groups": []},
                                {"collective": "AllGather", "replica_groups": []}])
    for command in ("check", "verify"):
        rc, out, _ = run([command, *DP_ONLY, "--plan", plan], capsys)
        assert rc == 1
        assert "sums shards that must stay apart" in out and "divisible" not in out
        assert "[0, 8] and [1, 9]" in out.replace("\n", " ")


def test_value_witnesses_are_distinct_and_non_zero(capsys):
    rc, out, _ = run(["verify", "--system", "v100-2x8", "--axes", "2,8", "--reduce", "1", "--matrix",
                      "[[2,1],[1,8]]", "--program", "(node, InsideGroup, AllReduce); (node, InsideGroup, AllReduce)",
                      "--values", "--json"], capsys)
    data = json.loads(out)
    assert rc == 1
    row = data["chunk"]
    xs = [data["inputs"][d][row] for d in range(16)]
    assert len(set(xs)) == 16 and 0 not in xs
    assert data["actual"] != data["expected"]


@pytest.mark.parametrize("steps, words", [
    ([{"collective": "AllReduce", "replica_groups": [[3, 3]]}], "step 1: device 3 appears twice in group [3, 3]"),
    ([{"collective": "AllReduce", "replica_groups": [[0, 8]], "channel_id": 1}], "step 1: unknown key 'channel_id'"),
    ([{"collective": "AllReduce"}], "step 1: missing key 'replica_groups'"),
])
def test_plan_errors_name_the_file_and_step(tmp_path, capsys, steps, words):
    plan = plan_file(tmp_path, steps)
    rc, _, err = run(["check", *DP_ONLY, "--plan", plan], capsys)
    assert rc == 2
    assert err.startswith(f"p2smt: error: {plan}: {words}") and err.count("\n") == 1


def test_empty_replica_groups_still_mean_all_devices(tmp_path, capsys):
    plan = plan_file(tmp_path, [{"collective": "AllReduce", "replica_groups": []}])
    rc, out, _ = run(["check", "--system", "v100-2x8", "--axes", "16", "--reduce", "0", "--matrix", "[[2,8]]",
                      "--plan", plan], capsys)
    assert (rc, out.split(":")[0]) == (0, "VALID")


def test_an_instruction_without_groups_is_refused_at_parse_time(capsys):
    rc, _, err = run(["check", *A100, "--program", "(node, InsideGroup, AllReduce); (gpu, InsideGroup, AllReduce)"],
                     capsys)
    assert rc == 2
    assert "1:34: (gpu, InsideGroup, AllReduce) forms no group of two or more devices" in err


def test_verify_proves_only_up_to_the_interpreters_failing_step(tmp_path, capsys):
    bad = {"collective": "AllReduce", "replica_groups": [[0, 8]]}
    plan = plan_file(tmp_path, [bad] * 3000)
    rc, out, _ = run(["verify", *DP_ONLY, "--plan", plan, "--json"], capsys)
    data = json.loads(out)
    assert (rc, data["failing_step"], data["violation"]["steps"], data["steps"]) == (1, 2, 3000, 3000)
    assert data["stats"]["solver_calls"] <= 4
