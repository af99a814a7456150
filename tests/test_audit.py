"""The audit of whole training steps (``p2smt audit``, ``p2smt.audit``), tested against numeric ground truth:
every step in tests/data/audit was run on 16 CPU devices with distinct integer inputs and compared with its
numpy reference (tests/test_jax_steps.py), so ``manifest.json``'s ``correct`` is what the numbers say.

A wrong step must never be PROVED, in any dialect (most are FINDINGS; a shard taken from the wrong neighbour is
only UNVERIFIED: the audit follows no ``(axis_index + 1) % n``); a correct one must never get a finding.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from p2smt.auditing import AuditVerdict, ChainVerdict, Expected, OutputStatus, audit_text, parse_expect
from p2smt.auditing.index import Affine, evaluate, partition_id
from p2smt.auditing.layout import AxisState, FindingKind, Layout
from p2smt.auditing.meshaxes import Mesh, axes_of_groups
from p2smt.auditing.rules import Op, apply
from p2smt.errors import P2Error

TESTS = Path(__file__).parent
AUDIT = TESTS / "data" / "audit"
MANIFEST = json.loads((AUDIT / "manifest.json").read_text())
GOLDEN = TESTS / "golden" / "audit-transformer-dp-tp.json"
HAS_JAX = importlib.util.find_spec("jax") is not None
needs_jax = pytest.mark.skipif(not HAS_JAX, reason="jax is not installed")

# What the StableHLO audit says of each step. Correct steps are PROVED except where the text cannot show
# everything (GSPMD's collectives, a custom call's); FSDP's sharded chains are proved against the goals read
# from them. Wrong ones are FINDINGS, or REFUSED where the text hides the communication.
STABLEHLO = {
    "all-gather-untiled-sum": "PROVED", "data-parallel-bf16": "PROVED", "grad-accumulation-loop": "PROVED",
    "wrong-accumulator-summed-in-loop": "FINDINGS", "wrong-permuted-slice": "UNVERIFIED",
    "custom-partitioning-sum": "REFUSED", "data-parallel-pytree": "PROVED", "fsdp": "PROVED",
    "gspmd-sum": "UNVERIFIED", "mixed-node-gpu": "PROVED", "row-parallel-mlp": "PROVED",
    "slice-reduce-scatter": "PROVED", "slice-then-reduce": "PROVED", "stats-pair": "PROVED",
    "tp-backward-manual": "PROVED", "tp-dp-linear": "PROVED", "transformer-dp-tp": "PROVED",
    "wrong-axis-linear": "FINDINGS", "wrong-bias-before-psum": "FINDINGS", "wrong-double-count": "FINDINGS",
    "wrong-gspmd-inserted": "FINDINGS", "wrong-hidden-custom-partitioning": "REFUSED",
    "wrong-missing-psum-before-nonlinearity": "FINDINGS", "wrong-partial-to-output": "FINDINGS",
    "wrong-psum-after-nonlinearity": "FINDINGS", "wrong-sharded-after-slice": "FINDINGS",
    "wrong-swapped-outputs": "FINDINGS", "wrong-tp-backward-missing-psum": "FINDINGS",
}
# Compiled HLO declares no output shardings: without --expect its chains are proved and its outputs unverified; a
# chain that sums twice is a counterexample there (XLA's partitioner added the second sum).
COMPILED_FINDINGS = {"wrong-double-count", "wrong-gspmd-inserted", "wrong-hidden-custom-partitioning"}
# What the compiled HLO's walk says of each step with --expect from the step's out_specs (as its StableHLO
# declares them). It differs from STABLEHLO where the compiled text shows what the StableHLO hides: the psum in a
# custom_partitioning body and GSPMD's all-reduce (correct steps PROVED, the wrong custom_partitioning step a
# FINDING instead of REFUSED).
COMPILED = {**STABLEHLO, "custom-partitioning-sum": "PROVED", "gspmd-sum": "PROVED",
            "wrong-hidden-custom-partitioning": "FINDINGS"}
# The two steps whose output is computed outside shard_map with no sharding in the StableHLO: jit's
# out_shardings, replicated (compiled.output_shardings), given by hand.
OUTSIDE_SHARD_MAP = {"custom-partitioning-sum": "0=-", "wrong-gspmd-inserted": "0=-,-"}
WRONG_KINDS = [
    ("wrong-missing-psum-before-nonlinearity", FindingKind.NONLINEAR_ON_PARTIAL),
    ("wrong-psum-after-nonlinearity", FindingKind.NONLINEAR_ON_PARTIAL),
    ("wrong-bias-before-psum", FindingKind.ADDED_TO_PARTIAL),
    ("wrong-tp-backward-missing-psum", FindingKind.ADDED_TO_PARTIAL),
    ("wrong-axis-linear", FindingKind.PARTIAL_TO_OUTPUT),
    ("wrong-sharded-after-slice", FindingKind.PARTIAL_TO_OUTPUT),
    ("wrong-swapped-outputs", FindingKind.SHARDING_MISMATCH),
    ("wrong-partial-to-output", FindingKind.SHARDING_MISMATCH),
    ("wrong-gspmd-inserted", FindingKind.SHARDING_MISMATCH),
    ("wrong-double-count", FindingKind.SUM_OF_REPLICATED),
    ("wrong-accumulator-summed-in-loop", FindingKind.ADDED_TO_PARTIAL),
]


def _audit(name: str, suffix: str, **kw):
    return audit_text((AUDIT / f"{name}{suffix}").read_text(), system="v100-2x8", where=f"{name}{suffix}", **kw)


def test_the_table_covers_every_fixture():
    assert set(STABLEHLO) == set(MANIFEST)


@needs_jax
@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_stablehlo_verdict(name):
    report = _audit(name, ".mlir")
    assert report.verdict.value == STABLEHLO[name]
    if MANIFEST[name]["correct"]:
        assert report.verdict is not AuditVerdict.FINDINGS and not report.findings
    else:
        assert report.verdict is not AuditVerdict.PROVED


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_compiled_hlo_is_never_proved_and_sums_twice_are_counterexamples(name):
    report = _audit(name, ".hlo", mesh=[(n, s) for n, s in zip(MANIFEST[name]["mesh"]["axis_names"],
                                                               MANIFEST[name]["mesh"]["shape"])])
    assert report.verdict is not AuditVerdict.PROVED
    assert all(o.status is OutputStatus.UNVERIFIED for o in report.outputs)
    bad = any(c.verdict is ChainVerdict.COUNTEREXAMPLE for c in report.chains)
    assert bad == (name in COMPILED_FINDINGS)
    if MANIFEST[name]["correct"]:
        assert report.verdict is AuditVerdict.UNVERIFIED


@needs_jax
def test_mixed_chains_are_each_proved_against_their_own_groups():
    report = _audit("mixed-node-gpu", ".mlir")
    steps = sorted((c.steps, c.axes, c.verdict) for c in report.chains)
    assert steps == [(("all-reduce(node)", "all-reduce(gpu)"), ("node", "gpu"), ChainVerdict.PROVED),
                     (("all-reduce(node+gpu)",), ("node", "gpu"), ChainVerdict.PROVED)]


@needs_jax
def test_tp_over_one_axis_dp_over_another():
    report = _audit("tp-dp-linear", ".mlir")
    assert {c.axes for c in report.chains} == {("tensor",), ("data",)}
    assert all(c.verdict is ChainVerdict.PROVED for c in report.chains)
    assert report.verdict is AuditVerdict.PROVED


@needs_jax
@pytest.mark.parametrize("name,kind", WRONG_KINDS)
def test_each_wrong_class_is_a_finding_in_words(name, kind):
    report = _audit(name, ".mlir")
    assert kind in {f.kind for f in report.findings}
    assert all(f.message and f.location for f in report.findings)


@needs_jax
def test_hidden_custom_partitioning_is_refused_naming_the_op():
    report = _audit("wrong-hidden-custom-partitioning", ".mlir")
    assert report.verdict is AuditVerdict.REFUSED
    assert "CustomSPMDPartitioning" in report.hidden[0]


@needs_jax
def test_gspmd_sums_shown_only_in_compiled_hlo_keep_stablehlo_unverified():
    report = _audit("gspmd-sum", ".mlir")
    assert report.verdict is AuditVerdict.UNVERIFIED
    assert "XLA's partitioner" in report.notes[0]


@needs_jax
def test_expect_overrides_the_declared_sharding():
    assert _audit("row-parallel-mlp", ".mlir").verdict is AuditVerdict.PROVED
    report = _audit("row-parallel-mlp", ".mlir", expect={0: Expected((("tensor",), ()))})
    assert report.verdict is AuditVerdict.FINDINGS
    assert parse_expect("1=data+tensor,-;unreduced=x") == (1, Expected((("data", "tensor"), ()), frozenset({"x"})))
    with pytest.raises(P2Error):
        parse_expect("x=data")


@needs_jax
def test_golden_json_of_the_transformer_block():
    report = _audit("transformer-dp-tp", ".mlir").to_json()
    report.pop("stats")
    assert report == json.loads(GOLDEN.read_text())


@needs_jax
def test_the_best_program_is_priced_and_faster_where_offered():
    report = _audit("data-parallel-pytree", ".mlir")
    assert report.placement == ((2, 8),)
    for c in report.chains:
        assert c.best_program and c.best_seconds < c.seconds
    assert report.seconds_best < report.seconds_now


def test_cli_errors_are_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("module @m {\n  func.func @main( {\n")
    cases = [
        ([str(bad), "--system", "v100-2x8"], "bad.mlir"),
        ([str(tmp_path / "missing.hlo"), "--system", "v100-2x8"], "does not exist"),
        ([str(AUDIT / "row-parallel-mlp.hlo"), "--system", "a100-4x16"], "16 devices but the system has 64"),
        ([str(AUDIT / "row-parallel-mlp.hlo"), "--system", "v100-2x8", "--expect", "zero=data"], "OUTPUT=SPEC"),
        ([str(AUDIT / "row-parallel-mlp.hlo"), "--system", "v100-2x8", "--png", "x.svg"], ".png"),
        ([str(AUDIT / "row-parallel-mlp.hlo"), "--system", "v100-2x8", "--mesh", "data=4,tensor=8"],
         "has 32 devices but the module runs on 16"),
        ([str(AUDIT / "row-parallel-mlp.hlo"), "--system", "v100-2x8", "--emit", "nodir/fixes"], "does not exist"),
        ([str(AUDIT / "row-parallel-mlp.hlo"), "--system", "v100-2x8", "--emit", ""], "give the folder"),
    ]
    for argv, words in cases:
        proc = subprocess.run([sys.executable, "-m", "p2smt", "audit", *argv], capture_output=True, text=True,
                              cwd=tmp_path, timeout=120, check=False)
        assert proc.returncode == 2, (argv, proc.stderr)
        assert proc.stdout == ""
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (argv, proc.stderr)


@needs_jax
def test_cli_json_png_and_exit_codes(tmp_path):
    def run(name, *extra):
        return subprocess.run([sys.executable, "-m", "p2smt", "audit", str(AUDIT / name), "--system", "v100-2x8",
                               *extra], capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False)

    ok = run("transformer-dp-tp.mlir", "--json")
    assert ok.returncode == 0
    assert json.loads(ok.stdout)["verdict"] == "PROVED"
    assert run("wrong-bias-before-psum.mlir").returncode == 1
    assert run("gspmd-sum.mlir").returncode == 4
    assert run("fsdp.mlir").returncode == 0  # its sharded chains proved against the goals read from them
    png = tmp_path / "where.png"
    shown = run("data-parallel-pytree.mlir", "--png", str(png))
    assert shown.returncode == 0 and png.read_bytes()[:4] == b"\x89PNG"
    assert "communication per step" in shown.stdout


# -- the rules, on their own -------------------------------------------------------------------------------


def _op(name, shapes_in, shapes_out, axes=("a", "b"), **attrs):
    return Op(name, "1:1", axes, tuple(shapes_in), tuple(shapes_out), attrs)


def test_contracting_a_sharded_dimension_on_both_sides_is_a_partial_sum():
    x = Layout(((), ("a",)))
    w = Layout((("a",), ()))
    out = apply(_op("stablehlo.dot_general", [(2, 4), (4, 3)], [(2, 3)], lhs_batch=(), rhs_batch=(),
                    lhs_contract=(1,), rhs_contract=(0,)), [x, w])
    assert out.results[0].state("a") is AxisState.PARTIAL and out.results[0].state("b") is AxisState.REPLICATED


def test_contracting_on_one_side_only_is_a_finding():
    x = Layout(((), ("a",)))
    w = Layout(((), ()))
    out = apply(_op("stablehlo.dot_general", [(2, 4), (4, 3)], [(2, 3)], lhs_batch=(), rhs_batch=(),
                    lhs_contract=(1,), rhs_contract=(0,)), [x, w])
    assert out.findings[0].kind is FindingKind.ONE_SIDED_CONTRACTION


def test_linear_ops_keep_a_partial_sum_and_nonlinear_ones_are_findings():
    p = Layout(((),), frozenset({"a"}))
    r = Layout(((),))
    assert apply(_op("stablehlo.multiply", [(4,), (4,)], [(4,)]), [p, r]).results[0].state("a") is AxisState.PARTIAL
    assert apply(_op("stablehlo.add", [(4,), (4,)], [(4,)]), [p, p]).results[0].state("a") is AxisState.PARTIAL
    assert apply(_op("stablehlo.add", [(4,), (4,)], [(4,)]), [p, r]).findings[0].kind is FindingKind.ADDED_TO_PARTIAL
    assert apply(_op("stablehlo.tanh", [(4,)], [(4,)]), [p]).findings[0].kind is FindingKind.NONLINEAR_ON_PARTIAL
    assert apply(_op("stablehlo.multiply", [(4,), (4,)], [(4,)]), [p, p]).findings


def test_unknown_ops_keep_replication_only():
    r, s = Layout(((),)), Layout((("a",),))
    out = apply(_op("stablehlo.sort", [(4,)], [(4,)]), [r]).results[0]
    assert out.state("a") is AxisState.REPLICATED
    out = apply(_op("stablehlo.sort", [(4,)], [(4,)]), [s]).results[0]
    assert out.state("a") is AxisState.UNKNOWN and "sort" in out.why("a")


def test_reshape_keeps_a_major_shard_and_loses_a_minor_one():
    op = _op("stablehlo.reshape", [(2, 8)], [(16,)])
    assert apply(op, [Layout((("a",), ()))]).results[0].dims == (("a",),)
    assert apply(op, [Layout(((), ("a",)))]).results[0].state("a") is AxisState.UNKNOWN


def test_an_untiled_gather_of_minor_shards_is_a_replicated_stack():
    """JAX's all_gather(tiled=False): a new one-element dimension gathered over b stacks the members' blocks; when
    b is the minor-most axis sharding another dimension, the stack is that dimension's whole over b."""
    from p2smt.auditing import comm

    op = _op("stablehlo.all_gather", [(1, 8)], [(4, 8)], axis_sizes={"a": 4, "b": 4})
    out = comm.all_gather(op, [Layout(((), ("a", "b")))], ("b",), 0)
    assert out.results[0].dims == ((), ("a",)) and not out.findings
    assert out.results[0].state("b") is AxisState.REPLICATED and out.results[0].state("a") is AxisState.SHARDED
    # b the major axis: the stack is no whole along the dimension; not followed
    assert comm.all_gather(op, [Layout(((), ("b", "a")))], ("b",), 0).results[0].state("b") is AxisState.UNKNOWN
    # blocks that each had a replicated value added: summing the stack would count it once per member
    mixed = Layout(((), ("a", "b")), mixed=frozenset({"b"}))
    assert comm.all_gather(op, [mixed], ("b",), 0).results[0].state("b") is AxisState.UNKNOWN
    # a partial sum stacked is no value until summed; not followed
    assert comm.all_gather(op, [Layout(((), ()), frozenset({"b"}))], ("b",), 0).results[0].state("b") \
        is AxisState.UNKNOWN
    # copies of a replicated value are still a finding
    assert comm.all_gather(op, [Layout(((), ()))], ("b",), 0).findings[0].kind is FindingKind.GATHER_OF_REPLICATED
    # a result dimension that is not the group's size is no untiled gather
    wide = _op("stablehlo.all_gather", [(1, 8)], [(16, 8)], axis_sizes={"a": 4, "b": 4})
    assert comm.all_gather(wide, [Layout(((), ("a", "b")))], ("b",), 0).results[0].state("b") is AxisState.UNKNOWN


