"""The ``p2smt`` command line: JSON contracts, sub-commands, and one-line exit-2 errors on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from p2smt.model.dsl import format_program, parse_program
from p2smt.model.system import shipped_systems

DATA = Path(__file__).parent / "data"


def run_subprocess(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "p2smt", *argv], check=False, capture_output=True, text=True, timeout=300
    )


# ---------------------------------------------------------------- JSON contracts


def test_placements_json(run_cli):
    rc, out, err = run_cli("placements", "--system", "a100-4x16", "--axes", "4,16", "--json")
    assert rc == 0 and err == ""
    payload = json.loads(out)
    assert payload["matrices"] == [[[1, 4], [4, 4]], [[2, 2], [2, 8]], [[4, 1], [1, 16]]]


def test_placements_json_fig2(run_cli):
    rc, out, _ = run_cli("placements", "--system", "fig2-16gpu", "--axes", "4,4", "--json")
    assert rc == 0
    assert sorted(json.loads(out)["matrices"]) == sorted(
        [[[1, 2, 2, 1], [1, 1, 1, 4]], [[1, 2, 1, 2], [1, 1, 2, 2]], [[1, 1, 2, 2], [1, 2, 1, 2]],
         [[1, 1, 1, 4], [1, 2, 2, 1]]]
    )


def test_placements_nodes_and_path(run_cli):
    rc, out, _ = run_cli("placements", "--system", "a100-4x16", "--nodes", "2", "--axes", "32", "--json")
    assert rc == 0 and json.loads(out)["matrices"] == [[[2, 16]]]
    rc, out, _ = run_cli("placements", "--system", DATA / "custom-2x4.yaml", "--axes", "2,4", "--json")
    assert rc == 0 and json.loads(out)["matrices"] == [[[1, 2], [2, 2]], [[2, 1], [1, 4]]]


def test_synth_json_one_matrix(run_cli):
    rc, out, err = run_cli("synth", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "0",
                           "--matrix", "[[1,4],[4,4]]", "--max-len", "5", "--engine", "enumerative", "--json")
    assert rc == 0 and err == ""
    payload = json.loads(out)
    assert payload["status"] == "complete"
    assert payload["total_programs"] == 3
    (m,) = payload["matrices"]
    assert m["matrix"] == [[1, 4], [4, 4]]
    assert m["synthesis_hierarchy"] == [["root", 1], ["node", 1], ["gpu", 4]]
    assert set(m["programs"]) == {
        "(root, InsideGroup, AllReduce)",
        "(root, InsideGroup, ReduceScatter); (root, InsideGroup, AllGather)",
        "(root, InsideGroup, Reduce); (root, InsideGroup, Broadcast)",
    }


def test_synth_json_all_matrices(run_cli):
    rc, out, _ = run_cli("synth", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--json")
    assert rc == 0
    payload = json.loads(out)
    assert payload["status"] == "complete"
    assert [m["matrix"] for m in payload["matrices"]] == [[[1, 4], [4, 4]], [[2, 2], [2, 8]], [[4, 1], [1, 16]]]
    assert [m["synthesis_hierarchy"] for m in payload["matrices"]] == [
        [["root", 1], ["node", 4], ["gpu", 4]],
        [["root", 1], ["node", 2], ["gpu", 8]],
        [["root", 1], ["node", 1], ["gpu", 16]],
    ]
    assert [len(m["programs"]) for m in payload["matrices"]] == [93, 93, 3]
    assert payload["total_programs"] == 189
    for m in payload["matrices"]:
        for text in m["programs"]:
            assert format_program(parse_program(text)) == text


def test_synth_max_len(run_cli):
    rc, out, _ = run_cli("synth", "--system", "v100-2x8", "--axes", "16", "--reduce", "0", "--max-len", "1",
                         "--json")
    assert rc == 0
    assert json.loads(out)["matrices"][0]["programs"] == ["(root, InsideGroup, AllReduce)"]


def test_synth_human_output(run_cli):
    rc, out, _ = run_cli("synth", "--system", "v100-2x8", "--axes", "2,8", "--reduce", "0")
    assert rc == 0
    assert "(root, InsideGroup, AllReduce)" in out
    assert "6" in out


def test_topologies(run_cli):
    rc, out, _ = run_cli("topologies", "--json")
    assert rc == 0
    systems = {s["name"]: s for s in json.loads(out)["systems"]}
    assert set(shipped_systems()) == set(systems)
    assert systems["fig2-16gpu"]["levels"] == [["rack", 1], ["server", 2], ["cpu", 2], ["gpu", 4]]
    assert systems["fig2-16gpu"]["devices"] == 16
    assert systems["a100-4x16"]["devices"] == 64
    rc, out, _ = run_cli("topologies")
    assert rc == 0 and "v100-4x8" in out


def test_groups_json(run_cli):
    rc, out, _ = run_cli("groups", "--system", "fig2-16gpu", "--axes", "16", "--reduce", "0",
                         "--matrix", "[[1,2,2,4]]", "--instruction", "(cpu, Parallel(server), AllReduce)", "--json")
    assert rc == 0
    payload = json.loads(out)
    assert payload["synthesis_hierarchy"] == [["root", 1], ["rack", 1], ["server", 2], ["cpu", 2], ["gpu", 4]]
    (row,) = payload["instructions"]
    assert row["instruction"] == "(cpu, Parallel(server), AllReduce)"
    expected = [[0, 4], [1, 5], [2, 6], [3, 7], [8, 12], [9, 13], [10, 14], [11, 15]]
    assert sorted(row["device_groups"]) == expected
    assert sorted(row["synthesis_groups"]) == expected


def test_groups_replicated(run_cli):
    rc, out, _ = run_cli("groups", "--system", "fig2-16gpu", "--axes", "4,4", "--reduce", "1",
                         "--matrix", "[[1,2,1,2],[1,1,2,2]]", "--instruction", "(root, InsideGroup, AllReduce)",
                         "--json")
    assert rc == 0
    (row,) = json.loads(out)["instructions"]
    assert row["synthesis_groups"] == [[0, 1, 2, 3]]
    assert sorted(map(sorted, row["device_groups"])) == [[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13],
                                                         [10, 11, 14, 15]]
    rc, out, _ = run_cli("groups", "--system", "fig2-16gpu", "--axes", "4,4", "--reduce", "1",
                         "--matrix", "[[1,2,1,2],[1,1,2,2]]", "--instruction", "(cpu, Parallel(root), AllReduce)")
    assert rc == 0 and "(cpu, Parallel(root), AllReduce)" in out


CHECK = ["check", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--matrix", "[[2,2],[2,8]]"]


@pytest.mark.parametrize("program", [
    "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); (node, InsideGroup, AllGather)",
    f"@{DATA / 'rs_ar_ag.p2'}",
    "(root, InsideGroup, AllReduce)",
])
def test_check_valid_program(run_cli, program):
    rc, out, _ = run_cli(*CHECK, "--program", program, "--json")
    assert rc == 0
    payload = json.loads(out)
    assert payload["valid"] is True and payload["violation"] is None and payload["defects"] == []
    rc, out, _ = run_cli(*CHECK, "--program", program)
    assert rc == 0 and "VALID" in out


def test_check_invalid_program(run_cli):
    rc, out, _ = run_cli(*CHECK, "--program", "(node, InsideGroup, AllReduce); (root, InsideGroup, AllReduce)",
                         "--json")
    assert rc == 1
    v = json.loads(out)["violation"]
    assert v["rule"] == "AllReduce.disjoint" and v["step"] == 2 and "count it twice" in v["message"]


def test_check_incomplete_program(run_cli):
    rc, out, _ = run_cli(*CHECK, "--program", "(node, InsideGroup, AllReduce)", "--json")
    assert rc == 1
    payload = json.loads(out)
    assert payload["valid"] is False and payload["violation"]["rule"] == "goal" and payload["defects"]


PLAN = ["check", "--system", DATA / "custom-2x4.yaml", "--axes", "2,4", "--reduce", "0", "--matrix", "[[2,1],[1,4]]"]


def test_check_explicit_plans(run_cli):
    rc, out, _ = run_cli(*PLAN, "--plan", DATA / "plan_rs_ag.json", "--json")
    assert rc == 0 and json.loads(out)["valid"] is True
    rc, out, _ = run_cli(*PLAN, "--plan", DATA / "plan_rs_then_ar.json", "--json")
    assert rc == 1
    v = json.loads(out)["violation"]
    assert v["rule"] == "AllReduce.same_chunks" and v["step"] == 2 and v["group"] == [0, 4]
    rc, out, _ = run_cli(*PLAN, "--plan", DATA / "plan_double_count.json", "--json")
    assert rc == 1 and json.loads(out)["violation"]["rule"] == "AllReduce.disjoint"
    rc, out, _ = run_cli(*PLAN, "--plan", DATA / "plan_incomplete.json", "--json")
    assert rc == 1 and json.loads(out)["defects"]
    rc, out, _ = run_cli(*PLAN, "--plan", DATA / "plan_rs_then_ar.json")
    assert rc == 1 and "INVALID" in out


# ---------------------------------------------------------------- bad input: one line, exit 2, no traceback

BAD_INPUT = {
    "non-factoring axes": (["placements", "--system", "a100-4x16", "--axes", "3,16"], "do not factor"),
    "unknown system": (["placements", "--system", "no-such-system", "--axes", "4,16"], "unknown system"),
    "malformed YAML": (["placements", "--system", str(DATA / "malformed.yaml"), "--axes", "8"], "malformed YAML"),
    "plan syntax error": ([*map(str, CHECK), "--program", f"@{DATA / 'syntax_error.p2'}"],
                          "syntax_error.p2:3:7: expected ','"),
    "reduction axis out of range": (["synth", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "2"],
                                    "reduction axis 2 is out of range"),
    "level size 0": (["placements", "--system", str(DATA / "zero_level.yaml"), "--axes", "2"], "levels.1.size"),
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_subprocess(case):
    argv, fragment = BAD_INPUT[case]
    proc = run_subprocess(*argv)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("p2smt: error: ")
    assert fragment in lines[0]
    assert proc.stdout == ""


MORE_BAD_INPUT = [
    ["placements", "--system", "a100-4x16", "--axes", "4,x"],
    ["placements", "--system", "a100-4x16", "--axes", "64", "--nodes", "0"],
    ["placements", "--system", str(DATA / "unknown_join.yaml"), "--axes", "8"],
    ["placements", "--system", "/nonexistent/system.yaml", "--axes", "8"],
    ["synth", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "0", "--matrix", "[[1,4],[4]]"],
    ["synth", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "0", "--matrix", "[[2,2],[2,4]]"],
    ["synth", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "0", "--matrix", "[[1,4],[4,4]"],
    ["synth", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "0,0"],
    ["synth", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "0", "--max-len", "0"],
    ["synth", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "0", "--engine", "no-such-engine"],
    ["synth", "--system", "a100-4x16", "--axes", "4,16"],
    [*map(str, CHECK), "--program", "(rack, InsideGroup, AllReduce)"],
    [*map(str, CHECK), "--program", "@/nonexistent/plan.p2"],
    [*map(str, CHECK)],
    [*map(str, PLAN), "--plan", str(DATA / "plan_malformed.json")],
    [*map(str, PLAN), "--plan", "/nonexistent/plan.json"],
    ["check", "--system", str(DATA / "custom-2x4.yaml"), "--nodes", "1", "--axes", "4", "--reduce", "0",
     "--matrix", "[[1,4]]", "--plan", str(DATA / "plan_rs_ag.json")],
    ["no-such-command"],
    [],
    ["synth", "--system", "h100-superpod", "--axes", "1024", "--reduce", "0", "--engine", "enumerative"],  # k^3 state
]


@pytest.mark.parametrize("argv", MORE_BAD_INPUT, ids=lambda a: " ".join(a)[-60:] or "no-args")
def test_more_bad_input_in_process(run_cli, argv):
    rc, out, err = run_cli(*argv)
    assert rc == 2, err
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith("p2smt: error: "), err


@pytest.mark.parametrize("argv", [
    pytest.param(["placements", "--system", str(DATA / "not_utf8.yaml"), "--axes", "2"], id="system-yaml"),
    pytest.param([*map(str, CHECK), "--program", f"@{DATA / 'not_utf8.p2'}"], id="program-file"),
    pytest.param([*map(str, PLAN), "--plan", str(DATA / "plan_not_utf8.json")], id="plan-json"),
])
def test_non_utf8_files_are_bad_input(argv):
    proc = run_subprocess(*argv)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1


def test_plan_syntax_error_in_process(run_cli):
    rc, _, err = run_cli(*CHECK, "--program", "(node, InsideGroup, AllReduce)\n(node, Inside, AllReduce)")
    assert rc == 2
    assert err.strip() == (
        "p2smt: error: 2:8: unknown form 'Inside'; expected InsideGroup, Parallel(level) or Master(level)"
    )


def test_version_and_help():
    proc = run_subprocess("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("p2smt ")
    proc = run_subprocess("synth", "--help")
    assert proc.returncode == 0 and "--max-len" in proc.stdout
