"""``p2smt verify``: prove a plan with Z3 (Boolean state, or ∀ data values with ``--values``).

The concrete interpreter runs first: a plan it rejects at step t is proved only up to step t (so a long
plan that fails early costs what its prefix costs), and Z3's verdict, failing step and rule must agree
with it. ``--timeout`` bounds the whole proof in wall-clock seconds.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

from p2smt.cli.bounded import add_bounds, progress_display, report_expired, run_bounded
from p2smt.cli.check import POSITIONS_CHECKED, add_verbose, positions_refusal, render_violation
from p2smt.cli.goals import add_goal, goal_of
from p2smt.cli.inputs import plan_request
from p2smt.cli.options import add_allow_noop, add_json, add_plan_input, add_request, seconds, timeout_ms
from p2smt.cli.output import ExitCode, counted, emit
from p2smt.errors import P2Error
from p2smt.synth.agree import agree


def register(sub) -> None:
    p = sub.add_parser("verify", help="prove a plan with Z3, or return a counterexample")
    add_request(p, matrix_required=True)
    add_plan_input(p, hlo=True)
    add_goal(p)
    p.add_argument("--values", action="store_true", help="prove over all integer data values (CEGIS encoding)")
    p.add_argument("--encoding", help="encoding that proves the Boolean semantics (default bool-matrix; not with "
                                      "--values, which has its own)")
    p.add_argument("--timeout", type=seconds, help="seconds for the whole proof (wall clock)")
    add_allow_noop(p)
    add_verbose(p)
    add_bounds(p)
    add_json(p)
    p.set_defaults(func=run)


def expired(args: argparse.Namespace, bounded, pr) -> int:
    """The deadline's ``unknown``: which steps were proved to apply and which one was under way."""
    from p2smt.smt.verify import undecided_words

    proved = max(bounded.pieces, default=0)
    words = undecided_words(proved, len(pr.steps), args.values)
    return report_expired(args, bounded, "step",
                          {"program": pr.program_text(), "steps": len(pr.steps), "steps_proved": proved},
                          f"deadline of {bounded.deadline:g} s reached: {words}")


def run(args: argparse.Namespace) -> int:
    """Prove a plan with Z3 (Boolean state, or ∀ data values with --values) or give a counterexample.

    Up to ``Z3_PLAN_DEVICES`` devices Z3 proves the whole plan; above, each reduction group shape of a plan
    whose groups stay inside reduction groups; else the verdict rests on the interpreter alone and says so."""
    from p2smt.semantics.verdict import judge
    from p2smt.smt.verify import Z3_PLAN_DEVICES

    if args.values and args.encoding:
        raise P2Error("--encoding selects the Boolean proof; --values proves with its own encoding")
    progress = not args.allow_noop
    with progress_display(args, "verify: plan read, plan checked by the interpreter", 2) as show:
        pr = plan_request(args)
        goal = goal_of(args, pr.reduce)
        sharding = goal.sharding(pr.placement)
        if args.values and goal.sharded:
            raise P2Error(f"verify --values does not prove the {goal.kind.value} goal yet (its encoding has the "
                          "allreduce goal); verify without --values proves it")
        n = pr.placement.num_devices
        if args.values and n > Z3_PLAN_DEVICES:
            raise P2Error(f"verify --values proves at most {Z3_PLAN_DEVICES:,} devices (this request has {n:,}); "
                          "without --values the Boolean proof runs one reduction group at a time")
        show(pr)
        verdict = judge(n, pr.steps, pr.goal_groups, pr.chunks, progress, layout=sharding is not None,
                        labels=pr.labels, sharding=sharding)
        show(verdict)
    if sharding is not None:
        return verify_sharded(args, pr, verdict, sharding)
    split = None
    if n > Z3_PLAN_DEVICES:
        from p2smt.model.components import split_plan

        split = split_plan(n, pr.steps, pr.goal_groups)
        if split is None or split.size > Z3_PLAN_DEVICES:
            why = ("its groups cross reduction groups" if split is None
                   else f"one reduction group has {split.size:,} devices")
            return unproved(args, pr, verdict, f"Z3 proof skipped above {Z3_PLAN_DEVICES:,} devices ({why})")
    common = {"require_progress": progress, "timeout_ms": timeout_ms(args), "chunks": pr.chunks}
    failing = verdict.violation.step if verdict.violation else None
    encoding = args.encoding or "bool-matrix"
    if args.values:
        from p2smt.smt.cegis import verify_values

        def work(report):
            return verify_values(n, pr.steps, pr.goal_groups, suspect=failing, report=report, **common)
    elif split is not None:
        from p2smt.smt.verify import prove_split

        def work(report):
            return prove_split(split, pr.steps, failing or len(pr.steps), encoding=encoding, report=report,
                               **common)
    else:
        from p2smt.smt.verify import prove_plan

        prefix = pr.steps if failing is None else pr.steps[:failing]

        def work(report):
            return prove_plan(n, prefix, pr.goal_groups, encoding=encoding, report=report, **common)
    bounded = run_bounded(args, "verify: steps proved", work, total=len(pr.steps))
    if bounded.expired:
        return expired(args, bounded, pr)
    if args.values:
        proof, rests_on = bounded.result, f"Z3 (all integer values) at the real size ({n} devices)"
    elif split is not None:
        proof = agree(bounded.result, verdict)
        shapes = "" if split.describe() in verdict.checked_by else f" ({split.describe()})"
        rests_on = f"Z3 on each reduction group shape{shapes}, agreeing with {verdict.checked_by}"
    else:
        proof = agree(bounded.result, verdict)
        rests_on = f"Z3 at the real size ({n} devices), agreeing with {verdict.checked_by}"
    payload = proof.to_json() | {"program": pr.program_text(), "steps": len(pr.steps), "buffers": pr.buffers,
                                 "rests_on": rests_on}
    status = proof.status
    if pr.program is None and status == "proved":
        layout = _positions(n, pr)
        if not layout.valid:
            status = "counterexample"
            payload |= {"status": status} | layout.counterexample()
    render = _renderer(args, pr, proof, payload, status, n)
    emit(args, payload, render)
    return {"proved": ExitCode.OK, "counterexample": ExitCode.FAIL}.get(status, ExitCode.UNKNOWN)


