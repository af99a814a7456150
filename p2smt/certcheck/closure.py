"""The closure check of a state-graph certificate (trusted; format in docs/certified.md).

From the problem alone it builds §4's initial and goal states, then walks the certificate from the
initial state: every state reached in fewer than ``max_len`` steps must account for every candidate, by
a successor (devices outside the candidate's groups unchanged; each group a *step lemma*) or by a group
and a failed rule (a *fact lemma* on the members the rule names). It returns the goal paths of length
≤ ``max_len`` and the lemmas; Z3 proves the lemmas (``smt2``), and the paths must be the claimed programs.
"""

from __future__ import annotations

from dataclasses import dataclass

FORMAT, VERSION, SHARDED_VERSION = "p2smt-state-graph", 1, 2
"""Version 1: the AllReduce goal; version 2: a sharded goal (``sharded_goal``: kind, each device's shard rank,
the number of shards; docs/semantics.md §6)."""
COLLECTIVES = ("AllReduce", "ReduceScatter", "AllGather", "Reduce", "Broadcast")
REDUCING = ("AllReduce", "ReduceScatter", "Reduce")
RULES: dict[str, tuple[tuple[str, ...], str]] = {
    **{f"{c}.same_chunks": ((c,), "same_chunks") for c in REDUCING},
    **{f"{c}.disjoint": ((c,), "disjoint") for c in REDUCING},
    "ReduceScatter.divisible": (("ReduceScatter",), "divisible"),
    "AllGather.disjoint_chunks": (("AllGather",), "disjoint_chunks"),
    "AllGather.equal_sizes": (("AllGather",), "equal_sizes"),
    "Broadcast.below_root": (("Broadcast",), "below_root"),
    "Broadcast.information_increase": (("Broadcast",), "information_increase"),
    "progress": (COLLECTIVES, "progress"),
}
"""Each rule a certificate may name: the collectives it belongs to, and the kind of fact it states."""
PAIRED = ("same_chunks", "disjoint", "disjoint_chunks", "equal_sizes", "below_root")
"""Kinds whose fact names a member ``a`` ≥ 1 (against member 0, or against members 0..a-1)."""


class Rejected(Exception):
    """The certificate does not prove the program set (the message says where)."""


@dataclass(frozen=True)
class Problem:
    """What the certificate must be about: devices, goal groups, candidates (collective name, groups)."""

    devices: int
    goal_groups: tuple[tuple[int, ...], ...]
    candidates: tuple[tuple[str, tuple[tuple[int, ...], ...]], ...]
    require_progress: bool
    sharded_goal: tuple[str, tuple[int, ...], int] | None = None
    """(kind ``reduce-scatter`` or ``all-gather``, each device's shard rank, shards); None: the AllReduce goal."""


@dataclass(frozen=True)
class Closed:
    """A certificate walked from the initial state: its goal state ids, the states reached in fewer than
    ``max_len`` steps (each accounts for every candidate), their edges, and the lemmas Z3 must prove."""

    goals: frozenset[int]
    reached: tuple[int, ...]
    edges: list
    lemmas: frozenset[tuple]
    steps: int
    unexpanded: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Checked:
    """A closed certificate: its goal paths, the lemmas Z3 must prove, and what was walked."""

    programs: frozenset[tuple[int, ...]]
    lemmas: frozenset[tuple]
    states: int
    steps: int


def _need(cond: bool, why: str) -> None:
    if not cond:
        raise Rejected(why)


def check(doc: dict, problem: Problem, max_len: int) -> Checked:
    """The certificate's goal paths and lemmas, or ``Rejected``."""
    closed = close(doc, problem, max_len)
    edges, goals = closed.edges, closed.goals
    try:
        claimed = {tuple(p) for p in doc["programs"]}
    except (KeyError, TypeError) as err:
        raise Rejected(f"malformed certificate ({err!r})") from None
    programs: dict[tuple[int, int], list[tuple[int, ...]]] = {}

    def ends(sid: int, left: int) -> list[tuple[int, ...]]:  # paths of 1..left steps from sid to the goal
        if (sid, left) not in programs:
            out = []
            for i, t in enumerate(edges[sid]):
                if type(t) is int:
                    out += [(i,)] * (t in goals) + ([(i, *p) for p in ends(t, left - 1)] if left > 1 else [])
            programs[sid, left] = out
        return programs[sid, left]

    found = frozenset(ends(0, max_len))
    _need(found == claimed, f"the claimed programs are not the goal paths ({len(claimed - found)} extra, "
          f"{len(found - claimed)} missing)")
    return Checked(found, closed.lemmas, len(closed.reached), closed.steps)


