"""``p2smt synth``: every valid reduction program up to ``--max-len`` on every placement (or one)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from p2smt.cli.bounded import add_bounds, run_bounded
from p2smt.cli.goals import add_goal
from p2smt.cli.options import (
    add_allow_noop,
    add_json,
    add_request,
    add_search,
    engine_config,
    gibibytes,
    request_of,
    seconds,
    shown,
    system_of,
)
from p2smt.cli.output import ExitCode, counted, emit


def register(sub) -> None:
    p = sub.add_parser("synth", help="synthesize every valid reduction program up to --max-len")
    add_request(p)
    add_goal(p)
    add_search(p)
    p.add_argument("--encoding", help="Z3 encoding variant (see `p2smt encodings`)")
    p.add_argument("--encoding-options", help="JSON object of encoding options")
    p.add_argument("--timeout", type=seconds, help="seconds per solver call")
    p.add_argument("--emit-smt2", metavar="DIR", help="write each solver query as SMT-LIB2 into DIR")
    p.add_argument("--memory", type=gibibytes, metavar="GIB",
                   help="engines z3 and z3-cegis: GiB the Z3 encoding may use (default: half the machine's RAM). A size "
                        "whose estimate exceeds it is refused up front; past it Z3 stops and the result is unknown")
    p.add_argument("--certificate", metavar="DIR",
                   help="certified engine: write Z3's validity and completeness queries as SMT-LIB2 into DIR")
    p.add_argument("--proof", default="auto", metavar="KIND",
                   help="certified engine: certificate (a state graph closed by an independent checker, each step "
                        "proved by one ground Z3 query), bmc (Z3 searches the whole program space), or auto (default: "
                        "the certificate up to 32 devices, bmc beyond or with --proof-store, the faster at each size). "
                        "No proof above 256 synthesis devices: the exhaustive search's programs, NOT certified, and "
                        "above 4,096 the symmetric engine's")
    p.add_argument("--prune", default="none", help="named pruning of the complete set (see docs); default none")
    add_allow_noop(p)
    p.add_argument("--show", type=shown, default=20, help="programs shown per matrix (human output)")
    add_bounds(p)
    add_json(p)
    p.set_defaults(func=run)


LEGEND = ("matrix: rows = parallelism axes, columns = system levels (outermost first); an entry is how many "
          "parts of that axis lie at that level")


def synth_config(args: argparse.Namespace):
    """The engine configuration of the shared options, with ``--proof``."""
    from dataclasses import replace

    config = engine_config(args)
    return replace(config, proof=args.proof) if args.proof != "auto" else config


def bounded_synthesis(args: argparse.Namespace, req, config, label: str, keep_partial: bool = False):
    """``synthesize`` under ``--deadline``/``--progress``: (bounded run, result or the placements found);
    with ``keep_partial`` and a deadline, ``bounded.partial`` holds the unfinished searches' finished first steps."""
    from p2smt.synth.driver import SynthesisResult, synthesize
    from p2smt.synth.partial import FirstStepPrograms

    system = req.load_system()
    placements = req.placements(system)
    on_partial = keep_partial and getattr(args, "deadline", None) is not None

    def work(report):
        return synthesize(req, config, on_matrix=report, **({"on_partial": report} if on_partial else {}))

    bounded = run_bounded(args, label, work, total=len(placements),
                          is_partial=lambda piece: isinstance(piece, FirstStepPrograms))
    if bounded.result is not None:
        return bounded, bounded.result
    reduce = placements[0].check_axes(req.reduce)
    partial = SynthesisResult(system.name, req.axes, reduce, config.engine, config.max_len, tuple(bounded.pieces),
                              float(bounded.deadline or 0))
    return bounded, partial


def next_steps(args: argparse.Namespace, devices: int = 0) -> str:
    """How to rank or pick the best of the programs just listed (same request options); what ``best`` does
    depends on the ``devices`` synthesis devices: proved optimal up to 256, searched alone up to 4,096, refused beyond."""
    req = f"--system {args.system}"
    if getattr(args, "nodes", None) is not None:
        req += f" --nodes {args.nodes}"
    req += "".join(f" --level {item}" for item in getattr(args, "level", None) or [])
    req += f" --axes {args.axes} --reduce {args.reduce}"
    if args.matrix:
        req += f" --matrix '{args.matrix}'"
    from p2smt.model.topology import unpriceable

    if (why := unpriceable(system_of(args))) is not None:
        return f"not priceable: {why}"
    if getattr(args, "goal", "allreduce") != "allreduce":  # best states the allreduce goal only
        shard = f" --shard-axes {args.shard_axes}" if args.shard_axes is not None else ""
        return f"next: `p2smt rank {req} --goal {args.goal}{shard}` orders these by predicted time"
    from p2smt.synth.driver import CERTIFY_LIMIT, SEARCH_LIMIT

    rank = f"next: `p2smt rank {req}` orders these by predicted time"
    if devices > SEARCH_LIMIT:
        return f"{rank} (`p2smt best` searches at most {SEARCH_LIMIT:,} synthesis devices; {devices:,} here)"
    if devices > CERTIFY_LIMIT:
        return (f"{rank}; `p2smt best {req}` finds the cheapest by exhaustive search (not proved optimal by Z3 "
                f"above {CERTIFY_LIMIT} synthesis devices; {devices:,} here)")
    return f"{rank}; `p2smt best {req}` finds the cheapest (exact search) and proves it optimal"


