"""``--goal`` and ``--shard-axes``: the goal a plan is judged against (docs/semantics.md §6)."""

from __future__ import annotations

import argparse

from p2smt.model.goal import Goal, GoalKind


def add_goal(p: argparse.ArgumentParser) -> None:
    p.add_argument("--goal", default=GoalKind.ALLREDUCE.value, choices=[k.value for k in GoalKind],
                   help="what every device must end with: the whole sum (allreduce, default), its shard of the sum "
                        "(reduce-scatter; HSDP with --shard-axes), or every shard (all-gather); "
                        "docs/semantics.md §6")
    p.add_argument("--shard-axes", metavar="AXES",
                   help="axes (indices, a subset of --reduce) the result is sharded over, e.g. 1 "
                        "(default: every reduction axis for reduce-scatter and all-gather)")


def goal_of(args: argparse.Namespace, reduce: tuple[int, ...]) -> Goal:
    """The goal of ``--goal``/``--shard-axes`` for reduction axes ``reduce`` (one-line P2Error if invalid)."""
    from p2smt.cli.options import int_list

    shard = int_list(args.shard_axes) if args.shard_axes is not None else None
    return Goal.of(args.goal, shard, reduce)
