"""The Z3 engine (issue 3): encoding plug-ins, exact enumeration against the enumerative engine,
tight length bounds, status on timeouts, SMT-LIB2 emission."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import z3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2smt.errors import P2Error
from p2smt.model.dsl import problem
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement, matrices
from p2smt.model.system import load_system
from p2smt.runs.grid import paper_grid
from p2smt.smt.engine import EngineResult, enumerate_z3
from p2smt.smt.registry import ENV_VAR, available_encodings, load_encoding
from p2smt.synth.enumerative import enumerate_programs

RS_AR_AG = (
    "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); (node, InsideGroup, AllGather)"
)


def labels(prob, programs) -> list[str]:
    return [prob.label(p) for p in programs]


# ---------------------------------------------------------------- registry


def test_shipped_encodings_are_discovered_sorted():
    names = [spec.name for spec in available_encodings()]
    assert names == sorted(names)
    assert {"bool-matrix", "values"} <= set(names)
    spec = load_encoding("bool-matrix")
    assert spec.description and "\n" not in spec.description
    assert {o["name"] for o in spec.option_help()} >= {"refine", "cells", "weights", "arithmetic"}


def test_unknown_encoding_lists_what_exists():
    with pytest.raises(P2Error, match="unknown encoding 'nope'.*bool-matrix.*values"):
        load_encoding("nope")


def test_bad_option_names_the_option(flat_hierarchy):
    prob = problem(flat_hierarchy((2,)))
    with pytest.raises(P2Error, match="option color.*(options: .*refine)"):
        enumerate_z3(prob, 2, options={"color": "red"})
    with pytest.raises(P2Error, match="option cells"):
        enumerate_z3(prob, 2, options={"cells": "some"})


PLUGIN = '''
"""renamed-matrix: the bool-matrix encoding under another name (a user plug-in)."""
from p2smt.smt.base import EncodingOptions, EncodingSpec
from p2smt.smt.registry import load_encoding


class Options(EncodingOptions):
    pass


def make(problem, max_len, options):
    return load_encoding("bool-matrix").create(problem, max_len)


ENCODING = EncodingSpec("renamed-matrix", "bool-matrix under another name", Options, make)
'''


def test_plugin_from_extra_dir_and_environment(tmp_path, monkeypatch, flat_hierarchy):
    (tmp_path / "renamed_matrix.py").write_text(PLUGIN)
    names = [s.name for s in available_encodings(extra_dirs=[tmp_path])]
    assert "renamed-matrix" in names and names == sorted(names)
    prob = problem(flat_hierarchy((2, 2)))
    res = enumerate_z3(prob, 3, encoding="renamed-matrix", extra_dirs=[tmp_path])
    assert list(res.programs) == enumerate_programs(prob, 3)
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert load_encoding("renamed-matrix").name == "renamed-matrix"


def test_broken_plugins_are_bad_input(tmp_path):
    (tmp_path / "wrong_name.py").write_text(PLUGIN)
    with pytest.raises(P2Error, match="declares name 'renamed-matrix'; expected 'wrong-name'"):
        load_encoding("wrong-name", extra_dirs=[tmp_path])
    other = tmp_path / "other"
    other.mkdir()
    (other / "bool_matrix.py").write_text(PLUGIN)
    with pytest.raises(P2Error, match="defined twice"):
        available_encodings(extra_dirs=[other])
    (tmp_path / "no_spec.py").write_text("X = 1\n")
    with pytest.raises(P2Error, match="no ENCODING spec"):
        load_encoding("no-spec", extra_dirs=[tmp_path])
    with pytest.raises(P2Error, match="does not exist"):
        available_encodings(extra_dirs=[tmp_path / "missing"])


# ---------------------------------------------------------------- tight bounds and exactness


def test_max_len_one_finds_only_allreduce(flat_hierarchy):
    for sizes in [(4, 4), (8,), (2, 3)]:
        prob = problem(flat_hierarchy(sizes, ("node", "gpu")[-len(sizes) :]))
        res = enumerate_z3(prob, 1)
        assert res.status == "complete"
        assert labels(prob, res.programs) == ["(root, InsideGroup, AllReduce)"]


def test_rs_ar_ag_needs_length_three(flat_hierarchy):
    prob = problem(flat_hierarchy((4, 4), ("node", "gpu")))
    assert RS_AR_AG not in labels(prob, enumerate_z3(prob, 2).programs)
    three = enumerate_z3(prob, 3)
    assert RS_AR_AG in labels(prob, three.programs)
    assert list(three.programs) == enumerate_programs(prob, 3)


@pytest.mark.parametrize(
    "sizes, max_len, require_progress",
    [
        ((2,), 5, True),
        ((5,), 4, False),
        ((2, 2), 5, True),
        ((3, 2), 4, False),
        ((2, 3), 5, True),
        ((2, 2, 2), 3, True),
    ],
)
def test_same_programs_as_enumerative(flat_hierarchy, sizes, max_len, require_progress):
    prob = problem(flat_hierarchy(sizes), require_progress)
    res = enumerate_z3(prob, max_len)
    assert isinstance(res, EngineResult)
    assert res.status == "complete"
    assert list(res.programs) == enumerate_programs(prob, max_len)
    assert res.stats["solver_calls"] + res.stats["implied"] >= len(res.programs) + 1


@pytest.mark.parametrize("kind", ["a", "b", "c"])
def test_several_goal_groups(hierarchy_of, kind):
    """Hierarchies (a)–(c) keep every device: several goal groups, groups that cross them."""
    for m in matrices((2, 4), (4, 2)):
        h = hierarchy_of((2, 4), (4, 2), m, (0,), ("node", "gpu"), kind)
        prob = problem(h)
        assert list(enumerate_z3(prob, 3).programs) == enumerate_programs(prob, 3)


@pytest.mark.parametrize(
    "options",
    [
        {"refine": "prefix"},
        {"cells": "all"},
        {"cells": "none", "weights": False},
        {"arithmetic": "int"},
        {"lemma_depth": 0},
    ],
)
def test_encoding_options_agree(flat_hierarchy, options):
    prob = problem(flat_hierarchy((2, 2)))
    assert list(enumerate_z3(prob, 4, options=options).programs) == enumerate_programs(prob, 4)


def grid_problems():
    """Every distinct synthesis problem of docs/evaluation-grid.md's grid (problems depend only on level sizes)."""
    seen = {}
    for cfg in paper_grid():
        system = load_system(cfg.system)
        for m in matrices(system.sizes, cfg.axes):
            h = synthesis_hierarchy(
                Placement(system.sizes, cfg.axes, m), cfg.reduction_axes, system.level_names
            )
            seen.setdefault(h.sizes, h)
    return [seen[k] for k in sorted(seen)]


