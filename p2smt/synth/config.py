"""The engine configuration: which engine searches, how far, and with which solver options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from p2smt.errors import P2Error
from p2smt.smt.budget import DEFAULT_PROOF_BUDGET

MAX_LEN_LIMIT = 12


class Engine(StrEnum):
    """The synthesis engines (``p2smt synth --engine``)."""

    ENUMERATIVE = "enumerative"
    PIECES = "pieces"
    Z3 = "z3"
    Z3_CEGIS = "z3-cegis"
    SYMMETRIC = "symmetric"
    CERTIFIED = "certified"
    AUTO = "auto"

    @classmethod
    def parse(cls, value: Any) -> Engine:
        try:
            return cls(value)
        except ValueError:
            raise P2Error(f"unknown engine {value!r}; engines: {', '.join(e.value for e in cls)}") from None


class Proof(StrEnum):
    """How the certified engine proves its set (``--proof``): a state-graph certificate checked by the
    independent checker and one ground Z3 query, or bounded model checking of the whole program space
    (validity and completeness queries); ``auto`` takes the faster for the problem's size (driver)."""

    AUTO = "auto"
    CERTIFICATE = "certificate"
    BMC = "bmc"


PROPOSERS = (Engine.ENUMERATIVE, Engine.PIECES)
"""The explicit engines whose program sets the certified engine has Z3 prove valid and complete."""


