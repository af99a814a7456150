"""The audit's ground truth: every step of tests/jax_steps.py runs on 16 CPU devices and its ``correct`` flag
is what the numbers say (exact comparison with its numpy reference); the printed fixtures show what they claim.

The steps run in one child process (JAX must start with 16 host devices, whatever this process imported).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
AUDIT = TESTS / "data" / "audit"
MANIFEST = json.loads((AUDIT / "manifest.json").read_text())

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")

RUN_ALL = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import jax_steps
    out = {}
    for name in jax_steps.BUILDERS:
        step = jax_steps.build(name)
        got, want = jax_steps.run(step), jax_steps.expected(step)
        out[name] = {"correct": step.correct, "finding": step.finding.value if step.finding else None,
                     "matches": jax_steps.same(got, want), "name": step.name,
                     "axes": list(step.mesh.axis_names), "devices": step.mesh.devices.size,
                     # a wrong step must be wrong in its values, not only in its shapes
                     "same_shapes": [list(map(int, a.shape)) for a in jax_steps.jax.tree.leaves(got)]
                     == [list(map(int, a.shape)) for a in jax_steps.jax.tree.leaves(want)]}
    print(json.dumps({"steps": out, "findings": [f.value for f in jax_steps.Finding]}))
    """
)


@pytest.fixture(scope="module")
def run_all() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, "-c", RUN_ALL, str(TESTS)], capture_output=True, text=True, env=env,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def results(run_all) -> dict:
    return run_all["steps"]


STEP_NAMES = sorted(MANIFEST)


@pytest.mark.parametrize("name", STEP_NAMES)
def test_the_correct_flag_is_what_the_numbers_say(results, name):
    r = results[name]
    assert r["name"] == name and r["devices"] == 16
    assert r["matches"] == r["correct"], f"{name}: correct={r['correct']} but the numbers say {r['matches']}"
    assert r["same_shapes"]


@pytest.mark.parametrize("name", STEP_NAMES)
def test_a_step_is_wrong_exactly_when_it_names_a_finding(results, name):
    r = results[name]
    assert (r["finding"] is None) == r["correct"] == (not name.startswith("wrong-"))


def test_every_finding_class_has_a_wrong_step_and_the_required_steps_exist(run_all, results):
    assert {r["finding"] for r in results.values() if r["finding"]} == set(run_all["findings"])
    for name in ("transformer-dp-tp", "data-parallel-pytree", "fsdp", "mixed-node-gpu", "tp-dp-linear"):
        assert results[name]["correct"] and results[name]["matches"]
    assert results["transformer-dp-tp"]["axes"] == ["data", "tensor"]
    assert results["mixed-node-gpu"]["axes"] == ["node", "gpu"]


def test_the_manifest_agrees_with_the_steps_run_now(results):
    assert set(MANIFEST) == set(results)
    for name, entry in MANIFEST.items():
        assert entry["correct"] == entry["matches_reference"] == results[name]["correct"]
        assert entry["finding"] == results[name]["finding"]
        assert sorted(entry["mesh"]["device_ids"]) == list(range(16))


def _count(name: str, suffix: str, pattern: str) -> int:
    return len(re.findall(pattern, (AUDIT / f"{name}{suffix}").read_text()))


STABLE_AR, HLO_AR = r'"stablehlo\.all_reduce"', r"\ball-reduce\("


@pytest.mark.parametrize("name", STEP_NAMES)
def test_every_step_is_printed_in_both_dialects(name):
    mlir, hlo = (AUDIT / f"{name}.mlir").read_text(), (AUDIT / f"{name}.hlo").read_text()
    assert mlir.startswith("module @") and "mhlo.num_partitions = 16" in mlir
    assert hlo.startswith("HloModule ") and "num_partitions=16" in hlo


def test_the_hidden_collectives_are_hidden_from_stablehlo_only():
    """What the wrong hidden steps rely on: StableHLO shows fewer all-reduces than XLA runs."""
    for name in ("custom-partitioning-sum", "wrong-hidden-custom-partitioning"):
        assert "@CustomSPMDPartitioning" in (AUDIT / f"{name}.mlir").read_text()
    assert _count("custom-partitioning-sum", ".mlir", STABLE_AR) == 0
    assert _count("custom-partitioning-sum", ".hlo", HLO_AR) == 1
    assert _count("wrong-hidden-custom-partitioning", ".mlir", STABLE_AR) == 1
    assert _count("wrong-hidden-custom-partitioning", ".hlo", HLO_AR) == 2
    assert _count("gspmd-sum", ".mlir", STABLE_AR) == 0 and _count("gspmd-sum", ".hlo", HLO_AR) == 1
    assert _count("wrong-gspmd-inserted", ".mlir", STABLE_AR) == 1
    assert _count("wrong-gspmd-inserted", ".hlo", HLO_AR) == 2
    for name, shown in (("custom-partitioning-sum", 0), ("wrong-hidden-custom-partitioning", 1), ("gspmd-sum", 0),
                        ("wrong-gspmd-inserted", 1)):  # HLO before partitioning shows what StableHLO shows
        assert _count(name, "-unpartitioned.hlo", HLO_AR) == shown


def test_swapped_outputs_differ_from_the_right_order_only_in_the_returned_order():
    right = (AUDIT / "stats-pair.mlir").read_text().splitlines()
    wrong = (AUDIT / "wrong-swapped-outputs.mlir").read_text().splitlines()
    diff = [(a.split(), b.split()) for a, b in zip(right, wrong, strict=True) if a != b]
    assert len(diff) == 1
    (a, b), = diff
    assert a[0] == b[0] == "sdy.return" and a[1:3] == [b[2].rstrip(",") + ",", b[1].rstrip(",")]


DIFFERENTIAL = TESTS.parent / "benchmarks" / "audit_differential.py"


@pytest.mark.slow
def test_the_differential_corpus_is_deterministic_and_its_bug_free_programs_are_right(tmp_path):
    """Two runs of the generator give the same programs and the same ground truth; a program without a bug
    computes its reference (the script exits 1 otherwise); the corpus holds bugs, and wrong programs."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    runs = []
    for out in (tmp_path / "one", tmp_path / "two"):
        proc = subprocess.run([sys.executable, str(DIFFERENTIAL), "--out", str(out), "--count", "6", "--no-audit",
                               "--bug-rate", "0.5"], capture_output=True, text=True, env=env, timeout=600,
                              check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads((out / "programs.json").read_text()))
        assert sorted(p.name for p in out.iterdir())[:2] == ["000.hlo", "000.mlir"]
    assert runs[0] == runs[1]
    assert any(r["bug"] for r in runs[0]) and any(not r["correct"] for r in runs[0])
    assert all(r["correct"] for r in runs[0] if not r["bug"])


def test_the_differential_refuses_bad_arguments_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(DIFFERENTIAL), "--out", str(tmp_path), "--count", "0"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and not proc.stdout
