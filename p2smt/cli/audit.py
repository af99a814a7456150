"""``p2smt audit``: audit a whole training step (compiled HLO, HLO before partitioning, or StableHLO).

Every chain of collectives is proved against its own reduction groups, priced, and compared with the
cheapest program for the same groups and bytes; on StableHLO every output is checked against its declared
sharding (no partial sum left, replicated where declared so, each device its own shard). Exit 0 PROVED,
1 FINDINGS, 4 UNVERIFIED or REFUSED (something was not followed).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from p2smt.cli.options import add_json, add_system, name_ints, shown
from p2smt.cli.output import ExitCode, emit, folder_path, output_file, png_path
from p2smt.errors import P2Error

MAX_MODULE_BYTES = 256 << 20


def register(sub) -> None:
    p = sub.add_parser("audit", help="audit a whole training step: every chain proved, priced and improved")
    p.add_argument("step", metavar="STEP", help="the module: compiled HLO, HLO before partitioning, or StableHLO")
    add_system(p)
    p.add_argument("--device-order", help="JSON device order: XLA device i is system device ORDER[i]")
    p.add_argument("--mesh", help="mesh axes where the module has none (compiled HLO), e.g. data=4,tensor=4")
    p.add_argument("--expect", action="append", default=[], metavar="OUTPUT=SPEC",
                   help="what output OUTPUT must be, overriding its declared sharding: per dimension '-' or mesh "
                        "axes joined by '+' (e.g. 0=data,-; '1=' is replicated); repeatable. StableHLO numbers "
                        "the shard_map outputs; compiled HLO the entry's outputs, which it judges only so")
    p.add_argument("--algo", default="auto", help="ring | tree | nvls | auto (NCCL's tuner; default)")
    p.add_argument("--max-len", type=shown, default=6, help="longest program the best-program search tries")
    p.add_argument("--emit", metavar="DIR", help="write a JAX shard_map module per improvable chain into DIR")
    p.add_argument("--png", help="plot where the step's communication time goes (each chain now vs best)")
    add_json(p)
    p.set_defaults(func=run)


def _mesh(text: str | None) -> list[tuple[str, int]] | None:
    if text is None:
        return None
    return list(name_ints([t for t in text.split(",") if t], "--mesh", "SIZE").items())


def run(args: argparse.Namespace) -> int:
    from p2smt.auditing import audit_text, parse_expect
    from p2smt.frontend.hlo import read_device_order
    from p2smt.model.system import load_system
    from p2smt.model.yamlfile import read_text_at_most

    if args.png:
        png_path(args.png, "--png")
    if args.emit is not None:
        if not args.emit.strip():
            raise P2Error("--emit: give the folder to write the fixes into")
        folder_path(args.emit, "--emit")
    expect = dict(parse_expect(e) for e in args.expect)
    try:
        text = read_text_at_most(Path(args.step), MAX_MODULE_BYTES, "module")
    except OSError as err:
        raise P2Error(f"cannot read {args.step}: {err.strerror}") from None
    system = load_system(args.system, args.nodes, name_ints(args.level) or None)
    order = read_device_order(args.device_order) if args.device_order else None
    report = audit_text(text, system=system, device_order=order, mesh=_mesh(args.mesh), expect=expect,
                        algo=args.algo, best_len=args.max_len, where=args.step)
    written = []
    if args.emit:
        from p2smt.auditing.emit import write_fixes

        try:
            written = [str(p) for p in write_fixes(report, system, args.emit)]
        except OSError as err:
            raise P2Error(f"--emit {args.emit!r}: cannot write the fixes: {err.strerror}") from None
    if args.png:
        from p2smt.auditing.plot import plot_report

        with output_file(args.png, "--png") as tmp:
            plot_report(report, tmp)
    payload = report.to_json() | {"emitted": written}
    emit(args, payload, lambda c: render(c, report, written))
    return {"PROVED": ExitCode.OK, "FINDINGS": ExitCode.FAIL}.get(report.verdict.value, ExitCode.UNKNOWN)


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.3g} µs"


def render(c: Console, report, written: list[str]) -> None:
    """The step's verdict, a table of chains, the outputs, the findings and what was not followed."""
    from rich.table import Table

    colour = {"PROVED": "green", "FINDINGS": "red"}.get(report.verdict.value, "yellow")
    mesh = ", ".join(f"{n}={s}" for n, s in report.mesh) if report.mesh else "none declared"
    c.print(f"[{colour}]{report.verdict.value}[/{colour}]: {escape(report.module)} on {escape(report.system)} "
            f"({report.num_devices} devices; mesh {escape(mesh)}; read from {' and '.join(report.sources)})")
    if report.placement:
        c.print(f"  placement of the mesh axes on the system's levels: {[list(r) for r in report.placement]}")
    t = Table(title=f"chains (bytes: per device; x: how many alike; runs: per step; NCCL {report.algo}; best "
                    "program below)")
    for col in ("#", "lines", "steps", "bytes", "x", "runs", "verdict", "now", "best", "speedup"):  # steps name the axes
        t.add_column(col, justify="right" if col in ("#", "bytes", "x", "now", "best", "speedup") else "left",
                     overflow="fold", min_width=10 if col == "steps" else None)
    for ch in report.chains:
        speed = ch.speedup
        t.add_row(str(ch.index), ",".join(map(str, ch.lines)), escape("; ".join(ch.steps)), str(ch.bytes),
                  str(ch.count), ch.runs,
                  ch.verdict.value, _us(ch.seconds), _us(ch.best_seconds),
                  "-" if speed is None else f"{speed:.2f}x" if speed > 1 else "keep")
    if report.chains:
        c.print(t)
        c.print(f"  communication per step: {_us(report.seconds_now)} now, {_us(report.seconds_best)} with the best "
                "programs")
        c.print("  best program per chain (the cheapest for its groups and bytes on the mesh's placement):")
        for ch in report.chains:  # below the table, whole: the program is the answer, never cut
            c.print(f"    {ch.index}: {escape(ch.best_program or ch.best_note or '-')}")
    for o in report.outputs:
        mark = {"ok": "[green]ok[/green]", "finding": "[red]finding[/red]"}.get(o.status.value,
                                                                                "[yellow]unverified[/yellow]")
        c.print(f"  output {o.index} ({escape(o.name)}): {mark} — declared {escape(o.declared)}; is "
                f"{escape(o.actual)}")
        for r in o.reasons:
            c.print(f"      {escape(r)}")
    for f in report.findings:
        if f.output is None:
            c.print(f"  [red]finding[/red] {f.kind.value}: {escape(f.message)}")
    for n in report.notes:
        c.print(f"  [yellow]not followed[/yellow]: {escape(n)}")
    for h in report.hidden:
        c.print(f"  [yellow]refused[/yellow]: {escape(h)}")
    for w in written:
        c.print(f"  wrote {escape(w)}")
