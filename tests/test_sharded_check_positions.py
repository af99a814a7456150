"""``check`` and ``verify`` of a DSL program under a sharded goal (docs/semantics.md §6) judge its XLA/NCCL buffer
positions too, as ``synth`` does for its programs and ``verify --plan`` for a plan: the chunk semantics cannot see
an AllGather's order, so gathering across nodes first and then inside each node is refused (naming device,
position and block) although every chunk arrives, while the orders the positions accept are VALID / PROVED.

Ground truth: tests/test_sharded_goals_jax.py runs these orders in JAX on 16 CPU devices and finds
``ag-across-then-inside``, ``rs-inside-then-across`` and ``hsdp-rs-across-ar-inside`` wrong (the first only in
positions: every chunk arrives, permuted) and their mirrors right; the programs here are those orders on the
synthesis hierarchy (64 devices on a100-4x16; fig2-16gpu for HSDP).
"""

from __future__ import annotations

import itertools
import json

import pytest

from p2smt.api import check, hierarchy_of, verify
from p2smt.model.dsl import candidate_instructions
from p2smt.model.goal import Goal
from p2smt.model.request import Request
from p2smt.synth.config import Engine, EngineConfig
from p2smt.synth.driver import synthesize

A100 = ["--system", "a100-4x16", "--axes", "64", "--reduce", "0", "--matrix", "[[4,16]]"]
HSDP = ["--system", "fig2-16gpu", "--axes", "4,4", "--reduce", "0,1", "--matrix", "[[1,2,2,1],[1,1,1,4]]",
        "--shard-axes", "1"]
A100_REQ = Request("a100-4x16", axes=(64,), reduce=(0,), matrix=((4, 16),))
HSDP_REQ = Request("fig2-16gpu", axes=(4, 4), reduce=(0, 1), matrix=((1, 2, 2, 1), (1, 1, 1, 4)))

ACROSS_THEN_INSIDE = "(node, Parallel(root), {c}); (node, InsideGroup, {c})"
INSIDE_THEN_ACROSS = "(node, InsideGroup, {c}); (node, Parallel(root), {c})"
AG_PERMUTED = ACROSS_THEN_INSIDE.format(c="AllGather")  # JAX: ag-across-then-inside, permuted
PERMUTED_WORDS = "device 0 position 1 holds block 16, not block 1: the result is permuted"
# HSDP: the shard axis is the 4 GPUs under each cpu, the replicas are the cpus
HSDP_GATHERS = ("(cpu, InsideGroup, ReduceScatter); (cpu, Parallel(root), ReduceScatter); "
                "{first}; {second}")
SERVER_FIRST = {"first": "(server, Parallel(root), AllGather)", "second": "(cpu, Parallel(server), AllGather)"}
SERVER_LAST = {"first": SERVER_FIRST["second"], "second": SERVER_FIRST["first"]}

HSDP_RIGHT = "(cpu, InsideGroup, ReduceScatter); (cpu, Parallel(root), AllReduce)"  # JAX: hsdp-rs-inside-ar-across
HSDP_WRONG = "(cpu, Parallel(root), ReduceScatter); (cpu, InsideGroup, AllReduce)"  # JAX: hsdp-rs-across-ar-inside
POSITIONS_CHECKED = "then the XLA/NCCL buffer positions of the plan (the positions interpreter)"

# (argv, goal, program, chunk semantics valid, positions valid)
CASES = {
    "ag-flat": (A100, "all-gather", "(root, InsideGroup, AllGather)", True, True),
    "ag-inside-then-across": (A100, "all-gather", INSIDE_THEN_ACROSS.format(c="AllGather"), True, True),
    "ag-across-then-inside": (A100, "all-gather", AG_PERMUTED, True, False),
    "rs-flat": (A100, "reduce-scatter", "(root, InsideGroup, ReduceScatter)", True, True),
    "rs-across-then-inside": (A100, "reduce-scatter", ACROSS_THEN_INSIDE.format(c="ReduceScatter"), True, True),
    "rs-inside-then-across": (A100, "reduce-scatter", INSIDE_THEN_ACROSS.format(c="ReduceScatter"), False, False),
    "hsdp-rs-inside-ar-across": (HSDP, "reduce-scatter", HSDP_RIGHT, True, True),
    "hsdp-rs-across-ar-inside": (HSDP, "reduce-scatter", HSDP_WRONG, False, False),
    "hsdp-gather-cpus-then-servers": (HSDP, "reduce-scatter", HSDP_GATHERS.format(**SERVER_LAST), True, True),
    "hsdp-gather-servers-then-cpus": (HSDP, "reduce-scatter", HSDP_GATHERS.format(**SERVER_FIRST), True, False),
}


