"""``p2smt topologies``: the shipped systems."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from p2smt.cli.options import add_json
from p2smt.cli.output import ExitCode, emit


def register(sub) -> None:
    p = sub.add_parser("topologies", help="list the shipped systems")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from p2smt.model.system import load_system, shipped_systems

    systems = [load_system(n) for n in shipped_systems()]
    payload = {
        "systems": [
            {
                "name": s.name,
                "levels": [[lv.name, lv.size] for lv in s.levels],
                "devices": s.num_devices,
                "interconnects": [ic.name for ic in s.interconnects],
                "description": s.description,
            }
            for s in systems
        ]
    }

    def render(c: Console) -> None:
        t = Table(title="shipped systems")
        for col in ("name", "levels", "devices", "interconnects", "description"):
            t.add_column(col, overflow="fold")
        for s in payload["systems"]:
            levels = " > ".join(f"{n} {k}" for n, k in s["levels"])
            t.add_row(s["name"], levels, str(s["devices"]), ", ".join(s["interconnects"]), s["description"])
        c.print(t)

    emit(args, payload, render)
    return ExitCode.OK
