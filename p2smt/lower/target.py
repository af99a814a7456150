"""Where a plan runs: the JAX device mesh of a placement and the reduction groups to check against."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

from p2smt.errors import P2Error
from p2smt.lower.layout import check_plan
from p2smt.lower.names import as_int, check_identifier, check_text
from p2smt.model.collectives import ExplicitPlan, Group
from p2smt.model.goal import GoalKind, Sharding

MAX_LOWER_DEVICES = 4096


@dataclass(frozen=True)
class MeshSpec:
    """A JAX device mesh: ``order[flat row-major mesh position] = physical device id``."""

    shape: tuple[int, ...]
    names: tuple[str, ...]
    order: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.shape) != len(self.names) or not self.names:
            raise P2Error("a mesh needs one name per dimension and at least one dimension")
        for n in self.names:
            check_identifier(n, "mesh axis name")
        if len(set(self.names)) != len(self.names):
            raise P2Error(f"mesh axis names repeat: {list(self.names)}")
        shape = tuple(as_int(s, "mesh size") for s in self.shape)
        order = tuple(as_int(d, "device id") for d in self.order)
        if any(s < 1 for s in shape) or sorted(order) != list(range(prod(shape))):
            raise P2Error(f"mesh order must be a permutation of 0..{prod(shape) - 1} for shape {shape}")

    @property
    def num_devices(self) -> int:
        return prod(self.shape)

    @property
    def position(self) -> tuple[int, ...]:
        """``position[physical id]`` = flat mesh position (inverse of ``order``)."""
        inv = [0] * len(self.order)
        for pos, dev in enumerate(self.order):
            inv[dev] = pos
        return tuple(inv)


def flat_mesh(num_devices: int) -> MeshSpec:
    """A one-axis mesh in physical order, for plans that come without a placement."""
    return MeshSpec((num_devices,), ("devices",), tuple(range(num_devices)))


def jax_mesh_order(placement) -> tuple[int, ...]:
    """Device order so that ``Mesh(np.array(jax.devices())[order].reshape(axes), names)`` is the placement."""
    return tuple(placement.mesh_order())


def placement_mesh(
    placement, level_names: Sequence[str], axis_names: Sequence[str] | None = None
) -> MeshSpec:
    """The per-level factor mesh of a placement: one mesh axis ``<axis>_<level>`` per matrix entry > 1.

    Mesh axes go axis by axis, levels outermost first, so flattening the factor mesh row-major gives
    the row-major index over the parallelism axes and ``placement.mesh_order()`` is its device order.
    Every InsideGroup/Parallel group of hierarchy (d) is then a set of mesh axes.
    """
    axes, matrix = tuple(placement.axes), tuple(placement.matrix)
    levels = tuple(check_identifier(n, "level name") for n in level_names)
    if len(levels) != len(placement.sizes):
        raise P2Error(f"{len(levels)} level names for {len(placement.sizes)} levels")
    if axis_names is None:
        axis_names = tuple(f"axis{i}" for i in range(len(axes)))
    names = tuple(check_identifier(n, "axis name") for n in axis_names)
    if len(names) != len(axes):
        raise P2Error(f"{len(names)} axis names for {len(axes)} axes")
    if len(set(names)) != len(names):
        raise P2Error(f"axis names repeat: {list(names)}")
    shape, dims = [], []
    for i, row in enumerate(matrix):
        for j, parts in enumerate(row):
            if parts > 1:
                shape.append(as_int(parts, "matrix entry"))
                dims.append(check_identifier(f"{names[i]}_{levels[j]}", "mesh axis name"))
    if not shape:
        shape, dims = [1], [names[0]]
    return MeshSpec(tuple(shape), tuple(dims), jax_mesh_order(placement))


@dataclass(frozen=True)
class Target:
    """Where a plan runs: the devices, the JAX mesh and the reduction groups the result must match."""

    num_devices: int
    mesh: MeshSpec
    reduction_groups: tuple[Group, ...]
    description: tuple[str, ...] = ()
    sharding: Sharding | None = None  # a sharded goal (docs/semantics.md §6); None: every device ends with the sum

    def __post_init__(self) -> None:
        n = as_int(self.num_devices, "number of devices")
        if not 1 <= n <= MAX_LOWER_DEVICES:
            raise P2Error(f"number of devices must be 1..{MAX_LOWER_DEVICES}, got {n}")
        if self.mesh.num_devices != n:
            raise P2Error(f"the mesh has {self.mesh.num_devices} devices, the target {n}")
        check_partition(self.reduction_groups, n, "reduction groups")
        for line in self.description:
            check_text(line)
        if self.sharding is not None:
            if len(self.sharding.rank) != n:
                raise P2Error(f"the goal ranks {len(self.sharding.rank)} devices, the target has {n}")
            self.sharding.block(self.num_chunks)

    @property
    def num_chunks(self) -> int:
        return len(self.reduction_groups[0])

    def starts_with(self, device: int) -> tuple[int, ...]:
        """The chunk ids ``device``'s buffer holds before the first step: all k, or its shard (AllGather)."""
        k = self.num_chunks
        if self.sharding is not None and self.sharding.kind is GoalKind.ALL_GATHER:
            return tuple(self.sharding.shard(device, k))
        return tuple(range(k))

    def ends_with(self, device: int) -> tuple[int, ...]:
        """The chunk ids ``device``'s buffer must hold at the end, in order: its shard (ReduceScatter, HSDP)
        or all k (AllReduce, AllGather)."""
        k = self.num_chunks
        if self.sharding is not None and self.sharding.kind is GoalKind.REDUCE_SCATTER:
            return tuple(self.sharding.shard(device, k))
        return tuple(range(k))

    def goal_json(self) -> dict | None:
        """The sharded goal for a worker process (kind, each device's rank, shards), or None."""
        s = self.sharding
        return None if s is None else {"kind": s.kind.value, "rank": list(s.rank), "shards": s.shards}


