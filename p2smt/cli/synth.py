"""``p2smt synth``: every valid reduction program up to ``--max-len`` on every placement (or one)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from p2smt.cli.bounded import add_bounds, run_bounded
from p2smt.cli.options import (
    add_allow_noop,
    add_json,
    add_request,
    add_search,
    engine_config,
    request_of,
    seconds,
)
from p2smt.cli.output import ExitCode, emit


def register(sub) -> None:
    p = sub.add_parser("synth", help="synthesize every valid reduction program up to --max-len")
    add_request(p)
    add_search(p)
    p.add_argument("--encoding", help="Z3 encoding variant (see `p2smt encodings`)")
    p.add_argument("--encoding-options", help="JSON object of encoding options")
    p.add_argument("--timeout", type=seconds, help="seconds per solver call")
    p.add_argument("--emit-smt2", metavar="DIR", help="write each solver query as SMT-LIB2 into DIR")
    p.add_argument("--certificate", metavar="DIR",
                   help="certified engine: write Z3's validity and completeness queries as SMT-LIB2 into DIR")
    p.add_argument("--prune", default="none", help="named pruning of the complete set (see docs); default none")
    add_allow_noop(p)
    p.add_argument("--show", type=int, default=20, help="programs shown per matrix (human output)")
    add_bounds(p)
    add_json(p)
    p.set_defaults(func=run)


LEGEND = ("matrix: rows = parallelism axes, columns = system levels (outermost first); an entry is how many "
          "parts of that axis lie at that level")


def bounded_synthesis(args: argparse.Namespace, req, config, label: str):
    """``synthesize`` under ``--deadline``/``--progress``: (bounded run, result or the placements found)."""
    from p2smt.synth.driver import SynthesisResult, synthesize

    system = req.load_system()
    placements = req.placements(system)
    bounded = run_bounded(args, label, lambda report: synthesize(req, config, on_matrix=report),
                          total=len(placements))
    if bounded.result is not None:
        return bounded, bounded.result
    reduce = placements[0].check_axes(req.reduce)
    partial = SynthesisResult(system.name, req.axes, reduce, config.engine, config.max_len, tuple(bounded.pieces),
                              float(bounded.deadline or 0))
    return bounded, partial


def next_steps(args: argparse.Namespace) -> str:
    """How to rank or pick the best of the programs just listed (same request options)."""
    req = f"--system {args.system} --axes {args.axes} --reduce {args.reduce}"
    if args.matrix:
        req += f" --matrix '{args.matrix}'"
    return (f"next: `p2smt rank {req}` orders these by predicted time; `p2smt best {req}` finds the cheapest "
            "with Z3 and proves it optimal")


def certification_line(result) -> str:
    """Whether Z3 certified the programs, and how long the proofs took (or why there is no proof)."""
    proofs = [m.stats["certificate"] for m in result.matrices if "certificate" in m.stats]
    secs = sum(p["seconds"] for p in proofs)
    if result.certified:
        return (f"certified by Z3: every program proved valid and no other program of length ≤ {result.max_len} "
                f"exists ({len(proofs)} proofs, {secs:.3f} s)")
    why = sorted({m.stats["why_not"] for m in result.matrices if m.stats.get("why_not")})
    return f"[yellow]NOT certified by Z3[/yellow]: {'; '.join(why)} (programs from the proposer, re-checked)"


def run(args: argparse.Namespace) -> int:
    bounded, result = bounded_synthesis(args, request_of(args), engine_config(args), "synth: placements")
    payload = result.to_json()
    if bounded.expired:
        payload |= {"status": "unknown", "message": bounded.message("placements")}

    def render(c: Console) -> None:
        c.print(
            f"{result.system}: axes {list(result.axes)}, reduce {list(result.reduction_axes)}, "
            f"engine {args.engine}, max length {args.max_len}: [bold]{result.total_programs}[/bold] programs "
            f"over {len(result.matrices)} placements in {result.seconds:.3f} s — status {result.status}"
        )
        for m in result.matrices:
            t = Table(
                title=f"matrix {[list(r) for r in m.matrix]}  hierarchy "
                f"{' > '.join(f'{n} {s}' for n, s in m.hierarchy.levels)}  "
                f"({len(m.programs)} programs, {m.seconds:.3f} s, {m.status}"
                + (f"; same problem as {m.stats['same_problem_as']}" if "same_problem_as" in m.stats else "")
                + ")"
            )
            t.add_column("#", justify="right")
            t.add_column("program")
            for n, p in enumerate(m.programs[: args.show]):
                t.add_row(str(n), str(p))
            if len(m.programs) > args.show:
                t.add_row("…", f"{len(m.programs) - args.show} more (use --show or --json)")
            c.print(t)
            if "rests_on" in m.stats:
                c.print(f"  rests on: {m.stats['rests_on']}")
        if result.certified is not None:
            c.print(certification_line(result))
        if bounded.expired:
            c.print(f"[yellow]UNKNOWN[/yellow]: {payload['message']}")
        c.print(LEGEND)
        c.print(next_steps(args))

    emit(args, payload, render)
    if bounded.expired:
        return ExitCode.UNKNOWN
    return ExitCode.OK if result.status == "complete" else ExitCode.FAIL
