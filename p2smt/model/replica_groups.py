"""XLA's replica-group forms, read into p2smt's device groups.

XLA lists every participant of a collective in some group: explicit lists (``{{0,1},{2,3}}`` or JSON
``[[0,1],[2,3]]``) where a group of one device is a no-op member, the empty list meaning one group of
all participants, and the compact iota form ``[G,S]<=[dims]`` / ``[G,S]<=[dims]T(perm)`` (iota over
``dims``, transposed by ``perm``, reshaped to G groups of S). Which ids the groups hold depends on the
op's mode (XLA ``CollectiveOpGroupMode``): replica ids, partition ids, or flattened global device ids
``replica * num_partitions + partition`` (``use_global_device_ids=true``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

from p2smt.errors import P2Error
from p2smt.model.collectives import Group

_INTS = r"\d+(?:\s*,\s*\d+)*"
_DIMS_PERM = rf"\[\s*(?P<dims>{_INTS})\s*\]\s*(?:T\s*\(\s*(?P<perm>{_INTS})\s*\))?"
"""An iota over ``dims``, transposed by ``perm``: ``[2,8]T(1,0)``."""
_IOTA = re.compile(rf"^\s*\[\s*(?P<shape>{_INTS})\s*\]\s*<=\s*{_DIMS_PERM}\s*$")
_MESH = re.compile(r"^\s*mesh\s*\[(?P<axes>[^\]]*)\]\s*(?:,\s*device_ids\s*=\s*\((?P<ids>[^()]*(?:\([^()]*\))?)\)\s*)?"
                   r"\{(?P<selected>[^}]*)\}\s*$")
_DEVICE_IOTA = re.compile(rf"^\s*{_DIMS_PERM}\s*$")
_MESH_AXIS = re.compile(r"^\s*'(?P<name>[^']+)'\s*=\s*(?P<size>\d+)\s*$")
_LISTS = re.compile(r"^\s*\{\s*(?:\{[\d\s,]*\}\s*(?:,\s*\{[\d\s,]*\}\s*)*)?\}\s*$")
MAX_IDS = 1 << 20
"""Most device ids an iota or mesh form may span: checked before any array is built (bounded memory)."""
MAX_DIMS = 32  # dims of an iota (numpy's arrays stop at 64)


class GroupMode(str, Enum):
    """What the ids of a collective's replica groups name (XLA's ``CollectiveOpGroupMode``)."""

    CROSS_REPLICA = "cross_replica"
    CROSS_PARTITION = "cross_partition"
    CROSS_REPLICA_AND_PARTITION = "cross_replica_and_partition"
    FLATTENED_ID = "flattened_id"

    @classmethod
    def of(cls, has_channel_id: bool, use_global_device_ids: bool | None) -> GroupMode:
        """XLA's rule: no channel id → replicas; channel id → partitions, replicas × partitions, or flat ids."""
        if not has_channel_id:
            if use_global_device_ids:
                raise P2Error("use_global_device_ids=true needs a channel_id")
            return cls.CROSS_REPLICA
        if use_global_device_ids is None:
            return cls.CROSS_PARTITION
        return cls.FLATTENED_ID if use_global_device_ids else cls.CROSS_REPLICA_AND_PARTITION


@dataclass(frozen=True)
class DeviceSpace:
    """How many replicas and partitions a module runs on; global id = replica * partitions + partition."""

    replicas: int = 1
    partitions: int = 1

    @property
    def num_devices(self) -> int:
        return self.replicas * self.partitions

    def participants(self, mode: GroupMode) -> int:
        """How many ids one mode's groups range over."""
        return {
            GroupMode.CROSS_REPLICA: self.replicas,
            GroupMode.CROSS_PARTITION: self.partitions,
            GroupMode.CROSS_REPLICA_AND_PARTITION: self.replicas,
        }.get(mode, self.num_devices)


