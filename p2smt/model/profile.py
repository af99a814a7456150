"""Model communication profiles: named parallelism axes and the reductions a training step runs."""

from __future__ import annotations

from math import prod
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from p2smt.errors import P2Error
from p2smt.model.goal import GoalKind
from p2smt.model.shipped import profiles_dir, shipped_profiles
from p2smt.model.system import IDENTIFIER, _format_validation_error
from p2smt.model.yamlfile import read_yaml

MAX_NAME = 64  # characters of an axis or communication name (a communication's names a file)
MAX_BYTES = 1e15  # bytes per device of one collective (a petabyte): beyond, times are no longer meaningful
MAX_COUNT = 1e9  # times one collective runs per training step


def identifier(name: str, what: str) -> str:
    """``name`` if it is an identifier of at most ``MAX_NAME`` characters (a ValueError for pydantic)."""
    if not IDENTIFIER.fullmatch(name) or len(name) > MAX_NAME:
        raise ValueError(f"{what} name {name!r} must be an identifier of at most {MAX_NAME} characters")
    return name


class Axis(BaseModel):
    """A parallelism axis; ``size: auto`` takes whatever devices the other axes leave."""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid", frozen=True)
    name: str
    size: StrictInt | Literal["auto"] = Field(description="number of parts, or 'auto'")
    kind: Literal["data", "tensor", "pipeline", "sequence", "expert", "other"] = "other"

    @field_validator("name")
    @classmethod
    def _identifier(cls, v: str) -> str:
        return identifier(v, "axis")

    @field_validator("size")
    @classmethod
    def _positive(cls, v):
        if v != "auto" and v < 1:
            raise ValueError("axis size must be at least 1")
        return v


class Communication(BaseModel):
    """A collective a step runs ``count`` times: a reduction over axes, sharded or not, an all-gather, or pipeline
    point-to-point sends.

    ``reduce``: every device ends with the sum over the devices that differ only on ``axes``.
    ``reduce-scatter``: the same sum, every device keeping only its shard along ``shard_axes`` (default: all of
    ``axes``; fewer is HSDP, the shard replicated over the others), docs/semantics.md §6 (gradients in ZeRO/FSDP).
    ``all-gather``: every device starts with its shard and ends with every shard of its group (parameters).
    ``bytes_per_device`` is the full (unsharded) buffer: a reduce-scatter's input, an all-gather's output.
    ``p2p``: every device sends its buffer to the next index on the single axis in ``axes``
    (pipeline activations/gradients); costed as one round of pair transfers, all at once (full-duplex links).
    """

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid", frozen=True)
    name: str
    kind: Literal["reduce", "reduce-scatter", "all-gather", "p2p"] = "reduce"
    axes: tuple[str, ...] = Field(min_length=1)
    shard_axes: tuple[str, ...] | None = Field(default=None, description="reduce-scatter only: the axes the result "
                                                                       "is sharded over (default: every axis)")
    bytes_per_device: float = Field(gt=0, le=MAX_BYTES)
    count: float = Field(default=1, gt=0, le=MAX_COUNT, description="times per training step")

    @field_validator("name")
    @classmethod
    def _identifier(cls, v: str) -> str:
        # plan --export-dir writes NAME_jax.py and NAME_torch.py: a path in a name would escape the folder
        return identifier(v, "communication")

    @field_validator("kind", mode="before")
    @classmethod
    def _kind(cls, v):
        """A goal's collective in any spelling (``allreduce``, ``AllGather``, ``reducescatter``) as its kind word."""
        if not isinstance(v, str) or v in ("reduce", "p2p"):
            return v
        try:
            kind = GoalKind.parse(v)
        except P2Error:
            return v  # pydantic's error lists the kinds
        return "reduce" if kind is GoalKind.ALLREDUCE else kind.value


class Profile(BaseModel):
    """A model's parallelism axes and its per-step communication."""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid", frozen=True)
    name: str
    description: str = ""
    axes: tuple[Axis, ...] = Field(min_length=1)
    communication: tuple[Communication, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> Profile:
        names = [a.name for a in self.axes]
        if len(set(names)) != len(names):
            raise ValueError(f"axis names must be distinct, got {names}")
        if sum(1 for a in self.axes if a.size == "auto") > 1:
            raise ValueError("at most one axis may have size 'auto'")
        comm_names = [c.name for c in self.communication]
        if len(set(comm_names)) != len(comm_names):
            raise ValueError(f"communication names must be distinct, got {comm_names}")
        for c in self.communication:
            for a in c.axes:
                if a not in names:
                    raise ValueError(f"communication {c.name!r} names unknown axis {a!r} (axes: {names})")
            if len(set(c.axes)) != len(c.axes):
                raise ValueError(f"communication {c.name!r} repeats an axis")
            if c.kind == "p2p" and len(c.axes) != 1:
                raise ValueError(f"p2p communication {c.name!r} needs exactly one axis")
            if c.shard_axes is not None:
                if c.kind != "reduce-scatter":
                    raise ValueError(f"communication {c.name!r}: shard_axes is for kind reduce-scatter only")
                if not c.shard_axes or any(a not in c.axes for a in c.shard_axes) or \
                        len(set(c.shard_axes)) != len(c.shard_axes):
                    raise ValueError(f"communication {c.name!r}: shard_axes must be distinct axes of {list(c.axes)}")
        return self

    def axis_index(self, name: str) -> int:
        return [a.name for a in self.axes].index(name)

    def goal_of(self, comm: Communication) -> tuple[str, tuple[int, ...], tuple[int, ...] | None]:
        """A communication's goal kind, reduction axes and shard axes as indices (docs/semantics.md §6)."""
        kind = {"reduce": "allreduce", "reduce-scatter": "reduce-scatter", "all-gather": "all-gather"}[comm.kind]
        red = tuple(sorted(self.axis_index(a) for a in comm.axes))
        shard = None if comm.shard_axes is None else tuple(sorted(self.axis_index(a) for a in comm.shard_axes))
        return kind, red, shard

    def sizes_for(self, num_devices: int) -> tuple[int, ...]:
        """Axis sizes on a system of ``num_devices``; resolves ``auto``; errors if they do not factor."""
        fixed = prod(a.size for a in self.axes if a.size != "auto")
        if any(a.size == "auto" for a in self.axes):
            if num_devices % fixed:
                raise P2Error(
                    f"profile {self.name!r}: fixed axes multiply to {fixed}, which does not divide "
                    f"{num_devices} devices"
                )
            return tuple(num_devices // fixed if a.size == "auto" else a.size for a in self.axes)
        if fixed != num_devices:
            raise P2Error(f"profile {self.name!r}: axes multiply to {fixed}, the system has {num_devices} devices")
        return tuple(a.size for a in self.axes)


def load_profile(name_or_path: Profile | str | Path) -> Profile:
    """Load a shipped profile by name or a YAML file by path (a Profile is taken as it is); errors name the
    file and the field."""
    if isinstance(name_or_path, Profile):
        return name_or_path
    path = Path(name_or_path)
    if not (path.suffix in (".yaml", ".yml") or path.exists()):
        path = profiles_dir() / f"{name_or_path}.yaml"
        if not path.is_file():
            raise P2Error(f"unknown profile {str(name_or_path)!r}; shipped: {', '.join(shipped_profiles())}")
    data = read_yaml(path, "profile file")  # a missing file, a FIFO or a folder: one line saying which
    if not isinstance(data, dict):
        raise P2Error(f"{path}: a profile must be a mapping")
    try:
        return Profile.model_validate(data)
    except ValidationError as err:
        raise P2Error(_format_validation_error(str(path), err)) from None
