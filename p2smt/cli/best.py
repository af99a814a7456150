"""``p2smt best``: the N cheapest programs per placement under the cost model, found by exact search and their
optimality proved with Z3 where it reaches (up to 256 synthesis devices; above, the search alone, said)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from p2smt.cli.bounded import add_bounds, run_bounded
from p2smt.cli.goals import add_goal
from p2smt.cli.options import (
    add_allow_noop,
    add_cost,
    add_json,
    add_request,
    engine_config,
    refuse_given,
    request_of,
    seconds,
)
from p2smt.cli.output import ExitCode, counted, emit
from p2smt.errors import P2Error
from p2smt.smt.budget import DEFAULT_PROOF_BUDGET


def register(sub) -> None:
    p = sub.add_parser("best", help="the N cheapest programs under the cost model, proved optimal with Z3 up to 256 synthesis devices")
    add_request(p)
    add_goal(p)
    p.add_argument("--engine", default="z3", choices=["z3"], help="the search is Z3's (kept for symmetry)")
    p.add_argument("--max-len", type=int, default=8, help="longest program considered (default 8)")
    add_cost(p)
    p.add_argument("--top", type=int, default=1, help="programs per placement (rank order)")
    p.add_argument("--timeout", type=seconds,
                   help="seconds per solver call (the Z3 method's, or the proof's); a placement that runs out is "
                        "'unknown'")
    p.add_argument("--encoding", help="counterexample-guided encoding (default bool-matrix)")
    p.add_argument("--encoding-options", help="JSON object of encoding options")
    p.add_argument("--bound", choices=["clauses", "sum"],
                   help="how cost <= U reaches the solver: prefix clauses (default) or also a bit-vector sum")
    add_allow_noop(p)
    p.add_argument("--method", default="search", choices=["search", "z3"],
                   help="search: exact branch and bound on the interpreter's state (docs/symmetry.md), its list then "
                        "proved (--proof; default); z3: Z3 finds the list and proves nothing cheaper exists")
    p.add_argument("--proof", default="auto", choices=["auto", "certificate", "bound", "none"],
                   help="what proves --method search's list: the state-graph certificate, grown as far as the cost "
                        "bound (auto up to 64 synthesis devices), one Z3 bound query (auto up to 256), or none (the "
                        "exhaustive search alone, not certified; auto above 256)")
    p.add_argument("--proof-budget", type=int, default=DEFAULT_PROOF_BUDGET, metavar="M",
                   help=f"millions of Z3 resource units for the certificate's query (default {DEFAULT_PROOF_BUDGET}; "
                        "0: no limit); a proof that runs out leaves the placement 'unknown'")
    p.add_argument("--no-lookahead", action="store_true",
                   help="bound a prefix by the next step alone, not by the count abstraction's cheapest completion")
    add_bounds(p)
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The N cheapest programs per placement under the cost model: exact search, optimality proved with Z3 where
    it reaches; an uncertified result says so in its header, ``certified`` and ``rests_on``."""
    from p2smt.cost.best import best
    from p2smt.synth.driver import placements_for

    if args.method == "search" and args.proof != "bound":
        refuse_given((("--encoding", args.encoding), ("--encoding-options", args.encoding_options),
                      ("--bound", args.bound), ("--no-lookahead", args.no_lookahead)),
                     "options of the Z3 bound strategy (--method z3, or --method search --proof bound)")
    if args.proof == "none":
        refuse_given((("--timeout", args.timeout),), "--proof none calls no solver (--deadline bounds the search)")
    if args.method == "z3":
        refuse_given((("--proof", args.proof != "auto" and args.proof),
                      ("--proof-budget", args.proof_budget != DEFAULT_PROOF_BUDGET)),
                     "options of --method search (--method z3 is its own proof)")
    if args.proof_budget < 0:
        raise P2Error(f"--proof-budget must be 0 (no limit) or positive, got {args.proof_budget}")
    req = request_of(args)
    config = engine_config(args)
    system = req.load_system()
    placements = placements_for(system, req.axes, req.matrix)

    def work(report):
        return best(req, max_len=config.max_len, top=args.top, algo=args.algo, bytes_per_device=args.bytes,
                    timeout_ms=config.timeout_ms, encoding=config.encoding or "bool-matrix",
                    encoding_options=config.encoding_options, bound=args.bound or "clauses",
                    lookahead=not args.no_lookahead, method=args.method, proof=args.proof,
                    proof_budget=args.proof_budget, report=report)

    bounded = run_bounded(args, "best: placements proved", work, total=len(placements))
    result = bounded.result if not bounded.expired else partial_result(args, req, system, placements, bounded)
    payload = result.to_json()
    finished = {tuple(m.matrix) for m in result.matrices}
    unfinished = [[list(r) for r in p.matrix] for p in placements if tuple(p.matrix) not in finished]
    if bounded.expired:
        message = f"deadline of {bounded.deadline:g} s reached with {len(result.matrices)} of {len(placements)} " \
                  "placements finished"
        payload |= {"status": "unknown", "message": message, "unfinished": unfinished}

    def render(c: Console) -> None:
        status = "unknown" if bounded.expired else result.status
        if status == "optimal" and not payload["certified"]:
            status = "optimal by exhaustive search, not certified by Z3"
        c.print(f"{system.name}: axes {list(req.axes)}, reduce {list(result.reduction_axes)}, max length "
                f"{config.max_len}, {args.algo}, {result.bytes_per_device:.4g} bytes per device: "
                f"[bold]{status}[/bold] ({counted(len(result.matrices), 'placement')}, {result.seconds:.3f} s)")
        for m in result.matrices:
            levels = " > ".join(f"{n} {s}" for n, s in m.hierarchy.levels)
            said = m.status if m.certified or m.status == "unknown" else f"{m.status}, not certified"
            t = Table(title=f"matrix {[list(r) for r in m.matrix]}  hierarchy {levels}  "
                            f"({said}, {m.seconds:.3f} s)")
            t.add_column("#", justify="right")
            t.add_column("seconds", justify="right")
            t.add_column("program")
            for i, p in enumerate(m.programs, 1):
                t.add_row(str(i), f"{p.seconds:.6g}", p.text)
            c.print(t)
            if "rests_on" in m.stats:
                c.print(f"  rests on: {m.stats['rests_on']}")
        if payload["best"]:
            b = payload["best"]
            what = "best of the finished placements" if bounded.expired else "best"
            c.print(f"{what}: matrix {b['matrix']}  {b['seconds']:.6g} s  {b['program']}")
        if bounded.expired:
            c.print(f"not finished: {', '.join(str(m) for m in unfinished)}")
            c.print(f"[yellow]UNKNOWN[/yellow]: {payload['message']}")

    emit(args, payload, render)
    if bounded.expired:
        return ExitCode.UNKNOWN
    return ExitCode.OK if result.status == "optimal" else ExitCode.UNKNOWN


def partial_result(args: argparse.Namespace, req, system, placements, bounded):
    """The placements ``best`` finished before the deadline, each with its proved-cheapest programs."""
    from p2smt.cost.best import BestResult
    from p2smt.cost.rank import check_request

    nbytes = check_request(system, args.algo, args.bytes, args.top)
    reduce = placements[0].check_axes(req.reduce)
    return BestResult(system.name, tuple(req.axes), reduce, args.algo, float(nbytes), args.max_len, args.top,
                      tuple(bounded.pieces), float(bounded.deadline or 0))