def test_axis_index_offsets_take_the_devices_own_block():
    sizes = {"data": 4, "tensor": 4}
    pid = partition_id((("data", 4), ("tensor", 4)))
    tensor = evaluate("remainder", [evaluate("divide", [pid, Affine((), 1)], sizes), Affine((), 4)], sizes)
    assert tensor == Affine((("tensor", 1),))
    data = evaluate("remainder", [evaluate("divide", [pid, Affine((), 4)], sizes), Affine((), 4)], sizes)
    assert data == Affine((("data", 1),))
    offset = evaluate("multiply", [tensor, Affine((), 2)], sizes)
    negative = evaluate("compare", [offset, Affine((), 0)], sizes, "LT")
    assert evaluate("select", [negative, Affine((), 99), offset], sizes) == offset
    op = _op("stablehlo.dynamic_slice", [(8,), ()], [(2,)], axes=("data", "tensor"), slice_sizes=(2,),
             offsets=[offset], axis_sizes=sizes)
    index = Layout(()).varies("tensor", "axis_index")
    out = apply(op, [Layout(((),)), index]).results[0]
    assert out.dims == (("tensor",),) and out.state("data") is AxisState.REPLICATED
    wrong = _op("stablehlo.dynamic_slice", [(8,), ()], [(2,)], axes=("data", "tensor"), slice_sizes=(2,),
                offsets=[evaluate("multiply", [tensor, Affine((), 1)], sizes)], axis_sizes=sizes)
    assert apply(wrong, [Layout(((),)), index]).results[0].state("tensor") is AxisState.VARYING


