"""``p2smt check``: run a plan through the concrete interpreter."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

from p2smt.cli.goals import add_goal, goal_of
from p2smt.cli.inputs import plan_request
from p2smt.cli.options import add_allow_noop, add_json, add_plan_input, add_request
from p2smt.cli.output import ExitCode, counted, emit

MAX_DEFECTS = 64
MAX_SHOWN = 8


def add_verbose(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verbose", action="store_true",
                   help="also print the group, the facts and the device states at the failure")


def register(sub) -> None:
    p = sub.add_parser("check", help="run a plan through the concrete interpreter")
    add_request(p, matrix_required=True)
    add_plan_input(p, hlo=True)
    add_goal(p)
    add_allow_noop(p)
    add_verbose(p)
    p.add_argument("--progress", action="store_true", help="show progress on stderr (default: on a terminal)")
    add_json(p)
    p.set_defaults(func=run)


def render_violation(c: Console, label: str, v, verbose: bool, states: dict | None = None,
                     defects=()) -> None:
    """``LABEL: failing step 3 of 3: (…)``, the first defect in words; the rest only when ``verbose``."""
    c.print(f"[red]{label}[/red]: {escape(v.headline())}")
    c.print(f"  {v.rule}: {escape(v.message)}")
    if not verbose:
        c.print("  (--verbose prints the group, the facts and the device states at the failure)")
        return
    if v.group is not None:
        c.print(f"  group: {list(v.group)}")
    for key, value in v.facts.items():
        c.print(f"  {key.replace('_', ' ')}: {escape(str(value))}")
    when = "at the end" if v.step is None else f"before step {v.step} (the state at the failure)"
    for dev, rows in list((states or {}).items())[:MAX_SHOWN]:
        c.print(f"  device {dev} {when}: {rows}")
    for d in list(defects)[:MAX_SHOWN]:
        c.print(f"  device {d['device']} chunk {d['chunk']}: missing {d['missing']} foreign {d['foreign']}")


def run(args: argparse.Namespace) -> int:
    from p2smt.cli.bounded import progress_display
    from p2smt.semantics.verdict import judge

    with progress_display(args, "check: plan read, plan judged", 2) as show:
        pr = plan_request(args)
        goal = goal_of(args, pr.reduce)
        show(pr)
        verdict = judge(pr.placement.num_devices, pr.steps, pr.goal_groups, pr.chunks, not args.allow_noop,
                        layout=pr.program is None or goal.sharded, labels=pr.labels,
                        sharding=goal.sharding(pr.placement))
        show(verdict)
    v = verdict.violation
    defects = [
        {"device": d.device, "chunk": d.chunk, "missing": list(d.missing), "foreign": list(d.foreign)}
        for d in verdict.execution.defects[:MAX_DEFECTS]
    ] if v is not None and v.step is None else []
    payload = {
        "valid": verdict.valid,
        "program": pr.program_text(),
        "steps": len(pr.steps),
        "buffers": pr.buffers,
        "violation": v.to_json() if v else None,
        "defects": defects,
        "checked_by": verdict.checked_by,
    } | ({"positions": verdict.positions.to_json()} if verdict.positions else {}) | (
        sharded_fields(goal, verdict) if goal.sharded else {})

    def render(c: Console) -> None:
        if v is not None:
            shown = list(dict.fromkeys((*v.devices, *(v.group or ()))))[:MAX_SHOWN]
            states = verdict.device_rows(shown)
            render_violation(c, "INVALID", v, getattr(args, "verbose", False), states, defects)
            if verdict.positions and not verdict.positions.valid:
                c.print(f"  under XLA/NCCL positions: {escape(verdict.positions.message())}")
        elif verdict.positions and not verdict.positions.valid and goal.sharded:
            c.print(f"[red]INVALID[/red]: {escape(payload['message'])}", soft_wrap=True)  # one line to grep
            c.print(f"  checked by: {escape(payload['checked_by'])}")
        elif verdict.positions and not verdict.positions.valid:
            c.print(f"[red]INVALID[/red] under XLA/NCCL positions: {escape(verdict.positions.message())}")
        else:
            c.print(f"[green]VALID[/green]: {counted(len(pr.steps), 'step')} reduce every group of axes {list(pr.reduce)}"
                    f"{goal_words(goal)}{pr.on_buffers()}")

    emit(args, payload, render)
    return ExitCode.OK if verdict.valid else ExitCode.FAIL


def goal_words(goal) -> str:
    """`` (reduce-scatter goal, sharded over axes [0])`` for a sharded goal, nothing for AllReduce."""
    return f" ({goal.kind.value} goal, sharded over axes {list(goal.shard_axes)})" if goal.sharded else ""


POSITIONS_CHECKED = "then the XLA/NCCL buffer positions of the plan (the positions interpreter)"
"""What a sharded goal's verdict adds to what it rests on once the chunk semantics lets every step apply."""


def positions_refusal(held: str, message: str) -> str:
    """``valid in chunk semantics, but under XLA/NCCL positions: …``: a sharded goal's result that the chunk
    semantics, blind to an AllGather's order (docs/semantics.md §6), accepts and the buffer positions refuse."""
    return f"{held} in chunk semantics, but under XLA/NCCL positions: {message}"


def sharded_fields(goal, verdict) -> dict:
    """A sharded goal's extra JSON fields: the goal, the chunk semantics' verdict apart, what the verdict rests on
    (with the positions run, for a DSL program as for a plan) and, where only the positions refuse, why."""
    out = {"goal": goal.to_json(), "chunk_semantics_valid": verdict.execution.valid}
    if verdict.positions is not None:
        out["checked_by"] = f"{verdict.checked_by}; {POSITIONS_CHECKED}"
        if verdict.execution.valid and not verdict.positions.valid:
            out["message"] = positions_refusal("valid", verdict.positions.message())
    return out
