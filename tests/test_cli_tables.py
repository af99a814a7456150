"""Human tables on a 100-column non-terminal: the answer each table exists for is printed whole, never cut
to an ellipsis (the audit's best programs, plan's headers)."""

from __future__ import annotations

import pytest

DATA = "tests/data/audit-sharded/hsdp-rs-gpu-psum-node.mlir"
BEST = "(a0_gpu, InsideGroup, ReduceScatter); (a0_gpu, Parallel(a0_node), AllReduce); (a0_node, Parallel(root), AllReduce)"


@pytest.fixture
def narrow(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")


def test_audit_prints_each_best_program_whole(run_cli, narrow):
    rc, out, _ = run_cli("audit", DATA, "--system", "v100-2x8")
    assert rc == 0 and "…" not in out
    assert f"0: {BEST}" in " ".join(out.split())


def test_plan_headers_are_not_cut(run_cli, narrow):
    rc, out, _ = run_cli("plan", "--profile", "gpt3-tp-pp-dp", "--system", "dgx-a100", "--nodes", "8")
    assert rc == 0 and "…" not in out
