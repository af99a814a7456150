"""The compressed interpreter's check (``pieces.check_programs``) at 10⁴–10⁵ devices: the per-device work in numpy.

The same rule code (``pieces.apply_group``) and the same verdicts as ``pieces.check_programs``; two changes
of representation make a step cost a few numpy passes over the devices plus Python work per *distinct*
group, instead of Python work per device:

* A state is two int32 arrays over the devices (a token and a chunk shift); a step gathers the groups'
  members as a groups × members array, computes each distinct row's outcome once with the pieces rule code
  (memoized) and scatters the new tokens back. Programs are walked as a prefix trie (lexicographic order),
  keeping only the current path's states.
* A device stores its state *in its own frame*: its chunks shifted down to its lowest chunk (the rules
  read chunks through equality, disjointness, sizes and their order, which a common shift keeps) and its
  contributions translated by minus its position in the hierarchy (digit-wise, modulo each level's size;
  the rules read contributions through union, intersection and equality, which any relabeling keeps).
  A group's members are brought to one frame before the rules run and each outcome is taken back to its
  member's frame, so groups that differ only by where they sit in the hierarchy share one outcome.

Two kinds of groups skip the per-group rule code (same rules, same order, same verdicts): a Broadcast is
decided member by member (each member below its root, none or all equal to it), each distinct (root, member,
relative shift and offset) pair once over all of an instruction's groups; a group of more than
``LARGE_MEMBERS`` one-piece members is decided on positions in numpy (overlaps counted, the union built once)
instead of k-bit integers per member. And an instruction whose groups are copies of one part's (a run of a
level's stride, or a column of those runs) is stepped on that part alone when the state is the same in every
part, up to one chunk shift per part.

``sizes`` (the hierarchy's level sizes, outermost first) only decides which groups share outcomes; any
factorization of k (or none: one level of size k) gives the same verdicts. It shares no code with the
encodings (an independent re-check). Its array helpers are in ``semantics.arrays``, the digit-wise
translations in ``semantics.digits``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from p2smt.model.problem import SynthesisProblem
from p2smt.semantics.arrays import by_rows, classes, constant_runs, distinct_parts, distinct_rows, repeats
from p2smt.semantics.digits import Digits
from p2smt.semantics.pieces import (
    AG,
    AR,
    BC,
    RED,
    Verdict,
    _below,
    _canon,
    _Fail,
    _Runner,
    _Table,
    outcome,
    run_checks,
)


@dataclass(frozen=True)
class _Frame:
    """A group's members' digit-wise offsets from its first member (the same in every group of this frame):
    ``devices`` is one such group; ``id`` names the offsets in the outcome memo."""

    id: int
    devices: np.ndarray


@dataclass(frozen=True)
class _Block:
    """The groups of one instruction with one number of members: ``members`` (groups × members) are their
    devices, ``index`` their positions in the instruction, ``frame`` each group's frame (into ``frames``)."""

    index: np.ndarray
    members: np.ndarray
    frame: np.ndarray
    frames: tuple[_Frame, ...]
    offsets: tuple[np.ndarray, np.ndarray]  # each member's offsets from the first one's and back (levels first)
    moved: dict = field(default_factory=dict)  # see _Machine._uniform