def certification_line(result) -> str:
    """``SynthesisResult.certification`` with the proofs' seconds, a missing proof in yellow."""
    from p2smt.cost.rank import flagged

    return flagged(result.certification(seconds=True))


def partial_words(partial) -> str:
    """The programs a run stopped at its deadline found inside its unfinished placements, in words."""
    if not partial:
        return ""
    count = sum(len(p.programs) for p in partial)
    return (f"; {count} programs found so far in {len(partial)} unfinished placement"
            f"{'s' if len(partial) != 1 else ''} (partial: not every program)")


def program_table(title: str, programs, show: int) -> Table:
    """A placement's programs, the first ``show`` of them numbered."""
    t = Table(title=title)
    t.add_column("#", justify="right")
    t.add_column("program")
    for n, p in enumerate(programs[:show]):
        t.add_row(str(n), str(p))
    if len(programs) > show:
        t.add_row("…", f"{len(programs) - show} more (use --show or --json)")
    return t


def no_program_words(m, max_len: int) -> str | None:
    """Why a finished placement has no program (None when it has some): every instruction of its synthesis
    hierarchy has a group mixing several reduction groups, or none of at most ``max_len`` steps suffices."""
    from p2smt.model.dsl import problem

    if m.programs or m.status != "complete":
        return None
    prob = problem(m.hierarchy)
    owner = {d: i for i, g in enumerate(prob.goal_groups) for d in g}
    if not any(all(len({owner[d] for d in g}) == 1 for g in c.groups) for c in prob.candidates):
        return ("no program: every instruction of this synthesis hierarchy has a group mixing devices of several "
                "reduction groups (its levels do not separate the reduced axes from the others); --hierarchy d, "
                "the default, splits each level by axis")
    return f"no program of at most {max_len} steps reaches the goal (a larger --max-len may find one)"


def hierarchy_words(m) -> str:
    return f"matrix {[list(r) for r in m.matrix]}  hierarchy {' > '.join(f'{n} {s}' for n, s in m.hierarchy.levels)}"


def run(args: argparse.Namespace) -> int:
    from p2smt.synth.partial import partial_placements

    bounded, result = bounded_synthesis(args, request_of(args), synth_config(args), "synth: placements",
                                        keep_partial=True)
    payload = result.to_json()
    partial = partial_placements(bounded.partial, (m.matrix for m in result.matrices)) if bounded.expired else ()
    if bounded.expired:
        payload |= {"status": "unknown", "message": bounded.message("placement") + partial_words(partial),
                    "partial": [p.to_json() for p in partial]}

    def render(c: Console) -> None:
        finished = "finished " if bounded.expired else ""
        unfinished = f" ({len(partial)} more listed as PARTIAL below)" if partial else ""
        c.print(
            f"{result.system}: axes {list(result.axes)}, reduce {list(result.reduction_axes)}, "
            f"{'goal ' + result.goal.describe() + ', ' if result.goal.sharded else ''}"
            f"engine {args.engine}, max length {args.max_len}: [bold]{result.total_programs}[/bold] programs "
            f"over {counted(len(result.matrices), finished + 'placement')}{unfinished} in {result.seconds:.3f} s — "
            f"status {payload['status']}"
        )
        for m in result.matrices:
            same = f"; same problem as {m.stats['same_problem_as']}" if "same_problem_as" in m.stats else ""
            c.print(program_table(f"{hierarchy_words(m)}  ({len(m.programs)} programs, {m.seconds:.3f} s, "
                                  f"{m.status}{same})", m.programs, args.show))
            if why := no_program_words(m, args.max_len):
                c.print(f"  {why}")
            if "rests_on" in m.stats:
                c.print(f"  rests on: {m.stats['rests_on']}")
            if m.status == "unknown":
                c.print(f"  [yellow]UNKNOWN[/yellow]: {m.stats.get('reason_unknown') or 'a solver call gave no answer'}; "
                        "the programs listed are those found before it (not every program)")
            if m.stats.get("dropped_at_real_size"):
                c.print(f"  dropped {m.stats['dropped_at_real_size']} programs of the generic instance that are "
                        f"invalid at the real size, e.g. {m.stats['dropped_example']}")
        for p in partial:
            c.print(program_table(f"{hierarchy_words(p)}  (PARTIAL: {len(p.programs)} programs found so far, "
                                  f"{p.first_steps_done} of {p.candidates} first steps searched)", p.programs, args.show))
            c.print(f"  rests on: {p.rests_on}")
        if result.certified is not None:
            c.print(certification_line(result))
        if bounded.expired:
            c.print(f"[yellow]UNKNOWN[/yellow]: {payload['message']}")
        c.print(LEGEND)
        c.print(next_steps(args, max((m.hierarchy.num_devices for m in result.matrices), default=0)))

    emit(args, payload, render)
    if bounded.expired or result.status == "unknown":  # a solver's limit: neither programs nor their absence proved
        return ExitCode.UNKNOWN
    return ExitCode.OK if result.status in ("complete", "conjectured") else ExitCode.FAIL
