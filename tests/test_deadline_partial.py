"""Long commands stopped early keep what they proved: verify's steps (``--timeout``, ``--deadline``), the
fail-fast prefix of ``verify --values``, and the placements ``best`` and ``plan`` finished.

No assertion reads a clock: what was proved, encoded and reported is counted instead; a deadline passes after
a given number of finished pieces (``deadline_after``), not after seconds a loaded machine may not keep.
"""

from __future__ import annotations

import json

import pytest

from p2smt.model.collectives import AG, AR, RS

V100 = ["--system", "v100-2x8", "--axes", "2,8", "--reduce", "1", "--matrix", "[[2,1],[1,8]]"]
A100 = ["--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--matrix", "[[1,4],[4,4]]"]
RS_AR_AG = "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); (node, InsideGroup, AllGather)"
MAX_STEPS = 4096


def long_invalid(tmp_path, steps: int = MAX_STEPS):
    """A plan whose step 2 gathers chunks every member already holds, then thousands more steps."""
    body = ["(node, InsideGroup, AllReduce)", "(node, InsideGroup, AllGather)"]
    body += ["(node, InsideGroup, AllReduce)"] * (steps - 2)
    path = tmp_path / "long.p2"
    path.write_text("; ".join(body))
    return f"@{path}"


def test_values_refutes_a_long_plan_at_step_2_encoding_only_its_prefix(run_cli, tmp_path):
    rc, out, _ = run_cli("verify", *V100, "--program", long_invalid(tmp_path), "--values", "--json")
    payload = json.loads(out)
    assert rc == 1 and payload["status"] == "counterexample"
    assert payload["failing_step"] == 2 and payload["steps"] == MAX_STEPS
    assert payload["message"].startswith(f"failing step 2 of {MAX_STEPS}: AllGather")
    assert payload["stats"]["steps_encoded"] == 2 and payload["stats"]["solver_calls"] <= 4


def test_boolean_verify_also_encodes_only_the_prefix(run_cli, tmp_path):
    rc, out, _ = run_cli("verify", *V100, "--program", long_invalid(tmp_path), "--json")
    payload = json.loads(out)
    assert rc == 1 and payload["failing_step"] == 2 and payload["stats"]["steps_encoded"] == 2


def test_values_prefix_is_only_a_shortcut_when_the_values_semantics_fails_there(run_cli):
    """The interpreter rejects step 2 (AllReduce twice sums the group twice); the value semantics has no step
    rule for that, so the whole plan is proved and refuted at its goal, not at the prefix's."""
    twice = "; ".join(["(node, InsideGroup, AllReduce)"] * 3)
    rc, out, _ = run_cli("verify", *V100, "--program", twice, "--values", "--json")
    payload = json.loads(out)
    assert rc == 1 and payload["rule"] == "goal" and payload["failing_step"] is None
    assert payload["stats"]["steps_encoded"] == 3
    assert payload["expected"] == 36 and payload["actual"] == 36 * 8 * 8


def test_tiny_timeout_stops_the_encoding_of_a_valid_plan(run_cli):
    for extra in ([], ["--values"]):
        rc, out, _ = run_cli("verify", *A100, "--program", RS_AR_AG, "--timeout", "0.001", *extra, "--json")
        payload = json.loads(out)
        assert rc == 4 and payload["status"] == "unknown", extra
        assert "ran out while declaring the encoding of 3 steps" in payload["message"], extra
        assert payload["steps_proved"] == 0 and payload["stats"]["steps_encoded"] == 0, extra
        assert "no step proved valid, step 1 undecided" in payload["message"], extra


def test_prove_plan_reports_each_step_proved():
    from p2smt.smt.cegis import verify_values
    from p2smt.smt.verify import prove_plan

    steps = [(RS, [(0, 1), (2, 3)]), (AR, [(0, 2), (1, 3)]), (AG, [(0, 1), (2, 3)])]
    for prove in (prove_plan, verify_values):
        seen: list[int] = []
        proof = prove(4, steps, [(0, 1, 2, 3)], chunks=4, report=seen.append)
        assert proof.proved and seen == [1, 2, 3], prove.__name__
    seen = []
    bad = [(AR, [(0, 1), (2, 3)]), (AR, [(0, 1), (2, 3)]), (AR, [(0, 2), (1, 3)])]
    proof = prove_plan(4, bad, [(0, 1, 2, 3)], report=seen.append)
    assert proof.failing_step == 2 and seen == [1]


