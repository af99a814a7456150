"""``p2smt recheck DIR``: cvc5 re-checks every certificate file that ``--certificate DIR`` wrote."""

from __future__ import annotations

import argparse
from collections import Counter

from rich.console import Console

from p2smt.cli.options import add_json, file_arg, seconds
from p2smt.cli.output import ExitCode, console, counted, emit


def register(sub) -> None:
    p = sub.add_parser("recheck", help="re-check a --certificate folder with cvc5: a verdict per file")
    p.add_argument("folder", type=file_arg, metavar="DIR", help="the folder given to --certificate")
    p.add_argument("--timeout", type=seconds, help="cvc5's seconds per file (default: no limit; past it: unknown)")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Exit 0 when cvc5 confirms every file, 1 when it refutes one, 4 when it answers none of some."""
    from p2smt.api import recheck
    from p2smt.smt.cvc5_recheck import Recheck, Verdict

    out = console()

    def line(r: Recheck) -> None:  # each file as it is done: a large folder takes minutes
        if not args.json:
            colour = {"confirmed": "green", "refuted": "red", "unknown": "yellow"}[r.verdict.value]
            why = f" ({r.reason})" if r.reason else ""
            out.print(f"[{colour}]{r.verdict.value.upper()}[/{colour}] {r.file}: Z3 {r.expected}, cvc5 {r.answer}"
                      f"{why} [{r.seconds:.2f} s]", soft_wrap=True)

    results = recheck(args.folder, timeout=args.timeout, report=line)
    tally = Counter(r.verdict for r in results)
    summary = (f"{counted(len(results), 'certificate file')}: {tally[Verdict.CONFIRMED]} confirmed by cvc5, "
               f"{tally[Verdict.REFUTED]} refuted, {tally[Verdict.UNKNOWN]} unknown")
    payload = {"folder": args.folder, "files": [r.to_json() for r in results],
               "confirmed": tally[Verdict.CONFIRMED], "refuted": tally[Verdict.REFUTED],
               "unknown": tally[Verdict.UNKNOWN]}

    def render(c: Console) -> None:
        c.print(summary)

    emit(args, payload, render)
    if tally[Verdict.REFUTED]:
        return ExitCode.FAIL
    return ExitCode.UNKNOWN if tally[Verdict.UNKNOWN] else ExitCode.OK