def test_groups_are_named_by_mesh_axes_in_order():
    mesh = Mesh((("node", 2), ("gpu", 4)), tuple(range(8)))
    assert axes_of_groups(mesh, [(0, 1, 2, 3), (4, 5, 6, 7)], ordered=True) == ("gpu",)
    assert axes_of_groups(mesh, [(0, 4), (1, 5), (2, 6), (3, 7)], ordered=False) == ("node",)
    assert axes_of_groups(mesh, [tuple(range(8))], ordered=True) == ("node", "gpu")
    assert axes_of_groups(mesh, [(0, 4, 1, 5, 2, 6, 3, 7)], ordered=True) == ("gpu", "node")
    assert axes_of_groups(mesh, [(0, 1), (2, 3), (4, 5), (6, 7)], ordered=False) is None


# -- the function, and the emitted fix, on 16 CPU devices -------------------------------------------------

FUNCTION_RUN = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import jax_steps, p2smt
    out = {}
    for name in jax_steps.BUILDERS:
        step = jax_steps.build(name)
        report = p2smt.audit(step.fn, *step.args, system="v100-2x8", mesh=step.mesh)
        out[name] = {"verdict": report.verdict.value, "kinds": sorted({f.kind.value for f in report.findings})}
    print(json.dumps(out))
    """
)


@needs_jax
@pytest.mark.slow
def test_the_function_audit_agrees_with_the_numbers():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, "-c", FUNCTION_RUN, str(TESTS)], capture_output=True, text=True,
                          env=env, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    assert set(got) == set(MANIFEST)
    for name, r in got.items():
        if MANIFEST[name]["correct"]:
            assert r["verdict"] in ("PROVED", "UNVERIFIED") and not r["kinds"], (name, r)
        else:  # a neighbour's shard is UNVERIFIED: the audit follows no (axis_index + 1) % n
            assert r["verdict"] == ("UNVERIFIED" if name == "wrong-permuted-slice" else "FINDINGS"), (name, r)
    # from the function the compiled chains are there: GSPMD's sum is proved, the step PROVED
    assert got["gspmd-sum"]["verdict"] == "PROVED"
    assert got["transformer-dp-tp"]["verdict"] == "PROVED"


@needs_jax
@pytest.mark.slow
def test_emitted_fix_runs_with_exact_sums(tmp_path):
    from p2smt.auditing.emit import fixes, write_fixes
    from p2smt.lower import RunCase, run_cases
    from p2smt.model.system import load_system

    system = load_system("v100-2x8")
    report = _audit("transformer-dp-tp", ".mlir")
    found = fixes(report, system)
    assert [f.chain for f in found] == [c.index for c in report.chains if c.speedup and c.speedup > 1]
    data = next(f for f in found if report.chains[f.chain].axes == ("data",))
    paths = write_fixes(report, system, tmp_path / "fix")
    source = (tmp_path / "fix" / f"chain{data.chain}.py").read_text()
    assert tmp_path / "fix" / f"chain{data.chain}.py" in paths and "shard_map" in source
    best, replaced = run_cases("jax", [RunCase("best", data.plan, data.target, data.labels, source=source),
                                       RunCase("replaced", data.replaces, data.target)])
    assert best.ok and replaced.ok, (best.summary(), replaced.summary())


def test_an_own_block_slice_of_a_shard_is_a_finer_shard():
    sizes = {"data": 4, "tensor": 4}
    offset = Affine((("tensor", 2),))
    op = _op("stablehlo.dynamic_slice", [(8,), ()], [(2,)], axes=("data", "tensor"), slice_sizes=(2,),
             offsets=[offset], axis_sizes=sizes)
    out = apply(op, [Layout((("data",),)), Layout(()).varies("tensor", "axis_index")]).results[0]
    assert out.dims == (("data", "tensor"),)


@needs_jax
def test_a_loop_s_chains_run_its_trip_count_times():
    report = _audit("grad-accumulation-loop", ".mlir")
    assert [(c.steps, c.runs) for c in report.chains] == [(("all-reduce(data)",), "3 times")]
    assert report.seconds_now == pytest.approx(3 * report.chains[0].seconds)


@needs_jax
def test_gspmd_annotations_without_shardy_also_keep_stablehlo_unverified():
    # printed by JAX with jax_use_shardy_partitioner=False: jnp.sum over a dimension sharded over data
    text = (TESTS / "data" / "audit-text" / "gspmd-mhlo-sharding.mlir").read_text()
    report = audit_text(text, system="v100-2x8")
    assert report.verdict is AuditVerdict.UNVERIFIED and "XLA's partitioner" in report.notes[0]


# -- sharded chains: the goal read from the collectives (docs/audit.md), against JAX's numbers ---------------

SHARDED = TESTS / "data" / "audit-sharded"
SHARDED_MANIFEST = json.loads((SHARDED / "manifest.json").read_text())
GOAL_OF = {"rs": "reduce-scatter", "ag": "all-gather"}


def _sharded(name: str, suffix: str):
    return audit_text((SHARDED / f"{name}{suffix}").read_text(), system="v100-2x8", where=f"{name}{suffix}",
                      mesh=[("node", 4), ("gpu", 4)] if suffix == ".hlo" else None)


def _flat_goal(name: str) -> str:
    """The goal JAX's numbers name: the flat collective the chain equals on every device (generate.py)."""
    entry = SHARDED_MANIFEST[name]
    assert entry["matches_flat"] is True
    op, over = next((op, over) for op, over in entry["flat"] if op in GOAL_OF)
    return f"{GOAL_OF[op]} over ({', '.join(over)}), shard = rank in that order"


