"""``p2smt experiment``: encoding variants over a configuration set; JSONL per run, a summary, a PNG."""

from __future__ import annotations

import argparse
from contextlib import nullcontext
from typing import Any

from rich.console import Console

from p2smt.cli.options import add_json, count, file_arg, gibibytes, name_ints, picture_path, seconds
from p2smt.cli.output import ExitCode, emit
from p2smt.errors import P2Error
from p2smt.model.paths import check_output, output_file


def register(sub) -> None:
    p = sub.add_parser("experiment", help="measure SMT encoding variants: JSONL per run, summary table, PNG")
    p.add_argument("--encodings", required=True, help="comma-separated encoding names (see `p2smt encodings`)")
    p.add_argument("--options", action="append", default=[], metavar="NAME=JSON",
                   help="an option set of one encoding, e.g. 'bitvec={\"choice\":\"index\"}' (repeatable: "
                        "one variant per set)")
    p.add_argument("--configs", required=True, help="paper-grid | a shipped set (scale) | a YAML file")
    p.add_argument("--repeat", type=count, default=1, help="repetitions (seed = --seed + repetition)")
    p.add_argument("--out", type=file_arg, default="results.jsonl",
                   help="JSONL results (overwritten; a device or a FIFO with a reader: written through)")
    p.add_argument("--png", type=file_arg, help="write solve time vs reduction-group size (log-log) here")
    p.add_argument("--timeout", type=seconds, default=300.0,
                   help="seconds per run: Z3's per-call limit (-> unknown) and, plus a grace, the wall-clock "
                        "kill (-> timeout)")
    p.add_argument("--max-len", type=count, help="override every configuration's max length")
    p.add_argument("--max-k", action="append", default=[], metavar="NAME=K",
                   help="run encoding NAME only on configurations with k <= K (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="Z3 random seed of repetition 0")
    p.add_argument("--memory", type=gibibytes, metavar="GIB",
                   help="the encodings' memory cap in GiB, as synth's (default: half the machine's RAM): a run "
                        "past its estimate is an error line, one past the cap ends unknown")
    p.add_argument("--encodings-dir", help="another folder of encoding files")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run encoding variants over a configuration set; JSONL lines, a summary table, an optional PNG."""
    from p2smt.runs.experiment import experiment
    from p2smt.runs.expreport import render_summary

    max_k = name_ints(args.max_k, "--max-k", "K")
    if any(k < 1 for k in max_k.values()):
        raise P2Error(f"--max-k expects NAME=K with K at least 1, got {', '.join(args.max_k)}")
    if args.png:
        check_output(picture_path(args.png, "--png"), "--png")
    check_output(args.out, "--out")
    extra = [args.encodings_dir] if args.encodings_dir else []
    console = Console(stderr=True, highlight=False)

    def progress(row: dict[str, Any]) -> None:
        if not args.json:
            secs = row.get("wall_seconds")
            done = f" in {secs:.3f} s, {row.get('programs')} programs" if secs is not None else ""
            console.print(f"{row['variant']}  {row['config']}  rep {row['repetition']}: {row['status']}{done}")

    # the picture is drawn to a temporary file, moved (or written through) to --png as every output
    with output_file(args.png, "--png", ".png") if args.png else nullcontext() as png:
        summary = experiment(
            args.encodings, args.configs, args.out, options=args.options, repeat=args.repeat,
            timeout_s=args.timeout, max_len=args.max_len, seed=args.seed, png=png, max_k=max_k or None,
            extra_dirs=extra, progress=progress, memory_gib=args.memory,
        )
    if args.png:
        summary["png"] = args.png

    def render(c: Console) -> None:
        title = (f"{summary['configs']}: {summary['points']} configurations × "
                 f"{summary['repeat']} repetitions ({summary['stats']['seconds']:.1f} s)")
        for part in render_summary(summary, title):
            c.print(part)
        c.print(f"results: {summary['out']}" + (f"; plot: {summary['png']}" if summary.get("png") else ""))

    emit(args, summary, render)
    if summary["failures"] and any(f["status"] == "unsound" for f in summary["failures"]):
        return ExitCode.INTERNAL
    return ExitCode.FAIL if summary["disagreements"] or summary["failures"] else ExitCode.OK