def request_of(argv: list[str]) -> Request:
    return A100_REQ if argv is A100 else HSDP_REQ


def shard_axes(argv: list[str]):
    return (1,) if argv is HSDP else None


def run_json(run_cli, command: str, name: str) -> tuple[dict, bool]:
    """The ``--json`` result of ``command`` on case ``name`` (its exit code checked) and whether it is right."""
    argv, goal, program, chunks_valid, positions_valid = CASES[name]
    valid = chunks_valid and positions_valid
    rc, out, err = run_cli(command, *argv, "--goal", goal, "--program", program, "--json")
    assert err == "" and rc == (0 if valid else 1)
    return json.loads(out), valid


@pytest.mark.parametrize("name", list(CASES))
def test_check_judges_chunks_and_positions(run_cli, name):
    argv, goal, program, chunks_valid, positions_valid = CASES[name]
    data, valid = run_json(run_cli, "check", name)
    assert data["valid"] is valid and data["chunk_semantics_valid"] is chunks_valid
    assert data["positions"]["valid"] is positions_valid
    assert data["checked_by"].endswith(POSITIONS_CHECKED)
    assert ("message" in data) == (chunks_valid and not positions_valid)
    rc, out, _ = run_cli("check", *argv, "--goal", goal, "--program", program)
    assert rc == (0 if valid else 1) and out.startswith("VALID" if valid else "INVALID")
    if chunks_valid and not positions_valid:
        assert out.startswith("INVALID: valid in chunk semantics, but under XLA/NCCL positions: device ")
    verdict = check(request_of(argv), program, goal=goal, shard_axes=shard_axes(argv))
    assert (verdict.valid, verdict.execution.valid) == (valid, chunks_valid)


@pytest.mark.parametrize("name", list(CASES))
def test_verify_proves_in_chunks_and_positions(run_cli, name):
    argv, goal, program, chunks_valid, positions_valid = CASES[name]
    data, valid = run_json(run_cli, "verify", name)
    assert data["status"] == ("proved" if valid else "counterexample")
    assert f"every step and the {goal} goal" in data["rests_on"] and data["rests_on"].endswith(POSITIONS_CHECKED)
    if chunks_valid and not positions_valid:
        assert data["chunk_semantics"] == "proved" and data["rule"] == "positions.goal"
        assert data["message"].startswith("proved in chunk semantics, but under XLA/NCCL positions: device ")
    elif not chunks_valid:
        assert data["rule"] == "goal" and data["positions"]["rule"] == "positions.goal"
    proof = verify(request_of(argv), program, goal=goal, shard_axes=shard_axes(argv))
    assert proof.status == data["status"]
    if not valid:
        assert str(proof.violation.rule) == data["rule"]


def test_the_permuted_all_gather_order_is_refused_naming_device_position_and_block(run_cli, tmp_path):
    """The program's verdict is its lowered plan's (``verify --plan``), and its reason is the one ``synth``
    gives for dropping it."""
    ag = [*A100, "--goal", "all-gather", "--program", AG_PERMUTED]
    rc, out, _ = run_cli("check", *ag)
    words = " ".join(out.split())  # the console wraps long lines
    assert rc == 1 and words.startswith(f"INVALID: valid in chunk semantics, but under XLA/NCCL positions: "
                                        f"{PERMUTED_WORDS} checked by: the dense interpreter")
    rc, out, _ = run_cli("check", *ag, "--json")
    data = json.loads(out)
    assert rc == 1 and data["violation"] is None and data["defects"] == []
    assert data["message"] == f"valid in chunk semantics, but under XLA/NCCL positions: {PERMUTED_WORDS}"
    assert data["positions"]["misplaced"][0] == {"device": 0, "position": 1, "expected_block": 1, "found_block": 16,
                                                 "missing": [1], "foreign": [16]}
    rc, out, _ = run_cli("verify", *ag)
    assert rc == 1 and out.startswith("COUNTEREXAMPLE: proved in chunk semantics, but under XLA/NCCL positions")
    assert "device: 0" in out and "position: 1" in out and "block: 16" in out and "rests on: Z3" in out
    rc, out, _ = run_cli("verify", *ag, "--json")
    program = json.loads(out)
    assert (program["device"], program["position"], program["block"], program["expected_block"]) == (0, 1, 16, 1)
    assert program["message"].endswith(PERMUTED_WORDS) and program["misplaced"] == 3840

    plan = tmp_path / "ag.json"
    plan.write_text(json.dumps([{"collective": "AllGather", "replica_groups": g}
                                for g in ("[16,4]<=[4,16]T(1,0)", "[4,16]<=[64]")]))
    rc, out, _ = run_cli("verify", *A100, "--goal", "all-gather", "--plan", str(plan), "--json")
    lowered = json.loads(out)
    keys = ("status", "rule", "device", "position", "block", "expected_block", "misplaced", "message")
    assert rc == 1 and {k: lowered[k] for k in keys} == {k: program[k] for k in keys}

    req = Request("a100-4x16", axes=(64,), reduce=(0,), matrix=((4, 16),), goal=Goal.of("all-gather", None, (0,)))
    (found,) = synthesize(req, EngineConfig(engine=Engine.PIECES, max_len=2)).matrices
    assert found.stats["positions_example"] == f"{AG_PERMUTED}: {PERMUTED_WORDS}"
    proof = verify(A100_REQ, AG_PERMUTED, goal="all-gather")
    assert proof.status == "counterexample" and str(proof.violation.rule) == "positions.goal"
    assert (proof.violation.facts["device"], proof.violation.facts["position"], proof.violation.facts["block"]) == (
        0, 1, 16)


