"""``--goal`` and ``--shard-axes``: the goal a plan is judged against (docs/semantics.md §6)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from p2smt.errors import P2Error
from p2smt.model.goal import Goal, GoalKind


def add_goal(p: argparse.ArgumentParser) -> None:
    p.add_argument("--goal", default=GoalKind.ALLREDUCE.value, type=goal_name,
                   metavar="{" + ",".join(k.value for k in GoalKind) + "}",
                   help="what every device must end with: the whole sum (allreduce, default), its shard of the sum "
                        "(reduce-scatter; HSDP with --shard-axes), or every shard (all-gather); any spelling of "
                        "the collective's name (allgather, AllGather); docs/semantics.md §6")
    p.add_argument("--shard-axes", metavar="AXES",
                   help="axes (indices, a subset of --reduce) the result is sharded over, e.g. 1 "
                        "(default: every reduction axis for reduce-scatter and all-gather)")


def named(parse: Callable[[str], str]) -> Callable[[str], str]:
    """An argparse ``type`` from a name parser: its one-line P2Error becomes the flag's usage error."""

    def convert(text: str) -> str:
        try:
            return parse(text)
        except P2Error as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    convert.__name__ = parse.__name__
    return convert


@named
def goal_name(text: str) -> str:
    """``--goal``'s value as its canonical goal name (``AllGather`` and ``allgather`` are ``all-gather``)."""
    return GoalKind.parse(text).value


def goal_of(args: argparse.Namespace, reduce: tuple[int, ...]) -> Goal:
    """The goal of ``--goal``/``--shard-axes`` for reduction axes ``reduce`` (one-line P2Error if invalid)."""
    from p2smt.cli.options import int_list

    shard = int_list(args.shard_axes) if args.shard_axes is not None else None
    return Goal.of(args.goal, shard, reduce)