def _count(value: object, flag: str, zero: str) -> None:
    """Refuses anything but an integer ≥ 0 for ``flag`` (``zero`` says what 0 means)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise P2Error(f"{flag} must be an integer ≥ 0 (0: {zero}), got {value!r}")


@dataclass(frozen=True)
class EngineConfig:
    """How to search: engine, maximum program length, solver limits, encoding and pruning.

    >>> EngineConfig(engine="pieces", max_len=3).to_json()["engine"]
    'pieces'
    >>> EngineConfig().engine
    <Engine.CERTIFIED: 'certified'>
    >>> EngineConfig(engine="enumerative", encoding="bitvec")
    Traceback (most recent call last):
    p2smt.errors.P2Error: --encoding: only with --engine z3 (got --engine enumerative)
    >>> EngineConfig(jobs=-1)
    Traceback (most recent call last):
    p2smt.errors.P2Error: --jobs must be an integer ≥ 0 (0: every core), got -1
    """

    engine: Engine = Engine.CERTIFIED
    max_len: int = 5
    timeout_ms: int | None = None
    encoding: str | None = None
    encoding_options: Mapping[str, Any] | None = None
    emit_smt2: str | None = None
    prune: str = "none"
    proposer: Engine | None = None
    certificate: str | None = None
    jobs: int = 1  # the certified engine's Z3 proof on this many threads (0: one per core)
    proof_budget: int = DEFAULT_PROOF_BUDGET  # the certified engine's Z3 work per placement, millions of units (0: none)
    proof_store: str | None = None  # the certified engine's folder of proofs to reuse and add to (proofstore.py)
    inclusion_pairs: int | None = None  # the symmetric engine's completeness proof: its bound (0: never)
    proof: Proof = Proof.AUTO  # the certified engine's proof: the state-graph certificate or BMC, by size
    memory_gib: float | None = None  # the Z3 encodings' memory cap, GiB (None: smt.memory's share of the RAM)

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine", Engine.parse(self.engine))
        if self.proof not in set(Proof):
            raise P2Error(f"--proof: one of {', '.join(p.value for p in Proof)} (got {self.proof!r})")
        object.__setattr__(self, "proof", Proof(self.proof))
        if self.proposer is not None:
            names, name = [p.value for p in PROPOSERS], str(self.proposer)
            if name not in names:
                raise P2Error(f"--proposer: one of {', '.join(names)} (got {name!r})")
            object.__setattr__(self, "proposer", Engine(name))
        _count(self.jobs, "--jobs", "every core")
        _count(self.proof_budget, "--proof-budget", "no limit")
        if self.inclusion_pairs is not None:
            _count(self.inclusion_pairs, "--inclusion-pairs", "no proof")
            if self.engine != Engine.SYMMETRIC:
                raise P2Error(f"--inclusion-pairs: only with --engine symmetric (got --engine {self.engine})")
        cert_only = [flag for flag, value in (("--proposer", self.proposer), ("--certificate", self.certificate),
                                              ("--jobs", self.jobs != 1),
                                              ("--proof-budget", self.proof_budget != DEFAULT_PROOF_BUDGET),
                                              ("--proof-store", self.proof_store),
                                              ("--proof", self.proof != Proof.AUTO)) if value]
        if cert_only and self.engine != Engine.CERTIFIED:
            raise P2Error(f"{', '.join(cert_only)}: only with --engine certified (got --engine {self.engine})")
        if isinstance(self.max_len, bool) or not isinstance(self.max_len, int):
            raise P2Error(f"--max-len must be an integer, got {self.max_len!r}")
        if not 1 <= self.max_len <= MAX_LEN_LIMIT:
            raise P2Error(f"--max-len must be between 1 and {MAX_LEN_LIMIT}, got {self.max_len}")
        smt_only = [flag for flag, value in (("--encoding", self.encoding),
                                             ("--encoding-options", self.encoding_options),
                                             ("--emit-smt2", self.emit_smt2)) if value]
        if smt_only and self.engine != Engine.Z3:
            raise P2Error(f"{', '.join(smt_only)}: only with --engine z3 (got --engine {self.engine})")
        if self.memory_gib is not None:
            from p2smt.smt.memory import MemoryCap

            MemoryCap(self.memory_gib)  # refuses a non-positive or non-finite figure
            if self.engine not in (Engine.Z3, Engine.Z3_CEGIS):
                raise P2Error(f"--memory: only with --engine z3 or z3-cegis (got --engine {self.engine})")
            if self.encoding and _is_wrapper(self.encoding):
                raise P2Error(f"--memory: the {self.encoding} encoding solves a shrunken problem by its own calls, "
                              "which --memory does not bound; leave --memory out, or use another encoding")
        if self.encoding_options is not None and not isinstance(self.encoding_options, Mapping):
            raise P2Error("--encoding-options must be a JSON object")

    def proposing(self, engine: Engine) -> EngineConfig:
        """This configuration for the certified engine's proposer ``engine``: the certified-only settings (those
        ``__post_init__`` refuses with another engine) back at their defaults."""
        return replace(self, engine=engine, proposer=None, certificate=None, jobs=1,
                       proof_budget=DEFAULT_PROOF_BUDGET, proof_store=None, proof=Proof.AUTO)

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine.value,
            "max_len": self.max_len,
            "timeout_ms": self.timeout_ms,
            "encoding": self.encoding,
            "encoding_options": dict(self.encoding_options) if self.encoding_options is not None else None,
            "emit_smt2": self.emit_smt2,
            "prune": self.prune,
            "proposer": self.proposer.value if self.proposer is not None else None,
            "certificate": self.certificate,
            "jobs": self.jobs,
            "proof_budget": self.proof_budget,
            "proof_store": self.proof_store,
            "inclusion_pairs": self.inclusion_pairs,
            "proof": self.proof.value,
            "memory_gib": self.memory_gib,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EngineConfig:
        extra = sorted(set(data) - set(cls().to_json()))
        if extra:
            raise P2Error(f"engine configuration: unknown keys {extra}")
        return cls(**data)


def _is_wrapper(encoding: str) -> bool:
    """Whether a shipped encoding name is a wrapper strategy (``representative``), which the memory cap does not
    reach; an unknown name is left to the engine's own error."""
    from p2smt.smt.registry import load_encoding

    try:
        return load_encoding(encoding).wrapper is not None
    except P2Error:
        return False