@needs_jax
@pytest.mark.parametrize("name", ["rs-node-then-gpu", "rs-gpu-then-node", "hsdp-rs-gpu-psum-node",
                                  "ag-gpu-then-node", "ag-node-then-gpu"])
@pytest.mark.parametrize("suffix", [".mlir", ".hlo"])
def test_a_sharded_chain_is_proved_against_the_goal_jax_computes(name, suffix):
    report = _sharded(name, suffix)
    [chain] = report.chains
    assert chain.verdict is ChainVerdict.PROVED, chain.message
    assert chain.goal == _flat_goal(name) and chain.goal in chain.message and chain.goal in chain.rests_on
    assert chain.to_json()["goal"] == chain.goal and chain.seconds and chain.seconds > 0
    if suffix == ".mlir":
        assert report.verdict is AuditVerdict.PROVED


def test_fsdp_chains_are_proved_against_their_sharded_goals():
    report = _audit("fsdp", ".hlo", mesh=[("data", 16)])
    goals = {c.steps: (c.verdict, c.goal) for c in report.chains}
    shard = "over (data), shard = rank in that order"
    assert goals[("all-gather(data)",)] == (ChainVerdict.PROVED, f"all-gather {shard}")
    assert goals[("reduce-scatter(data)",)] == (ChainVerdict.PROVED, f"reduce-scatter {shard}")


