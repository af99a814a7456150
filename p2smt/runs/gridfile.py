"""Grid files: YAML products of systems × nodes × axes × reductions × algorithms × message sizes.

A grid is one product, or several (``grids:``, a list of blocks, each a product; fields given beside
``grids:`` are defaults of every block) expanded one after the other. ``engine`` (default ``certified``),
``encoding``, ``max_len``, ``timeout_s``, ``proof_budget`` (the certified engine's, in millions of Z3
resource units per placement) and ``goal`` with ``shard_axes`` (docs/semantics.md §6; default the AllReduce
goal) hold for the whole file. Everything is validated on load, including the
engine configuration, so a bad entry is refused before anything runs.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
)

from p2smt.errors import P2Error
from p2smt.model.goal import Goal, GoalKind
from p2smt.model.limits import MAX_SECONDS
from p2smt.model.profile import MAX_BYTES
from p2smt.model.yamlfile import read_yaml
from p2smt.smt.budget import DEFAULT_PROOF_BUDGET

PositiveInt = Annotated[StrictInt, Field(ge=1)]
AxisSpec = PositiveInt | Literal["auto"]


def _no_bool(value: Any) -> Any:
    """``true`` is not a number of bytes (pydantic would read it as 1)."""
    if isinstance(value, bool):
        raise ValueError("a message size is a number of bytes or 'default', not true/false")  # noqa: TRY004 (pydantic reports ValueError)
    return value


# as --bytes: positive, finite, at most a profile's largest message
BytesSpec = Annotated[float, BeforeValidator(_no_bool), Field(gt=0, le=MAX_BYTES, allow_inf_nan=False)] | Literal[
    "default"]
BLOCK_FIELDS = ("systems", "nodes", "axes", "reductions", "algorithms", "bytes")


class Block(BaseModel):
    """One product of a grid. ``systems`` are shipped names or absolute paths (resolved on load)."""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid", frozen=True)
    systems: tuple[str, ...] = Field(min_length=1)
    nodes: tuple[PositiveInt, ...] | None = Field(default=None, min_length=1)
    axes: tuple[tuple[AxisSpec, ...], ...] = Field(min_length=1)
    reductions: tuple[tuple[Annotated[StrictInt, Field(ge=0)], ...], ...] = Field(min_length=1)
    algorithms: tuple[str, ...] = Field(default=("ring",), min_length=1)
    bytes: tuple[BytesSpec, ...] = Field(default=("default",), min_length=1)

    @field_validator("systems")
    @classmethod
    def _names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for s in v:
            if not s.strip():
                raise ValueError("a system name must not be empty")
        return v

    @field_validator("axes")
    @classmethod
    def _axes(cls, v):
        for spec in v:
            if not spec:
                raise ValueError("an axes entry needs at least one axis")
            if list(spec).count("auto") > 1:
                raise ValueError(f"at most one axis may be 'auto', got {list(spec)}")
        return v

    @field_validator("reductions")
    @classmethod
    def _reductions(cls, v):
        out = []
        for red in v:
            if not red:
                raise ValueError("a reduction needs at least one axis index")
            if len(set(red)) != len(red):
                raise ValueError(f"reduction axes repeat: {list(red)}")
            out.append(tuple(sorted(red)))
        return tuple(out)

    @field_validator("algorithms")
    @classmethod
    def _algorithms(cls, v):
        from p2smt.cost.model import ALGOS

        for a in v:
            if a not in ALGOS:
                raise ValueError(f"unknown algorithm {a!r}; choose from {', '.join(ALGOS)}")
        return v


class Grid(BaseModel):
    """A validated grid file: its blocks in file order and the engine settings of every task."""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid", frozen=True)
    blocks: tuple[Block, ...] = Field(min_length=1)
    engine: str = "certified"
    encoding: str | None = None
    max_len: int = Field(default=5, ge=1)
    timeout_s: float = Field(default=120.0, gt=0, le=MAX_SECONDS, allow_inf_nan=False)
    proof_budget: int = Field(default=DEFAULT_PROOF_BUDGET, ge=0, strict=True)
    goal: GoalKind = GoalKind.ALLREDUCE
    shard_axes: tuple[Annotated[StrictInt, Field(ge=0)], ...] | None = None  # None: Goal.of's default

    def goal_of(self, reduce: tuple[int, ...]) -> Goal:
        """The goal of a task reducing ``reduce`` (P2Error, one line, where the shard axes do not fit it)."""
        return Goal.of(self.goal, self.shard_axes, reduce)

    @field_validator("goal", mode="before")
    @classmethod
    def _goal(cls, v):
        """Any spelling of the goal's collective (``AllGather``, ``reducescatter``), as ``--goal`` takes it."""
        try:
            return GoalKind.parse(v)
        except P2Error as err:
            raise ValueError(str(err)) from None

    @field_validator("engine")
    @classmethod
    def _engine(cls, v):
        from p2smt.synth.config import Engine

        if v not in {e.value for e in Engine}:
            raise ValueError(f"unknown engine {v!r}; engines: {', '.join(e.value for e in Engine)}")
        return v

    @field_validator("max_len")
    @classmethod
    def _max_len(cls, v):
        from p2smt.synth.config import MAX_LEN_LIMIT

        if v > MAX_LEN_LIMIT:
            raise ValueError(f"max_len must be at most {MAX_LEN_LIMIT}, got {v}")
        return v


