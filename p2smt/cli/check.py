"""``p2smt check``: run a plan through the concrete interpreter."""

from __future__ import annotations

import argparse

from rich.console import Console

from p2smt.cli.inputs import plan_request
from p2smt.cli.options import add_allow_noop, add_json, add_plan_input, add_request
from p2smt.cli.output import ExitCode, emit


def register(sub) -> None:
    p = sub.add_parser("check", help="run a plan through the concrete interpreter")
    add_request(p, matrix_required=True)
    add_plan_input(p, hlo=True)
    add_allow_noop(p)
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from p2smt.semantics.verdict import judge

    pr = plan_request(args)
    verdict = judge(pr.placement.num_devices, pr.steps, pr.goal_groups, pr.chunks, not args.allow_noop,
                    layout=pr.program is None)
    result = verdict.execution
    payload = {
        "valid": verdict.valid,
        "program": pr.program_text(),
        "steps": len(pr.steps),
        "violation": result.violation.to_json() if result.violation else None,
        "defects": [
            {"device": d.device, "chunk": d.chunk, "missing": list(d.missing), "foreign": list(d.foreign)}
            for d in result.defects[:64]
        ],
    } | ({"positions": verdict.positions.to_json()} if verdict.positions else {})

    def render(c: Console) -> None:
        if verdict.positions and not verdict.positions.valid:
            c.print(f"[red]INVALID[/red] under XLA/NCCL positions: {verdict.positions.message()}")
        elif result.valid:
            c.print(f"[green]VALID[/green]: {len(pr.steps)} steps reduce every group of axes {list(pr.reduce)}")
        elif result.violation:
            v = result.violation
            c.print(f"[red]INVALID[/red] at step {v.step} ({v.rule}): {v.message}")
            c.print(f"  group {list(v.group)}")
        else:
            c.print("[red]INVALID[/red]: every precondition holds but the goal is not reached")
            for d in result.defects[:8]:
                c.print(f"  device {d.device} chunk {d.chunk}: missing {list(d.missing)} foreign {list(d.foreign)}")

    emit(args, payload, render)
    return ExitCode.OK if verdict.valid else ExitCode.FAIL