def test_the_other_shard_order_is_a_counterexample_naming_device_and_position():
    from p2smt.auditing.chains import ShardedGoal, _prove_sharded
    from p2smt.model.goal import GoalKind, Sharding

    def node_major(kind):  # rank = 4·node + gpu = the device id on this mesh
        return ShardedGoal(kind, ("node", "gpu"), Sharding(kind, tuple(range(16)), 16))

    rs = _sharded("rs-gpu-then-node", ".hlo").chains[0]  # its shards go gpu-major: rank = 4·gpu + node
    verdict, message, _ = _prove_sharded(16, rs.plan, rs.groups, node_major(GoalKind.REDUCE_SCATTER))
    assert verdict is ChainVerdict.COUNTEREXAMPLE and message.startswith("device 1 ends with chunks [4], not its shard")
    # the chunk semantics cannot see an all-gather's order: the XLA/NCCL positions can
    ag = _sharded("ag-node-then-gpu", ".hlo").chains[0]
    verdict, message, _ = _prove_sharded(16, ag.plan, ag.groups, node_major(GoalKind.ALL_GATHER))
    assert verdict is ChainVerdict.COUNTEREXAMPLE and "position" in message and "block" in message, message


def test_a_gather_of_shards_the_chain_did_not_scatter_says_why():
    [chain] = _sharded("rs-node-ag-gpu", ".hlo").chains
    assert chain.verdict is ChainVerdict.SHARDED_GOAL and chain.seconds is None
    assert chain.message.startswith("step 2 gathers over (gpu) but the chain's shards are over (node)")


