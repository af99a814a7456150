"""The count abstraction of a state: per device (or cell), its number of non-empty chunks and the number of
contributions each of them holds (None: unknown or unequal across its chunks).

Both follow the Hoare rules of the P² paper through numbers only, so they are exact for fixed programs
(``check.PlanChecker`` folds them to integers) and give necessary conditions of validity for searches over
counts (``cost.best``'s lower bounds). ``unroll.CellCounts`` states the same rules symbolically.
"""

from __future__ import annotations

from collections.abc import Sequence

from p2smt.model.collectives import Collective

Counts = tuple[int, int | None]
"""(non-empty chunks, contributions per non-empty chunk or None)."""


def may_run(coll: Collective, chunks: Sequence[int], k: int) -> bool:
    """The count-level preconditions of one group (members' chunk counts in rank order, ``k`` chunks in all):
    Broadcast members hold at most the root's chunks; the others hold equally many, ReduceScatter's
    divisible by the group size, AllGather's gathered total at most ``k``."""
    head = chunks[0]
    if coll is Collective.BROADCAST:
        return all(v <= head for v in chunks[1:])
    if any(v != head for v in chunks[1:]):
        return False
    if coll is Collective.REDUCE_SCATTER and head % len(chunks):
        return False
    return not (coll is Collective.ALL_GATHER and head * len(chunks) > k)


def after(coll: Collective, members: Sequence[Counts]) -> list[Counts]:
    """Each member's counts after ``coll`` over the group (in rank order); valid while the preconditions
    hold, which is when it is used."""
    chunks = [n for n, _ in members]
    per = [c for _, c in members]
    head, m = chunks[0], len(members)
    union = _union_per_chunk(coll, per)
    if coll in (Collective.ALL_REDUCE, Collective.BROADCAST):
        return [(head, union)] * m
    if coll is Collective.REDUCE_SCATTER:
        return [(head // m, union)] * m
    if coll is Collective.ALL_GATHER:
        return [(sum(chunks), union)] * m
    return [(head, union)] + [(0, 0)] * (m - 1)  # Reduce: the non-roots end empty


def _union_per_chunk(coll: Collective, per: Sequence[int | None]) -> int | None:
    """Contributions per non-empty chunk after the step, when every such chunk holds equally many."""
    if any(v is None for v in per):
        return None
    if coll is Collective.BROADCAST:
        return per[0]
    if coll is Collective.ALL_GATHER:
        return per[0] if all(v == per[0] for v in per) else None
    return sum(per)  # type: ignore[arg-type]
