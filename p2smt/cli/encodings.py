"""``p2smt encodings``: the SMT encoding variants and their options."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from p2smt.cli.options import add_json
from p2smt.cli.output import ExitCode, emit


def register(sub) -> None:
    p = sub.add_parser("encodings", help="list the SMT encoding variants and their options")
    p.add_argument("--encodings-dir", help="another folder of encoding files")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from p2smt.smt.registry import available_encodings

    extra = [args.encodings_dir] if args.encodings_dir else []
    specs = available_encodings(extra)
    payload = {
        "encodings": [
            {"name": e.name, "description": e.description, "source": e.source,
             "options": json.loads(json.dumps(e.options.model_json_schema().get("properties", {}), default=str))}
            for e in specs
        ]
    }

    def render(c: Console) -> None:
        t = Table(title="SMT encodings")
        for col in ("name", "description", "options"):
            t.add_column(col, overflow="fold")
        for e in payload["encodings"]:
            opts = "; ".join(
                f"{k}: {v.get('enum', v.get('type', ''))} = {v.get('default')!r}" for k, v in e["options"].items()
            )
            t.add_row(e["name"], e["description"], opts)
        c.print(t)

    emit(args, payload, render)
    return ExitCode.OK