def test_sharded_chains_are_priced_from_their_shards_and_offered_the_best_in_mesh_order():
    rs = _sharded("rs-node-then-gpu", ".hlo").chains[0]
    ag = _sharded("ag-gpu-then-node", ".hlo").chains[0]  # its mirror: the same bytes over the same links
    assert ag.bytes * 16 == rs.bytes and ag.seconds == pytest.approx(rs.seconds)
    for chain in (rs, ag):
        assert chain.best_program and chain.best_seconds <= chain.seconds and "certified" in chain.best_note
    permuted = _sharded("rs-gpu-then-node", ".hlo").chains[0]
    assert permuted.best_program is None and permuted.best_note == "best: not searched (shard order is not the mesh's)"


@pytest.mark.parametrize(("suffix", "mesh", "said"), [
    (".hlo", [("node", 16), ("gpu", 16)], "has 256 devices but the module runs on 16"),
    (".hlo", [("node", 4), ("gpu", 3)], "has 12 devices but the module runs on 16"),
    (".hlo", [("node", "four")], "give (axis name, size) pairs"),
    (".mlir", [("gpu", 4), ("node", 4)], "the module declares its mesh (node=4,gpu=4)"),
])
def test_a_mesh_that_does_not_name_the_module_s_devices_is_an_error(suffix, mesh, said):
    with pytest.raises(P2Error) as err:
        _audit("mixed-node-gpu", suffix, mesh=mesh)
    assert said in str(err.value)
    assert _audit("mixed-node-gpu", suffix, mesh=[("node", 4), ("gpu", 4)]).verdict is not None