def _span(form: str, sizes: Sequence[int], dims: Sequence[int]) -> int:
    """How many ids ``dims`` span, after checking every size is positive, the dims at most ``MAX_DIMS`` and
    the span at most ``MAX_IDS``."""
    if len(dims) > MAX_DIMS:
        raise P2Error(f"{form} over {len(dims)} dims: more than the {MAX_DIMS} p2smt reads")
    if any(v <= 0 for v in sizes):
        raise P2Error(f"{form}: sizes must be positive, got {list(sizes)}")
    total = math.prod(dims)
    if total > MAX_IDS:
        raise P2Error(f"{form} over {total:,} device ids: more than the {MAX_IDS:,} p2smt reads")
    return total


def iota_groups(shape: Sequence[int], dims: Sequence[int], perm: Sequence[int] | None = None) -> tuple[Group, ...]:
    """``[G,S]<=[dims]T(perm)``: iota over ``dims``, transposed by ``perm``, rows of the [G,S] reshape."""
    if len(shape) != 2:
        raise P2Error(f"iota replica groups need a [groups,size] shape, got {list(shape)}")
    total = _span("iota replica groups", [*shape, *dims], dims)
    if math.prod(shape) != total:
        raise P2Error(f"iota replica groups {list(shape)}<={list(dims)}: shape and dims hold different counts")
    rows = _iota("iota replica groups", dims, perm).reshape(tuple(shape))
    return tuple(tuple(int(v) for v in r) for r in rows)


def _iota(form: str, dims: Sequence[int], perm: Sequence[int] | None) -> np.ndarray:
    """``[dims]T(perm)`` flattened: iota over ``dims`` (its span already checked), transposed by ``perm``."""
    perm = tuple(range(len(dims))) if perm is None else tuple(perm)
    if sorted(perm) != list(range(len(dims))):
        raise P2Error(f"{form}: T{perm} is not a permutation of the {len(dims)} dims")
    return np.arange(math.prod(dims)).reshape(tuple(dims)).transpose(perm).reshape(-1)


def mesh_device_ids(text: str, count: int) -> np.ndarray:
    """A mesh form's ``device_ids=(…)``: an iota ``[dims]`` or ``[dims]T(perm)`` flattened, or ids listed."""
    m = _DEVICE_IOTA.match(text)
    if m:
        dims = tuple(int(v) for v in m.group("dims").split(","))
        _span("mesh device_ids", dims, dims)
        ids = _iota("mesh device_ids", dims, tuple(int(v) for v in m.group("perm").split(",")) if m.group("perm")
                    else None)
    elif re.fullmatch(r"\s*\d+(?:\s*,\s*\d+)*\s*", text):
        ids = np.array([int(v) for v in text.split(",")])
    else:
        raise P2Error(f"unsupported mesh device_ids ({text.strip()}): expected [dims], [dims]T(perm) or a list of ids")
    if len(ids) != count or sorted(ids.tolist()) != list(range(count)):
        raise P2Error(f"mesh device_ids ({text.strip()}) must list each of the mesh's {count} devices once")
    return ids


def mesh_axes_groups(axes: Sequence[tuple[str, int]], selected: Sequence[str],
                     device_ids: str | None = None) -> tuple[Group, ...]:
    """``mesh['a'=4,'b'=4] {'b'}``: mesh position p holds device p (or ``device_ids``' p-th id, row-major);
    one group per point of the other axes, its members along the selected axes in the order named."""
    names = [n for n, _ in axes]
    unknown = [s for s in selected if s not in names]
    if unknown or len(set(selected)) != len(selected):
        raise P2Error(f"mesh replica groups select {list(selected)} but the mesh axes are {names}")
    sizes = [s for _, s in axes]
    total = _span("mesh replica groups", sizes, sizes)
    ids = np.arange(total) if device_ids is None else mesh_device_ids(device_ids, total)
    cube = ids.reshape(tuple(sizes))
    vary = [names.index(s) for s in selected]
    fixed = [i for i in range(len(names)) if i not in vary]
    rows = cube.transpose(fixed + vary).reshape(-1, math.prod(axes[i][1] for i in vary))
    return tuple(tuple(int(v) for v in r) for r in rows)


