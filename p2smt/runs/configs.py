"""Experiment configurations: distinct synthesis problems from a config file, a shipped set or the paper grid.

A config file lists abstract hierarchies (``levels``: sizes outermost first, reducing over all of it) and
requests on systems (every placement unless ``matrix`` is given). Entries that give the very same
synthesis problem (up to level names) and max length are measured once (the first one; the others are
listed in ``also``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, model_validator

from p2smt.errors import P2Error
from p2smt.model.request import Request
from p2smt.model.system import _format_validation_error

SHIPPED_DIR = Path(__file__).resolve().parent / "experiments"
PAPER_GRID = "paper-grid"
MAX_EXPERIMENT_DEVICES = 16384
"""Largest reduction group of a ``levels`` entry (scale.py measures up to 4,096)."""

PositiveInt = Annotated[StrictInt, Field(ge=1)]


class ConfigEntry(BaseModel):
    """One configuration of a config file: an abstract hierarchy (``levels``: sizes outermost first,
    reducing over all of it) or a request on a system (every placement unless ``matrix`` is given)."""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid", frozen=True)
    name: str | None = None
    levels: tuple[Annotated[StrictInt, Field(ge=2)], ...] | None = Field(default=None, min_length=1)
    level_names: tuple[str, ...] | None = None
    system: str | None = None
    nodes: PositiveInt | None = None
    axes: tuple[PositiveInt, ...] | None = Field(default=None, min_length=1)
    reduce: tuple[Annotated[StrictInt, Field(ge=0)], ...] | None = Field(default=None, min_length=1)
    matrix: tuple[tuple[PositiveInt, ...], ...] | None = None
    hierarchy: Literal["a", "b", "c", "d"] = "d"
    max_len: PositiveInt | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ConfigEntry:
        if (self.levels is None) == (self.system is None):
            raise ValueError("give either levels: [SIZES] or system: NAME (with axes and reduce)")
        if self.levels is not None:
            extra = [f for f in ("nodes", "axes", "reduce", "matrix") if getattr(self, f) is not None]
            if extra:
                raise ValueError(f"{extra[0]} belongs to system entries, not to levels entries")
            if self.level_names is not None and len(self.level_names) != len(self.levels):
                raise ValueError(f"{len(self.level_names)} level_names for {len(self.levels)} levels")
            if math.prod(self.levels) > MAX_EXPERIMENT_DEVICES:
                raise ValueError(
                    f"levels {list(self.levels)} give {math.prod(self.levels)} devices; experiments take at "
                    f"most {MAX_EXPERIMENT_DEVICES} (the re-check of every program is exact at any size, "
                    "but larger groups only time out)"
                )
        elif self.axes is None or self.reduce is None:
            raise ValueError("a system entry needs axes and reduce")
        return self


class ConfigFile(BaseModel):
    """A config file: a description, a default max length and the configurations in run order."""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid", frozen=True)
    description: str = ""
    max_len: PositiveInt = 5
    configs: tuple[ConfigEntry, ...] = Field(min_length=1)


@dataclass(frozen=True)
class Point:
    """One configuration to measure. ``spec`` rebuilds the problem in a child process (JSON);
    ``k``: devices of the reduction group; ``levels``: non-trivial levels; ``also``: other requests
    with the very same synthesis problem (deduplicated)."""

    label: str
    spec: dict[str, Any]
    max_len: int
    k: int
    levels: int
    hierarchy: tuple[tuple[str, int], ...]
    also: tuple[str, ...] = ()


def _build(spec: dict[str, Any]):
    """(synthesis hierarchy, problem) of a point spec: ``{"levels", "level_names"}`` or ``{"request"}``
    (a ``Request`` in JSON form with its one matrix)."""
    from p2smt.model.dsl import problem
    from p2smt.model.hierarchy import synthesis_hierarchy
    from p2smt.model.placement import Placement

    if "levels" in spec:
        sizes = tuple(spec["levels"])
        names = tuple(spec.get("level_names") or [f"l{i}" for i in range(len(sizes))])
        placement = Placement(sizes, (math.prod(sizes),), (sizes,))
        h = synthesis_hierarchy(placement, (0,), names)
    else:
        request = Request.from_json(spec["request"])
        system = request.load_system()
        (placement,) = request.placements(system)
        h = synthesis_hierarchy(placement, request.reduce, system.level_names, request.hierarchy.value)
    return h, problem(h)


def _request_specs(entry: ConfigEntry, system_name: str) -> list[tuple[str, dict[str, Any]]]:
    from p2smt.model.placement import matrices
    from p2smt.model.system import load_system

    system = load_system(system_name, entry.nodes)
    found = [entry.matrix] if entry.matrix is not None else matrices(system.sizes, entry.axes)
    out = []
    for m in found:
        label = f"{system.name} axes {list(entry.axes)} reduce {list(entry.reduce)} {[list(r) for r in m]}"
        request = Request(system_name, entry.axes, entry.reduce, matrix=m, nodes=entry.nodes,
                          hierarchy=entry.hierarchy)
        out.append((label, {"request": request.to_json()}))
    return out


def _identity(prob) -> tuple:
    """A problem up to the names of its levels (candidate labels): equal keys, equal program sets."""
    cands = tuple((c.collective, c.groups) for c in prob.candidates)
    return prob.num_devices, prob.goal_groups, cands, prob.require_progress


def _dedupe(items: Iterable[tuple[str, dict[str, Any], int]]) -> list[Point]:
    """Points from (label, spec, max_len), one per distinct (problem, max_len), first occurrence kept."""
    firsts: dict[Any, int] = {}
    points: list[Point] = []
    for label, spec, max_len in items:
        try:
            h, prob = _build(spec)
        except P2Error as err:
            raise P2Error(f"configuration {label}: {err}") from None
        key = (_identity(prob), max_len)
        if key in firsts:
            i = firsts[key]
            points[i] = replace(points[i], also=(*points[i].also, label))
            continue
        firsts[key] = len(points)
        points.append(Point(label, spec, max_len, prob.num_devices, h.nontrivial_levels, h.levels))
    return points


def paper_grid_points(max_len: int = 5) -> list[Point]:
    """The distinct synthesis problems of P²'s evaluation grid, labelled by their first request and matrix."""
    from p2smt.runs.grid import paper_grid

    items = []
    for cfg in paper_grid():
        entry = ConfigEntry(system=cfg.system, axes=cfg.axes, reduce=cfg.reduction_axes)
        items.extend((label, spec, max_len) for label, spec in _request_specs(entry, cfg.system))
    return _dedupe(items)


