"""Z3 against the interpreter: the one check of ``synth.agree``, made by ``p2smt verify``, ``p2smt.verify`` and
the audit's chains. A disagreement is an InternalError, never a verdict."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

import p2smt.semantics.verdict as verdict_module
from p2smt import Request, verify
from p2smt.errors import InternalError
from p2smt.model.status import ProofStatus
from p2smt.synth.agree import agree

REQ = Request("a100-4x16", axes=(4, 16), reduce=(1,), matrix=((1, 4), (4, 4)))
GOOD = "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); (node, InsideGroup, AllGather)"
TWICE = "(node, InsideGroup, AllReduce); (node, InsideGroup, AllReduce); (node, Parallel(root), AllReduce)"


def test_the_api_verify_agrees_with_the_interpreter():
    assert verify(REQ, GOOD).status is ProofStatus.PROVED
    bad = verify(REQ, TWICE)
    assert bad.status is ProofStatus.COUNTEREXAMPLE and bad.violation.step == 2
    assert bad.violation.instruction == "(node, InsideGroup, AllReduce)"  # the interpreter's DSL text


@pytest.mark.parametrize("program", [GOOD, TWICE])
def test_a_disagreement_is_an_internal_error_not_a_verdict(monkeypatch, program):
    real = verdict_module.judge

    def flipped(*args, **kwargs):
        v = real(*args, **kwargs)
        return SimpleNamespace(execution=SimpleNamespace(valid=not v.execution.valid), violation=v.violation)

    monkeypatch.setattr(verdict_module, "judge", flipped)
    with pytest.raises(InternalError, match="Z3 says"):
        verify(REQ, program)


def test_a_counterexample_at_another_step_or_rule_is_an_internal_error():
    proof = verify(REQ, TWICE)
    for oracle in (replace(proof.violation, step=3), replace(proof.violation, group=(0,))):
        with pytest.raises(InternalError, match="Z3 refutes step 2"):
            agree(proof, SimpleNamespace(execution=SimpleNamespace(valid=False), violation=oracle))


def test_an_unknown_proof_is_returned_as_is():
    unknown = SimpleNamespace(status="unknown")
    assert agree(unknown, SimpleNamespace(execution=SimpleNamespace(valid=True), violation=None)) is unknown
