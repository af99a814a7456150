"""cvc5 re-checks Z3's certificates: every written query gets the answer Z3 recorded as its ``:status``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from p2smt.model.dsl import problem
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.system import load_system
from p2smt.runs.grid import paper_grid
from p2smt.smt.certify import certify
from p2smt.synth.driver import placements_for
from p2smt.synth.enumerative import enumerate_programs

cvc5 = pytest.importorskip("cvc5")

Z3_ONLY = ("(_ at-most", "(_ at-least", "(_ pbeq", "(_ pble", "(_ pbge")


def cvc5_answer(text: str) -> str:
    """cvc5's answer to the one ``check-sat`` of an SMT-LIB2 script."""
    tm = cvc5.TermManager()
    solver = cvc5.Solver(tm)
    parser = cvc5.InputParser(solver)
    parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, text, "certificate")
    symbols = parser.getSymbolManager()
    answers = []
    while True:
        cmd = parser.nextCommand()
        if cmd.isNull():
            break
        out = cmd.invoke(solver, symbols).strip()
        if out in ("sat", "unsat", "unknown"):
            answers.append(out)
    assert len(answers) == 1, answers
    return answers[0]


def grid_problems(levels: tuple[int, ...]):
    """The distinct synthesis problems of P²'s grid whose hierarchies have the given numbers of levels."""
    seen = {}
    for cfg in paper_grid():
        system = load_system(cfg.system)
        for placement in placements_for(system, tuple(cfg.axes), None):
            h = synthesis_hierarchy(placement, tuple(cfg.reduction_axes), system.level_names)
            prob = problem(h, True)
            if sum(size > 1 for _, size in h.levels) in levels and prob not in seen:
                seen[prob] = f"{cfg.label} {[list(r) for r in placement.matrix]}"
    return sorted(seen.items(), key=lambda item: (item[0].num_devices, item[1]))


PROBLEMS = grid_problems((1, 2))


def test_grid_has_one_and_two_level_problems():
    assert len(PROBLEMS) >= 8


def _param(prob, label):
    """Problems above 16 devices take minutes in cvc5 (measured: 32 devices ~75 s, 64 devices ~400 s)."""
    marks = [pytest.mark.slow] if prob.num_devices > 16 else []
    return pytest.param(prob, id=label.replace(" ", "_"), marks=marks)


@pytest.mark.parametrize("prob", [_param(p, label) for p, label in PROBLEMS])
def test_cvc5_agrees_with_z3_on_grid_certificates(prob, tmp_path: Path):
    cert = certify(prob, 5, enumerate_programs(prob, 5), certificate=tmp_path)
    assert cert.certified
    files = sorted(tmp_path.glob("*.smt2"))
    assert any("validity" in f.name for f in files)
    assert sum("completeness" in f.name for f in files) >= 1  # at least the final unsat query (all lengths at once)
    for f in files:
        text = f.read_text()
        assert "(set-logic ALL)" in text and "(check-sat)" in text
        assert not any(op in text for op in Z3_ONLY), f.name
        expected = re.search(r"\(set-info :status (sat|unsat)\)", text).group(1)
        assert cvc5_answer(text) == expected, f.name
