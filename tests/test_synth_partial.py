"""A synthesis stopped early keeps the programs of every first step its search finished (issue: ``--deadline``
ends ``unknown`` with the programs found so far), and those programs are all in the complete result.

No assertion reads a clock: searches are stopped by their own callback, and the CLI's child hangs after a
counted number of first steps.
"""

from __future__ import annotations

import json

import pytest

from p2smt.model.dsl import problem
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement
from p2smt.model.problem import canonical_order
from p2smt.model.request import Request
from p2smt.model.system import load_system
from p2smt.synth import enumerative, pieces, symmetric
from p2smt.synth.config import EngineConfig
from p2smt.synth.driver import synthesize
from p2smt.synth.partial import FirstStepPrograms, partial_placements

A100 = ["--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--matrix", "[[1,4],[4,4]]"]
SEARCHES = {"enumerative": enumerative.enumerate_programs, "pieces": pieces.enumerate_programs,
            "symmetric": symmetric.search}


class Stop(Exception):
    """Raised by a callback to stop a search part-way, as a deadline does."""


def a100_problem():
    system = load_system("a100-4x16")
    placement = Placement(system.sizes, (4, 16), ((1, 4), (4, 4)))
    h = synthesis_hierarchy(placement, placement.check_axes((1,)), system.level_names)
    return problem(h, True)


@pytest.mark.parametrize("engine", sorted(SEARCHES))
def test_each_first_step_reports_its_final_programs(engine):
    search = SEARCHES[engine]
    prob = a100_problem()
    full = search(prob, 4)
    reports: list[tuple[int, list[tuple[int, ...]]]] = []
    assert search(prob, 4, lambda i, found: reports.append((i, found))) == full
    assert [i for i, _ in reports] == list(range(len(prob.candidates)))
    for i, found in reports:
        assert found == canonical_order(found) and all(p[0] == i for p in found)
    assert canonical_order([p for _, found in reports for p in found]) == full


@pytest.mark.parametrize("engine", sorted(SEARCHES))
def test_a_search_stopped_part_way_keeps_a_subset_of_the_full_result(engine):
    search = SEARCHES[engine]
    prob = a100_problem()
    full = set(search(prob, 4))
    kept: list[tuple[int, ...]] = []

    def report(i: int, found: list[tuple[int, ...]]) -> None:
        kept.extend(found)
        if len(kept) >= 3:
            raise Stop

    with pytest.raises(Stop):
        search(prob, 4, report)
    assert len(kept) >= 3 and set(kept) < full


def test_partial_placements_merge_the_first_steps_of_unfinished_placements():
    req = Request("a100-4x16", axes=(4, 16), reduce=(1,), matrix=((1, 4), (4, 4)))
    config = EngineConfig(engine="pieces", max_len=4)
    full = synthesize(req, config)
    (whole,) = full.matrices
    seen: list[FirstStepPrograms] = []

    def on_partial(piece: FirstStepPrograms) -> None:
        seen.append(piece)
        if sum(len(p.programs) for p in seen) >= 4:
            raise Stop

    with pytest.raises(Stop):
        synthesize(req, config, on_partial=on_partial)
    (part,) = partial_placements(seen)
    assert part.matrix == whole.matrix and part.first_steps_done == len(seen) < part.candidates
    assert len(part.programs) >= 4 and set(part.programs) < set(whole.programs)
    order = {p: n for n, p in enumerate(whole.programs)}
    assert [order[p] for p in part.programs] == sorted(order[p] for p in part.programs)
    assert "not every program" in part.rests_on and "compressed interpreter" in part.rests_on
    assert partial_placements(seen, [whole.matrix]) == ()


def test_z3_engines_report_no_first_steps():
    req = Request("a100-4x16", axes=(4, 16), reduce=(1,), matrix=((1, 4), (4, 4)))
    seen: list[FirstStepPrograms] = []
    synthesize(req, EngineConfig(engine="z3", max_len=2), on_partial=seen.append)
    assert seen == []


def test_synth_deadline_lists_the_programs_found_so_far(run_cli, monkeypatch):
    from p2smt.synth import driver

    real = driver._first_step_reporter

    def hang_after_three(*args):
        report = real(*args)
        calls: list[int] = []

        def wrapped(i, found):
            report(i, found)
            calls.append(i)
            if len(calls) == 3:
                __import__("time").sleep(600)

        return wrapped

    monkeypatch.setattr(driver, "_first_step_reporter", hang_after_three)
    argv = ["synth", *A100, "--engine", "certified", "--max-len", "4"]
    rc, out, _ = run_cli(*argv, "--json")
    assert rc == 0
    (whole,) = json.loads(out)["matrices"]
    rc, out, _ = run_cli(*argv, "--deadline", "2", "--json")
    payload = json.loads(out)
    assert rc == 4 and payload["status"] == "unknown" and payload["matrices"] == []
    (part,) = payload["partial"]
    assert part["matrix"] == whole["matrix"] and part["complete"] is False
    assert part["first_steps_searched"] == 3 < part["first_steps"]
    assert part["programs"] and set(part["programs"]) < set(whole["programs"])
    assert part["programs"] == [p for p in whole["programs"] if p in set(part["programs"])]
    assert "the Z3 certificate was not reached" in part["rests_on"] and "not re-checked" in part["rests_on"]
    assert payload["message"].endswith(f"{len(part['programs'])} programs found so far in 1 unfinished placement "
                                       "(partial: not every program)")
    rc, out, _ = run_cli(*argv, "--deadline", "2")
    text = " ".join(out.split())
    assert rc == 4 and "PARTIAL:" in text and "3 of" in text and "status unknown" in text


def test_synth_deadline_structure_on_a_large_placement(run_cli):
    """The issue's request: whatever the machine's speed, the output says what was found and on what it rests."""
    rc, out, _ = run_cli("synth", "--system", "h100-superpod", "--axes", "1024", "--reduce", "0", "--max-len", "5",
                         "--engine", "pieces", "--deadline", "1", "--json")
    payload = json.loads(out)
    assert rc == 4 and payload["status"] == "unknown" and isinstance(payload["partial"], list)
    for part in payload["partial"]:
        assert part["complete"] is False and part["first_steps_searched"] < part["first_steps"]
        assert part["programs"] and "the compressed interpreter's exhaustive search" in part["rests_on"]
