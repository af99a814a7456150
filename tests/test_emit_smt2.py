"""``--emit-smt2``: every solver query is a file of plain SMT-LIB2 that Z3 re-reads with the engine's verdict.

The engine's verdicts are recorded by wrapping ``z3.Solver.check`` for the duration of one run; the
checker's follow-up query for a chunk-0 witness (same assertions plus one assumption, not a new
query) is the only call that is not emitted, and it is left out of the record.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import z3

from p2smt.model.dsl import problem
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement
from p2smt.model.request import Request
from p2smt.model.system import load_system
from p2smt.smt.engine import enumerate_z3
from p2smt.smt.registry import available_encodings
from p2smt.synth.config import EngineConfig
from p2smt.synth.driver import synthesize
from p2smt.synth.enumerative import enumerate_programs

ENCODINGS = [spec.name for spec in available_encodings() if spec.wrapper is None]
# wrapper strategies (representative) write their inner runs' queries: tests/test_representative.py
MAX_LEN = 2
FILE_NAME = re.compile(r"^(?P<tag>.+)-(?P<n>\d{5})-len(?P<len>\d+)-(?P<kind>[a-z-]+)\.smt2$")


def _problem(sizes):
    placement = Placement(tuple(sizes), (int(__import__("math").prod(sizes)),), (tuple(sizes),))
    return problem(synthesis_hierarchy(placement, (0,), ("node", "gpu")[-len(sizes):]))


def _recorded_run(monkeypatch, prob, max_len, encoding, folder):
    """(engine result, [(solver, had assumptions, verdict)] of every check in the run)."""
    calls: list[tuple[z3.Solver, bool, z3.CheckSatResult]] = []
    original = z3.Solver.check

    def check(self, *assumptions):
        result = original(self, *assumptions)
        calls.append((self, bool(assumptions), result))
        return result

    monkeypatch.setattr(z3.Solver, "check", check)
    result = enumerate_z3(prob, max_len, encoding=encoding, emit_smt2=folder)
    monkeypatch.setattr(z3.Solver, "check", original)
    checkers = {id(s) for s, with_args, _ in calls if not with_args}
    queries = [(s, v) for s, with_args, v in calls if not (with_args and id(s) in checkers)]
    return result, queries


SMT_LIB2_COMMANDS = {"declare-fun", "declare-const", "define-fun", "assert", "check-sat", "check-sat-assuming",
                     "push", "pop", "set-logic", "set-option", "set-info"}


def _commands(text: str) -> list[str]:
    """The head symbol of every top-level form (comments, strings and |quoted| symbols skipped)."""
    plain = re.sub(r'\|[^|]*\||"(?:[^"]|"")*"|;[^\n]*', " ", text)
    heads, depth = [], 0
    for m in re.finditer(r"[()]", plain):
        if m.group() == "(":
            if depth == 0:
                heads.append(re.match(r"\(\s*([^\s()]*)", plain[m.start():m.start() + 64]).group(1))
            depth += 1
        else:
            depth -= 1
    assert depth == 0, "unbalanced parentheses"
    return heads


def _z3_verdict(text: str) -> str:
    """Z3's answer to a whole SMT-LIB2 script in a fresh context (runs its check-sat command)."""
    ctx = z3.Context()
    return z3.Z3_eval_smtlib2_string(ctx.ref(), text).strip()


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_emitted_queries_reread_with_the_same_verdicts(encoding, monkeypatch, tmp_path):
    prob = _problem((2, 2))
    result, queries = _recorded_run(monkeypatch, prob, MAX_LEN, encoding, tmp_path)
    assert result.status == "complete" and list(result.programs) == enumerate_programs(prob, MAX_LEN)
    files = sorted(tmp_path.glob("*.smt2"))
    assert len(files) == len(queries) == result.stats["smt2_files"]
    synth_calls = [v for s, v in queries if s is queries[0][0]]
    assert len(synth_calls) == result.stats["solver_calls"]
    synth_files: dict[int, list[str]] = {}
    for path, (_, verdict) in zip(files, queries, strict=True):
        m = FILE_NAME.match(path.name)
        assert m is not None and m["tag"] == encoding, path.name
        text = path.read_text()
        commands = _commands(text)
        assert set(commands) <= SMT_LIB2_COMMANDS, f"{path.name}: {set(commands) - SMT_LIB2_COMMANDS}"
        assert commands[-1] in ("check-sat", "check-sat-assuming") and "assert" in commands, path.name
        answer = _z3_verdict(text)
        assert answer == str(verdict), path.name
        if m["kind"] == "synth":
            synth_files.setdefault(int(m["len"]), []).append(answer)
    assert sorted(synth_files) == list(range(1, MAX_LEN + 1))
    for length, verdicts in synth_files.items():
        assert verdicts[-1] == "unsat", length  # each length ends when the solver runs out of models
        assert set(verdicts[:-1]) <= {"sat"}, length
    found = {n: len(v) - 1 for n, v in synth_files.items()}
    per_length = {int(n): d["programs"] for n, d in result.stats["per_length"].items()}
    refuted = sum(result.stats["refinements"].values())
    assert sum(found.values()) + result.stats.get("implied", 0) == sum(per_length.values()) + refuted


def test_first_query_carries_its_assertions(tmp_path):
    """The very first query (before any check) must declare and assert the whole unrolled problem."""
    prob = _problem((2,))
    enumerate_z3(prob, 1, emit_smt2=tmp_path)
    first = min(tmp_path.glob("*-len1-synth.smt2"))
    solver = z3.Solver()
    solver.from_file(str(first))
    assert len(solver.assertions()) > 0
    assert _z3_verdict(first.read_text()) == "sat"


def test_synth_command_path_writes_one_file_per_query(tmp_path):
    """Through ``synthesize`` (the path of ``p2smt synth --emit-smt2``), one matrix."""
    system = load_system("a100-2x16")
    config = EngineConfig(engine="z3", max_len=2, emit_smt2=str(tmp_path / "q"))
    result = synthesize(Request.for_system(system, (4, 8), (0,), matrix=((2, 2), (1, 8))), config)
    stats = result.matrices[0].stats
    files = sorted((tmp_path / "q").glob("*.smt2"))
    assert result.status == "complete"
    assert len(files) == stats["smt2_files"] == stats["solver_calls"] + stats.get("checker_calls", 0)
    assert all(_z3_verdict(p.read_text()) in ("sat", "unsat") for p in files)


def test_unwritable_folder_is_bad_input(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    from p2smt.errors import P2Error

    with pytest.raises(P2Error, match="cannot create --emit-smt2 folder"):
        enumerate_z3(_problem((2,)), 1, emit_smt2=Path(blocker) / "sub")
