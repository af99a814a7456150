"""HLO text as computations of instructions with their attributes, for walks that follow every value (the
step-level audit of compiled HLO), and XLA's tile shardings (``{devices=[4,1,4]<=[16] last_tile_dim_replicate}``)
as arrays of device ids. The lexing is ``hlo.py``'s; this module only gives it a public face.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from p2smt.errors import P2Error
from p2smt.frontend.hlo import (
    _adds_its_parameters,
    _attribute_token,
    _Computation,
    _computations,
    _hlo_attribute,
    _hlo_collective,
    _Instruction,
    _leaves,
    _lexed,
    _row_major,
    _top_string,
)
from p2smt.frontend.hlo_program import HloCollective
from p2smt.model.replica_groups import DeviceSpace, mesh_device_ids

__all__ = ["HloText", "Instruction", "TileSharding", "parse_hlo", "parse_sharding"]

Instruction = _Instruction
_SPMD_MARKERS = ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape")


@dataclass(frozen=True)
class TileSharding:
    """An array's sharding: ``devices`` holds, per tile coordinate (one per data dimension, then one for the
    replicas of a tile), the device id; ``None`` devices: replicated on every device."""

    rank: int
    devices: np.ndarray | None

    @property
    def replicated(self) -> bool:
        return self.devices is None


@dataclass(frozen=True)
class HloText:
    """A parsed HLO text module: its computations by name, its entry, the devices it runs on, and whether it is
    SPMD-partitioned (per-device code: ``num_partitions`` declared and no sharding annotation left)."""

    name: str
    space: DeviceSpace
    partitioned: bool
    computations: dict
    entry: _Computation
    lines: tuple[str, ...]  # the text as written (strings kept), for string attributes

    def attribute(self, ins: Instruction, key: str) -> str | None:
        """A top-level attribute's text (``dimensions={1,0}``: ``{1,0}``; ``index=1``: ``1``)."""
        return _hlo_attribute(ins.attrs, key)

    def ints(self, ins: Instruction, key: str) -> tuple[int, ...] | None:
        text = self.attribute(ins, key)
        return None if text is None else tuple(int(v) for v in re.findall(r"-?\d+", text))

    def called(self, ins: Instruction, key: str) -> _Computation | None:
        """The computation an attribute names (``calls=``, ``to_apply=``, ``body=``), if the module has it."""
        name = _attribute_token(ins.attrs, key)
        return self.computations.get(name) if name else None

    def branches(self, ins: Instruction) -> list[_Computation] | None:
        listed = self.attribute(ins, "branch_computations")
        names = re.findall(r"%?([\w.\-]+)", listed.strip("{}")) if listed else \
            [_attribute_token(ins.attrs, k) for k in ("true_computation", "false_computation")]
        comps = [self.computations.get(n) for n in names if n]
        return comps if comps and all(c is not None for c in comps) else None

    def string(self, ins: Instruction, key: str) -> str | None:
        """A top-level string attribute as written (``custom_call_target``)."""
        return _top_string(self.lines[ins.line - 1], key)

    def adds(self, comp: _Computation | None) -> bool:
        """Whether a reduction computation is an add of its two parameters (through converts and copies)."""
        return comp is not None and _adds_its_parameters(comp, lambda i: False)

    def collective(self, ins: Instruction, where: str) -> HloCollective:
        return _hlo_collective(ins.attrs, ins.line, ins.op, where)

    def sharding(self, ins: Instruction) -> str | None:
        return self.attribute(ins, "sharding")


def leaves(shape: str) -> list[tuple[str, tuple[int, ...]]]:
    """The arrays of an HLO shape in order: (element type, dims)."""
    return _leaves(shape)


def row_major(shape: str) -> bool:
    return _row_major(shape)


def major_to_minor(shape: str) -> tuple[int, ...] | None:
    """An array shape's dimensions in memory order, major first (``f32[4,8]{0,1}``: (1, 0)); row-major when the
    shape prints no layout; None for a tuple or a layout that is no permutation of its dimensions."""
    m = re.fullmatch(r"\s*[a-z][a-z0-9]*\[([\d,\s]*)\](?:\{([^}:]*)(?::[^}]*)?\})?\s*", shape)
    if m is None:
        return None
    rank = len([d for d in m.group(1).split(",") if d.strip()])
    if m.group(2) is None:
        return tuple(range(rank))
    order = tuple(int(v) for v in m.group(2).split(",") if v.strip())[::-1]
    return order if sorted(order) == list(range(rank)) else None


def root(comp: _Computation) -> Instruction | None:
    return next((i for i in comp.body if i.root), comp.body[-1] if comp.body else None)


def parse_hlo(text: str, where: str = "<hlo>") -> HloText:
    """Every computation of an HLO text module, its entry and the devices it runs on."""
    lexed = _lexed(text, where)
    header = next((ln for ln in lexed.splitlines() if ln.startswith("HloModule")), None)
    if header is None:
        raise P2Error(f"{where}: not an HLO text module (no 'HloModule' line)")
    ints = {k: int(v) for k in ("replica_count", "num_partitions")
            if (v := _attribute_token(header, k)) and v.isdigit()}
    comps = _computations(lexed, where, split=True)
    entries = [c for c in comps if c.entry]
    if len(entries) != 1:
        raise P2Error(f"{where}: {len(entries)} ENTRY computations; an HLO module has one")
    lines = tuple(text.splitlines())
    annotated = any(i.op == "custom-call" and ((t := _top_string(lines[i.line - 1], "custom_call_target")) or "")
                    and (t in _SPMD_MARKERS or t.startswith("xla.sdy.")) for c in comps for i in c.body)
    return HloText(header.split()[1].rstrip(","), DeviceSpace(ints.get("replica_count", 1),
                                                               ints.get("num_partitions", 1)),
                   "num_partitions" in ints and not annotated, {c.name: c for c in comps}, entries[0], lines)


_TILED = re.compile(r"^\{\s*devices=\[(?P<shape>[\d,\s]+)\]\s*(?P<ids>[^\s}]+(?:\s*,\s*\d+)*)\s*"
                    r"(?P<rest>[^}]*)\}$")


def parse_sharding(text: str, rank: int) -> TileSharding | None:
    """An HLO sharding of one array: replicated, or tiled over devices (iota ``<=[dims]T(perm)`` or listed
    ids, with ``last_tile_dim_replicate``); None for any other form (maximal, manual, subgroups, tuples)."""
    text = text.strip()
    if text == "{replicated}":
        return TileSharding(rank, None)
    m = _TILED.match(text)
    if m is None:
        return None
    shape = tuple(int(v) for v in m.group("shape").split(",") if v.strip())
    rest = m.group("rest").strip()
    if rest not in ("", "last_tile_dim_replicate") or len(shape) != rank + (rest != ""):
        return None
    ids_text = m.group("ids").strip()
    count = math.prod(shape)
    try:
        ids = mesh_device_ids(ids_text.removeprefix("<="), count)
    except P2Error:
        return None
    if rest == "":
        shape = (*shape, 1)
    return TileSharding(rank, np.asarray(ids).reshape(shape))
