"""``p2smt cost``: the predicted time of one flat collective over all GPUs of a system."""

from __future__ import annotations

import argparse

from p2smt.cli.goals import named
from p2smt.cli.options import add_algo, add_json, add_system, byte_count, system_of
from p2smt.cli.output import ExitCode, emit
from p2smt.model.collectives import Collective, collective_named


def register(sub) -> None:
    p = sub.add_parser("cost", help="predicted time of one flat collective over all GPUs")
    add_system(p)
    p.add_argument("--collective", required=True, type=collective_name,
                   metavar="{" + ",".join(c.short for c in Collective) + "}",
                   help="any spelling of a collective's name (reduce-scatter, ReduceScatter, reducescatter)")
    p.add_argument("--bytes", type=byte_count, required=True, help="nccl-tests convention")
    add_algo(p)
    add_json(p)
    p.set_defaults(func=run)


@named
def collective_name(text: str) -> str:
    """``--collective``'s value in cost's canonical spelling (``reduce-scatter`` is ``reducescatter``)."""
    return collective_named(text, spelling=lambda c: c.short).short


def run(args: argparse.Namespace) -> int:
    from p2smt.cost.model import flat_collective_choice

    system = system_of(args)
    pick = flat_collective_choice(system, args.collective, args.bytes, args.algo)
    seconds = pick.seconds
    payload = {"system": system.name, "devices": system.num_devices, "collective": args.collective,
               "bytes": args.bytes, "algo": args.algo, "seconds": seconds,
               "chosen": {"algorithm": pick.algo, "protocol": pick.protocol.value}}
    emit(args, payload, lambda c: c.print(
        f"{args.collective} of {args.bytes:.4g} B over {system.num_devices} GPUs of {system.name} "
        f"({pick.algo}/{pick.protocol.value}): {seconds:.6g} s"))
    return ExitCode.OK