def _positions(n: int, pr):
    """The XLA/NCCL positions run of an explicit plan against the AllReduce goal (after P²'s semantics is proved;
    a sharded goal's runs in ``judge``)."""
    from p2smt.semantics.positions import execute_positions
    from p2smt.semantics.verdict import check_positions_size

    check_positions_size(n, pr.chunks)
    return execute_positions(n, pr.steps, pr.goal_groups, pr.chunks)


def verify_sharded(args: argparse.Namespace, pr, verdict, sharding) -> int:
    """A sharded goal (docs/semantics.md §6): Z3 proves that every step applies and the final state is the
    sharded goal, the interpreter naming the device and chunks where it is missed (``synth.sharded``); then the
    plan (a DSL program's lowered plan too) runs in XLA/NCCL buffer positions (``verdict.positions``), which see
    an AllGather's order that the chunk semantics cannot. Plans above Z3's size rest on the interpreters alone."""
    from p2smt.smt.verify import Z3_PLAN_DEVICES
    from p2smt.synth.sharded import prove_sharded

    n, goal = pr.placement.num_devices, sharding.kind.value
    if n > Z3_PLAN_DEVICES:
        return unproved(args, pr, verdict, f"Z3 proof skipped above {Z3_PLAN_DEVICES:,} devices", sharding)

    def work(report):
        return prove_sharded(n, pr.steps, pr.goal_groups, sharding, require_progress=not args.allow_noop,
                             timeout_ms=timeout_ms(args), chunks=pr.chunks, encoding=args.encoding or "bool-matrix",
                             report=report, verdict=verdict)

    bounded = run_bounded(args, "verify: steps proved", work, total=len(pr.steps))
    if bounded.expired:
        return expired(args, bounded, pr)
    proof = bounded.result  # checked against ``verdict`` by prove_sharded (synth.agree)
    layout = verdict.positions
    rests_on = (f"Z3 at the real size ({n} devices): every step and the {goal} goal, agreeing with "
                f"{verdict.checked_by}" + (f"; {POSITIONS_CHECKED}" if layout is not None else ""))
    payload = proof.to_json() | {"program": pr.program_text(), "steps": len(pr.steps), "buffers": pr.buffers,
                                 "goal": _goal_json(args, pr), "rests_on": rests_on}
    status = proof.status
    if status == "proved" and layout is not None and not layout.valid:
        status = "counterexample"
        payload |= _positions_counterexample(layout, "proved")
    elif layout is not None and not layout.valid:
        payload["positions"] = layout.counterexample()
    render = _renderer(args, pr, proof, payload, status, n)

    def render_all(c: Console) -> None:
        render(c)
        if "positions" in payload:
            c.print(f"  under XLA/NCCL positions: {escape(payload['positions']['message'])}")
        elif status == "counterexample" and proof.status == "proved":
            c.print(f"  rests on: {escape(rests_on)}")

    emit(args, payload, render_all)
    return {"proved": ExitCode.OK, "counterexample": ExitCode.FAIL}.get(status, ExitCode.UNKNOWN)


