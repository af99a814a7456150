"""The certified engine's state-graph proof: the explicit search writes its state graph, the independent
checker (``p2smt.certcheck``) closes it and derives the programs, and one ground Z3 query per batch proves
every distinct step against §4 (docs/certified.md, "The state-graph certificate")."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from p2smt.certcheck.closure import Closed, Problem, Rejected, check, close
from p2smt.certcheck.prove import prove
from p2smt.errors import InternalError, P2Error
from p2smt.model.problem import SynthesisProblem
from p2smt.synth.search import FirstStepReport
from p2smt.synth.stategraph import GraphBuilder, explore


def checker_problem(prob: SynthesisProblem) -> Problem:
    """The problem as the checker reads it: plain devices, groups and collective names."""
    sh = prob.sharding
    return Problem(prob.num_devices, tuple(prob.goal_groups),
                   tuple((c.collective.value, tuple(c.groups)) for c in prob.candidates), prob.require_progress,
                   None if sh is None else (sh.kind.value, tuple(sh.rank), sh.shards))


def certificate_proof(prob: SynthesisProblem, max_len: int, *, units: int | None = None,
                      folder: str | None = None, on_first_step: FirstStepReport | None = None,
                      timeout_ms: int | None = None) -> tuple[tuple[tuple[int, ...], ...], dict[str, Any]]:
    """(programs, stats): the search's programs and the proof's figures (``certified``, else ``why_not``);
    a certificate the checker rejects or a step Z3 refutes is an InternalError (the search is wrong).
    Z3's resource units bound the proof but are not reported: in the thread's reused context they depend
    by a few units on the queries run before, and a report must not."""
    start = time.perf_counter()
    graph = explore(prob, max_len)
    programs = graph.programs(on_first_step)
    searched = time.perf_counter()
    doc = graph.document(programs)
    try:
        checked = check(doc, checker_problem(prob), max_len)
    except Rejected as err:
        raise InternalError(f"certified synthesis: the state-graph certificate is rejected: {err}") from None
    closed = time.perf_counter()
    stats = _proved(prob, doc, checked.lemmas, checked.states, checked.steps, units, folder,
                    (start, searched, closed), timeout_ms)
    return tuple(programs), stats


def graph_proof(prob: SynthesisProblem, max_len: int, *, units: int | None = None, timeout_ms: int | None = None,
                grow: Callable[[GraphBuilder], Any] | None = None) -> tuple[dict[str, Any], Closed, dict[str, Any]]:
    """(certificate, its closed graph, figures): the state graph without its program set, closed by the
    checker and its steps proved by Z3 — what ``best`` reads its cheapest goal paths from. ``grow`` expands
    the states it needs (``best``'s cost bound; the rest stay unexpanded, ``Closed.unexpanded``); without it,
    every state before ``max_len`` is expanded, as for synthesis."""
    start = time.perf_counter()
    if grow is None:
        graph = explore(prob, max_len)
    else:
        builder = GraphBuilder(prob)
        grow(builder)
        graph = builder.graph(max_len)
    doc = graph.document([], lists=False)
    searched = time.perf_counter()
    try:
        closed = close(doc, checker_problem(prob), max_len, partial=grow is not None)
    except Rejected as err:
        raise InternalError(f"best: the state-graph certificate is rejected: {err}") from None
    walked = time.perf_counter()
    stats = _proved(prob, doc, closed.lemmas, len(closed.reached), closed.steps, units, None,
                    (start, searched, walked), timeout_ms)
    stats["certificate"]["unexpanded"] = len(closed.unexpanded)
    return doc, closed, stats


def _proved(prob: SynthesisProblem, doc: dict[str, Any], lemmas: frozenset[tuple], states: int, steps: int,
            units: int | None, folder: str | None, times: tuple[float, float, float],
            timeout_ms: int | None = None) -> dict[str, Any]:
    """Z3 on the lemmas; the figures (``certified``, else ``why_not``); a refuted step is an InternalError."""
    start, searched, closed = times
    proved = prove(lemmas, prob.num_devices, units, timeout_ms)
    if folder is not None and proved.status == "unsat":  # only a finished proof: no partial certificate
        write(Path(folder), doc, proved.texts)
    if proved.status == "sat":
        raise InternalError("the state-graph certificate: Z3 refutes steps of the graph against §4: "
                            + "; ".join(proved.refuted[:3]))
    figures = {"proof": "certificate", "states": states, "steps": steps,
               "lemmas": len(lemmas), "queries": proved.queries,
               "search_seconds": round(searched - start, 6), "check_seconds": round(closed - searched, 6),
               "solver_seconds": round(proved.seconds, 6), "seconds": round(time.perf_counter() - start, 6)}
    stats: dict[str, Any] = {"certified": proved.status == "unsat", "certificate": figures}
    if proved.status != "unsat":
        stats["why_not"] = (f"the state-graph proof {proved.why} before it finished (--proof-budget raises it; 0: no "
                            "limit)" if proved.why and proved.why.startswith("spent") else
                            f"the state-graph proof stopped: {proved.why or 'Z3 gave no answer'}")
    return stats


def certificate_words(k: int, max_len: int, figures: dict[str, Any]) -> str:
    """What a result certified by the state graph rests on."""
    return (f"Z3-certified at the real size ({k} devices) by a state-graph certificate: {figures['states']} states "
            f"and {figures['steps']} steps closed by the independent checker, the programs exactly its goal paths "
            f"of length ≤ {max_len}, every distinct step ({figures['lemmas']} lemmas) proved by Z3 against §4 "
            f"({figures['queries']} ground {'query' if figures['queries'] == 1 else 'queries'})")


def write(folder: Path, doc: dict[str, Any], texts: tuple[str, ...]) -> None:
    """The certificate as ``state-graph-<digest>.json`` and its Z3 queries as ``…-<n>.smt2`` in ``folder``."""
    text = json.dumps(doc, separators=(",", ":"))
    stem = f"state-graph-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{stem}.json").write_text(text, encoding="utf-8")
        for i, query in enumerate(texts):
            (folder / f"{stem}-{i}.smt2").write_text(query, encoding="utf-8")
    except OSError as err:
        raise P2Error(f"--certificate: cannot write to {folder} ({err.strerror})") from None
