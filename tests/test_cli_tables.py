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


def test_experiment_summary_fits_and_keeps_bracketed_variant_names(narrow):
    """Every column of experiment's summary fits 100 columns, and a variant's options in brackets are printed,
    not read as markup."""
    import io

    from rich.console import Console

    from p2smt.runs.expreport import render_summary

    row = {"variant": "bool-matrix[lemma_depth=2]", "configs": 12, "runs": 12, "complete": 12, "conjectured": 0,
           "unknown": 0, "timeout": 0, "error": 0, "unsound": 0, "skipped": 0, "median_seconds": 0.123,
           "total_seconds": 1234.5, "programs": 12345}
    console = Console(width=100, record=True, file=io.StringIO())
    for part in render_summary({"variants": [row], "disagreements": [], "failures": []}, "t"):
        console.print(part)
    text = console.export_text()
    assert "bool-matrix[lemma_depth=2]" in text and "progs" in text and "12345" in text and "…" not in text
