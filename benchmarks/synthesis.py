"""Synthesis time per configuration of P2.md §7's grid: enumerative engine versus Z3 (issue 3 must-show).

For every configuration (all matrices of one axes/reduction request, max length 5) it prints the
number of programs, the enumerative time, the Z3 time (engine alone, and with the interpreter's
re-check of every program that ``synthesize`` performs), their ratio, P²'s reported range
(0.0035–1.16 s per configuration), whether both engines found the same programs, then the totals and
the machine. With z3 among the engines, the "floor" column is a reference floor: the time Z3 needs
merely to hand back the known programs as models, plus the interpreter's re-check of them
(``z3_floor``) — what an engine that returns every program as a Z3 model pays before any semantics.
``--engines`` adds ``z3-cegis``; ``--json FILE`` writes every row.

    python benchmarks/synthesis.py                 # the whole grid
    python benchmarks/synthesis.py --only a100-4x16 --engines enumerative,z3,z3-cegis
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from p2smt.model.request import Request
from p2smt.model.system import load_system
from p2smt.runs.grid import paper_grid
from p2smt.runs.machine import describe_machine, machine_info
from p2smt.synth.config import EngineConfig
from p2smt.synth.driver import recheck, synthesize

P2_RANGE = (0.0035, 1.16)


def run(engine: str, cfg, timeout_ms: int | None):
    system = load_system(cfg.system)
    config = EngineConfig(engine=engine, timeout_ms=timeout_ms)
    start = time.perf_counter()
    res = synthesize(Request.for_system(system, cfg.axes, cfg.reduction_axes), config)
    total = time.perf_counter() - start
    engine_only = sum(float(m.stats.get("seconds", m.seconds)) for m in res.matrices)
    programs = [tuple(str(p) for p in m.programs) for m in res.matrices]
    return res, total, engine_only, programs


def z3_floor(cfg) -> tuple[float, float]:
    """Seconds Z3 needs to hand back a request's known programs one model at a time (no semantics),
    and seconds of the interpreter's re-check of those programs (which every Z3 engine must run).

    The answer set (from the enumerative engine, not timed) is asserted as a disjunction over one
    bit-vector choice per step (STOP = n), and models are enumerated with blocking clauses through
    z3py, as an engine must: with the re-check, a reference floor for a sound engine that returns every
    program as a Z3 model (an estimate: an engine's own choice encoding may differ).
    """
    import z3

    from p2smt.model.dsl import problem
    from p2smt.model.hierarchy import synthesis_hierarchy
    from p2smt.synth.driver import placements_for
    from p2smt.synth.enumerative import enumerate_programs

    system = load_system(cfg.system)
    seen, total, checked = set(), 0.0, 0.0
    for placement in placements_for(system, tuple(cfg.axes), None):
        h = synthesis_hierarchy(placement, tuple(cfg.reduction_axes), system.level_names)
        prob = problem(h, True)
        if prob in seen:
            continue
        seen.add(prob)
        programs = enumerate_programs(prob, 5)
        start = time.perf_counter()
        n, steps = len(prob.candidates), 5
        ctx = z3.Context()
        solver = z3.SolverFor("QF_FD", ctx=ctx)
        width = n.bit_length()
        x = [z3.BitVec(f"x{t}", width, ctx) for t in range(steps)]
        solver.add(*[z3.ULE(v, n) for v in x])
        solver.add(*[z3.Implies(x[t] == n, x[t + 1] == n) for t in range(steps - 1)])
        solver.add(z3.Or([z3.And([x[t] == (p[t] if t < len(p) else n) for t in range(steps)]) for p in programs]))
        found = 0
        while solver.check() == z3.sat:
            model = solver.model()
            values = [model[v].as_long() for v in x]
            solver.add(z3.Or([v != a for v, a in zip(x, values)]))
            found += 1
        total += time.perf_counter() - start
        assert found == len(programs)
        start = time.perf_counter()
        recheck(prob, programs, "z3")
        checked += time.perf_counter() - start
    return total, checked


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", default="enumerative,pieces,z3", help="comma list; the first is the baseline")
    ap.add_argument("--only", help="only configurations whose label contains this text")
    ap.add_argument("--timeout", type=int, help="per solver call, ms")
    ap.add_argument("--json", help="write the rows as JSON to this file")
    args = ap.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    base = engines[0]
    configs = [c for c in paper_grid() if not args.only or args.only in c.label]
    rows = []
    totals = {e: 0.0 for e in engines}
    engine_totals = {e: 0.0 for e in engines}
    head = (
        f"{'configuration':44s} {'mats':>4s} {'progs':>5s} "
        + " ".join(f"{e + ' s':>12s}" for e in engines)
        + " "
        + " ".join(f"{e + '/' + base:>16s}" for e in engines[1:])
    )
    head += "  same  P² range         " + " ".join(f"{e + ' ≤1.16':>12s}" for e in engines[1:])
    print(head)
    print("-" * len(head))
    floor_total, floor_check = 0.0, 0.0
    for cfg in configs:
        results = {e: run(e, cfg, args.timeout) for e in engines}
        floor, checked = z3_floor(cfg) if "z3" in engines else (0.0, 0.0)
        floor_total += floor
        floor_check += checked
        ref = results[base][3]
        same = all(results[e][3] == ref for e in engines)
        row = {
            "config": cfg.label,
            "matrices": len(results[base][0].matrices),
            "programs": results[base][0].total_programs,
            "same_programs": same,
        }
        for e in engines:
            res, total, eng, _ = results[e]
            totals[e] += total
            engine_totals[e] += eng
            row[e] = {"seconds": round(total, 4), "engine_seconds": round(eng, 4), "status": res.status}
        line = f"{cfg.label:44s} {row['matrices']:4d} {row['programs']:5d} " + " ".join(
            f"{results[e][1]:12.3f}" for e in engines
        )
        line += " " + " ".join(f"{results[e][1] / max(results[base][1], 1e-9):16.1f}" for e in engines[1:])
        line += f"  {'yes' if same else 'NO':4s}  {P2_RANGE[0]}–{P2_RANGE[1]} s  "
        line += " ".join(f"{'yes' if results[e][1] <= P2_RANGE[1] else 'no':>12s}" for e in engines[1:])
        line += f"  floor {floor:.3f} + {checked:.3f}" if "z3" in engines else ""
        row["z3_floor_seconds"] = round(floor, 4)
        row["recheck_seconds"] = round(checked, 4)
        print(line, flush=True)
        rows.append(row)
    print("-" * len(head))
    print(
        "totals: "
        + ", ".join(f"{e} {totals[e]:.2f} s (engine alone {engine_totals[e]:.2f} s)" for e in engines)
    )
    for e in engines[1:]:
        print(
            f"ratio {e}/{base}: {totals[e] / max(totals[base], 1e-9):.2f}x overall "
            f"(engines alone {engine_totals[e] / max(engine_totals[base], 1e-9):.2f}x); "
            f"configurations under P²'s {P2_RANGE[1]} s: "
            f"{sum(1 for r in rows if r[e]['seconds'] <= P2_RANGE[1])}/{len(rows)} "
            f"(engine alone: {sum(1 for r in rows if r[e]['engine_seconds'] <= P2_RANGE[1])}/{len(rows)})"
        )
    if "z3" in engines:
        print(
            f"Z3 reference floor (the known programs handed back as models, no semantics): {floor_total:.2f} s"
            f" = {floor_total / max(totals[base], 1e-9):.2f}x {base}; with the interpreter's re-check of them "
            f"({floor_check:.2f} s): {(floor_total + floor_check) / max(totals[base], 1e-9):.2f}x {base}"
        )
    print(f"all program sets equal: {all(r['same_programs'] for r in rows)}")
    print(f"machine: {describe_machine()}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"machine": machine_info(), "rows": rows, "totals": totals}, indent=2)
        )
    return 0 if all(r["same_programs"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
