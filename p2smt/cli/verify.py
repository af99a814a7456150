"""``p2smt verify``: prove a plan with Z3 (Boolean state, or ∀ data values with ``--values``)."""

from __future__ import annotations

import argparse

from rich.console import Console

from p2smt.cli.bounded import add_bounds, report_expired, run_bounded
from p2smt.cli.inputs import plan_request
from p2smt.cli.options import add_allow_noop, add_json, add_plan_input, add_request, seconds, timeout_ms
from p2smt.cli.output import ExitCode, emit
from p2smt.errors import InternalError


def register(sub) -> None:
    p = sub.add_parser("verify", help="prove a plan with Z3, or return a counterexample")
    add_request(p, matrix_required=True)
    add_plan_input(p, hlo=True)
    p.add_argument("--values", action="store_true", help="prove over all integer data values (CEGIS encoding)")
    p.add_argument("--encoding", default="bool-matrix", help="encoding that proves the Boolean semantics")
    p.add_argument("--timeout", type=seconds, help="seconds per solver call")
    add_allow_noop(p)
    add_bounds(p)
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Prove a plan with Z3 (Boolean state, or ∀ data values with --values) or give a counterexample."""
    from p2smt.semantics.dense import execute

    pr = plan_request(args)
    n = pr.placement.num_devices
    common = {"require_progress": not args.allow_noop, "timeout_ms": timeout_ms(args), "chunks": pr.chunks}
    if args.values:
        from p2smt.smt.cegis import verify_values

        bounded = run_bounded(args, "verify: proving",
                              lambda report: verify_values(n, pr.steps, pr.goal_groups, **common))
    else:
        from p2smt.smt.verify import prove_plan

        bounded = run_bounded(args, "verify: proving", lambda report: prove_plan(
            n, pr.steps, pr.goal_groups, encoding=args.encoding, **common))
    if bounded.expired:
        return report_expired(args, bounded, "proofs", {"program": pr.program_text(), "steps": len(pr.steps)})
    proof = bounded.result
    oracle = execute(n, pr.steps, pr.goal_groups, not args.allow_noop, pr.chunks)
    if proof.status != "unknown" and (proof.status == "proved") != oracle.valid and not args.values:
        raise InternalError(
            f"Z3 says {proof.status} but the interpreter says {'valid' if oracle.valid else 'invalid'}"
        )
    payload = proof.to_json() | {"program": pr.program_text(), "steps": len(pr.steps)}
    status = proof.status
    if pr.program is None and status == "proved":
        from p2smt.semantics.positions import execute_positions

        layout = execute_positions(n, pr.steps, pr.goal_groups, pr.chunks)
        if not layout.valid:
            status = "counterexample"
            payload |= {"status": status} | layout.counterexample()

    def render(c: Console) -> None:
        if status == "proved":
            what = "for every integer input" if args.values else "the goal holds and no precondition fails"
            c.print(f"[green]PROVED[/green]: {what} ({len(pr.steps)} steps, {n} devices)")
            return
        if status == "unknown":
            c.print(f"[yellow]UNKNOWN[/yellow]: {payload.get('message', 'the solver gave up')}")
            return
        c.print(f"[red]COUNTEREXAMPLE[/red]: {payload.get('message', '')}")
        for key in ("failing_step", "group", "devices", "device", "chunk", "position", "block", "expected_block",
                    "rule", "expected", "actual"):
            if payload.get(key) is not None:
                c.print(f"  {key.replace('_', ' ')}: {payload[key]}")
        for d in payload.get("defects", [])[:8]:
            c.print(f"  defect: {d}")
        for dev, rows in list(payload.get("states", {}).items())[:8]:
            c.print(f"  final state of device {dev}: {rows}")
        for key in ("inputs", "witness"):
            if payload.get(key):
                c.print(f"  {key.replace('_', ' ')}: {payload[key]}")

    emit(args, payload, render)
    return {"proved": ExitCode.OK, "counterexample": ExitCode.FAIL}.get(status, ExitCode.UNKNOWN)
