"""Z3 on the ground query of ``smt2``: every lemma proved (``unsat``), or the lemmas it refutes."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import z3

from p2smt.certcheck.smt2 import query

BATCH = 4096
"""Lemmas per query: one query for every placement of P²'s grid and for BlueConnect at length 6."""


_LOCAL = threading.local()


def _context() -> z3.Context:
    """This thread's Z3 context, made once: a context costs several milliseconds, a placement's whole
    query on P²'s smallest problems about one."""
    ctx = getattr(_LOCAL, "ctx", None)
    if ctx is None:
        ctx = _LOCAL.ctx = z3.Context()
    return ctx


def _units(ctx: z3.Context) -> int:
    """The context's resource units spent so far (Z3 counts per context)."""
    figures = z3.SimpleSolver(ctx=ctx).statistics()
    return int(figures.get_key_value("rlimit count")) if "rlimit count" in figures.keys() else 0  # noqa: SIM118


def _text(x) -> str:
    """A lemma's sort key: its repr with numbers in hex (a k²-bit state past 119 devices has more decimal digits
    than Python converts)."""
    if isinstance(x, tuple):
        return "(" + ",".join(_text(y) for y in x) + ")"
    return format(x, "x") if isinstance(x, int) else repr(x)


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


def prove(lemmas: frozenset[tuple], k: int, units: int | None = None, timeout_ms: int | None = None) -> Proved:
    """Every lemma by Z3, ``BATCH`` to a ground query, within ``units`` resource units (None: no limit): a
    query whose parsing has spent more is not answered (unknown; Z3's counts repeat, so the same one stops
    on every run). ``timeout_ms`` bounds each query's wall time, reading included (``--timeout``)."""
    start = time.perf_counter()
    ordered = sorted(lemmas, key=_text)
    texts, refuted, status, why = [], [], "unsat", None
    ctx = _context()
    begun = _units(ctx)
    for i in range(0, max(len(ordered), 1), BATCH):
        text, terms = query(ordered[i : i + BATCH], k)
        texts.append(text)
        solver = z3.SimpleSolver(ctx=ctx)
        began = time.perf_counter()
        solver.from_string(text)  # ground: Z3 rewrites every lemma while it parses, counted in its units
        spent = _units(ctx) - begun
        if timeout_ms is not None:
            left = timeout_ms - (time.perf_counter() - began) * 1000
            if left <= 0:
                status, why = "unknown", f"exceeded the --timeout of {timeout_ms:,} ms per query"
                break
            solver.set("timeout", max(1, int(left)))
        if units is not None:
            if spent > units:
                status, why = "unknown", f"spent its budget of {units:,} Z3 resource units"
                break
            solver.set("rlimit", units - spent)
        answer = solver.check()
        if answer == z3.unknown:
            why = solver.reason_unknown()
            status, why = "unknown", (f"exceeded the --timeout of {timeout_ms:,} ms per query"
                                      if timeout_ms is not None and why in ("timeout", "canceled") else why)
            break
        if answer == z3.sat:
            status = "sat"
            refuted += [t for t in terms if not _holds(text, t)]
    return Proved(status, tuple(refuted), tuple(texts), len(texts), _units(ctx) - begun,
                  time.perf_counter() - start, why)


def _holds(text: str, term: str) -> bool:
    """Whether one lemma is true: the query's definitions with only its negation asserted."""
    head = text[: text.index("(define-fun lemma0 ")] if "(define-fun lemma0 " in text else text
    solver = z3.SimpleSolver(ctx=_context())
    solver.from_string(head + f"(assert (not {term}))\n")
    return solver.check() == z3.unsat