def shipped_configs() -> list[str]:
    """Names accepted by ``load_configs`` besides a path: paper-grid and p2smt/experiments/*.yaml."""
    return [PAPER_GRID, *sorted(p.stem for p in SHIPPED_DIR.glob("*.yaml"))]


def parse_config_file(data: Any, source: str, base_dir: Path | None = None,
                      max_len: int | None = None) -> list[Point]:
    """Validate a parsed config document into points (``max_len`` overrides every entry's)."""
    from p2smt.synth.config import MAX_LEN_LIMIT

    if not isinstance(data, dict):
        raise P2Error(f"{source}: a config file must be a mapping, got {type(data).__name__}")
    try:
        doc = ConfigFile.model_validate(data)
    except ValidationError as err:
        raise P2Error(_format_validation_error(source, err)) from None
    items = []
    for i, entry in enumerate(doc.configs):
        length = max_len or entry.max_len or doc.max_len
        if length > MAX_LEN_LIMIT:
            raise P2Error(f"{source}: configs.{i}: max_len must be at most {MAX_LEN_LIMIT}, got {length}")
        if entry.levels is not None:
            names = entry.level_names
            label = entry.name or "levels " + "x".join(str(s) for s in entry.levels)
            spec = {"levels": list(entry.levels), "level_names": list(names) if names else None}
            items.append((label, spec, length))
            continue
        system = entry.system
        if (system.endswith((".yaml", ".yml")) or os.sep in system) and base_dir and not Path(system).is_absolute():
            system = str((base_dir / system).resolve())
        try:
            specs = _request_specs(entry, system)
        except P2Error as err:
            raise P2Error(f"{source}: configs.{i}: {err}") from None
        items.extend(((entry.name or label) if entry.matrix is not None else label, spec, length)
                     for label, spec in specs)
    try:
        return _dedupe(items)
    except P2Error as err:
        raise P2Error(f"{source}: {err}") from None


def load_configs(name_or_path: str | Path, max_len: int | None = None) -> list[Point]:
    """``paper-grid``, a shipped set name (``scale``) or a YAML file path -> points in run order."""
    from p2smt.model.yamlfile import read_yaml

    text = str(name_or_path)
    if text == PAPER_GRID:
        return paper_grid_points(max_len or 5)
    path = Path(text)
    if not path.exists() and path.suffix == "" and (SHIPPED_DIR / f"{path.name}.yaml").is_file():
        path = SHIPPED_DIR / f"{path.name}.yaml"
    if not path.is_file():
        raise P2Error(f"config file {text!r} does not exist (shipped: {', '.join(shipped_configs())})")
    return parse_config_file(read_yaml(path, "config file"), str(path), path.resolve().parent, max_len)
