"""System descriptions: ordered hardware levels plus interconnects, loaded from YAML and validated."""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal

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
from p2smt.model.hardware import PhysicalLayout
from p2smt.model.paths import require_file
from p2smt.model.yamlfile import read_yaml

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_LEVEL_NAMES = frozenset({"root", "InsideGroup", "Parallel", "Master"})
InterconnectKind = Literal["nvlink", "nvswitch", "pcie", "nic", "network", "shm"]


class Level(BaseModel):
    """One level of the hierarchy: ``size`` children under each node of the level above."""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid", frozen=True)
    name: str
    size: StrictInt = Field(ge=1)

    @field_validator("name")
    @classmethod
    def _identifier(cls, v: str) -> str:
        if not IDENTIFIER.fullmatch(v):
            raise ValueError(f"level name {v!r} must be an identifier (letters, digits, _)")
        if v in RESERVED_LEVEL_NAMES:
            raise ValueError(f"level name {v!r} is reserved by the DSL")
        return v


class Interconnect(BaseModel):
    """A switched link joining the children of one node at the levels in ``joins``."""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid", frozen=True)
    name: str
    kind: InterconnectKind
    joins: tuple[str, ...] = Field(min_length=1)
    bandwidth_gbps: float = Field(gt=0, description="GB/s per direction per device port")
    latency_us: float = Field(ge=0)

    @field_validator("name")
    @classmethod
    def _identifier(cls, v: str) -> str:
        if not IDENTIFIER.fullmatch(v):
            raise ValueError(f"interconnect name {v!r} must be an identifier")
        return v


MAX_SYSTEM_NAME = 100


def valid_name(v: str, what: str) -> str:
    """A name read from a file, used in file names (``draw``'s default ``NAME.png``) and printed: not empty,
    at most ``MAX_SYSTEM_NAME`` characters, printable (no control character reaches the terminal), no path
    separator and not ``.`` or ``..`` (``../../x`` would be written outside the current folder)."""
    if not v.strip():
        raise ValueError(f"a {what} name must not be empty")
    if len(v) > MAX_SYSTEM_NAME:
        raise ValueError(f"a {what} name has at most {MAX_SYSTEM_NAME} characters, got {len(v)}")
    if not v.isprintable():
        raise ValueError(f"a {what} name must be printable (no control characters), got {v!r}")
    if "/" in v or "\\" in v or v in (".", ".."):
        raise ValueError(f"a {what} name must not contain a slash or a backslash, nor be '.' or '..', got {v!r}")
    return v


class System(BaseModel):
    """A hierarchical machine: ``levels`` outermost first, the innermost being single devices."""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid", frozen=True)
    name: str
    description: str = ""
    levels: tuple[Level, ...] = Field(min_length=1)
    scalable_level: str | None = Field(
        default=None, description="level whose size --nodes sets (default: the first level)"
    )
    interconnects: tuple[Interconnect, ...] = ()
    physical: PhysicalLayout | None = Field(
        default=None, description="node layout for the physical topology model (cost model)"
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return valid_name(v, "system")

    @field_validator("description")
    @classmethod
    def _description(cls, v: str) -> str:
        if not all(c.isprintable() or c in "\n\t" for c in v):
            raise ValueError("a description must be printable text (no control characters but newlines and tabs)")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> System:
        names = [lv.name for lv in self.levels]
        if len(set(names)) != len(names):
            raise ValueError(f"level names must be distinct, got {names}")
        if self.scalable_level is not None and self.scalable_level not in names:
            raise ValueError(f"scalable_level {self.scalable_level!r} is not a level ({names})")
        for ic in self.interconnects:
            for lv in ic.joins:
                if lv not in names:
                    raise ValueError(f"interconnect {ic.name!r} joins unknown level {lv!r} ({names})")
        return self

    @property
    def level_names(self) -> tuple[str, ...]:
        return tuple(lv.name for lv in self.levels)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(lv.size for lv in self.levels)

    @property
    def num_devices(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n

    @property
    def nodes_level(self) -> str:
        return self.scalable_level or self.levels[0].name

    def with_levels(self, sizes: Mapping[str, int]) -> System:
        """The same system with some levels resized, e.g. ``{"su": 2}``."""
        unknown = sorted(set(sizes) - set(self.level_names))
        if unknown:
            raise P2Error(f"unknown level(s) {unknown}; levels are {', '.join(self.level_names)}")
        bad = sorted(name for name, v in sizes.items() if v < 1)
        if bad:
            raise P2Error(f"level sizes must be at least 1 ({', '.join(bad)})")
        levels = tuple(Level(name=lv.name, size=sizes.get(lv.name, lv.size)) for lv in self.levels)
        return self.model_copy(update={"levels": levels})

    def with_nodes(self, nodes: int) -> System:
        """The same system with ``nodes`` nodes at its scalable level."""
        if nodes < 1:
            raise P2Error(f"--nodes must be at least 1, got {nodes}")
        levels = tuple(
            Level(name=lv.name, size=nodes) if lv.name == self.nodes_level else lv for lv in self.levels
        )
        return self.model_copy(update={"levels": levels})


def _packaged_dir(kind: str) -> Path | None:
    """Where data folders live: inside the wheel (p2smt/data/KIND) or beside the package in a checkout."""
    inside = Path(str(resources.files("p2smt"))) / "data" / kind
    if inside.is_dir():
        return inside
    checkout = Path(__file__).resolve().parents[2] / kind
    return checkout if checkout.is_dir() else None


def topologies_dir() -> Path:
    found = _packaged_dir("topologies")
    if found is None:
        raise P2Error("the shipped topologies folder is missing from this installation")
    return found


def shipped_systems() -> list[str]:
    """Names of the shipped system files, sorted."""
    return sorted(p.stem for p in topologies_dir().glob("*.yaml"))


def _format_validation_error(source: str, err: ValidationError) -> str:
    first = err.errors()[0]
    field = ".".join(str(x) for x in first["loc"]) or "(top level)"
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{source}: field {field}: {first['msg']}{more}"


def parse_system(data: Any, source: str) -> System:
    """Validate an already-parsed YAML document; errors name the file and the field."""
    if not isinstance(data, dict):
        raise P2Error(f"{source}: a system file must be a mapping, got {type(data).__name__}")
    try:
        return System.model_validate(data)
    except ValidationError as err:
        raise P2Error(_format_validation_error(source, err)) from None


def load_system(
    name_or_path: System | str | Path, nodes: int | None = None, levels: Mapping[str, int] | None = None
) -> System:
    """Load a shipped system by name or a YAML file by path (a System is taken as it is); ``nodes``
    re-instantiates its node count (its scalable level) and ``levels`` resizes any named levels."""
    system = name_or_path if isinstance(name_or_path, System) else _read_system(name_or_path)
    if nodes is not None:
        if levels and system.nodes_level in levels:
            raise P2Error(f"--nodes and --level {system.nodes_level}=… both resize level {system.nodes_level!r}; "
                          "give one of them")
        system = system.with_nodes(nodes)
    return system.with_levels(levels) if levels else system


def _read_system(name_or_path: str | Path) -> System:
    text_path = Path(name_or_path)
    if text_path.suffix in (".yaml", ".yml") or text_path.exists():
        path = require_file(text_path, "system file")
    else:
        path = topologies_dir() / f"{name_or_path}.yaml"
        if not path.is_file():
            known = ", ".join(shipped_systems())
            raise P2Error(f"unknown system {str(name_or_path)!r}; shipped systems: {known}")
    return parse_system(read_yaml(path, "system file"), str(path))