def test_check_keeps_exactly_the_programs_synth_keeps():
    """Every program of up to two instructions on the AllGather request: the API's ``check`` calls VALID exactly
    the programs ``synth`` returns, and refuses in positions alone exactly the ones it drops."""
    req = Request("a100-4x16", axes=(64,), reduce=(0,), matrix=((4, 16),), goal=Goal.of("all-gather", None, (0,)))
    (found,) = synthesize(req, EngineConfig(engine=Engine.PIECES, max_len=2)).matrices
    _, h = hierarchy_of(req)
    names = [str(ins) for ins, _ in candidate_instructions(h)]
    valid, positions_only = [], []
    for program in [*names, *("; ".join(p) for p in itertools.product(names, repeat=2))]:
        verdict = check(A100_REQ, program, goal="all-gather")
        if verdict.valid:
            valid.append(program)
        elif verdict.execution.valid:
            positions_only.append(program)
    assert valid == [str(p) for p in found.programs]
    assert positions_only == [AG_PERMUTED] and found.stats["positions_dropped"] == 1


def test_the_allreduce_goal_still_judges_a_program_in_chunk_semantics_alone(run_cli):
    program = "(root, InsideGroup, ReduceScatter); (root, InsideGroup, AllGather)"
    rc, out, _ = run_cli("check", *A100, "--program", program, "--json")
    data = json.loads(out)
    assert rc == 0 and data["valid"] and not {"positions", "goal", "chunk_semantics_valid"} & set(data)
    assert data["checked_by"] == "the dense interpreter at the real size (64 devices)"
    rc, out, _ = run_cli("verify", *A100, "--program", program, "--json")
    data = json.loads(out)
    assert rc == 0 and data["rests_on"] == ("Z3 at the real size (64 devices), agreeing with the dense interpreter "
                                            "at the real size (64 devices)")
    assert check(A100_REQ, program).positions is None


@pytest.mark.parametrize("name", ["hsdp-gather-cpus-then-servers", "hsdp-gather-servers-then-cpus",
                                  "hsdp-rs-across-ar-inside"])
def test_above_z3s_size_the_interpreters_judge_positions_too(run_cli, monkeypatch, name):
    """Where Z3 does not prove (here: its bound lowered to 8 devices), the verdict rests on the dense and positions
    interpreters, and a program valid in chunk semantics alone is still a counterexample."""
    from p2smt.smt import verify as z3_verify

    monkeypatch.setattr(z3_verify, "Z3_PLAN_DEVICES", 8)
    chunks_valid, positions_valid = CASES[name][3:]
    data, valid = run_json(run_cli, "verify", name)
    assert data["status"] == ("valid" if valid else "counterexample")
    assert "Z3 proof skipped above 8 devices" in data["rests_on"] and data["rests_on"].endswith(POSITIONS_CHECKED)
    if chunks_valid and not positions_valid:
        assert data["chunk_semantics"] == "valid" and data["rule"] == "positions.goal"
        assert data["message"] == "valid in chunk semantics, but under XLA/NCCL positions: device 0 position 1 " \
                                  "holds block 2, not block 1: the result is permuted"
    if not chunks_valid:
        assert data["rule"] == "goal" and data["positions"]["rule"] == "positions.goal"