def test_verify_deadline_says_which_steps_were_proved(run_cli, verify_hangs_at_step_3, deadline_after):
    deadline_after(2)  # steps 1 and 2 proved, step 3 hangs
    rc, out, _ = run_cli("verify", *A100, "--program", RS_AR_AG, "--deadline", "2", "--json")
    payload = json.loads(out)
    assert rc == 4 and payload["status"] == "unknown" and payload["steps_proved"] == 2
    assert payload["message"] == "deadline of 2 s reached: steps 1..2 proved valid, step 3 undecided"
    rc, out, _ = run_cli("verify", *A100, "--program", RS_AR_AG, "--deadline", "2")
    assert rc == 4 and "steps 1..2 proved valid, step 3 undecided" in " ".join(out.split())


def first_then_hang(real):
    """``real`` for its first call, then a sleep far past any test deadline."""
    calls = []

    def wrapped(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            __import__("time").sleep(600)
        return real(*args, **kwargs)

    return wrapped


def test_best_deadline_keeps_the_finished_placements(run_cli, monkeypatch, deadline_after):
    from p2smt.cost import best as best_module

    deadline_after(1)
    monkeypatch.setattr(best_module, "best_on_hierarchy", first_then_hang(best_module.best_on_hierarchy))
    argv = ["best", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--max-len", "2", "--deadline", "1.5"]
    rc, out, _ = run_cli(*argv, "--json")
    payload = json.loads(out)
    assert rc == 4 and payload["status"] == "unknown"
    assert payload["message"] == "deadline of 1.5 s reached with 1 of 3 placements finished"
    (done,) = payload["matrices"]
    assert done["status"] == "optimal" and done["programs"] and payload["best"]["matrix"] == done["matrix"]
    assert len(payload["unfinished"]) == 2 and done["matrix"] not in payload["unfinished"]
    rc, out, _ = run_cli(*argv)
    text = " ".join(out.split())
    assert rc == 4 and "best of the finished placements: matrix" in text and "not finished: [[" in text
    assert "UNKNOWN: deadline of 1.5 s reached with 1 of 3 placements finished" in text


@pytest.mark.parametrize(("engine", "chooser", "deadline"), [
    ("auto", "_searched_choice", "1.5"), ("certified", "_reduction_choice", "5")])
def test_plan_deadline_keeps_the_finished_units(run_cli, monkeypatch, deadline_after, engine, chooser, deadline):
    """Under ``auto`` each unit's program comes from the branch and bound, under the default from ranking a
    certified set: either way the units chosen before the deadline are kept."""
    from p2smt.cost import plan as plan_module

    deadline_after(1)
    monkeypatch.setattr(plan_module, chooser, first_then_hang(getattr(plan_module, chooser)))
    argv = ["plan", "--profile", "gpt3-13b-tp-dp", "--system", "dgx-a100", "--nodes", "4", "--deadline", deadline,
            "--engine", engine]
    rc, out, _ = run_cli(*argv, "--json")
    payload = json.loads(out)
    assert rc == 4 and payload["status"] == "unknown"
    (done,) = payload["finished"]
    assert done["program"] and done["seconds_each"] > 0
    waiting = {u["communication"]: u["matrices"] for u in payload["unfinished"]}
    assert done["matrix"] not in waiting[done["communication"]]
    units = 1 + sum(len(m) for m in waiting.values())
    assert payload["message"] == (f"deadline of {deadline} s reached with 1 of {units} (placement, communication) "
                                  "units finished")
    if engine == "certified":
        return  # the text is drawn from the same result under either engine: read once, under the shorter deadline
    rc, out, _ = run_cli(*argv)
    text = " ".join(out.split())
    assert rc == 4 and f"not finished: {done['communication']} on" in text and done["program"][:20] in text


def test_the_clock_is_checked_between_steps_while_encoding(monkeypatch):
    """A clock that runs out after step 1's formulas are built stops the encoding there (no solver call)."""
    from p2smt.smt.verify import ProofClock, prove_plan

    readings = iter([1000.0] * 3)  # the solver limit, "declaring", step 1; then spent
    monkeypatch.setattr(ProofClock, "left_ms", lambda self: next(readings, -1.0))
    steps = [(RS, [(0, 1), (2, 3)]), (AR, [(0, 2), (1, 3)]), (AG, [(0, 1), (2, 3)])]
    proof = prove_plan(4, steps, [(0, 1, 2, 3)], chunks=4, timeout_ms=60_000)
    assert proof.status == "unknown" and proof.steps_proved == 0
    assert proof.stats["steps_encoded"] == 1 and proof.stats["solver_calls"] == 0
    assert proof.message == "the proof's 60 s ran out while encoding step 2 of 3; no step proved valid, step 1 undecided"


def test_values_goal_counterexample_tries_only_contents_of_chunks_left_empty(monkeypatch):
    """AllReduce never empties a chunk: explaining a 40-step plan's wrong sum evaluates it a few times,
    not once per (step, device) of free empty-chunk content (641 times before)."""
    from p2smt.smt import cegis

    calls = []
    real = cegis._evaluate
    monkeypatch.setattr(cegis, "_evaluate", lambda *a, **k: calls.append(1) or real(*a, **k))
    proof = cegis.verify_values(4, [(AR, [(0, 1), (2, 3)])] * 40, [(0, 1), (2, 3)])
    assert proof.status == "counterexample" and proof.rule == "goal" and proof.blanks == ()
    assert proof.expected == proof.inputs[proof.device][proof.chunk] + proof.inputs[proof.device ^ 1][proof.chunk]
    assert len(calls) <= 3


def test_values_declares_empty_chunk_contents_only_for_the_steps_encoded(monkeypatch):
    """The values encoding declares a step's empty-chunk contents when the step is encoded, so a clock that runs
    out after step 1 leaves at most one step's worth declared (not one per step and device up front)."""
    from p2smt.smt import check
    from p2smt.smt.cegis import verify_values
    from p2smt.smt.verify import ProofClock

    declared: list[str] = []
    real = check.PlanChecker.declare
    monkeypatch.setattr(check.PlanChecker, "declare", lambda self, name, *a: declared.append(name) or real(self, name, *a))
    readings = iter([1000.0] * 3)  # the solver limit, "declaring", step 1; then spent
    monkeypatch.setattr(ProofClock, "left_ms", lambda self: next(readings, -1.0))
    steps = [(RS, [(0, 1), (2, 3)]), (AR, [(0, 2), (1, 3)])] + [(AG, [(0, 1), (2, 3)])] * 400
    proof = verify_values(4, steps, [(0, 1, 2, 3)], chunks=4, timeout_ms=60_000)
    assert proof.status == "unknown" and proof.stats["steps_encoded"] == 1
    assert declared and all(name.startswith("blank_1_") for name in declared) and len(declared) <= 4


def test_values_timeout_bounds_a_long_valid_prefix_plan(run_cli, tmp_path):
    """AllReduce repeated: the interpreter's step-2 suspicion is no failure of the value semantics, so the whole
    plan must be encoded; a short --timeout stops that encoding (declarations included) part-way."""
    path = tmp_path / "long.p2"
    path.write_text("; ".join(["(node, InsideGroup, AllReduce)"] * MAX_STEPS))
    rc, out, _ = run_cli("verify", *V100, "--program", f"@{path}", "--values", "--timeout", "0.5", "--json")
    payload = json.loads(out)
    assert rc == 4 and payload["status"] == "unknown" and payload["steps"] == MAX_STEPS
    assert "ran out while" in payload["message"] and payload["stats"]["steps_encoded"] < MAX_STEPS
