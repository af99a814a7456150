"""The child-process runner: answers, errors, a killed sleeping call, restart, and the JSONL store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from p2smt.errors import P2Error
from p2smt.runs.child import Child, ChildStartError, OutcomeStatus, hard_limit, run_in_child
from p2smt.runs.store import ResultStore, read_rows

HERE = Path(__file__).resolve()


def spawn_sleeper(seconds: float, pidfile: str) -> int:
    """Start a grandchild that sleeps, then sleep too: a kill must take both down."""
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])
    Path(pidfile).write_text(str(proc.pid))
    print("stray output", flush=True)  # goes to stderr: the protocol stream stays clean
    time.sleep(seconds)
    return proc.pid


def test_a_call_answers_with_its_json_value():
    outcome = run_in_child("math:comb", [5, 2], limit_s=60)
    assert (outcome.status, outcome.value, outcome.error) == (OutcomeStatus.OK, 10, None)


def test_a_call_by_file_path_and_a_raising_call_are_one_line_errors():
    outcome = run_in_child(f"{HERE}:no_such_function", [], limit_s=60)
    assert outcome.status == OutcomeStatus.ERROR and "AttributeError" in outcome.error
    outcome = run_in_child("p2smt.model.system:load_system", ["no-such-system"], limit_s=60)
    assert outcome.status == OutcomeStatus.ERROR and "no-such-system" in outcome.error
    assert "\n" not in outcome.error


def test_a_sleeping_call_is_killed_at_its_limit_with_its_process_group_and_the_child_restarts(tmp_path):
    import os
    import time

    pidfile = tmp_path / "pid"
    with Child() as child:
        outcome = child.call(f"{HERE}:spawn_sleeper", [60, str(pidfile)], limit_s=3)
        assert outcome.status == OutcomeStatus.TIMEOUT and outcome.error == "killed after 3 s"
        again = child.call("math:factorial", [4], limit_s=60)
        assert (again.status, again.value) == (OutcomeStatus.OK, 24)
    grandchild = int(pidfile.read_text())
    for _ in range(100):  # the kill is asynchronous; the grandchild must be gone soon after
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"grandchild {grandchild} survived the kill of its process group")


def test_a_crashing_child_is_an_error_and_a_broken_start_raises():
    outcome = run_in_child("os:_exit", [7], limit_s=60)
    assert outcome.status == OutcomeStatus.ERROR and "exited with code 7" in outcome.error
    with pytest.raises(ChildStartError, match="did not start"):
        run_in_child("math:factorial", [3], limit_s=60, preload=["no_such_module_anywhere"])


def test_hard_limit_gives_the_solver_its_budget_first():
    assert hard_limit(0.2) == 1.2 and hard_limit(100) == 125


def test_store_keeps_complete_lines_cuts_a_torn_tail_and_refuses_garbage(tmp_path):
    path = tmp_path / "sub" / "r.jsonl"
    with ResultStore(path) as store:
        store.append({"key": "a", "v": 1})
        store.append({"key": "b", "v": 2})
    path.write_bytes(path.read_bytes() + b'{"key": "c", "v"')
    with ResultStore(path) as store:
        assert store.keys == {"a", "b"} and [r["v"] for r in store.rows] == [1, 2]
        store.append({"key": "c", "v": 3})
    assert [json.loads(x)["key"] for x in path.read_text().splitlines()] == ["a", "b", "c"]
    assert [r["key"] for r in read_rows(path)] == ["a", "b", "c"]
    with ResultStore(path, fresh=True) as store:
        assert store.keys == set()
    assert path.read_bytes() == b""
    path.write_text('{"key": "a"}\n[1]\n')
    with pytest.raises(P2Error, match=r"r.jsonl:2: not a result line \(no 'key'\)"):
        ResultStore(path)
    with ResultStore(tmp_path / "x.jsonl") as store, pytest.raises(ValueError):
        store.append({"key": "nan", "v": float("nan")})


def test_a_results_file_of_another_kind_is_neither_emptied_nor_appended_to(tmp_path):
    """An experiment's file given to a sweep (or the reverse) is refused, naming the line, and left whole."""
    path = tmp_path / "r.jsonl"
    path.write_text('{"key": "a", "variant": "bool-matrix"}\n')
    with pytest.raises(P2Error, match=r"r.jsonl:1: a line of another kind of results file \(no 'task'\)"):
        ResultStore(path, marker="task")
    with ResultStore(path, marker="variant") as store:
        assert store.keys == {"a"}
    path.write_text('{"key": "a", "task": {}}\n')
    with pytest.raises(P2Error, match="no 'variant'"):
        ResultStore(path, fresh=True, marker="variant")
    path.write_text("notes\n")
    with pytest.raises(P2Error, match=r"invalid JSON\); give another file, or delete it"):
        ResultStore(path, fresh=True, marker="variant")
    assert path.read_text() == "notes\n"
