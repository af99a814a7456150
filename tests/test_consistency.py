"""The CLI and the Python API spell one concept one way: collective names through one parser, ``best`` on a
Request like its siblings, real signatures, one exit-code rule for an invalid program, one placement taken
without ``--matrix``, files reported on stdout."""

from __future__ import annotations

import json

import pytest

import p2smt
from p2smt.errors import P2Error
from p2smt.model.collectives import Collective, collective_named
from p2smt.model.goal import Goal, GoalKind
from p2smt.model.profile import Communication


def one_error_line(rc: int, out: str, err: str, fragment: str) -> bool:
    lines = err.splitlines()
    return rc == 2 and out == "" and len(lines) == 1 and lines[0].startswith("p2smt: error: ") and fragment in err


# ---------------------------------------------------------------- #8: one parser of collective names

@pytest.mark.parametrize("spelling", ["reduce-scatter", "reducescatter", "ReduceScatter", "reduce_scatter",
                                      "REDUCE-SCATTER"])
def test_every_spelling_names_one_collective(spelling):
    assert collective_named(spelling) is Collective.REDUCE_SCATTER
    assert Collective.parse(spelling) is Collective.REDUCE_SCATTER
    assert GoalKind.parse(spelling) is GoalKind.REDUCE_SCATTER
    assert Goal.of(spelling, None, (0,)).kind is GoalKind.REDUCE_SCATTER
    assert Communication(name="g", kind=spelling, axes=("x",), bytes_per_device=1).kind == "reduce-scatter"


def test_a_profile_reduction_keeps_its_kind_word():
    kinds = [Communication(name="g", kind=k, axes=("x",), bytes_per_device=1).kind
             for k in ("reduce", "allreduce", "AllReduce", "all-gather", "AllGather", "p2p")]
    assert kinds == ["reduce", "reduce", "reduce", "all-gather", "all-gather", "p2p"]


def test_unknown_names_list_each_places_canonical_names():
    with pytest.raises(P2Error, match="unknown goal 'Reduce'; choose from allreduce, reduce-scatter, all-gather$"):
        GoalKind.parse("Reduce")
    with pytest.raises(P2Error, match="choose from AllReduce, ReduceScatter, AllGather, Reduce, Broadcast$"):
        Collective.parse("gather")


@pytest.mark.parametrize("spelling", ["reduce-scatter", "ReduceScatter", "reducescatter"])
def test_cost_takes_every_spelling_and_answers_in_its_own(run_cli, spelling):
    rc, out, _ = run_cli("cost", "--system", "dgx-h100", "--collective", spelling, "--bytes", "1e6", "--json")
    assert rc == 0 and json.loads(out)["collective"] == "reducescatter"
    assert p2smt.cost("dgx-h100", spelling, 1e6).seconds == json.loads(out)["seconds"]


def test_cost_refuses_an_unknown_collective_with_its_names(run_cli):
    assert one_error_line(*run_cli("cost", "--system", "dgx-h100", "--collective", "gather", "--bytes", "1e6"),
                          "argument --collective: unknown collective 'gather'; choose from allreduce, reducescatter, "
                          "allgather, reduce, broadcast")


@pytest.mark.parametrize("spelling", ["allgather", "AllGather", "all-gather"])
def test_goal_takes_every_spelling_and_answers_in_its_own(run_cli, spelling):
    argv = ("check", "--system", "v100-2x8", "--axes", "16", "--reduce", "0", "--matrix", "[[2,8]]",
            "--program", "(root, InsideGroup, AllGather)", "--json")
    rc, out, _ = run_cli(*argv, "--goal", spelling)
    assert rc == 0 and json.loads(out)["goal"]["kind"] == "all-gather"


def test_goal_refuses_a_collective_that_is_no_goal(run_cli):
    assert one_error_line(*run_cli("synth", "--system", "v100-2x8", "--axes", "16", "--reduce", "0", "--goal",
                                   "broadcast"), "unknown goal 'broadcast'; choose from allreduce, reduce-scatter")


def test_the_dsl_reads_the_same_names():
    req = p2smt.Request("v100-2x8", axes=(16,), reduce=(0,), matrix=((2, 8),))
    assert p2smt.check(req, "(root, InsideGroup, allreduce)").valid
    assert p2smt.groups(req, "(node, InsideGroup, all_reduce)")[0]["instruction"] == "(node, InsideGroup, AllReduce)"
