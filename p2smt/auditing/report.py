"""The audit's result: the step's verdict, its chains, its outputs and its findings, as one value."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from p2smt.auditing.chains import ChainAudit, ChainVerdict
from p2smt.auditing.layout import Finding
from p2smt.auditing.walk import OutputStatus, StepOutput

__all__ = ["AuditReport", "AuditVerdict"]


class AuditVerdict(str, Enum):
    """The whole step's verdict.

    PROVED: every chain proved against its own groups and every output is what it was declared (replicated,
    sharded, no partial sum left), with nothing the audit could not follow. FINDINGS: a chain's
    counterexample or a step-level error. UNVERIFIED: nothing wrong found, but something was not followed (an
    op, a sharded goal, communication the text does not show). REFUSED: the module hides communication the
    audit cannot see (a custom call that may communicate).
    """

    PROVED = "PROVED"
    FINDINGS = "FINDINGS"
    UNVERIFIED = "UNVERIFIED"
    REFUSED = "REFUSED"


@dataclass(frozen=True)
class AuditReport:
    """Everything the audit found about one step."""

    module: str
    sources: tuple[str, ...]  # what was read: "StableHLO", "compiled HLO", …
    system: str
    num_devices: int
    mesh: tuple[tuple[str, int], ...] | None
    placement: tuple[tuple[int, ...], ...] | None
    chains: tuple[ChainAudit, ...]
    outputs: tuple[StepOutput, ...]
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    algo: str = "auto"
    stats: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def verdict(self) -> AuditVerdict:
        if self.hidden:
            return AuditVerdict.REFUSED
        if self.findings or any(c.verdict is ChainVerdict.COUNTEREXAMPLE for c in self.chains) or any(
                o.status is OutputStatus.FINDING for o in self.outputs):
            return AuditVerdict.FINDINGS
        if self.notes or any(c.verdict is not ChainVerdict.PROVED for c in self.chains) or any(
                o.status is not OutputStatus.OK for o in self.outputs):
            return AuditVerdict.UNVERIFIED
        return AuditVerdict.PROVED

    @property
    def seconds_now(self) -> float:
        """Predicted communication seconds per step of the priced chains (a loop's chains times its trip
        count; chains of unknown count once)."""
        return sum((c.seconds or 0.0) * c.count * c.per_step for c in self.chains)

    @property
    def seconds_best(self) -> float:
        """The same with each chain's best program where it is faster."""
        return sum(min(c.seconds or 0.0, c.best_seconds if c.best_seconds is not None else c.seconds or 0.0)
                   * c.count * c.per_step for c in self.chains)

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict.value, "module": self.module, "sources": list(self.sources),
                "system": self.system, "devices": self.num_devices,
                "mesh": [[n, s] for n, s in self.mesh] if self.mesh else None,
                "matrix": [list(r) for r in self.placement] if self.placement else None, "algo": self.algo,
                "chains": [c.to_json() for c in self.chains], "outputs": [o.to_json() for o in self.outputs],
                "findings": [f.to_json() for f in self.findings], "notes": list(self.notes),
                "hidden": list(self.hidden),
                "totals": {"seconds_now": self.seconds_now, "seconds_best": self.seconds_best,
                           "speedup": self.seconds_now / self.seconds_best if self.seconds_best else None},
                "stats": self.stats}