def check_partition(groups: Sequence[Group], num_devices: int, what: str) -> None:
    """Reduction groups: disjoint, covering 0..n-1, all of one size."""
    seen: list[int] = []
    for g in groups:
        seen.extend(as_int(d, "device id") for d in g)
    if sorted(seen) != list(range(num_devices)):
        raise P2Error(f"{what} must partition devices 0..{num_devices - 1}")
    if len({len(g) for g in groups}) != 1:
        raise P2Error(f"{what} must all have the same size, got sizes {sorted({len(g) for g in groups})}")


def placement_target(
    placement,
    reduction_axes: Sequence[int],
    level_names: Sequence[str],
    axis_names: Sequence[str] | None = None,
    system_name: str | None = None,
    sharding: Sharding | None = None,
) -> Target:
    """The target of a placement: factor mesh, reduction groups, the goal, and a one-line description."""
    mesh = placement_mesh(placement, level_names, axis_names)
    red = placement.check_axes(tuple(reduction_axes))
    matrix = [list(r) for r in placement.matrix]
    lines = []
    if system_name is not None:
        lines.append(f"system: {check_text(system_name)}")
    lines.append(f"axes: {list(placement.axes)}  matrix: {matrix}  reduce: {list(red)}")
    if sharding is not None:
        lines.append(sharding.describe())
    return Target(placement.num_devices, mesh, placement.reduction_groups(red), tuple(lines), sharding)


def connected_groups(plan: ExplicitPlan, num_devices: int) -> tuple[Group, ...]:
    """Reduction groups inferred from a plan alone: devices joined by any of its groups."""
    parent = list(range(num_devices))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for step in plan:
        for g in step.groups:
            for d in g[1:]:
                parent[find(d)] = find(g[0])
    comps: dict[int, list[int]] = {}
    for d in range(num_devices):
        comps.setdefault(find(d), []).append(d)
    return tuple(sorted(tuple(c) for c in comps.values()))


def plan_target(
    plan: ExplicitPlan, num_devices: int, reduction_groups: Sequence[Group] | None = None
) -> Target:
    """A target for a bare explicit plan: one flat mesh axis; reduction groups given or inferred."""
    n = as_int(num_devices, "number of devices")
    check_plan(plan, n)
    groups = (
        connected_groups(plan, n) if reduction_groups is None else tuple(tuple(g) for g in reduction_groups)
    )
    if reduction_groups is None and len({len(g) for g in groups}) != 1:
        raise P2Error("the plan joins devices into groups of different sizes; give the reduction groups")
    return Target(n, flat_mesh(n), groups, (f"explicit plan on {n} devices",))