def close(doc: dict, problem: Problem, max_len: int, partial: bool = False) -> Closed:
    """The certificate's graph walked and closed (no program set: ``best`` reads its cheapest paths), or
    ``Rejected``. ``partial``: a reached state may be left unexpanded (no row); they are returned, and
    whoever reads paths off the graph must show that none of them matters (``best``'s cost bound)."""
    k, cands = problem.devices, problem.candidates
    try:
        sharded = problem.sharded_goal
        version = VERSION if sharded is None else SHARDED_VERSION
        _need(doc["format"] == FORMAT and doc["version"] == version,
              f"not a version-{version} state-graph certificate")
        _need(doc.get("sharded_goal") == (None if sharded is None else
                                          {"kind": sharded[0], "rank": list(sharded[1]), "shards": sharded[2]}),
              "another goal")
        _need(doc["devices"] == k and doc["max_len"] == max_len and doc["require_progress"] is True
              and problem.require_progress, "another problem (devices, length or progress rule)")
        _need([list(g) for g in problem.goal_groups] == doc["goal_groups"]
              and [[c, [list(g) for g in gs]] for c, gs in cands] == doc["candidates"], "another problem")
        mats = [int(h, 16) for h in doc["device_states"]]
        _need(all(0 <= m < 1 << (k * k) for m in mats), "a device state wider than k×k")
        states = [tuple(mats[i] for i in s) for s in doc["states"]]
        edges = doc["edges"]
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise Rejected(f"malformed certificate ({err!r})") from None
    _need(all(len(s) == k for s in states) and len(set(states)) == len(states), "states not distinct k-tuples")
    for coll, groups in cands:
        flat = [d for g in groups for d in g]
        _need(coll in COLLECTIVES and len(set(flat)) == len(flat) and all(0 <= d < k for d in flat),
              f"a candidate whose groups are not disjoint devices: {coll} {groups}")
    initial, goal = _ends(problem)
    _need(states[0] == initial, "state 0 is not initial")
    goals = {i for i, s in enumerate(states) if s == goal}
    _need(goals == ({doc["goal"]} if type(doc["goal"]) is int else set()) and (goals or doc["goal"] is None),
          "the goal is not the state the goal accepts")
    depth, order, lemmas, unexpanded = {0: 0}, [0], set(), set()
    for sid in order:  # breadth first: depth is the fewest steps from the initial state
        if depth[sid] >= max_len:
            continue
        row = edges[sid] if 0 <= sid < len(edges) else None
        if partial and row is None:
            unexpanded.add(sid)
            continue
        _need(isinstance(row, (list, tuple)) and len(row) == len(cands),
              f"state {sid} does not account for every candidate")
        for i, edge in enumerate(row):
            coll, groups = cands[i]
            src = states[sid]
            if type(edge) is int:
                _need(0 <= edge < len(states), f"state {sid}, candidate {i}: no state {edge}")
                dst = states[edge]
                covered = {d for g in groups for d in g}
                _need(all(src[d] == dst[d] for d in range(k) if d not in covered),
                      f"state {sid}, candidate {i}: a device outside the groups changes")
                for g in groups:
                    lemmas.add(("step", coll, tuple(src[d] for d in g), tuple(dst[d] for d in g)))
                if edge not in depth:
                    depth[edge] = depth[sid] + 1
                    order.append(edge)
            else:
                lemmas.add(_fact(sid, i, coll, groups, src, edge))
    return Closed(frozenset(goals), tuple(order), edges, frozenset(lemmas),
                  sum(len(edges[s]) for s in order if depth[s] < max_len and s not in unexpanded),
                  frozenset(unexpanded))


def _ends(problem: Problem) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The initial and goal states as k×k matrices (bit ``r·k + c``: chunk r holds contribution c), from the
    problem alone. AllReduce (§4): d starts with column d in every chunk and ends with its goal group's columns
    in every chunk. Sharded (§6), with shard ``s`` = chunks ``s·b .. s·b+b-1``, ``b = k / shards``: ReduceScatter
    ends with the group's columns in the chunks of d's shard only; AllGather starts with column d in d's shard
    only and ends with, in every chunk r, the column of the group member whose shard holds r."""
    k = problem.devices
    kind, rank, shards = problem.sharded_goal or (None, (), 1)
    _need(k % shards == 0 and (kind is None or (len(rank) == k and all(0 <= r < shards for r in rank))),
          "a sharded goal that does not fit the devices")
    b = k // shards

    def chunks(d: int) -> range:
        return range(rank[d] * b, rank[d] * b + b) if kind is not None else range(k)

    initial = [sum(1 << (r * k + d) for r in (chunks(d) if kind == "all-gather" else range(k))) for d in range(k)]
    goal = [0] * k
    for g in problem.goal_groups:
        row = sum(1 << c for c in g)
        owner = {r: c for c in g for r in chunks(c)}
        for d in g:
            if kind == "all-gather":
                _need(sorted(owner) == list(range(k)), "a goal group that does not hold each shard once")
                goal[d] = sum(1 << (r * k + owner[r]) for r in range(k))
            else:
                goal[d] = sum(row << (r * k) for r in chunks(d))
    return tuple(initial), tuple(goal)


def _fact(sid: int, i: int, coll: str, groups, src: tuple[int, ...], edge) -> tuple:
    """The fact lemma of a failure ``[group, rule, member]``: the one precondition it breaks, on its members."""
    where = f"state {sid}, candidate {i}"
    _need(isinstance(edge, (list, tuple)) and len(edge) == 3 and type(edge[0]) is int and type(edge[2]) is int
          and 0 <= edge[0] < len(groups) and isinstance(edge[1], str) and edge[1] in RULES,
          f"{where}: a malformed failure {edge!r}")
    g, rule, a = edge
    owners, kind = RULES[rule]
    group = groups[g]
    _need(coll in owners, f"{where}: {rule} is no rule of {coll}")
    if kind in PAIRED:
        _need(1 <= a < len(group), f"{where}: member {a} of a group of {len(group)}")
        if kind in ("disjoint", "disjoint_chunks"):
            return (kind, src[group[a]], tuple(sorted({src[d] for d in group[:a]})))
        return (kind, src[group[0]], src[group[a]])
    members = tuple(src[d] for d in group)
    if kind == "divisible":
        return (kind, len(members), members[0])
    if kind == "information_increase":
        return (kind, members[0], tuple(sorted(set(members[1:]))))
    return (kind, coll, members)