def with_search(grid: Grid, engine: str | None = None, max_len: int | None = None,
                proof_budget: int | None = None) -> Grid:
    """``grid`` with ``engine``, ``max_len`` and ``proof_budget`` replacing its own where given (``sweep
    --engine --max-len --proof-budget``), validated as a grid file's would be."""
    update = {k: v for k, v in (("engine", engine), ("max_len", max_len), ("proof_budget", proof_budget))
              if v is not None}
    if not update:
        return grid
    new = _replaced(grid, update)
    _check_engine(new)
    return new


def _replaced(grid: Grid, update: dict[str, Any]) -> Grid:
    """``grid`` with the fields of ``update`` (given as command-line options), validated as in a grid file."""
    try:
        return Grid.model_validate(grid.model_dump() | update)
    except ValidationError as err:
        first = err.errors()[0]
        flag = str(first["loc"][0]).replace("_", "-")
        raise P2Error(f"--{flag}: {first['msg'].removeprefix('Value error, ')}") from None


def with_goal(grid: Grid, goal: GoalKind | str | None = None, shard_axes: Sequence[int] | None = None) -> Grid:
    """``grid`` with the goal of ``sweep --goal --shard-axes`` (the API's ``goal``, ``shard_axes``): a goal
    given replaces the grid's goal and shard axes, shard axes alone replace the grid's shard axes."""
    if goal is None and shard_axes is None:
        return grid
    update = {"goal": goal if goal is not None else grid.goal,
              "shard_axes": None if shard_axes is None else tuple(shard_axes)}
    new = _replaced(grid, update)
    _check_goal(new)
    return new


def refuse_goal_engine(grid: Grid) -> None:
    """Refuse, in synth's own words, a sharded goal the grid's engine settings do not take (the symmetric engine,
    an encoding that states only the AllReduce goal): those settings synthesize the smallest request of the goal
    (2 devices, one step) first, so the refusal comes from the engines themselves before any task runs."""
    if grid.goal is GoalKind.ALLREDUCE:
        return
    from p2smt.model.request import Request
    from p2smt.model.system import Level, System
    from p2smt.synth.config import EngineConfig
    from p2smt.synth.driver import synthesize

    pair = System(name="goal-probe", levels=(Level(name="device", size=2),))
    synthesize(Request.for_system(pair, (2,), (0,), goal=Goal.of(grid.goal, None, (0,))),
               EngineConfig(engine=grid.engine, max_len=1, encoding=grid.encoding, proof_budget=grid.proof_budget))


def check_store(grid: Grid, proof_store: str | Path | None) -> str | None:
    """The sweep's proof store as an absolute path, its folder made (None: none given); refused for a sweep
    of another engine, where it would be unused."""
    if proof_store is None:
        return None
    if grid.engine != "certified":
        raise P2Error(f"--proof-store: only with --engine certified (the sweep's engine is {grid.engine})")
    from p2smt.synth.proofstore import ProofStore

    return str(ProofStore(proof_store).ensure().root)


