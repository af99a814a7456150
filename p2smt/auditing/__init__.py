"""Audit a whole training step: every collective chain proved against its own groups, the step's outputs
checked against their declared shardings, each chain priced and the cheapest proved program offered.

>>> from p2smt.auditing import audit_text
>>> report = audit_text(open("tests/data/audit/mixed-node-gpu.mlir").read(), system="a100-4x16", nodes=1)
... # doctest: +SKIP
"""

from p2smt.auditing.chains import ChainAudit, ChainVerdict
from p2smt.auditing.layout import AxisState, Finding, FindingKind, Layout
from p2smt.auditing.report import AuditReport, AuditVerdict
from p2smt.auditing.step import audit_function, audit_text, parse_expect
from p2smt.auditing.walk import Expected, OutputStatus, StepOutput

__all__ = ["AuditReport", "AuditVerdict", "AxisState", "ChainAudit", "ChainVerdict", "Expected", "Finding",
           "FindingKind", "Layout", "OutputStatus", "StepOutput", "audit_function", "audit_text", "parse_expect"]
