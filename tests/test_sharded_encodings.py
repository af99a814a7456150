"""The bitvec and values (z3-cegis) encodings take the sharded goals of docs/semantics.md §6: for ReduceScatter
and AllGather on a100-4x16 and HSDP on fig2-16gpu each finds exactly the pieces engine's programs (and drops as
many by positions, so the chunk-semantics sets agree too); the representative wrapper still refuses in one line.
Lengths are kept where a 64-device unrolling stays within a minute or so on two shared cores. The vectorized
interpreter (the re-check above 512 devices) gives the compressed one's verdict on every program up to length 3."""

from __future__ import annotations

import functools
import itertools

import pytest

from p2smt.errors import P2Error
from p2smt.model.dsl import problem
from p2smt.model.goal import Goal
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.request import Request
from p2smt.semantics import pieces as compressed
from p2smt.semantics import vectorized
from p2smt.synth import recheck as recheck_module
from p2smt.synth.config import Engine, EngineConfig
from p2smt.synth.driver import synthesize

A100 = {"system": "a100-4x16", "axes": (64,), "reduce": (0,), "matrix": ((4, 16),)}
HSDP = {"system": "fig2-16gpu", "axes": (4, 4), "reduce": (0, 1), "matrix": ((1, 2, 2, 1), (1, 1, 1, 4))}
TWO_GROUPS = {"system": "dgx-a100", "axes": (2, 2, 4), "reduce": (1, 2), "matrix": ((2, 1), (1, 2), (1, 4)),
              "hierarchy": "c"}
GOALS = {"rs": (A100, "reduce-scatter", None), "ag": (A100, "all-gather", None), "hsdp": (HSDP, "reduce-scatter", (1,)),
         "c-hsdp": (TWO_GROUPS, "reduce-scatter", (2,)), "c-ag": (TWO_GROUPS, "all-gather", None)}
CASES = [("bitvec", "rs", 2), ("bitvec", "ag", 4), ("bitvec", "hsdp", 3),
         ("values", "rs", 2), ("values", "ag", 3), ("values", "hsdp", 3)]


def request(name: str) -> Request:
    where, kind, shard = GOALS[name]
    return Request(**where, goal=Goal.of(kind, shard, where["reduce"]))


def found(name: str, config: EngineConfig) -> tuple[list[str], int]:
    """The programs and how many chunk-semantics programs the positions interpreter dropped."""
    (m,) = synthesize(request(name), config).matrices
    return [str(p) for p in m.programs], m.stats.get("positions_dropped")


@functools.cache
def pieces(name: str, max_len: int) -> tuple[list[str], int]:
    return found(name, EngineConfig(engine=Engine.PIECES, max_len=max_len))


@pytest.mark.slow  # 8-52 s each on 64 devices: run by .ci/run (P2SMT_SLOW=1), not by a plain pytest
@pytest.mark.parametrize(("encoding", "name", "max_len"), CASES, ids=[f"{e}-{n}-{m}" for e, n, m in CASES])
def test_the_encoding_finds_the_pieces_set(encoding, name, max_len):
    expected = pieces(name, max_len)
    assert expected[0], "the goal has programs at this length"
    assert found(name, EngineConfig(engine=Engine.Z3, encoding=encoding, max_len=max_len)) == expected


def test_the_sets_are_the_goal_s_not_the_allreduce_one():
    """A test that could fail: the ReduceScatter set holds the two ReduceScatter orders, not AllReduce's."""
    progs, _ = pieces("rs", 2)
    across_then_inside = "(node, Parallel(root), ReduceScatter); (node, InsideGroup, ReduceScatter)"
    assert progs == ["(root, InsideGroup, ReduceScatter)", across_then_inside]


def test_the_representative_wrapper_refuses_a_sharded_goal():
    config = EngineConfig(engine=Engine.Z3, encoding="representative", max_len=2)
    with pytest.raises(P2Error, match="representative encoding does not take the reduce-scatter goal"):
        synthesize(request("hsdp"), config)


def synthesis_problem(name: str):
    req = request(name)
    system = req.load_system()
    (placement,) = req.placements(system)
    h = synthesis_hierarchy(placement, placement.check_axes(req.reduce), system.level_names, req.hierarchy,
                            req.master_scope)
    return problem(h, req.require_progress, req.sharding(placement, h)), h


@pytest.mark.parametrize("name", list(GOALS))
def test_the_vectorized_interpreter_gives_the_compressed_one_s_verdicts(name):
    prob, h = synthesis_problem(name)
    n = len(prob.candidates)
    progs = [p for length in (1, 2, 3) for p in itertools.product(range(n), repeat=length)]
    expected = [(v.proved, v.step, v.rule) for v in compressed.check_programs(prob, progs)]
    assert any(proved for proved, _, _ in expected)
    for sizes in (None, h.sizes):
        assert [(v.proved, v.step, v.rule) for v in vectorized.check_programs(prob, progs, sizes=sizes)] == expected


def test_the_re_check_above_the_dense_interpreter_takes_the_goal(monkeypatch):
    """The re-check's compressed and vectorized forms (here forced at 64 devices) drop what the dense one does."""
    prob, _ = synthesis_problem("ag")
    progs = [p for length in (1, 2) for p in itertools.product(range(len(prob.candidates)), repeat=length)]
    dense = recheck_module.recheck(prob, progs, "test", drop=True)
    assert 0 < len(dense) < len(progs)
    for pieces_above, vectorized_above in ((16, 1024), (16, 32)):
        monkeypatch.setattr(recheck_module, "PIECES_ABOVE", pieces_above)
        monkeypatch.setattr(recheck_module, "VECTORIZED_ABOVE", vectorized_above)
        assert recheck_module.recheck(prob, progs, "test", drop=True) == dense
