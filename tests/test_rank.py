"""Ranking: the JSON contract of ``p2smt rank``, ordering, ``top``, determinism and bad input."""

from __future__ import annotations

import json

import pytest

from p2smt.cost.rank import rank, render_rank
from p2smt.errors import P2Error
from p2smt.model.request import Request


@pytest.fixture(scope="module")
def report():
    return rank(Request("a100-2x16", (2, 16), (1,)))


def test_json_contract_shape(report):
    assert set(report) == {"bytes_per_device", "algo", "engine", "status", "certified", "certification", "matrices",
                           "best", "stats"}
    assert report["bytes_per_device"] == 4 * 2**29 * 2 and report["algo"] == "ring"
    assert report["engine"] == "certified" and report["status"] == "complete" and report["certified"] is True
    assert report["certification"].startswith("certified by Z3: every program proved valid")
    assert set(report["stats"]) == {"synthesis_seconds", "proof_seconds"}
    assert [m["matrix"] for m in report["matrices"]] == [[[1, 2], [2, 8]], [[2, 1], [1, 16]]]
    for m in report["matrices"]:
        assert set(m) == {"matrix", "allreduce_seconds", "status", "rests_on", "programs"}
        assert m["status"] == "complete" and m["rests_on"].startswith("Z3-certified at the real size")
        assert m["allreduce_seconds"] > 0
        for p in m["programs"]:
            assert set(p) == {"program", "seconds"} and isinstance(p["program"], str) and p["seconds"] > 0
        keys = [(p["seconds"], p["program"]) for p in m["programs"]]
        assert keys == sorted(keys, key=lambda k: (float(f"{k[0]:.9g}"), k[1]))
    assert set(report["best"]) == {"matrix", "program", "seconds"}
    json.loads(json.dumps(report))


def test_best_is_the_fastest_program_over_all_matrices(report):
    fastest = min((p["seconds"], m["matrix"], p["program"]) for m in report["matrices"] for p in m["programs"])
    assert report["best"] == {"matrix": fastest[1], "program": fastest[2], "seconds": fastest[0]}
    # Reducing inside a node: the local AllReduce is (one of) the best; across nodes a program beats it.
    local = report["matrices"][1]
    assert local["programs"][0]["seconds"] == pytest.approx(local["allreduce_seconds"])
    spread = report["matrices"][0]
    assert spread["programs"][0]["seconds"] < spread["allreduce_seconds"] / 1.5
    assert "(root, InsideGroup, AllReduce)" in [p["program"] for p in spread["programs"]]


def test_top_bytes_and_algorithm_are_honoured(report):
    small = rank(Request("a100-2x16", (2, 16), (1,)), top=2, bytes_per_device=1 << 20, algo="tree")
    assert small["bytes_per_device"] == 1 << 20 and small["algo"] == "tree"
    assert all(len(m["programs"]) == 2 for m in small["matrices"])
    assert small["matrices"][0]["allreduce_seconds"] < report["matrices"][0]["allreduce_seconds"]


def test_same_inputs_same_report(report):
    """Equal but for the measured seconds under ``stats``."""
    again = rank(Request("a100-2x16", (2, 16), (1,)))
    assert {k: v for k, v in again.items() if k != "stats"} == {k: v for k, v in report.items() if k != "stats"}


def test_another_engine_says_what_its_programs_rest_on():
    """Under an explicit engine the report has no certificate, and each placement names its re-check."""
    from p2smt.synth.config import EngineConfig

    other = rank(Request("a100-2x16", (2, 16), (1,)), EngineConfig(engine="auto"))
    assert other["engine"] == "auto" and "certified" not in other and "certification" not in other
    assert all(m["rests_on"].startswith("every program re-checked by the dense interpreter") for m in other["matrices"])


def test_render_builds_tables(report):
    from rich.console import Console

    console = Console(width=160, record=True)
    console.print(render_rank(report))
    text = console.export_text()
    assert "AllReduce" in text and "certified by Z3: every program proved valid" in text
    assert "the proofs took" in text


@pytest.mark.parametrize("kwargs", [{"algo": "butterfly"}, {"top": 0}, {"bytes_per_device": -1}])
def test_bad_input_is_a_p2error(kwargs):
    with pytest.raises(P2Error):
        rank(Request("a100-2x16", (2, 16), (1,)), **kwargs)