def parse_groups_text(text: str) -> tuple[Group, ...]:
    """HLO's printed forms: ``{{0,1},{2,3}}``, ``{}``, ``[4,4]<=[16]``, ``[4,4]<=[4,4]T(1,0)`` and the
    mesh-axes form ``mesh['axis_0'=4,'axis_1'=4] {'axis_1'}``, also with ``, device_ids=([2,8]T(1,0))``."""
    mesh = _MESH.match(text)
    if mesh:
        axes = [_MESH_AXIS.match(a) for a in mesh.group("axes").split(",")]
        if not all(axes):
            raise P2Error(f"unsupported mesh replica groups {text.strip()!r}: expected 'name'=size axes")
        parts = [s.strip() for s in mesh.group("selected").split(",") if s.strip()]
        if any(not re.fullmatch(r"'[^']+'", p) for p in parts):
            raise P2Error(f"unsupported mesh replica groups {text.strip()!r}: only whole axes ('name') are "
                          "supported, not sub-axes ('name':(k)m)")
        return mesh_axes_groups([(a.group("name"), int(a.group("size"))) for a in axes],
                                [p.strip("'") for p in parts], mesh.group("ids"))
    m = _IOTA.match(text)
    if m:
        ints = [tuple(int(v) for v in m.group(k).split(",")) if m.group(k) else None for k in ("shape", "dims", "perm")]
        return iota_groups(*ints)
    if _LISTS.match(text):
        inner = text.strip()[1:-1]
        return tuple(tuple(int(v) for v in g.split(",") if v.strip()) for g in re.findall(r"\{([^{}]*)\}", inner))
    raise P2Error(f"unsupported replica_groups form {text.strip()!r}: expected {{{{…}},…}}, {{}}, [G,S]<=[dims] "
                  "or mesh[…] {…}")


def parse_groups_value(value: object, where: str) -> tuple[Group, ...]:
    """A JSON ``replica_groups`` value: a list of lists of ids, or one of HLO's printed forms as a string."""
    if isinstance(value, str):
        try:
            return parse_groups_text(value)
        except P2Error as err:
            raise P2Error(f"{where}: {err}") from None
    if not isinstance(value, list) or not all(
        isinstance(g, list) and g and all(isinstance(d, int) and not isinstance(d, bool) for d in g) for g in value
    ):
        raise P2Error(
            f"{where}: replica_groups must be a list of non-empty lists of device ids (or an HLO form such "
            "as '[4,4]<=[16]')"
        )
    return tuple(tuple(g) for g in value)


def global_groups(groups: Sequence[Group], mode: GroupMode, space: DeviceSpace) -> tuple[Group, ...]:
    """The groups in global device ids; an empty list is one group of every participant."""
    ids = space.participants(mode)
    groups = tuple(tuple(g) for g in groups) or (tuple(range(ids)),)
    for g in groups:
        for d in g:
            if not 0 <= d < ids:
                raise P2Error(f"id {d} in replica_groups is out of range 0..{ids - 1} ({mode.value})")
    R, P = space.replicas, space.partitions
    if mode is GroupMode.FLATTENED_ID:
        return groups
    if mode is GroupMode.CROSS_REPLICA:
        return tuple(tuple(r * P + p for r in g) for p in range(P) for g in groups)
    if mode is GroupMode.CROSS_PARTITION:
        return tuple(tuple(r * P + p for p in g) for r in range(R) for g in groups)
    if P == 1 or R == 1:
        return tuple(tuple(r * P + p for r in g for p in range(P)) for g in groups)
    raise P2Error(
        f"replica groups over replicas and partitions ({R} replicas × {P} partitions, no "
        "use_global_device_ids) are not supported: their member order is not fixed by the groups"
    )


def normalize(groups: Sequence[Group], num_devices: int) -> tuple[Group, ...]:
    """XLA-complete groups to p2smt's: empty → all devices; groups of one device (no-ops) dropped."""
    groups = tuple(tuple(g) for g in groups) or (tuple(range(num_devices)),)
    return tuple(g for g in groups if len(g) >= 2)