@pytest.mark.parametrize("h", grid_problems(), ids=lambda h: "x".join(map(str, h.sizes)))
def test_grid_conformance(h):
    prob = problem(h)
    res = enumerate_z3(prob, 5)
    assert res.status == "complete"
    assert list(res.programs) == enumerate_programs(prob, 5)


@st.composite
def hierarchies(draw):
    levels = draw(st.integers(1, 3))
    sizes = tuple(draw(st.integers(2, 6)) for _ in range(levels))
    total = 1
    for s in sizes:
        total *= s
    if total > 36:
        sizes = sizes[:2] if sizes[0] * sizes[1] <= 36 else sizes[:1]
    max_len = {1: 5, 2: 3, 3: 2}[len(sizes)]
    return sizes, max_len, draw(st.booleans())


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hierarchies())
def test_random_hierarchies_match_enumerative(flat_hierarchy, case):
    sizes, max_len, require_progress = case
    prob = problem(flat_hierarchy(sizes), require_progress)
    res = enumerate_z3(prob, max_len)
    assert res.status == "complete"
    assert list(res.programs) == enumerate_programs(prob, max_len)


# ---------------------------------------------------------------- status, determinism, emission


def test_tiny_timeout_is_never_complete(flat_hierarchy):
    prob = problem(flat_hierarchy((4, 16)))
    res = enumerate_z3(prob, 5, timeout_ms=1)
    assert res.status == "unknown"
    assert set(res.programs) <= set(enumerate_programs(prob, 5))


def test_bad_lengths_and_timeouts(flat_hierarchy):
    prob = problem(flat_hierarchy((2,)))
    empty = enumerate_z3(prob, 0)
    assert (empty.status, empty.programs) == ("complete", ())
    with pytest.raises(P2Error):
        enumerate_z3(prob, -1)
    with pytest.raises(P2Error, match="timeout"):
        enumerate_z3(prob, 2, timeout_ms=0)


def test_deterministic(flat_hierarchy):
    prob = problem(flat_hierarchy((2, 4)))
    assert enumerate_z3(prob, 4).programs == enumerate_z3(prob, 4).programs