def _positions_counterexample(layout, held: str) -> dict:
    """A sharded goal's COUNTEREXAMPLE fields where the chunk semantics held (``held``: proved or valid) and the
    XLA/NCCL positions do not: the device, position and block, the message saying both."""
    out = layout.counterexample()
    return out | {"status": "counterexample", "chunk_semantics": held,
                  "message": positions_refusal(held, out["message"])}


def _goal_json(args: argparse.Namespace, pr) -> dict:
    return goal_of(args, pr.reduce).to_json()


def unproved(args: argparse.Namespace, pr, verdict, skipped: str, sharding=None) -> int:
    """The interpreter's verdict alone, where Z3 does not prove (status ``valid`` or ``counterexample``,
    never ``proved``), with what it rests on."""
    n = pr.placement.num_devices
    status = "valid" if verdict.execution.valid else "counterexample"
    sharded_layout = verdict.positions if sharding is not None else None
    rests_on = f"{verdict.checked_by}; {skipped}" + (f"; {POSITIONS_CHECKED}" if sharded_layout is not None else "")
    payload = {"status": status, "program": pr.program_text(), "steps": len(pr.steps), "buffers": pr.buffers,
               "rests_on": rests_on} | ({"goal": _goal_json(args, pr)} if sharding is not None else {})
    v = verdict.violation
    if v is not None:
        payload |= {"failing_step": v.step, "rule": str(v.rule), "message": v.message, "violation": v.to_json()}
    if sharded_layout is not None and not sharded_layout.valid:
        if status == "valid":
            status = "counterexample"
            payload |= _positions_counterexample(sharded_layout, "valid")
        else:
            payload["positions"] = sharded_layout.counterexample()
    elif status == "valid" and pr.program is None and sharding is None:
        layout = _positions(n, pr)
        if not layout.valid:
            status = "counterexample"
            payload |= {"status": status} | layout.counterexample()

    def render(c: Console) -> None:
        if status == "valid":
            c.print(f"[green]VALID[/green] (not proved by Z3): {counted(len(pr.steps), 'step')}, {n} devices"
                    f"{pr.on_buffers()}")
        elif v is not None:
            render_violation(c, "COUNTEREXAMPLE", v, getattr(args, "verbose", False),
                             verdict.device_rows(list(dict.fromkeys((*v.devices, *(v.group or ()))))[:8]))
        else:
            c.print(f"[red]COUNTEREXAMPLE[/red]: {escape(payload.get('message', ''))}")
        if "positions" in payload:
            c.print(f"  under XLA/NCCL positions: {escape(payload['positions']['message'])}")
        c.print(f"  rests on: {escape(rests_on)}")

    emit(args, payload, render)
    return ExitCode.OK if status == "valid" else ExitCode.FAIL


def _renderer(args, pr, proof, payload, status, n):
    verbose = getattr(args, "verbose", False)

    def render(c: Console) -> None:
        if status == "proved":
            what = "for every integer input" if args.values else "the goal holds and no precondition fails"
            c.print(f"[green]PROVED[/green]: {what} ({counted(len(pr.steps), 'step')}, {n} devices{pr.on_buffers()})")
            c.print(f"  rests on: {escape(payload['rests_on'])}")
            return
        if status == "unknown":
            c.print(f"[yellow]UNKNOWN[/yellow]: {escape(payload.get('message', 'the solver gave up'))}")
            return
        v = getattr(proof, "violation", None)
        if v is not None:
            render_violation(c, "COUNTEREXAMPLE", v, verbose, proof.states, proof.defects)
            if verbose and proof.witness:
                c.print(f"  Z3 witness: {proof.witness}")
            return
        c.print(f"[red]COUNTEREXAMPLE[/red]: {escape(payload.get('message', ''))}")
        for key in ("failing_step", "group", "device", "chunk", "position", "block", "expected_block",
                    "rule", "expected", "actual"):
            if payload.get(key) is not None:
                c.print(f"  {key.replace('_', ' ')}: {payload[key]}")
        if verbose and payload.get("inputs"):
            c.print(f"  inputs (device × chunk): {payload['inputs']}")

    return render
