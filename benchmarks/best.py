"""Cost-guided search (``p2smt best``) vs enumerate-then-rank, at max length 5, 6, 7, 8.

    python benchmarks/best.py [--lengths 5,6,7,8] [--limit 600] [--cases a100,superpod] [--top 1]
                              [--engine pieces|enumerative] [--method search|z3] [--json FILE]

Cases: the 4 × A100 system (``a100-4x16``, axes 4,16 reducing axis 1: every placement) and the
1,024-GPU ``h100-superpod`` (su 4 > node 32 > pcie 4 > gpu 2; axes 16,64 reducing axis 0 with the
placement that spreads the 16-way reduction as 2 × 2 × 2 × 2 over all four levels). Each point runs
in its own process under a wall-clock limit, both sides of a point one after the other in the same
run (the machine is shared, so only ratios measured side by side mean much); a side that exceeds
the limit is reported as such. speedup = enumerate-then-rank seconds / best seconds; "same": equal
top-N lists (programs, seconds, order) per placement and equal overall best. The enumerating side
uses ``--engine`` (default ``pieces``, the fastest exact enumeration; ``enumerative`` is P²'s); the
cost-guided side ``--method`` (default ``search``: the branch and bound of ``cost.branch`` on the
bitmatrix state; ``z3``: the Z3 bound strategy of ``cost.bound``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from p2smt.model.request import Request
from p2smt.runs.child import OutcomeStatus, run_in_child
from p2smt.runs.machine import describe_machine, machine_info
from p2smt.synth.config import EngineConfig

CASES = {
    "a100": {"system": "a100-4x16", "axes": [4, 16], "reduce": [1], "matrix": None},
    "superpod": {"system": "h100-superpod", "axes": [16, 64], "reduce": [0],
                 "matrix": [[2, 2, 2, 2], [2, 16, 2, 1]]},
}


def point_spec(case: str, side: str, max_len: int, top: int, engine: str, method: str = "search") -> dict:
    """One side of one point as JSON: the case's request, the engine configuration and ``best``'s method."""
    c = CASES[case]
    matrix = tuple(tuple(r) for r in c["matrix"]) if c["matrix"] else None
    request = Request(c["system"], tuple(c["axes"]), tuple(c["reduce"]), matrix=matrix)
    config = EngineConfig(engine=engine, max_len=max_len)
    return {"request": request.to_json(), "config": config.to_json(), "side": side, "top": top, "method": method}


def run_point(spec: dict) -> dict:
    """One side of one point, in this process (the child): {"seconds", "status", "best", ...}."""
    request = Request.from_json(spec["request"])
    config = EngineConfig.from_json(spec["config"])
    system = request.load_system()
    start = time.perf_counter()
    if spec["side"] == "rank":
        from p2smt.cost.rank import rank_result
        from p2smt.synth.driver import synthesize

        result = synthesize(Request.for_system(system, request.axes, request.reduce, matrix=request.matrix),
                            config)
        synth_seconds = time.perf_counter() - start
        report = rank_result(system, result, top=spec["top"])
        return {"seconds": time.perf_counter() - start, "synth_seconds": synth_seconds,
                "programs": result.total_programs, "status": result.status, "best": report["best"],
                "top": [m["programs"] for m in report["matrices"]]}
    from p2smt.cost.best import best

    found = best(Request.for_system(system, request.axes, request.reduce, matrix=request.matrix),
                 max_len=config.max_len, top=spec["top"], method=spec.get("method", "z3"))
    report = found.to_json()
    calls = sum(m.stats.get("solver_calls", 0) for m in found.matrices)
    clauses = sum(m.stats.get("cost_clauses", 0) for m in found.matrices)
    return {"seconds": time.perf_counter() - start, "status": report["status"], "best": report["best"],
            "top": [m["programs"] for m in report["matrices"]], "solver_calls": calls, "cost_clauses": clauses}


def measure(spec: dict, limit: float) -> dict:
    """Run a point in a fresh child process (``runs.child``); {"timeout": limit} when it does not finish."""
    outcome = run_in_child(f"{Path(__file__).resolve()}:run_point", [spec], limit_s=limit)
    if outcome.status == OutcomeStatus.OK:
        return outcome.value
    if outcome.status == OutcomeStatus.TIMEOUT:
        return {"timeout": limit, "seconds": outcome.seconds}
    return {"error": outcome.error}


def show(side: dict) -> str:
    if "timeout" in side:
        return f"> {side['timeout']:.0f} s (limit)"
    if "error" in side:
        return f"error: {side['error']}"
    return f"{side['seconds']:.2f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="5,6,7,8")
    parser.add_argument("--limit", type=float, default=600.0, help="wall-clock seconds per side of a point")
    parser.add_argument("--cases", default="a100,superpod")
    parser.add_argument("--top", type=int, default=1)
    parser.add_argument("--engine", default="pieces", help="engine of the enumerate-then-rank side")
    parser.add_argument("--method", default="search", help="best's method: search (branch and bound) or z3")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    info = machine_info()
    print(f"machine: {describe_machine(info)}")
    print(f"per-side wall limit {args.limit:.0f} s, top {args.top}, enumerating engine {args.engine}, "
          f"best's method {args.method}")
    header = f"{'case':<9} {'len':>3}  {'enumerate+rank':>18}  {'programs':>8}  {'best (' + args.method + ')':>18}  " \
             f"{'calls':>6}  {'speedup':>7}  same  best program"
    print(header)
    rows = []
    for case in args.cases.split(","):
        for length in [int(v) for v in args.lengths.split(",")]:
            ranked = measure(point_spec(case, "rank", length, args.top, args.engine), args.limit)
            found = measure(point_spec(case, "best", length, args.top, args.engine, args.method), args.limit)
            both = "best" in ranked and "best" in found
            same = ("yes" if ranked["top"] == found["top"] and ranked["best"] == found["best"] else "NO") if both \
                else "-"
            ratio = f"{ranked['seconds'] / found['seconds']:.2f}x" if both else "-"
            if "best" in found and "timeout" in ranked:
                ratio = f">{ranked['timeout'] / found['seconds']:.1f}x"
            program = (found.get("best") or ranked.get("best") or {}).get("program", "-")
            print(f"{case:<9} {length:>3}  {show(ranked):>18}  {ranked.get('programs', '-'):>8}  "
                  f"{show(found):>18}  {found.get('solver_calls', '-'):>6}  {ratio:>7}  {same:<4}  {program}",
                  flush=True)
            rows.append({"case": case, "max_len": length, "enumerate_then_rank": ranked, "best": found,
                         "same": same})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "limit": args.limit, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
