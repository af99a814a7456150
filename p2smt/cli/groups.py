"""``p2smt groups``: the device groups of DSL instructions on one placement."""

from __future__ import annotations

import argparse

from rich.console import Console

from p2smt.cli.goals import add_goal
from p2smt.cli.inputs import read_arg_text
from p2smt.cli.options import add_json, add_request, one_hierarchy, request_of
from p2smt.cli.output import ExitCode, emit


def register(sub) -> None:
    p = sub.add_parser("groups", help="show the device groups of instructions on a placement")
    add_request(p, matrix_required=True)
    add_goal(p)
    p.add_argument("--instruction", required=True,
                   help="DSL text (or @FILE), e.g. '(node, InsideGroup, AllReduce)'")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from p2smt.api import shard_ranks
    from p2smt.model.dsl import instruction_groups, lower_program, parse_program

    _, placement, _, h = one_hierarchy(args)
    req = request_of(args)
    text, source = read_arg_text(args.instruction, "--instruction")
    program = parse_program(text, h, source)
    lowered = lower_program(h, program)
    rows = [
        {
            "instruction": str(ins),
            "synthesis_groups": [list(g) for g in instruction_groups(h, ins)],
            "device_groups": [list(g) for g in step.groups],
            **shard_ranks(req, placement, h, instruction_groups(h, ins)),
        }
        for ins, step in zip(program.instructions, lowered)
    ]
    payload = {"synthesis_hierarchy": [[n, s] for n, s in h.levels], "instructions": rows}

    def render(c: Console) -> None:
        c.print(f"synthesis hierarchy: {' > '.join(f'{n} {s}' for n, s in h.levels)}")
        for r in rows:
            c.print(f"[bold]{r['instruction']}[/bold]")
            c.print(f"  on the synthesis hierarchy: {r['synthesis_groups']}")
            c.print(f"  on the system ({len(r['device_groups'])} groups): {r['device_groups']}")
            if "shard_ranks" in r:
                c.print(f"  shard ranks of the synthesis groups' members: {r['shard_ranks']}")

    emit(args, payload, render)
    return ExitCode.OK
