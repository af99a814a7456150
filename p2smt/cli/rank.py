"""``p2smt rank``: every placement's programs ranked by predicted time."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from p2smt.cli.bounded import add_bounds
from p2smt.cli.goals import add_goal
from p2smt.cli.options import (
    add_cost,
    add_json,
    add_request,
    add_search,
    engine_config,
    request_of,
)
from p2smt.cli.output import ExitCode, counted, emit
from p2smt.cli.synth import bounded_synthesis
from p2smt.errors import P2Error


def register(sub) -> None:
    p = sub.add_parser("rank", help="rank every placement's programs by predicted time")
    add_request(p)
    add_goal(p)
    add_cost(p)
    p.add_argument("--top", type=int, help="keep the N fastest programs per placement")
    p.add_argument("--program", help="a hand-written DSL program (or @FILE) to price beside the synthesized ones "
                                     "(needs --matrix); it is checked first")
    p.add_argument("--plan", help="an explicit JSON plan on physical device ids (XLA replica-group forms) to price "
                                  "beside the synthesized ones (needs --matrix); it is checked first")
    add_search(p)
    add_bounds(p)
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from p2smt.cost.rank import check_request, rank_result, render_rank

    req = request_of(args)
    check_request(req.load_system(), args.algo, args.bytes, args.top)
    try:
        yours = users_program(args, req)
    except InvalidProgram as verdict:  # a verdict (exit 1), as check, lower and run give it: not bad input
        print(f"p2smt: {verdict} (rank prices only a valid program)", file=sys.stderr)
        return ExitCode.FAIL
    bounded, result = bounded_synthesis(args, req, engine_config(args), "rank: placements")
    report = rank_result(req.load_system(), result, algo=args.algo, bytes_per_device=args.bytes, top=args.top)
    if bounded.expired:
        report |= {"status": "unknown", "message": bounded.message("placement")}
    if yours is not None:
        report |= {"yours": price_users_program(req, yours, result, args.algo, report["bytes_per_device"])}

    def render(c: Console) -> None:
        if bounded.expired:
            c.print(f"[yellow]partial[/yellow]: only the {counted(len(result.matrices), 'placement')} finished "
                    "before the deadline are ranked below")
        c.print(render_rank(report))
        if yours is not None:
            y = report["yours"]
            if y["rank"] is None:
                c.print(f"yours: {y['program']}  {y['seconds']:.6g} s — not ranked: the placement's synthesis "
                        "did not finish")
            else:
                c.print(f"yours: {y['program']}  {y['seconds']:.6g} s — rank {y['rank']} of {y['of']} "
                        f"({y['vs_best']:.3f}x the best synthesized program's time)")
        if bounded.expired:
            c.print(f"[yellow]UNKNOWN[/yellow]: {report['message']}")

    emit(args, report, render)
    return ExitCode.UNKNOWN if bounded.expired else ExitCode.OK


def users_program(args: argparse.Namespace, req):
    """The hand-written ``--program`` on the request's one ``--matrix``, refused unless the interpreter
    accepts it (pricing a wrong reduction would rank a wrong answer)."""
    if args.plan and args.program:
        raise P2Error("give at most one of --program and --plan")
    if not args.program and not args.plan:
        return None
    from p2smt.api import one_placement

    req = one_placement(req, f"rank {'--program' if args.program else '--plan'}")  # a plan is for one placement
    if args.plan:
        return users_plan(args, req)
    from p2smt.api import hierarchy_of
    from p2smt.cli.inputs import read_arg_text
    from p2smt.model.dsl import lower_program, parse_program

    _, h = hierarchy_of(req)
    text, source = read_arg_text(args.program)
    program = parse_program(text, h, source)
    if len(program.instructions) > args.max_len:
        raise P2Error(f"rank --program: {len(program.instructions)} steps, more than --max-len {args.max_len}: it would "
                      "be ranked among shorter programs only; raise --max-len")
    _refuse_invalid(req, lower_program(h, program), layout=False, what="rank --program")
    return program


class InvalidProgram(Exception):
    """The user's program or plan parses but the interpreter rejects it: rank's verdict, exit 1."""


def _refuse_invalid(req, plan, layout: bool, what: str) -> None:
    """A plan the interpreter rejects against the request's goal (``layout``, or a sharded goal: also under
    XLA/NCCL positions) is not priced."""
    from p2smt.api import hierarchy_of
    from p2smt.semantics.verdict import judge

    placement, _ = hierarchy_of(req)
    goal = placement.reduction_groups(placement.check_axes(req.reduce))
    sharding = req.goal.sharding(placement)
    verdict = judge(placement.num_devices, [(s.collective, s.groups) for s in plan], goal, len(goal[0]),
                    req.require_progress, layout=layout or sharding is not None, sharding=sharding)
    if not verdict.valid:
        raise InvalidProgram(f"{what}: {verdict.message()}")


def users_plan(args: argparse.Namespace, req):
    """An explicit ``--plan`` on the request's placement, refused unless both semantics accept it (P²'s
    chunks and XLA/NCCL positions)."""
    from pathlib import Path

    from p2smt.api import hierarchy_of
    from p2smt.cli.inputs import plan_from_args

    placement, h = hierarchy_of(req)
    plan, _, _ = plan_from_args(argparse.Namespace(program=None, plan=args.plan), h, placement.num_devices)
    _refuse_invalid(req, plan, layout=True, what=f"rank --plan {Path(args.plan).name}")
    return plan


def price_users_program(req, program, result, algo: str, nbytes: float) -> dict:
    """The hand-written program's (or explicit plan's) predicted time and where it falls among the
    synthesized ones."""
    from p2smt.api import hierarchy_of
    from p2smt.cost.model import program_time
    from p2smt.cost.rank import explicit_plan_seconds, sort_key
    from p2smt.model.dsl import Program, format_program

    system = req.load_system()
    placement, h = hierarchy_of(req)
    if isinstance(program, Program):
        seconds = program_time(system, h, program, algo=algo, bytes_per_device=nbytes).seconds
        text = format_program(program)
    else:
        blocks = len(placement.reduction_groups(placement.check_axes(req.reduce))[0])
        seconds = explicit_plan_seconds(system, program, blocks, nbytes, algo)
        text = "; ".join(f"{s.collective.value} over {[list(g) for g in s.groups]}" if s.groups else
                         f"{s.collective.value} (a no-op: no group of two or more devices)" for s in program)
    if not result.matrices:  # the deadline came first: nothing to rank it among
        return {"program": text, "seconds": seconds, "rank": None, "of": None, "synthesized": None, "vs_best": None}
    (m,) = result.matrices
    times = sorted(sort_key(program_time(system, m.hierarchy, p, algo=algo, bytes_per_device=nbytes).seconds,
                            format_program(p)) for p in m.programs)
    mine = sort_key(seconds, text)
    return {"program": text, "seconds": seconds, "rank": 1 + sum(t[0] < mine[0] for t in times),
            "of": len(times), "synthesized": any(t == mine for t in times),
            "vs_best": seconds / times[0][0] if times else 1.0}