def test_nvls_is_refused_where_no_nvlink_sharp_switch_exists(run_cli):
    rc, out, err = run_cli("rank", "--system", "v100-2x8", "--axes", "16", "--reduce", "0", "--algo", "nvls")
    assert rc == 2 and out == "" and "no NVLink SHARP switch" in err and err.count("\n") == 1
    rc, out, _ = run_cli("rank", "--system", "dgx-h100", "--nodes", "2", "--axes", "16", "--reduce", "0",
                         "--algo", "nvls", "--top", "1")
    assert rc == 0 and "nvls for AllReduce steps within one NVSwitch domain, ring for the others" in " ".join(out.split())
    assert "AllReduce across domains included" in " ".join(out.split())


RANK_ONE = ["rank", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--matrix", "[[1,4],[4,4]]"]


def test_rank_prices_a_users_program_beside_the_synthesized_ones(run_cli):
    rc, out, _ = run_cli(*RANK_ONE, "--json", "--program", "(root, InsideGroup, AllReduce)")
    assert rc == 0
    report = json.loads(out)
    yours = report["yours"]
    (m,) = report["matrices"]
    assert yours["synthesized"] and yours["of"] == len(m["programs"]) == 93
    same = [p for p in m["programs"] if p["program"] == yours["program"]]
    assert same and same[0]["seconds"] == yours["seconds"]
    assert yours["rank"] == 1 + sum(p["seconds"] < yours["seconds"] for p in m["programs"])
    assert abs(yours["seconds"] - m["allreduce_seconds"]) <= 1e-9 * yours["seconds"]


def test_rank_refuses_an_invalid_users_program_and_a_missing_matrix(run_cli):
    rc, out, err = run_cli(*RANK_ONE, "--program", "(node, InsideGroup, ReduceScatter)")
    assert rc == 1 and out == "" and "goal is not reached" in err  # a verdict, as check/lower/run give it
    rc, _, err = run_cli(*RANK_ONE[:-2], "--program", "(root, InsideGroup, AllReduce)")
    assert rc == 2 and "rank --program needs a matrix: axes 4,16 have 3 placements" in err


def test_rank_prices_an_explicit_plan_like_the_same_program_and_refuses_a_permuted_one(run_cli, tmp_path):
    import p2smt
    from p2smt.api import hierarchy_of
    from p2smt.model.dsl import explicit_plan_json, lower_program, parse_program

    program = "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); (node, InsideGroup, AllGather)"
    _, h = hierarchy_of(p2smt.Request("a100-4x16", (4, 16), (1,), matrix=((1, 4), (4, 4))))
    steps = explicit_plan_json(lower_program(h, parse_program(program, h)))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(steps))
    rc, out, _ = run_cli(*RANK_ONE, "--json", "--plan", plan)
    assert rc == 0
    explicit = json.loads(out)["yours"]
    rc, out, _ = run_cli(*RANK_ONE, "--json", "--program", program)
    assert rc == 0
    dsl = json.loads(out)["yours"]
    assert explicit["seconds"] == dsl["seconds"] and explicit["rank"] == dsl["rank"]
    steps[2]["replica_groups"] = [list(reversed(g)) for g in steps[2]["replica_groups"]]
    plan.write_text(json.dumps(steps))
    rc, out, err = run_cli(*RANK_ONE, "--plan", plan)
    assert rc == 1 and out == "" and "permuted" in err


def test_a_hand_written_program_is_ranked_only_among_finished_programs_of_its_length(run_cli):
    base = ["rank", "--system", "v100-2x8", "--axes", "16", "--reduce", "0", "--matrix", "[[2,8]]"]
    rc, out, err = run_cli(*base, "--program", "(root, InsideGroup, AllReduce)", "--deadline", "0.001", "--json")
    assert rc == 4 and err == "" and json.loads(out)["yours"]["rank"] is None
    rc, out, err = run_cli(*base, "--program", "(node, InsideGroup, AllReduce); (node, Parallel(root), AllReduce)",
                           "--max-len", "1")
    assert rc == 2 and out == "" and "more than --max-len 1" in err
