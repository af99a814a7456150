"""Z3 on the ground query of ``smt2``: every lemma proved (``unsat``), or the lemmas it refutes."""

from __future__ import annotations

import time
from dataclasses import dataclass

import z3

from p2smt.certcheck.smt2 import query

BATCH = 4096
"""Lemmas per query: one query for every placement of P²'s grid and for BlueConnect at length 6."""


@dataclass(frozen=True)
class Proved:
    """Z3's answer on a certificate's lemmas: ``status`` unsat (all proved), sat (``refuted`` lists the
    false lemmas' terms) or unknown (``why``); the query texts, queries and resource units spent."""

    status: str
    refuted: tuple[str, ...]
    texts: tuple[str, ...]
    queries: int
    units: int
    seconds: float
    why: str | None = None


def prove(lemmas: frozenset[tuple], k: int, units: int | None = None) -> Proved:
    """Every lemma by Z3, ``BATCH`` to a ground query, within ``units`` resource units (None: no limit)."""
    start = time.perf_counter()
    ordered = sorted(lemmas, key=repr)
    texts, refuted, spent, status, why = [], [], 0, "unsat", None
    for i in range(0, max(len(ordered), 1), BATCH):
        text, terms = query(ordered[i : i + BATCH], k)
        texts.append(text)
        ctx = z3.Context()
        solver = z3.Solver(ctx=ctx)
        if units is not None:
            solver.set("rlimit", max(units - spent, 1))
        solver.from_string(text)
        answer = solver.check()
        figures = solver.statistics()
        names = figures.keys()
        spent += int(figures.get_key_value("rlimit count")) if "rlimit count" in names else 0
        if answer == z3.unknown:
            status, why = "unknown", solver.reason_unknown()
            break
        if answer == z3.sat:
            status = "sat"
            refuted += [t for t in terms if not _holds(text, t)]
    return Proved(status, tuple(refuted), tuple(texts), len(texts), spent, time.perf_counter() - start, why)


def _holds(text: str, term: str) -> bool:
    """Whether one lemma is true: the query's definitions with only its negation asserted."""
    head = text[: text.index("(define-fun lemma0 ")] if "(define-fun lemma0 " in text else text
    solver = z3.Solver(ctx=z3.Context())
    solver.from_string(head + f"(assert (not {term}))\n")
    return solver.check() == z3.unsat
