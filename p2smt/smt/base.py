"""The plug-in interface of SMT encodings: a spec (name, description, typed options, factory) and the
encoding object the engine drives (declare, decode, block, refine, statistics)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import z3
from pydantic import BaseModel, ConfigDict, ValidationError

from p2smt.errors import P2Error
from p2smt.model.problem import SynthesisProblem

Program = tuple[int, ...]


class EncodingOptions(BaseModel):
    """Base of every encoding's options: typed, immutable, unknown keys rejected."""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid", frozen=True)


@dataclass(frozen=True)
class Refinement:
    """The encoding's verdict on a decoded candidate program.

    ``accepted``: the program is valid and may be reported. Otherwise the encoding has added
    constraints to the solver that exclude it (``kind`` says which: a counterexample ``witness`` or an
    invalid ``prefix``), or its own check returned ``unknown``.
    """

    accepted: bool
    kind: str = "accepted"
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def unknown(self) -> bool:
        return self.kind == "unknown"


ACCEPTED = Refinement(True)


class Encoding(ABC):
    """One SMT encoding of a synthesis problem unrolled to ``max_len`` steps.

    The object owns its Z3 context and every variable in it (no global state): the engine creates
    its solver with ``encoding.new_solver()`` and then calls ``declare`` once.
    """

    name: str = "encoding"
    logic: str | None = None  # a Z3 logic for ``z3.SolverFor`` (e.g. "QF_FD"); None: the default solver

    def __init__(self, problem: SynthesisProblem, max_len: int):
        self.problem = problem
        self.max_len = max_len
        self.context = z3.Context()

    def new_solver(self) -> z3.Solver:
        """A fresh solver in this encoding's context (of ``logic`` if set)."""
        if self.logic:
            return z3.SolverFor(self.logic, ctx=self.context)
        return z3.Solver(ctx=self.context)

    @abstractmethod
    def declare(self, solver: z3.Solver) -> None:
        """Assert the unrolled problem: choices, transitions, preconditions, the goal."""

    @abstractmethod
    def length_assumptions(self, length: int) -> list[z3.BoolRef]:
        """Assumption literals that restrict models to programs of exactly ``length`` steps."""

    @abstractmethod
    def decode(self, model: z3.ModelRef) -> Program:
        """The program (candidate indices, STOP stripped) that ``model`` chooses."""

    @abstractmethod
    def blocking_clause(self, program: Program) -> z3.BoolRef:
        """A clause over choice variables only that excludes exactly ``program``."""

    def refine(self, solver: z3.Solver, program: Program, timeout_ms: int | None = None) -> Refinement:
        """Confirm a decoded program; exact encodings accept every model (the default)."""
        return ACCEPTED

    batch_refine = False  # the engine may confirm several candidates at once with ``refine_many``

    def refine_many(
        self, solver: z3.Solver, programs: Sequence[Program], timeout_ms: int | None = None
    ) -> list[Refinement]:
        """Confirm several decoded programs (already excluded by their blocking clauses) at once."""
        return [self.refine(solver, p, timeout_ms) for p in programs]

    def implied(self, program: Program) -> Sequence[Program]:
        """Candidates an accepted ``program`` implies (confirmed like decoded ones); default: none."""
        return ()

    def statistics(self) -> dict[str, Any]:
        """Encoding-specific figures (sizes, refinements) merged into the engine's stats."""
        return {}

    record_queries = False  # set by the engine for --emit-smt2

    def queries(self) -> Sequence[tuple[str, str]]:
        """(kind, SMT-LIB2 text) of the auxiliary queries of the last ``refine`` when recording."""
        return ()


OptionsT = type[EncodingOptions]
Factory = Callable[[SynthesisProblem, int, Any], Encoding]
Wrapper = Callable[..., Any]
"""A wrapper strategy: (problem, hierarchy or None, max_len, options, timeout_ms, sink, extra_dirs) ->
``engine.EngineResult``; it runs other encodings on the one solver loop (``smt.representative``)."""
Footprint = Callable[[SynthesisProblem, int, Any], int]
"""(problem, max_len, typed options) -> the bytes an enumeration is estimated to need at its peak (Python's
terms and Z3's solver), from the problem's size alone: a run past ``--memory`` is refused before any term is
built (``smt.memory``)."""


@dataclass(frozen=True)
class EncodingSpec:
    """What an ``encodings/*.py`` file exports as ``ENCODING``: an encoding (``factory``) or a wrapper
    strategy over encodings (``wrapper``), selected by the same ``--encoding`` name."""

    name: str
    description: str
    options: OptionsT
    factory: Factory | None
    source: str = ""
    wrapper: Wrapper | None = None
    footprint: Footprint | None = None  # None: no estimate (nothing refused up front; Z3's memory cap still holds)

    def estimate(self, problem: SynthesisProblem, max_len: int, options: dict[str, Any] | None = None) -> int | None:
        """The encoding's estimated peak bytes on ``problem`` up to ``max_len`` steps (None: none declared)."""
        return None if self.footprint is None else self.footprint(problem, max_len, self.parse_options(options))

    def parse_options(self, options: dict[str, Any] | None) -> EncodingOptions:
        """Validate user options; errors name the offending option and list the known ones."""
        if options is not None and not isinstance(options, dict):
            raise P2Error(f"encoding {self.name!r}: options must be a mapping, got {type(options).__name__}")
        try:
            return self.options.model_validate(options or {})
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(options)"
            known = ", ".join(self.options.model_fields) or "none"
            raise P2Error(
                f"encoding {self.name!r}: option {where}: {first['msg']} (options: {known})"
            ) from None

    def create(
        self, problem: SynthesisProblem, max_len: int, options: dict[str, Any] | None = None
    ) -> Encoding:
        if self.factory is None:
            raise P2Error(
                f"{self.name!r} is a strategy over other encodings, not an encoding: run it with "
                f"engine.enumerate_z3 (--engine z3 --encoding {self.name})"
            )
        return self.factory(problem, max_len, self.parse_options(options))

    def option_help(self) -> list[dict[str, Any]]:
        """Each option's name, type, default and description (for ``p2smt encodings``)."""
        out = []
        for name, f in self.options.model_fields.items():
            ann = getattr(f.annotation, "__name__", None) or str(f.annotation).replace("typing.", "")
            out.append({"name": name, "type": ann, "default": f.default, "description": f.description or ""})
        return out

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "options": self.option_help()}
