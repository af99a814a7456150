"""The step-level check on compiled (SPMD-partitioned) HLO, against the same numeric ground truth as
tests/test_audit.py: each step in tests/data/audit ran on 16 CPU devices and ``manifest.json`` says whether its
numbers are right. From the compiled text, with ``--expect`` from the step's out_specs, no wrong step may be
PROVED, no correct step may have a finding, and each wrong class gives the finding it gives from StableHLO.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from test_audit import AUDIT, COMPILED, HAS_JAX, MANIFEST, OUTSIDE_SHARD_MAP, WRONG_KINDS, needs_jax

from p2smt.auditing import AuditVerdict, Expected, FindingKind, OutputStatus, audit_text, parse_expect
from p2smt.auditing.hlo_walk import NO_DECLARED, layout_of_sharding
from p2smt.auditing.meshaxes import Mesh
from p2smt.errors import P2Error

MESH_4x4 = Mesh((("data", 4), ("tensor", 4)), tuple(range(16)))


def _mesh(name: str) -> list[tuple[str, int]]:
    m = MANIFEST[name]["mesh"]
    return list(zip(m["axis_names"], m["shape"]))


def _declared(name: str) -> dict[int, Expected]:
    """The step's out_specs, as its StableHLO declares them (by hand where the output leaves shard_map)."""
    if name in OUTSIDE_SHARD_MAP:
        return dict([parse_expect(OUTSIDE_SHARD_MAP[name])])
    from p2smt.auditing.step import _walk

    walk = _walk((AUDIT / f"{name}.mlir").read_text(), name, {})
    return {i: d for i, d in enumerate(walk.declared) if d is not None}


def _compiled(name: str, expect=None):
    return audit_text((AUDIT / f"{name}.hlo").read_text(), system="v100-2x8", where=f"{name}.hlo",
                      mesh=_mesh(name), expect=expect)


def test_the_table_covers_every_fixture():
    assert set(COMPILED) == set(MANIFEST)


@needs_jax
@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_compiled_hlo_verdict_with_the_declared_shardings(name):
    report = _compiled(name, _declared(name))
    assert report.verdict.value == COMPILED[name], [o.reasons for o in report.outputs]
    if MANIFEST[name]["correct"]:
        assert not report.findings and report.verdict is not AuditVerdict.FINDINGS
    else:
        assert report.verdict is not AuditVerdict.PROVED


@needs_jax
@pytest.mark.parametrize("name,kind", WRONG_KINDS)
def test_each_wrong_class_gives_the_same_finding_from_compiled_hlo(name, kind):
    report = _compiled(name, _declared(name))
    kinds = {f.kind for f in report.findings}
    if name == "wrong-gspmd-inserted":
        # The compiled text shows the cause the StableHLO cannot: the all-reduce XLA inserts for jnp.sum sums a
        # value the explicit psum already made replicated. The StableHLO sees only the output it gives.
        assert FindingKind.SUM_OF_REPLICATED in kinds
    else:
        assert kind in kinds
    assert all(f.message and f.location.startswith("line ") for f in report.findings if f.op != "output")


@pytest.mark.parametrize("name", ["wrong-missing-psum-before-nonlinearity", "wrong-bias-before-psum",
                                  "wrong-psum-after-nonlinearity", "wrong-double-count"])
def test_op_findings_need_no_expect(name):
    report = _compiled(name)
    assert report.verdict is AuditVerdict.FINDINGS
    assert all(o.status is OutputStatus.UNVERIFIED and NO_DECLARED in o.reasons for o in report.outputs)


def test_correct_compiled_steps_without_expect_are_unverified_saying_why():
    report = _compiled("transformer-dp-tp")
    assert report.verdict is AuditVerdict.UNVERIFIED and not report.findings
    assert [o.reasons for o in report.outputs] == [(NO_DECLARED,)] * 4
    with_expect = _compiled("transformer-dp-tp", {0: Expected(()), 1: Expected(((), ())),
                                                  2: Expected(((), ("tensor",))), 3: Expected((("tensor",), ()))})
    assert with_expect.verdict is AuditVerdict.PROVED


def test_a_wrong_expect_is_a_finding():
    report = _compiled("row-parallel-mlp", {0: Expected((("tensor",), ()))})
    assert report.verdict is AuditVerdict.FINDINGS
    assert {f.kind for f in report.findings} == {FindingKind.SHARDING_MISMATCH}


def test_hlo_before_partitioning_is_not_walked():
    text = (AUDIT / "gspmd-sum-unpartitioned.hlo").read_text()
    report = audit_text(text, system="v100-2x8", mesh=_mesh("gspmd-sum"))
    assert report.verdict is AuditVerdict.UNVERIFIED
    assert "before SPMD partitioning" in report.outputs[0].reasons[0]


@pytest.mark.parametrize("sharding,rank,dims", [
    ("{replicated}", 2, ((), ())),
    ("{devices=[4,4]<=[16]}", 2, (("data",), ("tensor",))),
    ("{devices=[4,1,4]<=[4,4]T(1,0) last_tile_dim_replicate}", 2, (("tensor",), ())),
    ("{devices=[4,1,4]<=[16] last_tile_dim_replicate}", 2, (("data",), ())),
    ("{devices=[16]<=[16]}", 1, (("data", "tensor"),)),
    ("{devices=[16]<=[4,4]T(1,0)}", 1, (("tensor", "data"),)),
])
def test_parameter_shardings_become_mesh_axes(sharding, rank, dims):
    lay = layout_of_sharding(sharding, rank, MESH_4x4)
    assert lay.dims == dims and not lay.unknown


