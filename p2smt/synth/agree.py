"""Z3's verdict on a plan against an interpreter's, the one check every caller of ``prove_plan`` makes.

The encodings and the interpreters share no code, so a disagreement is a bug in one of them: it is raised as
``InternalError``, never reported as a verdict. ``p2smt verify``, ``p2smt.verify`` and the audit's chains use it.
"""

from __future__ import annotations

from dataclasses import replace

from p2smt.errors import InternalError

__all__ = ["agree", "same_verdict"]


def same_verdict(proof, verdict) -> None:
    """Raise unless Z3's ``proof`` (proved or not) and the interpreter's ``verdict`` (valid or not) agree."""
    if (proof.status == "proved") != verdict.execution.valid:
        raise InternalError(
            f"Z3 says {proof.status} but the interpreter says {'valid' if verdict.execution.valid else 'invalid'}")


def agree(proof, verdict):
    """Z3's ``proof`` after checking it against the interpreter's ``verdict``: the status, and for a
    counterexample the failing step, rule and group (the sentence too when the interpreter gives the chunk's
    facts), returned with the interpreter's DSL instruction text. An ``unknown`` proof is returned as is."""
    if proof.status == "unknown":
        return proof
    same_verdict(proof, verdict)
    v, oracle = proof.violation, verdict.violation
    if v is None:
        return proof
    if (v.step, v.rule, v.group) != (oracle.step, oracle.rule, oracle.group) or (
            oracle.facts and v.message != oracle.message):
        raise InternalError(f"Z3 refutes step {v.step} ({v.rule}: {v.message}) but the interpreter step "
                            f"{oracle.step} ({oracle.rule}: {oracle.message})")
    return replace(proof, violation=replace(v, steps=oracle.steps, instruction=oracle.instruction))