def test_audit_function_refuses_a_mesh_that_is_not_a_jax_mesh():
    from p2smt.auditing import audit_function

    with pytest.raises(P2Error, match="jax.sharding.Mesh"):
        audit_function(lambda x: x, 1.0, system="v100-2x8", mesh={"data": 4})


def test_a_mesh_equal_to_the_declared_one_keeps_the_module_s_device_order():
    """--mesh names axes in device order 0..n-1; where the module declares the same axes with its own device
    order, that order stands (the chains are read over the same axes with and without --mesh)."""
    text = (AUDIT / "all-gather-untiled-sum.mlir").read_text().replace(
        '<["node"=4, "gpu"=4]>', '<["node"=4, "gpu"=4], device_ids=[0,4,8,12,1,5,9,13,2,6,10,14,3,7,11,15]>', 1)
    plain = audit_text(text, system="v100-2x8")
    given = audit_text(text, system="v100-2x8", mesh=[("node", 4), ("gpu", 4)])
    assert [c.to_json()["steps"] for c in given.chains] == [c.to_json()["steps"] for c in plain.chains]


def test_a_module_cut_short_says_so():
    text = "\n".join((AUDIT / "all-gather-untiled-sum.mlir").read_text().splitlines()[:9])
    with pytest.raises(P2Error, match=r"cut\.mlir:9:\d+: .* \(at the last line of 9: is the module cut short\?\)"):
        audit_text(text, system="v100-2x8", where="cut.mlir")
    whole = (AUDIT / "all-gather-untiled-sum.mlir").read_text().replace("stablehlo.reduce(", "stablehlo.reduce((", 1)
    with pytest.raises(P2Error) as err:
        audit_text(whole, system="v100-2x8", where="typo.mlir")
    assert "cut short" not in str(err.value)
