"""``p2smt best``: the N cheapest programs per placement under the cost model, found and proved with Z3."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from p2smt.cli.bounded import add_bounds, report_expired, run_bounded
from p2smt.cli.options import (
    add_allow_noop,
    add_cost,
    add_json,
    add_request,
    engine_config,
    request_of,
    seconds,
)
from p2smt.cli.output import ExitCode, emit


def register(sub) -> None:
    p = sub.add_parser("best", help="the N cheapest programs under the cost model, found and proved with Z3")
    add_request(p)
    p.add_argument("--engine", default="z3", choices=["z3"], help="the search is Z3's (kept for symmetry)")
    p.add_argument("--max-len", type=int, default=8)
    add_cost(p)
    p.add_argument("--top", type=int, default=1, help="programs per placement (rank order)")
    p.add_argument("--timeout", type=seconds,
                   help="seconds per solver call; a placement that runs out is 'unknown'")
    p.add_argument("--encoding", help="counterexample-guided encoding (default bool-matrix)")
    p.add_argument("--encoding-options", help="JSON object of encoding options")
    p.add_argument("--bound", default="clauses", choices=["clauses", "sum"],
                   help="how cost <= U reaches the solver: prefix clauses (default) or also a bit-vector sum")
    add_allow_noop(p)
    p.add_argument("--method", default="z3", choices=["z3", "search"],
                   help="z3: Z3 proves nothing cheaper exists (default); search: exact branch and bound on the "
                        "interpreter's state (docs/symmetry.md), much faster on large hierarchies")
    p.add_argument("--no-lookahead", action="store_true",
                   help="bound a prefix by the next step alone, not by the count abstraction's cheapest completion")
    add_bounds(p)
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The N cheapest programs per placement under the cost model, found and proved optimal with Z3."""
    from p2smt.cost.best import best

    req = request_of(args)
    config = engine_config(args)
    system = req.load_system()
    bounded = run_bounded(args, "best: proving", lambda report: best(system, req.axes, req.reduce, matrix=req.matrix, max_len=config.max_len, top=args.top,
                  algo=args.algo, bytes_per_device=args.bytes, timeout_ms=config.timeout_ms,
                  encoding=config.encoding or "bool-matrix", encoding_options=config.encoding_options,
                  hierarchy_kind=req.hierarchy, master_scope=req.master_scope,
                  require_progress=req.require_progress, bound=args.bound, lookahead=not args.no_lookahead,
                  method=args.method))
    if bounded.expired:
        return report_expired(args, bounded, "placements")
    result = bounded.result
    payload = result.to_json()

    def render(c: Console) -> None:
        c.print(f"{system.name}: axes {list(req.axes)}, reduce {list(result.reduction_axes)}, max length "
                f"{config.max_len}, {args.algo}, {result.bytes_per_device:.4g} bytes per device: "
                f"[bold]{result.status}[/bold] ({len(result.matrices)} placements, {result.seconds:.3f} s)")
        for m in result.matrices:
            levels = " > ".join(f"{n} {s}" for n, s in m.hierarchy.levels)
            t = Table(title=f"matrix {[list(r) for r in m.matrix]}  hierarchy {levels}  "
                            f"({m.status}, {m.seconds:.3f} s)")
            t.add_column("#", justify="right")
            t.add_column("seconds", justify="right")
            t.add_column("program")
            for i, p in enumerate(m.programs, 1):
                t.add_row(str(i), f"{p.seconds:.6g}", p.text)
            c.print(t)
        if payload["best"]:
            b = payload["best"]
            c.print(f"best: matrix {b['matrix']}  {b['seconds']:.6g} s  {b['program']}")

    emit(args, payload, render)
    return ExitCode.OK if result.status == "optimal" else ExitCode.UNKNOWN