def test_stats_report_solver_work(flat_hierarchy):
    res = enumerate_z3(problem(flat_hierarchy((2, 2))), 3)
    for key in ("solver_calls", "per_length", "seconds", "checks", "witnesses", "refinements"):
        assert key in res.stats
    assert set(res.stats["per_length"]) == {1, 2, 3}
    assert any(k in res.stats for k in ("conflicts", "decisions", "memory", "max memory"))


def test_emit_smt2_writes_parseable_queries(tmp_path: Path, flat_hierarchy):
    prob = problem(flat_hierarchy((2, 2)))
    res = enumerate_z3(prob, 2, emit_smt2=tmp_path)
    files = sorted(tmp_path.glob("*.smt2"))
    assert len(files) == res.stats["smt2_files"] > 0
    assert any("synth" in f.name for f in files) and any("forall" in f.name for f in files)
    text = files[0].read_text()
    assert "check-sat-assuming" in text
    solver = z3.Solver()
    solver.from_string(textwrap.dedent(text.split("(check-sat-assuming")[0]))
    assert solver.check() == z3.sat
    # the first candidate is (root, InsideGroup, AllReduce), which the checker's query proves
    proof = next(f for f in files if "forall" in f.name).read_text()
    checker = z3.Solver()
    checker.from_string(proof.replace("(check-sat)", ""))
    assert checker.check() == z3.unsat


# ---------------------------------------------------------------- proving candidates in batches


def _all_sequences(n: int, max_len: int):
    out, frontier = [], [()]
    for _ in range(max_len):
        frontier = [s + (c,) for s in frontier for c in range(n)]
        out += frontier
    return out


@pytest.mark.parametrize("checker", ["mask", "column"])
def test_batch_proofs_match_the_enumerative_set(flat_hierarchy, checker):
    """``PlanChecker.failures`` on every sequence of up to 2 steps (valid and invalid mixed in one
    batch) accepts exactly the programs the enumerative engine finds."""
    prob = problem(flat_hierarchy((2, 3)))
    enc = load_encoding("bool-matrix").create(prob, 2, {"checker": checker})
    seqs = _all_sequences(len(prob.candidates), 2)
    fails = enc.proof_checker().failures(seqs)
    valid = {s for s, f in zip(seqs, fails) if f is None}
    assert valid == set(enumerate_programs(prob, 2))
    assert all(f.rule for f in fails if f is not None)


@pytest.mark.parametrize(
    "options",
    [
        {"quotient": False},
        {"checker": "column"},
        {"cells": "none"},  # the first candidate fails: the mask checker's failure is diagnosed
        {"cells": "none", "refine": "prefix", "checker": "column"},
    ],
)
def test_checker_and_track_options_agree(flat_hierarchy, options):
    prob = problem(flat_hierarchy((2, 4)))
    res = enumerate_z3(prob, 4, options=options)
    assert res.status == "complete"
    assert list(res.programs) == enumerate_programs(prob, 4)


def test_witness_refinement_names_a_full_cell(flat_hierarchy):
    """Without an initial track some candidate fails; its refinement adds the failing cell's track."""
    prob = problem(flat_hierarchy((2, 4)))
    res = enumerate_z3(prob, 4, options={"cells": "none"})
    assert res.stats["refinements"].get("witness", 0) >= 1
    assert res.stats["witnesses"] >= 1


def test_quotient_track_is_small(flat_hierarchy):
    """The chunk-0 track follows one device per cell of a stable partition that singles out its
    column, whatever the number of devices."""
    from p2smt.smt.structure import Quotient, Structure

    for sizes in [(4, 8), (2, 16), (8, 8)]:
        s = Structure(problem(flat_hierarchy(sizes)))
        q = Quotient(s, 0)
        assert q.k <= 8 < s.k
        assert q.cell[0] == q.device and q.cell.count(q.device) == 1
        assert all(len(q.group_of(c, gi)) == len(s.group_of(c, gi))
                   for c in range(len(s.cand_groups)) for gi in range(len(s.cand_groups[c])))


def test_prefix_refinement_with_the_mask_checker(flat_hierarchy):
    prob = problem(flat_hierarchy((2, 4)))
    res = enumerate_z3(prob, 4, options={"cells": "none", "refine": "prefix"})
    assert res.stats["refinements"].get("prefix", 0) >= 1
    assert list(res.programs) == enumerate_programs(prob, 4)