def shared_store(grid: Grid, checked: str | None, local: bool = True) -> contextlib.AbstractContextManager[str | None]:
    """The folder a sweep's tasks share proofs through: ``checked`` (``check_store``'s), else for a local
    sweep of the certified engine a folder kept for the run only, else none."""
    if checked is not None or not local or grid.engine != "certified":
        return contextlib.nullcontext(checked)
    return tempfile.TemporaryDirectory(prefix="p2smt-proofs-")


def grids_dir() -> Path:
    """The shipped grids (p2smt/runs/grids)."""
    return Path(__file__).resolve().parent / "grids"


def shipped_grids() -> list[str]:
    return sorted(p.stem for p in grids_dir().glob("*.yaml"))


def _field_error(source: str, err: ValidationError, single: bool) -> str:
    loc = list(err.errors()[0]["loc"])
    prefix: list[str] = []
    if loc[:1] == ["blocks"] and len(loc) > 2:
        prefix, loc = ([] if single else ["grids", str(loc[1])]), loc[2:]
    path = prefix + [str(x) for i, x in enumerate(loc) if i == 0 or isinstance(x, int)]
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{source}: field {'.'.join(path) or '(top level)'}: {err.errors()[0]['msg']}{more}"


def _looks_like_path(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) or "/" in name or os.sep in name


def _document(data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The grid document in its ``blocks`` form, and whether it was a single product."""
    shared = {k: v for k, v in data.items() if k in BLOCK_FIELDS}
    rest = {k: v for k, v in data.items() if k not in BLOCK_FIELDS and k != "grids"}
    if "grids" not in data:
        return {"blocks": [shared], **rest}, True
    blocks = data["grids"]
    if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
        raise ValueError("grids must be a list of mappings")
    return {"blocks": [shared | b for b in blocks], **rest}, False


def _check_engine(grid: Grid) -> None:
    from p2smt.synth.config import EngineConfig

    EngineConfig(engine=grid.engine, max_len=grid.max_len, encoding=grid.encoding, proof_budget=grid.proof_budget)
    if grid.encoding is not None:
        from p2smt.smt.registry import load_encoding

        load_encoding(grid.encoding)


def _check_goal(grid: Grid) -> None:
    """Every reduction of the grid takes its goal (a shard axis outside a reduction is refused, as by synth)."""
    for block in grid.blocks:
        for red in block.reductions:
            grid.goal_of(red)


def parse_grid(data: Any, source: str, base_dir: Path | None = None) -> Grid:
    """Validate a parsed grid document; system files are resolved against ``base_dir`` and loaded."""
    from p2smt.model.system import load_system

    if not isinstance(data, dict):
        raise P2Error(f"{source}: a grid file must be a mapping, got {type(data).__name__}")
    try:
        doc, single = _document(data)
        grid = Grid.model_validate(doc)
    except ValueError as err:
        if isinstance(err, ValidationError):
            raise P2Error(_field_error(source, err, "grids" not in data)) from None
        raise P2Error(f"{source}: field grids: {err}") from None
    try:
        _check_engine(grid)
        _check_goal(grid)
    except P2Error as err:
        raise P2Error(f"{source}: {err}") from None
    blocks = []
    for b, block in enumerate(grid.blocks):
        systems = []
        for i, name in enumerate(block.systems):
            if _looks_like_path(name) and base_dir is not None and not Path(name).is_absolute():
                name = str((base_dir / name).resolve())
            try:
                load_system(name)
            except P2Error as err:
                where = f"systems.{i}" if single else f"grids.{b}.systems.{i}"
                raise P2Error(f"{source}: field {where}: {err}") from None
            systems.append(name)
        blocks.append(block.model_copy(update={"systems": tuple(systems)}))
    return grid.model_copy(update={"blocks": tuple(blocks)})


def load_grid(path: str | Path) -> Grid:
    """Load a grid YAML file (or a shipped grid by name, see ``shipped_grids``); errors name file+field."""
    p = Path(path)
    if not p.exists() and p.suffix == "" and (grids_dir() / f"{p.name}.yaml").is_file():
        p = grids_dir() / f"{p.name}.yaml"
    if not os.path.lexists(p):
        raise P2Error(f"grid file {str(path)!r} does not exist (shipped grids: {', '.join(shipped_grids())})")
    data = read_yaml(p, "grid file")
    return parse_grid(data, str(p), p.resolve().parent)
