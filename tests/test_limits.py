"""Issue 35 item 8: requests past the memory bounds are refused up front in one line (exit 2), and long runs
show progress on stderr. No test here asserts a duration."""

from __future__ import annotations

import io
import json
import sys
import time

import pytest

from p2smt.cli import bounded
from p2smt.errors import P2Error
from p2smt.synth import symmetric

SUPERPOD_1024 = ("--system", "h100-superpod", "--axes", "1024", "--reduce", "0")


def _one_line_refusal(rc: int, out: str, err: str, words: str) -> None:
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("p2smt: error:") and words in lines[0]


def test_symmetric_search_estimate_refuses_sixteen_levels_of_two():
    """The 16-level, 65,536-device system (1,280 candidates): its generic instance is the system itself."""
    with pytest.raises(P2Error, match=r"65,536 devices with 1,280 candidate instructions .* above its 2 GiB bound"):
        symmetric.check_search_size(65_536, 1_280)
    symmetric.check_search_size(16, 200)  # the superpod's generic instance: far below
    symmetric.check_search_size(256, 320)  # 8 levels of two at length 2: 311 MiB measured


def test_symmetric_search_refused_before_any_work(run_cli, monkeypatch):
    monkeypatch.setattr(symmetric, "MEMORY_BOUND", 1 << 10)
    rc, out, err = run_cli("synth", "--system", "fig2-16gpu", "--axes", "16", "--reduce", "0", "--engine",
                           "symmetric", "--max-len", "2", "--json")
    _one_line_refusal(rc, out, err, "symmetric engine's explicit search")


def test_inclusion_pairs_capped(run_cli):
    rc, out, err = run_cli("synth", *SUPERPOD_1024, "--engine", "symmetric", "--inclusion-pairs", "1000000000000")
    _one_line_refusal(rc, out, err, "--inclusion-pairs 1,000,000,000,000: at most 16,384 at 1,024 devices")


def test_inclusion_bound_of_the_defaults():
    assert symmetric.inclusion_bound(None, False, 1024) == 0
    assert symmetric.inclusion_bound(None, True, 1024) == symmetric.INCLUSION_PAIRS
    assert symmetric.inclusion_bound(None, True, 4096) >= 769  # three levels need 722-769 pairs there
    assert symmetric.inclusion_bound(None, True, 16_384) == symmetric.max_inclusion_pairs(16_384) >= 40
    assert symmetric.inclusion_bound(7, False, 65_536) == 7
    caps = [symmetric.max_inclusion_pairs(k) for k in (64, 1024, 16_384, 65_536)]
    assert caps == sorted(caps, reverse=True)


def test_enumerative_refused_above_its_limit(run_cli):
    from p2smt.semantics.dense import MAX_INTERPRETER_DEVICES

    nodes = 2 * MAX_INTERPRETER_DEVICES // 32  # the superpod has 32 GPUs per node and SU
    rc, out, err = run_cli("synth", "--system", "h100-superpod", "--nodes", nodes, "--axes", 32 * nodes,
                           "--reduce", "0", "--engine", "enumerative", "--max-len", "2", "--json")
    _one_line_refusal(rc, out, err, "too large for the enumerative engine")


def test_check_and_verify_progress_lines(run_cli):
    argv = ("--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--matrix", "[[1,4],[4,4]]",
            "--program", "(root, InsideGroup, AllReduce)", "--progress")
    rc, _, err = run_cli("check", *argv)
    assert rc == 0 and "check: plan read, plan judged: 2/2 done" in err
    rc, _, err = run_cli("verify", *argv)
    assert rc == 0 and "verify: plan read, plan checked by the interpreter: 2/2 done" in err
    assert "verify: steps proved: 1/1 done" in err


def test_synth_progress_lines(run_cli):
    rc, out, err = run_cli("synth", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--engine", "pieces",
                           "--max-len", "3", "--progress", "--json")
    assert rc == 0 and json.loads(out)["status"] == "complete"
    assert "synth: placements: 3/3 done" in err


def test_heartbeat_lines_while_a_piece_runs(monkeypatch):
    """A piece that takes long still prints ``still working`` lines (the run is alive); waits for the line,
    asserts no duration."""
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setattr(bounded, "HEARTBEAT_S", 0.01)
    with bounded._plain_lines("job", 2) as line:
        for _ in range(3000):
            if "still working" in stream.getvalue():
                break
            time.sleep(0.01)
        line("piece")
    text = stream.getvalue()
    assert "job: 0/2 done, still working" in text and "job: 1/2 done (" in text


def test_sixteen_levels_of_two_refused_through_the_cli(run_cli, tmp_path):
    """Issue 35's request: a legal 16-level, 65,536-device system at length 2; refused in one line (after its
    1,280 candidates are built), not run for minutes."""
    levels = "\n".join(f"  - {{name: l{i}, size: 2}}" for i in range(16))
    system = tmp_path / "sixteen.yaml"
    system.write_text(f"name: sixteen\ndescription: sixteen levels of two\nlevels:\n{levels}\ninterconnects:\n"
                      "  - {name: net, kind: network, joins: [l0, l15], bandwidth_gbps: 100, latency_us: 5}\n")
    rc, out, err = run_cli("synth", "--system", system, "--axes", "65536", "--reduce", "0", "--engine", "symmetric",
                           "--max-len", "2", "--json")
    _one_line_refusal(rc, out, err, "65,536 devices with 1,280 candidate instructions")


def test_positions_run_bounded_in_cells():
    from p2smt.semantics.verdict import POSITIONS_CELLS, check_positions_size

    check_positions_size(1024, 1024)  # a 1,024-device reduction with one block per device
    with pytest.raises(P2Error, match="beyond the bound of 1,048,576 cells"):
        check_positions_size(2 * POSITIONS_CELLS // 1024, 1024)