@pytest.mark.parametrize("sharding", ["{devices=[2,1,8]<=[16] last_tile_dim_replicate}", "{maximal device=0}",
                                      "{manual}", "{devices=[4,4]0,1,2,3,4,5,6,7,8,9,10,11,12,13,15,14}", None])
def test_shardings_no_union_of_mesh_axes_forms_are_unknown(sharding):
    lay = layout_of_sharding(sharding, 2, MESH_4x4)
    assert {a for a, _ in lay.unknown} == {"data", "tensor"}


def _tiny(body: str, params: str = "p: f32[2]", result: str = "f32[2]") -> str:
    return (f"HloModule tiny, num_partitions=16\n\n%add (a: f32[], b: f32[]) -> f32[] {{\n"
            "  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n  ROOT %s = f32[] add(%a, %b)\n}\n\n"
            f"ENTRY %main ({params}) -> {result} {{\n"
            "  %p = f32[2]{0} parameter(0), sharding={devices=[16]<=[16]}\n" + body + "}\n")


@pytest.mark.parametrize("line,named", [
    ("  ROOT %c = f32[2]{0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,0}}\n",
     "collective-permute"),
    ('  ROOT %c = f32[2]{0} custom-call(%p), custom_call_target="my_kernel"\n', "custom-call @my_kernel"),
])
def test_what_the_walk_cannot_follow_is_unverified_and_named(line, named):
    report = audit_text(_tiny(line), system="v100-2x8", mesh=[("x", 16)],
                        expect={0: Expected((("x",),))})
    out = report.outputs[0]
    assert out.status is OutputStatus.UNVERIFIED and named in out.reasons[0]


def test_nonlinearity_on_a_partial_sum_in_a_while_loop_and_a_fusion():
    body = ("  %z = f32[] constant(0)\n"
            "  %r = f32[] reduce(%p, %z), dimensions={0}, to_apply=%add\n"
            "  %t = (f32[]) tuple(%r)\n"
            "  %w = (f32[]) while(%t), condition=%cond, body=%loop\n"
            "  %g = f32[] get-tuple-element(%w), index=0\n"
            "  ROOT %s = f32[] all-reduce(%g), channel_id=1, replica_groups=[1,16]<=[16], use_global_device_ids=true,"
            " to_apply=%add\n")
    text = _tiny(body, result="f32[]").replace("ENTRY", (
        "%cond (c: (f32[])) -> pred[] {\n  %c = (f32[]) parameter(0)\n  ROOT %f = pred[] constant(false)\n}\n\n"
        "%fused (q: f32[]) -> f32[] {\n  %q = f32[] parameter(0)\n  ROOT %e = f32[] exponential(%q)\n}\n\n"
        "%loop (l: (f32[])) -> (f32[]) {\n  %l = (f32[]) parameter(0)\n  %v = f32[] get-tuple-element(%l), index=0\n"
        "  %x = f32[] fusion(%v), kind=kLoop, calls=%fused\n  ROOT %o = (f32[]) tuple(%x)\n}\n\nENTRY"), 1)
    report = audit_text(text, system="v100-2x8", mesh=[("x", 16)],
                        expect={0: Expected(())})
    assert {f.kind for f in report.findings} == {FindingKind.NONLINEAR_ON_PARTIAL}
    assert "exponential" in report.findings[0].message


@pytest.mark.skipif(not HAS_JAX, reason="jax is not installed")
def test_cli_compiled_hlo_with_expect(tmp_path):
    hlo = AUDIT / "wrong-sharded-after-slice.hlo"
    run = [sys.executable, "-m", "p2smt", "audit", str(hlo), "--system", "v100-2x8", "--mesh", "data=4,tensor=4"]
    bare = subprocess.run(run, capture_output=True, text=True, check=False)
    assert bare.returncode == 4, bare.stderr
    found = subprocess.run([*run, "--expect", "0=data,-"], capture_output=True, text=True, check=False)
    assert found.returncode == 1 and "partial" in found.stdout, found.stdout


def test_a_bitcast_across_layouts_is_a_transpose():
    text = ("HloModule tiny, num_partitions=16\n\nENTRY %main (p: f32[2,8]) -> f32[8,2] {\n"
            "  %p = f32[2,8]{1,0} parameter(0), sharding={devices=[16,1]<=[16]}\n"
            "  ROOT %b = f32[8,2]{0,1} bitcast(%p)\n}\n")
    right = audit_text(text, system="v100-2x8", mesh=[("x", 16)], expect={0: Expected(((), ("x",)))})
    assert right.verdict is AuditVerdict.PROVED, right.outputs
    wrong = audit_text(text, system="v100-2x8", mesh=[("x", 16)], expect={0: Expected((("x",), ()))})
    assert wrong.verdict is AuditVerdict.FINDINGS


@pytest.mark.parametrize("spec", ["3=-", "0=data", "0=data,-,-"])
def test_an_expect_naming_no_output_of_its_rank_is_an_error(spec):
    with pytest.raises(P2Error, match="--expect"):
        _compiled("wrong-sharded-after-slice", dict([parse_expect(spec)]))