@dataclass(frozen=True)
class _Repeat:
    """An instruction whose groups are copies of the groups of one part of the devices, moved part by part: the
    parts are the runs of ``width`` devices (the same outer levels' digits; a run is the devices ``[0, width)``
    moved by a multiple of ``width``) or, with ``columns``, the columns of those runs (the same inner levels'
    digits; the first column is the devices 0, width, 2·width, …). On a state the same in every part (it repeats
    run by run, or is constant in each run) the step is the first part's, copied to the others.
    ``blocks``: the first part's groups, their members numbered within it and their ``index`` ranking them by
    ``first``, the least index of each one's copies (the failing group reported is the first one, among all
    copies)."""

    width: int
    columns: bool
    blocks: tuple[_Block, ...]
    first: np.ndarray

    def part(self, values: np.ndarray) -> np.ndarray:
        return values[:: self.width] if self.columns else values[: self.width]

    def same(self, values: np.ndarray) -> bool:
        return constant_runs(values, self.width) if self.columns else repeats(values, self.width)

    def spread(self, values: np.ndarray, k: int) -> np.ndarray:
        return np.repeat(values, self.width) if self.columns else np.tile(values, k // self.width)

    def grid(self, values: np.ndarray) -> np.ndarray:
        """The first part's ``values`` laid along the parts' axis of the runs × width grid, for broadcasting."""
        return values[:, None] if self.columns else values[None, :]


MEMO_MEMBERS = 256
LARGE_MEMO_BYTES = 64 << 20
"""The outcomes of groups of more than ``MEMO_MEMBERS`` members (whose keys and outcomes cost O(members)
bytes) are memoized up to about this many bytes, then forgotten."""
LARGE_MEMBERS = 16
"""Groups of more members are decided by ``_Machine._large`` when its structure applies (its numpy passes cost
O(k) per group, less than translating each member's k-bit contributions from about this many members)."""
GATHER_CLASSES = 64


class _Machine:
    """Device states as (token, chunk shift) arrays: a device's state is ``states[token]`` with its chunks
    shifted up by ``shift`` (the lowest chunk it holds) and its contributions translated by its position.
    ``step`` maps the arrays to the next ones or raises ``_Fail`` with the first failing group and rule."""

    def __init__(self, problem: SynthesisProblem, sizes: Sequence[int] | None = None):
        self.problem = problem
        self.k = k = problem.num_devices
        self.full = full = (1 << k) - 1
        self.digits = Digits(k, (k,) if sizes is None else sizes)
        self.states = _Table()
        self.token = self.states.id
        self.frames = _Table()  # members' contribution offsets
        self.free = np.zeros(0, dtype=bool)  # by token: see _free
        self.memo: dict[tuple, tuple[np.ndarray, np.ndarray] | str] = {}  # (collective, frame, row) -> outcome
        self.large: dict[tuple, tuple[np.ndarray, np.ndarray] | str] = {}  # the same for large groups
        self.large_bytes = 0
        self.kept_bits = np.zeros(0, dtype=np.int64)  # by token: see _kept_of
        self.pairs: dict[tuple[int, int, int, int], tuple[bool, bool]] = {}  # see _pair
        self.sent: dict[tuple[int, int], int] = {}  # see _sent
        self.frame_offsets: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # see _frame_offsets
        self.kept_states: dict[tuple[int, ...], int] = {}  # see _kept_state
        self.shaped: dict[tuple[int, bool], tuple] = {}  # see _shaped
        sh = problem.sharding  # a sharded goal (docs/semantics.md §6): a shard is b chunks from rank·b
        kind, b = (None, k) if sh is None else (sh.kind, sh.block(k))
        shard_shifts = np.zeros(k, np.int32) if sh is None else np.array(sh.rank, dtype=np.int32) * b
        if kind == "all-gather":  # d holds its own contribution in its shard only
            self.initial = (np.full(k, self.token((((1 << b) - 1, 1),)), dtype=np.int32), shard_shifts)
        else:
            self.initial = (np.full(k, self.token(((full, 1),)), dtype=np.int32), np.zeros(k, np.int32))
        goal, goal_shifts = np.full(k, self.token(()), dtype=np.int32), np.zeros(k, np.int32)
        for g in problem.goal_groups:
            devices = np.array(g, dtype=np.int64)
            mask = self._bits(devices)
            if kind == "reduce-scatter":
                goal_shifts[devices] = shard_shifts[devices]
            if kind == "all-gather":  # chunk r holds its owner's contribution alone
                owners = sh.owners(tuple(g), k)
                held = _canon({1 << o: sum(1 << r for r in range(k) if owners[r] == o) for o in g})
            else:  # every chunk (AllReduce) or the shard's, shifted below (ReduceScatter/HSDP)
                held = ((full if kind is None else (1 << b) - 1, mask),)
            first = self.token(held)  # in device 0's frame, then sent to each device's
            back = self.digits.offsets(np.stack([np.zeros_like(devices), devices], axis=1))[1][:, :, 1]
            goal[devices] = self._send(np.full(len(g), first, dtype=np.int32), back)
        self.goal = (goal, goal_shifts)

    def step(self, state: tuple[np.ndarray, np.ndarray], i: int) -> tuple[np.ndarray, np.ndarray]:
        candidate = self.problem.candidates[i]
        coll, groups = candidate.collective, candidate.groups
        blocks, repeats = self._shaped(groups, coll is BC)
        tokens, shifts = state
        for rep in repeats:
            if not rep.same(tokens):
                continue
            lift = None if rep.same(shifts) else self._lift(tokens, shifts, rep)
            if lift is False:
                continue
            part_tokens, part_shifts = rep.part(tokens), rep.part(shifts)
            new_tokens, new_shifts = part_tokens.astype(np.int32), part_shifts.astype(np.int32)
            failure = self._apply(rep.blocks, coll, part_tokens, part_shifts, new_tokens, new_shifts)
            if failure is not None:
                raise _Fail(groups[int(rep.first[failure[0]])], failure[1])
            if lift is None:
                return rep.spread(new_tokens, self.k), rep.spread(new_shifts, self.k)
            lifted = rep.grid(new_shifts) + np.where(rep.grid(self._free(new_tokens)), 0, lift)
            return rep.spread(new_tokens, self.k), lifted.reshape(-1).astype(np.int32)
        new_tokens, new_shifts = tokens.astype(np.int32), shifts.astype(np.int32)  # stored states may be uint16
        failure = self._apply(blocks, coll, tokens, shifts, new_tokens, new_shifts)
        if failure is not None:
            raise _Fail(groups[failure[0]], failure[1])
        return new_tokens, new_shifts

    def _lift(self, tokens: np.ndarray, shifts: np.ndarray, rep: _Repeat) -> np.ndarray | bool:
        """For a state whose tokens are the same in every part of ``rep``: each part's chunk shift above the
        first part's (runs × 1, or 1 × width for columns), when that is one number per part for the devices whose
        state is not free (see ``_free``), none for the free ones, and every group has a member that is not free;
        else False. Every rule reads chunks only relative to the lowest of the group's members that are not free,
        so a group in such a part steps as its copy in the first part does, its new shifts (those of new states
        that are not free) raised by the part's."""
        part = rep.part(tokens)
        free = self._free(part)
        held = np.flatnonzero(~free)
        if not len(held) or any(self._free(part[b.members]).all(axis=1).any() for b in rep.blocks):
            return False
        j = int(held[0])
        runs = shifts.reshape(-1, rep.width).astype(np.int64)
        rest = runs - (runs[:, :1] if rep.columns else runs[:1])
        lift = rest[j : j + 1] if rep.columns else rest[:, j : j + 1]
        if not np.where(rep.grid(free), rest == 0, rest == lift).all():
            return False
        return lift

    def _apply(self, blocks: Sequence[_Block], coll, tokens: np.ndarray, shifts: np.ndarray, new_tokens: np.ndarray,
               new_shifts: np.ndarray) -> tuple[int, str] | None:
        """The blocks' groups applied to the state (tokens, shifts), written into (new_tokens, new_shifts);
        the first failing group's index (the blocks' ``index``) and rule, or None."""
        failure: tuple[int, str] | None = None
        for b in blocks:
            if coll is BC:
                failed, placed = self._broadcast(b, tokens, shifts, failure is None)
                if failed is not None and (failure is None or failed[0] < failure[0]):
                    failure = failed
                if failure is None:
                    new_tokens[b.members], new_shifts[b.members] = placed
                continue
            rows, sh = tokens[b.members], shifts[b.members]
            free = self._free(rows)
            if free.any():
                base = by_rows(np.minimum, np.where(free, self.k, sh))
                base[base == self.k] = 0
                sh = np.where(free, 0, sh - base[:, None])
            else:
                base = by_rows(np.minimum, sh).astype(np.int64)
                sh = sh - base[:, None]
            m = rows.shape[1]
            first, inverse = distinct_parts([rows, sh] if len(b.frames) == 1 else [b.frame[:, None], rows, sh])
            out_tokens = np.empty((len(first), m), dtype=np.int32)
            out_shifts = np.empty((len(first), m), dtype=np.int32)
            for d in np.argsort(first, kind="stable").tolist():
                f = int(first[d])
                row = np.concatenate([b.frame[f : f + 1], rows[f], sh[f]]).astype(np.int64)
                frame = b.frames[row[0]]
                key = (coll, frame.id, row.tobytes())
                memo = self.memo if m <= MEMO_MEMBERS else self.large
                out = memo.get(key)
                if out is None:
                    out = memo[key] = self._outcome(coll, frame, row[1 : m + 1], row[m + 1 :])
                    if m > MEMO_MEMBERS:
                        self.large_bytes += 3 * len(key[2])
                        if self.large_bytes > LARGE_MEMO_BYTES:
                            self.large.clear()
                            self.large_bytes = 0
                if out.__class__ is str:
                    g = int(b.index[first[d]])
                    if failure is None or g < failure[0]:
                        failure = (g, out)
                    break
                out_tokens[d], out_shifts[d] = out
            if failure is None:
                new_tokens[b.members] = out_tokens[inverse]
                free = self._free(out_tokens)
                if not free.any():
                    new_shifts[b.members] = out_shifts[inverse] + base[:, None]
                elif free.all():
                    new_shifts[b.members] = 0
                else:
                    new_shifts[b.members] = np.where(free[inverse], 0, out_shifts[inverse] + base[:, None])
        return failure

    def _repeats_of(self, blocks: Sequence[_Block]) -> tuple[_Repeat, ...]:
        """The parts (runs of each level's stride, narrowest first, then their columns, widest first) of which an
        instruction's groups are copies (see ``_Repeat``)."""
        out = []
        widths = [w for w in sorted(self.digits.strides) if w < self.k]
        for width, columns in [(w, False) for w in widths] + [(w, True) for w in reversed(widths) if w > 1]:
            copies, move = (width, 1) if columns else (self.k // width, width)
            firsts, kept = [], []
            for b in blocks:
                members = b.members
                part = members % width if columns else members // width
                if not (part == part[:, :1]).all():
                    break
                head = np.flatnonzero(members[:, 0] % width == 0 if columns else members[:, 0] < width)
                if len(head) * copies != len(members):
                    break
                owner = np.full(self.k, -1, dtype=np.int64)
                owner[members[:, 0]] = np.arange(len(members))
                moved = members[head, None, :] + (np.arange(copies) * move)[None, :, None]  # head × copies × m
                rows = owner[moved[:, :, 0]]
                if (rows < 0).any() or not (members[rows] == moved).all():
                    break
                least = b.index[rows].min(axis=1)
                by = np.argsort(least, kind="stable")  # the rows in the order of their first copies
                firsts.append(least[by])
                kept.append(head[by])
            else:
                out.append(_Repeat(width, columns, *self._firsts(blocks, firsts, kept, width if columns else 0)))
        return tuple(out)

    @staticmethod
    def _firsts(blocks: Sequence[_Block], firsts: list[np.ndarray], kept: list[np.ndarray], column: int = 0):
        """The blocks of the groups ``kept`` (their rows per block), indexed in the order of ``firsts`` (the
        least index of each one's copies), and those indices in that order; with ``column``, members are
        numbered within the first column of the runs of that width."""
        first = np.concatenate(firsts) if firsts else np.zeros(0, np.int64)
        rank = np.argsort(first, kind="stable")
        order = np.empty(len(rank), np.int64)
        order[rank] = np.arange(len(rank))
        out, at = [], 0
        for b, head in zip(blocks, kept):
            index = order[at : at + len(head)]
            at += len(head)
            offsets = b.offsets if len(b.offsets[0]) == 0 else tuple(o[:, head] for o in b.offsets)
            members = b.members[head] // column if column else b.members[head]
            out.append(_Block(index, members, b.frame[head], b.frames, offsets))
        return tuple(out), first[rank]

    def _shaped(self, groups: Sequence[tuple[int, ...]], broadcast: bool):
        """An instruction's blocks and the parts its groups repeat over, built once per groups object (the
        collectives of one communicator share it) and kind (Broadcast blocks keep their offsets)."""
        key = (id(groups), broadcast)
        found = self.shaped.get(key)
        if found is None or found[0] is not groups:
            blocks = self._blocks_of(groups, broadcast)
            found = self.shaped[key] = (groups, blocks, self._repeats_of(blocks))
        return found[1:]

    def _blocks_of(self, groups: Sequence[tuple[int, ...]], broadcast: bool) -> tuple[_Block, ...]:
        out = []
        lengths = np.fromiter(map(len, groups), np.int64, len(groups))
        uniform = bool((lengths == lengths[0]).all())
        for m in np.unique(lengths).tolist():
            if uniform:
                index, members = np.arange(len(groups)), np.array(groups, dtype=np.intp)
            else:
                index = np.flatnonzero(lengths == m)
                members = np.array([groups[j] for j in index.tolist()], dtype=np.intp).reshape(len(index), m)
            offsets = self.digits.offsets(members)
            codes = offsets[0].sum(axis=0)
            if (codes == codes[0]).all():  # hierarchy-shaped: one frame
                codes, first, frame = codes[:1], np.zeros(1, np.int64), np.zeros(len(codes), np.int64)
            else:
                codes, first, frame = np.unique(codes, axis=0, return_index=True, return_inverse=True)
            frames = tuple(_Frame(self.frames.id(tuple(c)), members[f]) for c, f in zip(codes.tolist(), first))
            out.append(_Block(index, members, frame.reshape(-1).astype(np.int32), frames,
                              offsets if broadcast else (np.zeros(0), np.zeros(0))))
        return tuple(out)

    def _broadcast(self, b: _Block, tokens: np.ndarray, shifts: np.ndarray, place: bool):
        """A Broadcast block decided member by member: a group fails ``below_root`` if some member is not
        below its root (the first member), else ``information_increase`` if every member equals the root
        (which also covers progress); else every member gets the root's state. Each distinct (root's token,
        member's token, chunk shift between them, offset of the member from the root along the levels
        neither's contributions are kept by: a translation along a level the root keeps maps the root to
        itself, so it decides nothing) is decided once. Returns (first failing group index and rule, or
        None; the members' new tokens and shifts, when ``place`` and no group failed)."""
        rows, sh = tokens[b.members], shifts[b.members]
        root, root_sh = rows[:, :1], sh[:, :1]
        free = self._free(rows)
        d = np.where(free | free[:, :1], 0, sh.astype(np.int64) - root_sh)
        kept = self._kept_of(rows)
        kept_root = kept[:, :1]
        off = self._uniform(b, 0, kept | kept_root)[0]
        n, k = len(self.states), self.k
        if n * n * 2 * k * k < 1 << 62:
            key = (root.astype(np.int64) * n + rows) * (2 * k * k) + (d + k) * k + off
        else:
            pair = np.unique(root.astype(np.int64) * n + rows, return_inverse=True)[1]
            key = pair.reshape(rows.shape).astype(np.int64) * (2 * k * k) + (d + k) * k + off
        first, inverse = classes(key.reshape(-1))
        memo, decide = self.pairs, self._pair
        facts = []
        for key in zip(np.broadcast_to(root, rows.shape).reshape(-1)[first].tolist(), rows.reshape(-1)[first].tolist(),
                       d.reshape(-1)[first].tolist(), off.reshape(-1)[first].tolist()):
            found = memo.get(key)
            facts.append(decide(*key) if found is None else found)
        fails = ~np.array(facts, dtype=bool).reshape(-1, 2)  # (not below, not equal) by distinct key
        below = (np.ones(len(rows), dtype=bool) if not fails[:, 0].any()
                 else ~by_rows(np.logical_or, fails[:, 0][inverse].reshape(rows.shape)))
        same = ~by_rows(np.logical_or, fails[:, 1][inverse].reshape(rows.shape))
        bad = np.flatnonzero(~below | same)
        if len(bad):
            g = int(bad[0])
            return (int(b.index[g]), "Broadcast.below_root" if not below[g] else "Broadcast.information_increase"), None
        if not place:
            return None, None
        codes, where = self._uniform(b, 1, np.broadcast_to(kept_root, rows.shape))[1:]
        if codes is not None and (root == root[0, 0]).all():  # one state sent: once per distinct offset
            new = np.array([self._sent(int(root[0, 0]), c) for c in codes.tolist()], dtype=np.int32)[where]
        else:
            new = self._send(np.broadcast_to(root, rows.shape), b.offsets[1], np.broadcast_to(kept_root, rows.shape))
        return None, (new.reshape(rows.shape), np.broadcast_to(root_sh, rows.shape))

    def _uniform(self, b: _Block, which: int, kept: np.ndarray):
        """``_moved(b.offsets[which], kept)``, and when every entry keeps the same levels, its distinct values
        and each entry's index into them (kept with the block per set of levels)."""
        v = int(kept.flat[0])
        if not (kept == v).all():
            return self._moved(b.offsets[which], kept), None, None
        found = b.moved.get((which, v))
        if found is None:
            moved = self._moved(b.offsets[which], np.full(kept.shape, v))
            codes, where = np.unique(moved, return_inverse=True)
            found = b.moved[which, v] = (moved.astype(np.int32), codes, where.reshape(-1).astype(np.int32))
        return found

    def _send(self, tokens: np.ndarray, down: np.ndarray, kept: np.ndarray | None = None) -> np.ndarray:
        """Each member's token for state ``tokens`` (in its group's first member's frame) in its own frame,
        ``down`` being its offsets back to it (levels × …); once per distinct (token, offset). ``kept``:
        ``_kept_of(tokens)`` when known."""
        k = self.k
        kept = self._kept_of(tokens) if kept is None else kept
        codes = (tokens.astype(np.int64) * k + self._moved(down, kept)).reshape(-1)
        first, which = classes(codes)
        new = np.array([self._sent(int(c // k), int(c % k)) for c in codes[first].tolist()], dtype=np.int32)
        return new[which].reshape(tokens.shape)

    def _moved(self, offsets: np.ndarray, kept: np.ndarray) -> np.ndarray:
        """The offsets (levels × …, coded by stride) along the levels not in ``kept`` (a bit set of levels per
        entry: those a state's contributions are kept by, along which a translation changes nothing)."""
        out = np.zeros(kept.shape, dtype=np.int64)
        for level, along in enumerate(offsets):
            out += np.where(kept >> level & 1, 0, along)
        return out

    def _pair(self, root: int, member: int, d: int, off: int) -> tuple[bool, bool]:
        """(member below root, member equal to root): the member's state (token ``member``) with its chunks
        ``d`` above the root's and its contributions translated by ``off`` into the root's frame."""
        key = (root, member, d, off)
        found = self.pairs.get(key)
        if found is None:
            translate = self.digits.translate
            r_state = self.states[root]
            m_state = tuple((r << d if d > 0 else r, translate(c, off)) for r, c in self.states[member])
            if d < 0:
                r_state = tuple((r << -d, c) for r, c in r_state)
            found = self.pairs[key] = (_below(m_state, r_state), set(m_state) == set(r_state))
        return found

    def _sent(self, root: int, back: int) -> int:
        """The token of state ``root`` with its contributions translated by ``back`` (into a member's frame)."""
        key = (root, back)
        found = self.sent.get(key)
        if found is None:
            translate = self.digits.translate
            found = self.sent[key] = self.token(tuple((r, translate(c, back)) for r, c in self.states[root]))
        return found

    def _outcome(self, coll, frame: _Frame, members: np.ndarray, shifts: np.ndarray):
        """The members' new (tokens, shifts relative to the group's lowest), or the rule the group violates.

        The members are brought to one frame (member 0's contributions, the group's lowest chunk shift),
        the pieces rule code decides, and each new state is normalized back to its own frame. A state
        whose contributions a level's translations keep is not translated along that level (so members
        alike in the group's frame are brought to it once)."""
        if len(members) > LARGE_MEMBERS:
            found = self._large(coll, frame, members, shifts)
            if found is not None:
                return found
        digits = self.digits
        tokens, which = np.unique(members, return_inverse=True)
        kept = self._kept_of(tokens)[which.reshape(-1)]
        up, down = self._frame_offsets(frame)
        moves = self._moved(up, kept)
        placed, which = np.unique(np.stack([members, moves, shifts], axis=1), axis=0, return_inverse=True)
        states = [tuple((r << s, digits.translate(c, o)) for r, c in self.states[t]) for t, o, s in placed.tolist()]
        before = [states[j] for j in which.reshape(-1).tolist()]
        out = outcome(coll, tuple(range(len(before))), before, self.problem.require_progress)
        if out.__class__ is str:
            return out
        alike: dict[int, int] = {}  # new states by object (AllReduce, AllGather, … give every member one)
        kind = np.array([alike.setdefault(id(st), len(alike)) for st in out], dtype=np.int64)
        states = [out[j] for j in np.unique(kind, return_index=True)[1].tolist()]
        lows = np.array([min(((r & -r).bit_length() - 1 for r, _ in st), default=0) for st in states], dtype=np.int32)
        keep = np.array([self._kept_state(st) for st in states], dtype=np.int64)
        made, where = np.unique(kind * self.k + self._moved(down, keep[kind]), return_inverse=True)
        tokens = [self.token(tuple((r >> int(lows[c // self.k]), digits.translate(x, c % self.k))
                                   for r, x in states[c // self.k])) for c in made.tolist()]
        return np.array(tokens, dtype=np.int32)[where.reshape(-1)], lows[kind]

    def _kept_state(self, state) -> int:
        """``Digits.kept`` of a state's contributions (remembered by their values)."""
        contributions = tuple(c for _, c in state)
        found = self.kept_states.get(contributions)
        if found is None:
            found = self.kept_states[contributions] = self.digits.kept(contributions)
        return found

    def _large(self, coll, frame: _Frame, members: np.ndarray, shifts: np.ndarray):
        """``_outcome`` of a group of one-piece members (else None) by the rules' structure: each member's
        chunks or contributions as positions in numpy (the chunks shifted, the contributions translated
        digit-wise by the member's offset), their overlaps counted, the union built once, and the new
        state sent to the members' frames once per distinct (state, offset)."""
        first, which = classes(members)
        tokens = members[first]
        states = [self.states[t] for t in tokens.tolist()]
        if len(members) < 2 or any(len(st) != 1 for st in states):
            return None
        rows = [st[0][0] for st in states]
        contribs = [st[0][1] for st in states]
        up, down = self._frame_offsets(frame)
        if coll is AG:
            sizes = np.array([r.bit_count() for r in rows], dtype=np.int64)[which]
            seen = self._union(rows, which, lambda pos, j: pos[None, :] + shifts[j, None])
            if seen is None:
                return "AllGather.disjoint_chunks"
            if (sizes != sizes[0]).any():
                return "AllGather.equal_sizes"
            state = self._gathered(tokens, which, shifts, up)
            if state is None:
                return None
        else:
            chunks = np.array([rows.index(r) for r in rows], dtype=np.int64)[which]
            if (chunks != chunks[0]).any() or (shifts != shifts[0]).any():
                return f"{coll.value}.same_chunks"
            union = self._union(contribs, which, lambda pos, j: self._moved_positions(pos, up[:, j]))
            if union is None:
                return f"{coll.value}.disjoint"
            whole = rows[which[0]] << int(shifts[0])
            if coll is AR:
                counts = np.array([c.bit_count() for c in contribs], dtype=np.int64)[which]
                if self.problem.require_progress and (counts == union.bit_count()).all():
                    return "progress"
                state = ((whole, union),)
            elif coll is RED:
                low = int(shifts[0])
                first = self.token(((whole >> low, union),))
                out = np.full(len(members), self.token(()), dtype=np.int32)
                out[0] = first
                lows = np.zeros(len(members), dtype=np.int32)
                lows[0] = low
                return out, lows
            else:
                if whole.bit_count() % len(members):
                    return "ReduceScatter.divisible"
                lows, shapes = self._cut(whole, len(members))
                firsts = np.array([self.token(((b, union),)) for b in shapes[0]], dtype=np.int32)[shapes[1]]
                return self._send(firsts, down), lows
        low = min((r & -r).bit_length() - 1 for r, _ in state)
        first = self.token(tuple((r >> low, c) for r, c in state))
        return self._send(np.full(len(members), first, dtype=np.int32), down), np.full(len(members), low, np.int32)

    def _cut(self, rows: int, m: int) -> tuple[np.ndarray, tuple[list[int], np.ndarray]]:
        """``pieces._blocks(rows, m)`` (m divides its size) as each block's lowest chunk and its shape (the
        block shifted down to chunk 0): the distinct shapes and each block's index into them."""
        positions = self._positions(rows).reshape(m, -1)
        lows = positions[:, 0]
        first, which = distinct_rows(positions - lows[:, None])
        shapes = [self._bits(positions[f] - lows[f]) for f in first.tolist()]
        return lows.astype(np.int32), (shapes, which)

    def _union(self, sets: list[int], which: np.ndarray, place) -> int | None:
        """The union of the members' sets (member j's is ``sets[which[j]]`` placed by ``place(positions,
        members)``), or None if two overlap."""
        counts = np.array([c.bit_count() for c in sets], dtype=np.int64)
        if counts[which].sum() > self.k:
            return None
        placed = [place(self._positions(bits), np.flatnonzero(which == t)).reshape(-1) for t, bits in enumerate(sets)]
        seen = np.bincount(np.concatenate(placed), minlength=self.k)
        if seen.max(initial=0) > 1:
            return None
        return self._bits(np.flatnonzero(seen))

    def _gathered(self, tokens, which, shifts, up):
        """AllGather's new state (chunks relative to the group's lowest, contributions in its first member's
        frame), or None when the members' contributions fall in more than ``GATHER_CLASSES`` classes."""
        moved = self._moved(up, self._kept_of(tokens[which]))
        codes = which.astype(np.int64) * self.k + moved
        first, where = classes(codes)
        keys = codes[first]
        if len(keys) > GATHER_CLASSES:
            return None
        values = [self.digits.translate(self.states[int(tokens[c // self.k])][0][1], int(c % self.k))
                  for c in keys.tolist()]
        pieces: dict[int, int] = {}
        where = where.reshape(-1)
        for v, c in enumerate(values):
            j = np.flatnonzero(where == v)
            held = which[j]
            rows = [(self._positions(self.states[int(tokens[t])][0][0])[None, :] + shifts[j[held == t], None])
                    for t in held[classes(held)[0]].tolist()]
            pieces[c] = pieces.get(c, 0) | self._bits(np.concatenate([r.reshape(-1) for r in rows]))
        return _canon(pieces)

    def _bits(self, positions: np.ndarray) -> int:
        """The bit set of ``positions`` (each below k)."""
        marked = np.zeros(self.k, dtype=bool)
        marked[positions] = True
        return int.from_bytes(np.packbits(marked, bitorder="little").tobytes(), "little")

    def _positions(self, bits: int) -> np.ndarray:
        """The set bits of ``bits`` (< 2**k), ascending."""
        raw = np.frombuffer(bits.to_bytes((self.k + 7) // 8, "little"), dtype=np.uint8)
        return np.flatnonzero(np.unpackbits(raw, bitorder="little"))

    def _moved_positions(self, positions: np.ndarray, up: np.ndarray) -> np.ndarray:
        """Devices ``positions`` translated by each of the offsets ``up`` (levels × members): members × positions."""
        out = np.zeros((up.shape[1], len(positions)), dtype=np.int64)
        for level, (s, w) in enumerate(zip(self.digits.sizes, self.digits.strides)):
            out += ((positions[None, :] // w % s + up[level, :, None] // w) % s) * w
        return out

    def _frame_offsets(self, frame: _Frame) -> tuple[np.ndarray, np.ndarray]:
        """Offsets (levels × members) of a frame's members from its first member and back (kept per frame)."""
        found = self.frame_offsets.get(frame.id)
        if found is None:
            found = self.frame_offsets[frame.id] = tuple(a[:, 0] for a in self.digits.offsets(frame.devices[None, :]))
        return found

    def _free(self, tokens: np.ndarray) -> np.ndarray:
        """Whether each token is a state whose chunks need no shift: empty, or one piece holding every chunk.

        Such a member keeps its chunks when its group is brought to one frame: the rules compare them with
        the others' only by equality, disjointness, inclusion and size, which that keeps (the others hold
        some chunks and not all), and they are never cut into blocks next to other chunks."""
        self.free = self._extended(self.free, lambda s: not s or (len(s) == 1 and s[0][0] == self.full), bool)
        return self.free[tokens]

    def _kept_of(self, tokens: np.ndarray) -> np.ndarray:
        """The levels whose translations keep the contributions of each token's state (bit sets)."""
        self.kept_bits = self._extended(self.kept_bits, self._kept_state, np.int64)
        return self.kept_bits[tokens]

    def _extended(self, known: np.ndarray, fact, dtype) -> np.ndarray:
        """``known``, one ``fact`` per token, extended to every device state interned so far."""
        if len(known) == len(self.states):
            return known
        return np.concatenate([known, np.fromiter((fact(s) for s in self.states[len(known):]), dtype=dtype)])


SAMPLE = 1024
"""The devices whose states key ``_Store``'s index (the rest is compared on a hit): reading all of them costs
about as much as the comparison."""


class _Store:
    """Whole states (token and shift arrays) interned by value, so a step from a state reached by two prefixes
    is computed once: ``id`` numbers a state (its values at ``SAMPLE`` fixed random devices as a first key, the
    whole arrays compared exactly), ``store[id]`` gives it back (read-only arrays, in 16 bits when they fit)."""

    def __init__(self, k: int):
        self.k = k
        self.sample = np.sort(np.random.default_rng(20261202).permutation(k)[:SAMPLE])
        self.ids: dict[bytes, list[int]] = {}
        self.kept: list[np.ndarray] = []

    def id(self, state: tuple[np.ndarray, np.ndarray]) -> int:
        tokens, shifts = state
        key = np.stack([tokens[self.sample], shifts[self.sample]]).astype(np.int32).tobytes()
        same = self.ids.setdefault(key, [])
        for sid in same:
            kept = self.kept[sid]
            if np.array_equal(kept[0], tokens) and np.array_equal(kept[1], shifts):
                return sid
        both = np.stack(state)
        kept = both.astype(np.uint16 if both.min(initial=0) >= 0 and both.max(initial=0) < 1 << 16 else np.int32)
        kept.flags.writeable = False
        same.append(len(self.kept))
        self.kept.append(kept)
        return len(self.kept) - 1

    def __getitem__(self, sid: int) -> tuple[np.ndarray, np.ndarray]:
        kept = self.kept[sid]
        return kept[0], kept[1]


def check_programs(
    problem: SynthesisProblem, programs: Sequence[Sequence[int]], timeout_ms: int | None = None,
    sizes: Sequence[int] | None = None,
) -> list[Verdict]:
    """``pieces.check_programs``: one verdict per program (in the given order), the same verdicts.
    ``sizes``: the hierarchy's level sizes (their product is the number of devices), for speed only.
    Programs are taken in lexicographic order along one path of prefix states; each distinct (state,
    candidate) step is computed once (every distinct state is kept, in 4 or 8 bytes per device)."""
    return run_checks(problem, programs, timeout_ms,
                      lambda: _Runner(_Machine(problem, sizes), _Store(problem.num_devices)))
