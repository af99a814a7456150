"""``p2smt lower`` and ``p2smt run``: a program as JAX or torch.distributed code, and run on local CPUs."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from rich.markup import escape

from p2smt.cli.goals import add_goal, goal_of
from p2smt.cli.inputs import plan_from_args
from p2smt.cli.options import (
    add_algo,
    add_json,
    add_plan_input,
    add_request,
    byte_count,
    count,
    file_arg,
    gibibytes,
    one_hierarchy,
    seconds,
)
from p2smt.cli.output import ExitCode, emit
from p2smt.errors import P2Error
from p2smt.model.paths import check_output, write_text


def register(sub) -> None:
    p = sub.add_parser("lower", help="emit JAX or torch.distributed code for a program")
    _add_lowering(p)
    p.add_argument("--out", type=file_arg, help="write the module here instead of stdout (a symbolic link: its "
                   "target; a device or a FIFO: written through)")
    p.add_argument("--allow-invalid", action="store_true",
                   help="emit code for a program the check rejects (its docstring says so)")
    p.set_defaults(func=run_lower)

    p = sub.add_parser("run", help="run a lowered program on local CPU devices and check exact sums")
    _add_lowering(p)
    p.add_argument("--length", type=int,
                   help="elements per device (a multiple of the group size; default 256 a chunk, fewer where that "
                        "does not fit --memory)")
    p.add_argument("--repeats", type=count, default=1,
                   help="timed runs after the checked one; each time is the best of them (default 1)")
    p.add_argument("--run-timeout", type=seconds, default=600.0,
                   help="seconds before the run is killed (default 600); a size that takes longer by the estimate "
                        "is refused up front")
    p.add_argument("--memory", type=gibibytes, metavar="GIB",
                   help="GiB the run's worker processes may use (default: half the machine's RAM, or 80%% of the "
                        "memory available now if less). A size whose estimate exceeds it is refused up front")
    p.add_argument("--allow-invalid", action="store_true",
                   help="run a program the check rejects (the report says so); p2smt's lowering places chunks "
                        "by P²'s semantics, so such a run can end with exact sums that the plan itself would not give")
    add_json(p)
    p.set_defaults(func=run_run)


def _add_lowering(p: argparse.ArgumentParser) -> None:
    add_request(p, matrix_required=True)
    p.add_argument("--backend", required=True, choices=["jax", "torch"])
    add_plan_input(p)
    add_goal(p)
    p.add_argument("--axis-names", help="comma-separated names of the axes (identifiers)")
    p.add_argument("--bytes", type=byte_count,
                   help="predict each step's bytes and time (NCCL's tuner) against the goal's flat collective, for "
                        "this many bytes per device in the full buffer (a sharded goal predicts by default, with "
                        "P²'s 2^29 float32 per GPU per node)")
    add_algo(p)


def lowering_inputs(args: argparse.Namespace):
    """(plan, target, step labels, verdict of the check, predicted price or None) for lower/run from the request
    and --program/--plan."""
    from p2smt.lower import placement_target
    from p2smt.semantics.verdict import judge

    system, placement, reduce, h = one_hierarchy(args)
    goal = goal_of(args, reduce)
    sharding = goal.sharding(placement)
    plan, program, _ = plan_from_args(args, h, placement.num_devices)
    names = args.axis_names.split(",") if args.axis_names else None
    target = placement_target(placement, reduce, system.level_names, names, system.name, sharding)
    labels = [str(i) for i in program.instructions] if program else None
    groups = placement.reduction_groups(reduce)
    # a sharded goal is judged in buffer positions too: its lowering hands each device its buffer as it is
    verdict = judge(placement.num_devices, [(s.collective, s.groups) for s in plan], groups, len(groups[0]),
                    True, layout=labels is None or sharding is not None, labels=labels, sharding=sharding)
    price = None  # the prediction, or why there is none (a string)
    if (args.bytes is not None or goal.sharded) and verdict.valid:
        from p2smt.cost.sharded import price_plan
        from p2smt.cost.volumes import default_bytes_per_device

        try:
            nbytes = default_bytes_per_device(system) if args.bytes is None else args.bytes
            price = price_plan(system, plan, target, placement, reduce, goal, nbytes, args.algo, labels)
        except P2Error as err:
            if args.bytes is not None:  # asked for: a refusal
                raise
            price = f"not predicted: {err}"  # a sharded goal's default prediction: said, not fatal
    return plan, target, labels, verdict, price


def run_lower(args: argparse.Namespace) -> int:
    from p2smt.lower import lower_module

    if args.out is not None:
        check_output(args.out, "--out")
    plan, target, labels, verdict, price = lowering_inputs(args)
    if price is not None and not isinstance(price, str):
        target = replace(target, description=(*target.description, *price.lines()))
    if not verdict.valid and not args.allow_invalid:
        print(f"p2smt: {verdict.message()} (lower refuses an invalid program; --allow-invalid emits it anyway)",
              file=sys.stderr)
        return ExitCode.FAIL
    source = lower_module(args.backend, plan, target, labels)
    if not verdict.valid:
        head, _, rest = source.partition("\n")
        source = (f"{head}\n\nWARNING: emitted with --allow-invalid. p2smt check says {verdict.message()}; "
                  f"reduce(x) does NOT compute the sums described below.\n{rest}")
    if args.out is not None:
        write_text(args.out, source, "--out")
        print(f"wrote {args.out}")  # on stdout, as draw, plan --png, audit --emit and experiment report files
    else:
        sys.stdout.write(source)
    return ExitCode.OK


def run_run(args: argparse.Namespace) -> int:
    from p2smt.lower.run import require_backend, run_program

    require_backend(args.backend)
    plan, target, labels, verdict, price = lowering_inputs(args)
    if not verdict.valid and not args.allow_invalid:
        print(f"p2smt: {verdict.message()} (run refuses an invalid program, as lower does; --allow-invalid runs "
              "it anyway)", file=sys.stderr)
        return ExitCode.FAIL
    report = run_program(
        args.backend, plan, target, step_labels=labels, length=args.length, repeats=args.repeats,
        timeout=args.run_timeout, memory_gib=args.memory,
    )
    predicted = {"error": price} if isinstance(price, str) else price.to_json() if price is not None else None
    payload = report.to_json() | ({"predicted": predicted} if price is not None else {})
    warning = None
    if not verdict.valid:
        warning = f"WARNING: run with --allow-invalid; p2smt check says {verdict.message()}"
        payload["check"] = {"valid": False, "message": verdict.message()}

    def render(c) -> None:
        if warning:
            c.print(warning)
        c.print(report.summary())
        for line in [price] if isinstance(price, str) else price.lines() if price is not None else []:
            c.print(escape(line))

    emit(args, payload, render)
    return report.exit_code if verdict.valid else ExitCode.FAIL
