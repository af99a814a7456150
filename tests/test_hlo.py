"""verify --hlo (issue 16): HLO and StableHLO that JAX compiled on 16 CPU devices, proved or refuted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from p2smt.cli.main import main
from p2smt.errors import P2Error
from p2smt.frontend.hlo import hlo_plan, parse_hlo_text, parse_module
from p2smt.model.collectives import Collective

HLO = Path(__file__).parent / "data" / "hlo"
SYSTEM = ["--system", "a100-4x16", "--level", "gpu=4"]
ALL = [*SYSTEM, "--axes", "16", "--reduce", "0", "--matrix", "[[4,4]]"]
PROVED = ["allreduce", "two-allreduce", "rs-ar-ag", "blueconnect", "pytree-psum", "pytree-two-steps"]
WRONG = {"wrong-double-count": (2, "AllReduce.disjoint"), "wrong-gather-across": (2, "AllGather.disjoint_chunks"),
         "call-twice": (2, "AllReduce.disjoint"), "wrong-composite": (2, "AllReduce.disjoint")}  # 1-based
REFUSED = {"loop-psum": "straight-line", "cond-psum": "straight-line", "psum-pmax": "reduces with maximum",
           "independent": "differs from the chain", "independent-via-call": "differs from the chain",
           "mixed-with-input": "combined with the module's input", "reversed-between": "changes values or their",
           "nested-cond": "combined with the module's input", "return-intermediate": "reaches the module's output",
           "tuple-partial": "differs from the chain"}
"""JAX programs p2smt must not prove: a psum in a loop or a branch, a pmax, two psums of one input (also
through a call), a psum's result added to the input (also through nested branches), a reduce-scatter's result
reversed before the gather, a partial sum returned, one buffer of a (tuple) all-reduce reduced further and the
other not."""


def mesh_order(tmp_path: Path, capsys, axes: str, matrix: str) -> str:
    """The device order file written by ``placements --export jax-mesh --json``."""
    assert main(["placements", *SYSTEM, "--axes", axes, "--matrix", matrix, "--export", "jax-mesh", "--json"]) == 0
    path = tmp_path / "mesh.json"
    path.write_text(capsys.readouterr().out)
    return str(path)


def verify(argv: list[str], capsys) -> tuple[int, dict]:
    rc = main(["verify", *argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def check_fixtures(folder: Path, tmp_path: Path, capsys, suffixes=(".hlo", ".mlir")) -> None:
    order = mesh_order(tmp_path, capsys, "16", "[[4,4]]")
    if ".mlir" in suffixes:  # StableHLO printed with debug information
        rc, out = verify([*ALL, "--hlo", str(folder / "blueconnect-debug.mlir"), "--device-order", order], capsys)
        assert (rc, out["status"], out["steps"]) == (0, "proved", 4)
    if ".hlo" in suffixes:  # HLO printed before partitioning: a call runs the body, the mesh gives the devices
        for name, steps, buffers in (("blueconnect", 4, 1), ("pytree-psum", 1, 2)):
            rc, out = verify([*ALL, "--hlo", str(folder / f"{name}-unpartitioned.hlo"), "--device-order", order],
                             capsys)
            assert (rc, out["status"], out["steps"], out["buffers"]) == (0, "proved", steps, buffers), name
    for name in PROVED:
        for suffix in suffixes:
            rc, out = verify([*ALL, "--hlo", str(folder / f"{name}{suffix}"), "--device-order", order], capsys)
            assert (rc, out["status"]) == (0, "proved"), (name, suffix, out)
            # a pytree's psum: one all_reduce per leaf in StableHLO, one all-reduce of both in compiled HLO
            assert out["buffers"] == (2 if name.startswith("pytree") else 1), (name, suffix)
    for name, (step, rule) in WRONG.items():
        for suffix in suffixes:
            rc, out = verify([*ALL, "--hlo", str(folder / f"{name}{suffix}"), "--device-order", order], capsys)
            assert (rc, out["status"], out["failing_step"], out["rule"]) == (1, "counterexample", step, rule)
    for name, words in REFUSED.items():
        for suffix in suffixes:
            assert main(["verify", *ALL, "--hlo", str(folder / f"{name}{suffix}"), "--device-order", order]) == 2
            captured = capsys.readouterr()
            assert captured.out == "" and words in captured.err and len(captured.err.splitlines()) == 1, name


def test_p2_examples_compiled_by_jax_are_proved_and_wrong_ones_refuted(tmp_path, capsys):
    check_fixtures(HLO, tmp_path, capsys)


def test_xla_reduction_order_and_groups_are_read_in_program_order():
    prog = parse_module((HLO / "rs-ar-ag.hlo").read_text(), "rs-ar-ag.hlo")
    assert [c.collective for c in prog.collectives] == [Collective.REDUCE_SCATTER, Collective.ALL_REDUCE,
                                                         Collective.ALL_GATHER]
    assert prog.space.partitions == 16 and [c.dimension for c in prog.collectives] == [0, None, 0]
    plan = hlo_plan(prog, 16)
    assert plan[1].groups == ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15))
    assert hlo_plan(parse_module((HLO / "rs-ar-ag.mlir").read_text()), 16) == plan


@pytest.mark.parametrize(("name", "reduce"), [("sum-gpu", "1"), ("sum-node", "0")])
def test_spmd_partitioned_sums_in_xla_mesh_form_are_proved(name, reduce, tmp_path, capsys):
    order = mesh_order(tmp_path, capsys, "4,4", "[[4,1],[1,4]]")
    argv = [*SYSTEM, "--axes", "4,4", "--reduce", reduce, "--matrix", "[[4,1],[1,4]]", "--hlo",
            str(HLO / f"{name}.hlo"), "--device-order", order]
    assert verify(argv, capsys)[0] == 0


def test_device_order_maps_xla_ids_to_system_devices(tmp_path, capsys):
    # axis 0 inside a node, axis 1 across nodes: JAX mesh position i is system device order[i]
    order = mesh_order(tmp_path, capsys, "4,4", "[[1,4],[4,1]]")
    argv = [*SYSTEM, "--axes", "4,4", "--reduce", "1", "--matrix", "[[1,4],[4,1]]", "--hlo",
            str(HLO / "sum-gpu.hlo")]
    assert verify([*argv, "--device-order", order], capsys)[0] == 0
    rc, out = verify(argv, capsys)  # identity order: the groups are nodes, not the reduction groups
    assert (rc, out["status"]) == (1, "counterexample")


MODULE = """HloModule m, num_partitions=4
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}
ENTRY %main (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
BODY
}
"""


def module(body: str) -> str:
    return MODULE.replace("BODY", body)


def test_async_pairs_and_iota_groups():
    text = module(
        "  %rs = f32[4]{0} reduce-scatter(%p), channel_id=1, replica_groups=[2,2]<=[4], use_global_device_ids=true,"
        " dimensions={0}, to_apply=%add\n"
        "  %ars = f32[4]{0} all-reduce-start(%rs), channel_id=2, replica_groups=[2,2]<=[2,2]T(1,0), "
        "use_global_device_ids=true, to_apply=%add\n"
        "  %ard = f32[4]{0} all-reduce-done(%ars)\n"
        "  %ags = (f32[4]{0}, f32[8]{0}) all-gather-start(%ard), channel_id=3, replica_groups={{0,1},{2,3}}, "
        "dimensions={0}, use_global_device_ids=true\n"
        "  ROOT %agd = f32[8]{0} all-gather-done(%ags)")
    prog = parse_hlo_text(text)
    assert [c.op for c in prog.collectives] == ["reduce-scatter", "all-reduce-start", "all-gather-start"]
    assert hlo_plan(prog, 4)[1].groups == ((0, 2), (1, 3))


def test_replica_ids_without_channel():
    text = module("  ROOT %ar = f32[8]{0} all-reduce(%p), replica_groups={}, to_apply=%add").replace(
        "num_partitions=4", "replica_count=4")
    assert hlo_plan(parse_hlo_text(text), 4)[0].groups == ((0, 1, 2, 3),)


@pytest.mark.parametrize("op", ["collective-permute", "all-to-all", "collective-permute-start"])
def test_non_reduction_collectives_are_reported_with_op_and_line(op):
    text = module(f"  ROOT %x = f32[8]{{0}} {op}(%p), channel_id=1, source_target_pairs={{{{0,1}}}}")
    with pytest.raises(P2Error, match=rf"<hlo>:9: {op} is not a reduction collective"):
        parse_hlo_text(text)


def test_stablehlo_non_reductions_and_other_computations_are_errors(tmp_path, capsys):
    all_to_all = ('%1 = "stablehlo.all_to_all"(%arg0) <{concat_dimension = 0 : i64, split_count = 4 : i64, '
                  'split_dimension = 0 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> : '
                  '(tensor<8xf32>) -> tensor<8xf32>')
    mlir = STABLE.replace("CALLEE", "inner").replace("RECURSE", all_to_all)
    with pytest.raises(P2Error, match="m.mlir:12: all_to_all is not a reduction"):
        parse_module(mlir, "m.mlir")
    text = MODULE.replace("ROOT %s = f32[] add(f32[] %a, f32[] %b)",
                          "ROOT %s = f32[] all-reduce(%a), replica_groups={}, to_apply=%add").replace("BODY", "")
    with pytest.raises(P2Error, match="not in the entry computation"):
        parse_hlo_text(text)
    path = tmp_path / "bad.hlo"
    path.write_text(module("  ROOT %x = f32[8]{0} all-to-all(%p), channel_id=1, replica_groups={}"))
    assert main(["verify", *ALL, "--hlo", str(path)]) == 2
    assert "all-to-all is not a reduction collective" in capsys.readouterr().err


def test_device_count_must_match():
    with pytest.raises(P2Error, match="4 devices"):
        hlo_plan(parse_hlo_text(module("  ROOT %ar = f32[8]{0} all-reduce(%p), replica_groups={}, to_apply=%add")), 16)


def test_a_reduction_must_name_its_sum():
    with pytest.raises(P2Error, match="names no reduction computation"):
        parse_hlo_text(module("  ROOT %ar = f32[8]{0} all-reduce(%p), replica_groups={}"))
    text = module("  ROOT %ar = f32[8]{0} all-reduce(%p), replica_groups={}, to_apply=%add").replace(
        "add(f32[] %a, f32[] %b)", "multiply(f32[] %a, f32[] %b)")
    with pytest.raises(P2Error, match=r"<hlo>:9: all-reduce reduces with multiply \(to_apply=%add\)"):
        parse_hlo_text(text)


def test_collectives_must_form_one_chain_on_one_buffer():
    """A collective reads its predecessor's result alone, through ops that keep values and positions."""
    chained = module("  %a = f32[8]{0} all-reduce(%p), replica_groups={{0,1},{2,3}}, to_apply=%add\n"
                     "  %n = f32[8]{0} copy(f32[8]{0} %a)\n"
                     "  ROOT %b = f32[8]{0} all-reduce(%n), replica_groups={{0,2},{1,3}}, to_apply=%add")
    assert len(parse_hlo_text(chained).collectives) == 2
    with pytest.raises(P2Error, match="<hlo>:11: the chain of collectives through the all-reduce at line 11 "
                                      "differs from the chain through the all-reduce at line 9 \\(step 1\\)"):
        parse_hlo_text(chained.replace("all-reduce(%n)", "all-reduce(%p)"))
    with pytest.raises(P2Error, match="reads the result of the all-reduce at line 9 through negate"):
        parse_hlo_text(chained.replace("copy(", "negate("))
    with pytest.raises(P2Error, match="combined with the module's input"):
        parse_hlo_text(chained.replace("copy(f32[8]{0} %a)", "add(f32[8]{0} %a, f32[8]{0} %p)"))


def test_the_same_chain_on_several_buffers_is_one_program_and_a_fork_is_refused():
    """A psum of a pytree without XLA's combiner: one chain per leaf, each the same program, proved once.
    Chains that differ, or one that stops short, name the step where they part; a result read by two
    collectives (a fork) is refused."""
    first = ("  %a = f32[8]{0} all-reduce(%p), replica_groups={{0,1},{2,3}}, to_apply=%add\n"
             "  %q = f32[8]{0} negate(f32[8]{0} %p)\n"
             "  %b = f32[8]{0} all-reduce(%q), replica_groups={{0,1},{2,3}}, to_apply=%add\n")  # two buffers, step 1
    two = module(first +
                 "  %c = f32[8]{0} all-reduce(%a), replica_groups={{0,2},{1,3}}, to_apply=%add\n"
                 "  %d = f32[8]{0} all-reduce(%b), replica_groups={{0,2},{1,3}}, to_apply=%add\n"
                 "  ROOT %e = (f32[8]{0}, f32[8]{0}) tuple(%c, %d)")
    prog = parse_hlo_text(two)
    assert (prog.buffers, [c.line for c in prog.collectives]) == (2, [9, 12])
    assert prog.to_json()["buffers"] == 2
    with pytest.raises(P2Error, match="<hlo>:13: the chain of collectives through the all-reduce at line 13 "
                                      "differs from the chain through the all-reduce at line 12 \\(step 2\\)"):
        parse_hlo_text(two.replace("%d = f32[8]{0} all-reduce(%b), replica_groups={{0,2},{1,3}}",
                                   "%d = f32[8]{0} all-reduce(%b), replica_groups={{0,1,2,3}}"))
    with pytest.raises(P2Error, match="<hlo>:11: the chain of collectives through the all-reduce at line 11 "
                                      "differs from the chain through the all-reduce at line 12 \\(step 2\\)"):
        parse_hlo_text(two.replace("all-reduce(%b), replica_groups", "negate(%b), replica_groups"))
    with pytest.raises(P2Error, match="<hlo>:13: all-reduce reads the result of the all-reduce at line 9, which "
                                      "the all-reduce at line 12 reads too"):
        parse_hlo_text(two.replace("all-reduce(%b)", "all-reduce(%a)"))
    # XLA's combiner merges the second step into one all-reduce of both buffers: each buffer's chain goes on
    merged = module(first +
                    "  %t = (f32[8]{0}, f32[8]{0}) all-reduce(%a, %b), replica_groups={{0,2},{1,3}}, to_apply=%add\n"
                    "  %c = f32[8]{0} get-tuple-element(%t), index=1\n"
                    "  %d = f32[8]{0} get-tuple-element(%t), index=0\n"
                    "  ROOT %e = (f32[8]{0}, f32[8]{0}) tuple(%c, %d)")
    prog = parse_hlo_text(merged)
    assert (prog.buffers, [c.line for c in prog.collectives]) == (2, [9, 12])
    with pytest.raises(P2Error, match="<hlo>:16: all-reduce reads the result of the all-reduce at line 12 combined "
                                      "with another buffer of the all-reduce at line 12"):
        parse_hlo_text(merged.replace("ROOT %e = (f32[8]{0}, f32[8]{0}) tuple(%c, %d)",
                                      "%s = f32[8]{0} add(%c, %d)\n"
                                      "  ROOT %f = f32[8]{0} all-reduce(%s), replica_groups={}, to_apply=%add"))


def test_a_partial_result_that_reaches_the_output_is_refused():
    """psum(psum(x, a), b) returned beside psum(x, a): the first result escapes unreduced."""
    text = module("  %a = f32[8]{0} all-reduce(%p), replica_groups={{0,1},{2,3}}, to_apply=%add\n"
                  "  %b = f32[8]{0} all-reduce(%a), replica_groups={{0,2},{1,3}}, to_apply=%add\n"
                  "  ROOT %t = (f32[8]{0}, f32[8]{0}) tuple(%b, %a)")
    with pytest.raises(P2Error, match="<hlo>:9: the result of the all-reduce at line 9 \\(step 1 of 2 of its chain\\) "
                                      "reaches the module's output without the later steps"):
        parse_hlo_text(text)
    assert len(parse_hlo_text(text.replace("tuple(%b, %a)", "tuple(%b, %p)")).collectives) == 2


def test_values_the_readers_cannot_trace_are_refused_not_taken_for_input():
    """An instruction or statement in a form the reader does not know, or a name never defined, would cut a
    chain in two that then look like the same program on two buffers: refused."""
    text = module("  %a = f32[8]{0} all-reduce(%p), replica_groups={{0,1},{2,3}}, to_apply=%add\n"
                  "  %n = f32[8]{0} copy(f32[8]{0} %a)\n"
                  "  ROOT %b = f32[8]{0} all-reduce(%n), replica_groups={{0,2},{1,3}}, to_apply=%add")
    literals = text.replace("  %n = ", "  %k = pred[] constant(false)\n  %m = f32[] constant(-inf)\n  %n = ")
    assert len(parse_hlo_text(literals).collectives) == 2  # a constant's literal names no operand
    with pytest.raises(P2Error, match="<hlo>:10: a line p2smt cannot read as an instruction"):
        parse_hlo_text(text.replace("copy(f32[8]{0} %a)", "copy f32[8]{0} %a"))
    mlir = (HLO / "two-allreduce.mlir").read_text()
    second = '%2 = "stablehlo.all_reduce"(%1)'
    assert second in mlir
    with pytest.raises(P2Error, match="<hlo>:10:35: use of undeclared SSA value name"):  # MLIR's own parser
        parse_module(mlir.replace(second, '%2 = "stablehlo.all_reduce"(%nope)'))
    dollar = mlir.replace(second, '%v$1 = stablehlo.reshape %1 : (tensor<16xf32>) -> tensor<16xf32>\n'
                                  '      %2 = "stablehlo.all_reduce"(%v$1)')
    assert len(parse_module(dollar).collectives) == 2  # MLIR names may hold '$'
    # a value named like a property is no property: without the flag, the groups are not global ids
    named = mlir.replace("%arg1", "%use_global_device_ids").replace(", use_global_device_ids}>", "}>")
    assert {c.mode.value for c in parse_module(named).collectives} == {"cross_replica_and_partition"}
    with pytest.raises(P2Error, match=":10:11: expected operation name in quotes"):
        parse_module(mlir.replace(second, '%v = (%1)\n      %2 = "stablehlo.all_reduce"(%v)'))
    # an optimization barrier over both buffers between the steps gives each its own operand back
    pytree = (HLO / "pytree-two-steps.mlir").read_text()
    step2 = ('%5 = "stablehlo.all_reduce"(%3)', '%6 = "stablehlo.all_reduce"(%4)')
    assert all(text in pytree for text in step2)
    barrier = pytree.replace(step2[0], '%b:2 = stablehlo.optimization_barrier %3, %4 : tensor<16xf32>, tensor<16xf32>\n'
                                       '      %5 = "stablehlo.all_reduce"(%b#0)').replace(step2[1], '%6 = "stablehlo.all_reduce"(%b#1)')
    assert parse_module(barrier).buffers == 2  # was refused: the barrier's results read as both buffers combined
    twice = (HLO / "call-twice.mlir").read_text()
    call = "%2 = func.call @psum_all(%1)"
    assert call in twice
    with pytest.raises(P2Error, match=":6: stablehlo.custom_call names @psum_all, which runs the all_reduce at line"):
        parse_module(twice.replace(call, '%2 = stablehlo.custom_call @foo(%1) {called_computations = [@psum_all]}'))


HANDWRITTEN = {
    "add-one-parameter-twice.hlo": "reduces with an add that is not of its two parameters",
    "add-one-argument-twice.mlir": "reduces with an add that is not of its region's two arguments",
    "async-wrapper-doubles.hlo": "add in the async computation %wrapped beside its collective",
    "use-before-definition.hlo": "operand %m is not defined before it",
    "nested-operand.hlo": "an operand written as an instruction (negate(…))",
    "fusion-swaps-tuple.hlo": "combined with the module's input",
    "all-gather-start-operand.hlo": "reads a value p2smt cannot trace",
    "operands-on-next-line.hlo": "an instruction whose operands go on past its line",
    "quote-in-comment.hlo": "(step 1 of 2 of its chain) reaches the module's output",
    "async-start-operand-returned.hlo": "the module's output holds a value p2smt cannot trace",
    "copy-start-source.hlo": "(step 1 of 2 of its chain) reaches the module's output",
    "statement-on-two-lines.mlir": "(step 1 of 2 of its chain) reaches the module's output",
    "two-statements-a-line.mlir": "(step 1 of 2 of its chain) reaches the module's output",
    "decoy-to-apply-in-backend-config.hlo": "reduces with maximum (to_apply=%mx)",
    "decoy-calls-in-backend-config.hlo": "through fusion, which changes values",
    "decoy-index-in-backend-config.hlo": "reaches the module's output",
    "decoy-decomposition-in-attributes.mlir": "through negate, which changes values",
    "unreachable-block.mlir": "a second block in a region",
    "nested-module-main.mlir": "a module inside the module",
    "while-runs-a-called-collective.hlo": "while runs %wbody, which runs a collective",
}
"""Modules written by hand (XLA parses them) that a second review found PROVED while wrong: a combiner adding one
argument twice, an async computation computing beside its collective, a use before its definition, an operand
written as an instruction, a fusion that swaps a tuple's partial sum and input, and the operand element of an
all-gather-start taken for its result; then (a third review) operands on the next line, a quote inside a
comment read before the comment, the operand of an async start returned, a copy-start's source element, a
statement on two lines and two on one (read by MLIR's parser since, each returns a partial sum); then (a fourth) attributes read inside backend_config={…} or a
nested attribute dictionary instead of at the top level, an unreachable block, a module inside the module."""


def test_handwritten_modules_a_review_found_proved_wrongly_are_refused(tmp_path, capsys):
    folder = HLO / "handwritten"
    for name, words in HANDWRITTEN.items():
        with pytest.raises(P2Error) as err:
            parse_module((folder / name).read_text(), name)
        assert words in str(err.value), (name, str(err.value))
    # a step inside a /* … */ comment over several lines does not run: one step, which misses the goal
    assert len(parse_module((folder / "step-in-block-comment.hlo").read_text()).collectives) == 1
    # groups read at the top level, not from a decoy in backend_config or in a longer property's name
    for name in ("decoy-groups-in-backend-config.hlo", "decoy-groups-property.mlir"):
        assert [len(g) for g in parse_module((folder / name).read_text()).collectives[0].groups] == [4] * 4, name
    # a sharding constraint inside the reduction region (a nested shard_map) is still a sum: proved
    order = mesh_order(tmp_path, capsys, "16", "[[4,4]]")
    rc, out = verify([*ALL, "--hlo", str(folder / "nested-manual-constraint-in-region.mlir"), "--device-order",
                      order], capsys)
    assert (rc, out["status"], out["steps"]) == (0, "proved", 2)


def test_xla_mesh_form_with_device_ids_is_read_as_xla_partitioned_it():
    """jnp.sum over mesh axes p and r of a (p 2, q 2, r 4) mesh: devices p*8+q*4+r with one q sum together."""
    prog = parse_hlo_text((HLO / "sum-pr.hlo").read_text())
    assert [c.groups for c in prog.collectives] == [((0, 1, 2, 3, 8, 9, 10, 11), (4, 5, 6, 7, 12, 13, 14, 15))]
    from p2smt.model.replica_groups import parse_groups_text

    assert parse_groups_text("mesh['a'=8,'b'=1,'c'=2], device_ids=([2,8]T(1,0)) {'a'}") == (
        tuple(range(8)), tuple(range(8, 16)))
    with pytest.raises(P2Error, match="sub-axes"):
        parse_groups_text("mesh['a'=4,'b'=4] {'a':(1)2}")
    with pytest.raises(P2Error, match="each of the mesh's 16 devices once"):
        parse_groups_text("mesh['a'=4,'b'=4], device_ids=([2,4]) {'a'}")


def test_check_hlo_uses_positions(tmp_path, capsys):
    assert main(["check", *ALL, "--hlo", str(HLO / "blueconnect.hlo"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["positions"]["valid"]


@pytest.mark.skipif(os.environ.get("P2SMT_SKIP_JAX") == "1", reason="JAX run disabled")
def test_jax_compiles_here_and_its_hlo_verifies(tmp_path, capsys):
    """Real JAX on 16 CPU devices, now: compile the fixtures' functions again and verify what XLA printed."""
    out = tmp_path / "hlo"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    subprocess.run([sys.executable, str(HLO / "generate.py"), str(out)], check=True, env=env, timeout=600)
    check_fixtures(out, tmp_path, capsys)


@pytest.mark.skipif(os.environ.get("P2SMT_SKIP_JAX") == "1", reason="JAX run disabled")
def test_the_printed_jax_mesh_runs_and_orders_the_devices_as_its_json(tmp_path, capsys):
    """``placements --export jax-mesh`` prints code that runs as printed (unwrapped, however long), and its
    mesh holds the devices in the order the JSON form gives ``verify --device-order``."""
    argv = ["placements", *SYSTEM, "--axes", "4,4", "--matrix", "[[2,2],[2,2]]", "--export", "jax-mesh",
            "--axis-names", "dp,tp"]
    assert main([*argv, "--json"]) == 0
    order = json.loads(capsys.readouterr().out)["device_order"]
    assert main(argv) == 0
    code = capsys.readouterr().out
    script = tmp_path / "mesh.py"
    script.write_text(code + "\nprint([d.id for d in mesh.devices.flat], mesh.axis_names)\n")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=16", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, str(script)], check=False, capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{order} ('dp', 'tp')"
    assert order != sorted(order)  # the placement interleaves the levels: the order matters


STABLE = """module @m attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
    %0 = func.call @CALLEE(%arg0) : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
  func.func private @inner(%arg0: tensor<8xf32>) -> tensor<8xf32> {
    %0 = "stablehlo.all_reduce"(%arg0) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
    ^bb0(%arg1: tensor<f32>, %arg2: tensor<f32>):
      %1 = stablehlo.add %arg1, %arg2 : tensor<f32>
      stablehlo.return %1 : tensor<f32>
    }) : (tensor<8xf32>) -> tensor<8xf32>
    RECURSE
    return %0 : tensor<8xf32>
  }
}
"""


def test_stablehlo_calls_are_run_and_bad_calls_refused():
    def read(callee: str, recurse: str = "") -> list:
        return list(parse_module(STABLE.replace("CALLEE", callee).replace("RECURSE", recurse), "m.mlir").collectives)

    assert [c.line for c in read("inner")] == [7]
    with pytest.raises(P2Error, match=r"m.mlir:3:10: 'func.call' op 'nowhere' does not reference a valid function"):
        read("nowhere")
    with pytest.raises(P2Error, match="@inner calls itself"):
        read("inner", "%2 = func.call @inner(%0) : (tensor<8xf32>) -> tensor<8xf32>")
    two = STABLE.replace("CALLEE", "inner").replace("RECURSE", "").replace("@main", "@first").replace(
        "private @inner", "public @inner")
    with pytest.raises(P2Error, match="no @main and 2 public functions"):
        parse_module(two)


def test_between_collectives_only_ops_that_keep_values_in_place():
    """A narrowing convert rounds, a bitcast across layouts transposes, a reshape moves what lies along a
    dimension other than 0: each, between two collectives, is refused."""
    first = "  %a = f32[8]{0} all-reduce(%p), replica_groups={{0,1},{2,3}}, to_apply=%add\n"
    last = "  ROOT %b = f32[8]{0} all-reduce(%y), replica_groups={{0,2},{1,3}}, to_apply=%add"
    rounds = "  %x = bf16[8]{0} convert(f32[8]{0} %a)\n  %y = f32[8]{0} convert(bf16[8]{0} %x)\n"
    with pytest.raises(P2Error, match="through convert"):
        parse_hlo_text(module(first + rounds + last))
    moves = "  %x = f32[2,4]{0,1} bitcast(f32[8]{0} %a)\n  %y = f32[8]{0} bitcast(f32[2,4]{0,1} %x)\n"
    with pytest.raises(P2Error, match="through bitcast"):
        parse_hlo_text(module(first + moves + last))
    row_major = moves.replace("{0,1}", "{1,0}")
    assert len(parse_hlo_text(module(first + row_major + last)).collectives) == 2
    along_1 = module(
        "  %q = f32[2,4]{1,0} reshape(f32[8]{0} %p)\n"
        "  %r = f32[2,2]{1,0} reduce-scatter(%q), replica_groups={{0,1},{2,3}}, dimensions={1}, to_apply=%add\n"
        "  %s = f32[4,1]{1,0} reshape(f32[2,2]{1,0} %r)\n"
        "  ROOT %g = f32[4,2]{1,0} all-gather(%s), replica_groups={{0,1},{2,3}}, dimensions={1}")
    with pytest.raises(P2Error, match="keeps positions along dimension 0 only"):
        parse_hlo_text(along_1)


def test_a_named_computation_runs_in_line_like_a_call(tmp_path, capsys):
    """sdy.named_computation is a named call (its region runs once, on its operands): the psum inside it is the
    first step of the chain; run twice (a second psum over gpu inside it), the double count is refuted."""
    path = HLO / "handwritten" / "named-computation.mlir"
    order = mesh_order(tmp_path, capsys, "16", "[[4,4]]")
    rc, out = verify([*ALL, "--hlo", str(path), "--device-order", order], capsys)
    assert (rc, out["status"], out["steps"]) == (0, "proved", 2)
    text = path.read_text()
    twice = tmp_path / "twice.mlir"
    twice.write_text(text.replace("[[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]",
                                  "[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]"))
    rc, out = verify([*ALL, "--hlo", str(twice), "--device-order", order], capsys)
    assert rc == 1 and out["status"] != "proved"


STEPS = ("", "-unpartitioned")
"""Suffixes of generate_steps.py's HLO: compiled, and printed before partitioning."""


@pytest.mark.parametrize(("name", "steps"), [("gather-untiled", 3), ("bf16-two-psums", 2)])
@pytest.mark.parametrize("suffix", [".mlir", ".hlo", "-unpartitioned.hlo"])
def test_correct_steps_refused_before_are_proved(name, steps, suffix, tmp_path, capsys):
    """JAX's default all_gather(tiled=False) (a broadcast_in_dim adding the gathered dimension, then a reshape),
    and bf16 psums XLA promotes to f32 all-reduces with a convert to bf16 and back between them (each step is
    widen, sum, narrow back: the bf16 all-reduce computed wider): both are sums over the 16 devices."""
    order = mesh_order(tmp_path, capsys, "16", "[[4,4]]")
    rc, out = verify([*ALL, "--hlo", str(HLO / f"{name}{suffix}"), "--device-order", order], capsys)
    assert (rc, out["status"], out["steps"]) == (0, "proved", steps)


@pytest.mark.parametrize("suffix", [".mlir", ".hlo", "-unpartitioned.hlo"])
def test_a_rounding_between_steps_stays_refused(suffix, capsys):
    """f32 psums with a cast to bf16 and back between them: narrowing then widening rounds the partial sums."""
    assert main(["verify", *ALL, "--hlo", str(HLO / f"f32-rounded-between{suffix}")]) == 2
    assert "through convert" in capsys.readouterr().err


def test_a_sharding_annotation_inside_a_combiner_is_read_as_the_compiled_module():
    """A shard_map manual over one axis: before partitioning (HLO custom-call "Sharding", GSPMD's StableHLO
    custom_call @Sharding, Shardy's StableHLO) the combiners hold a sharding annotation; each reads as the
    collectives XLA compiled."""
    def steps(name: str) -> list:
        return [(c.collective, c.groups, c.dimension) for c in parse_module((HLO / name).read_text(), name).collectives]

    compiled = steps("partial-manual.hlo")
    assert [c[0] for c in compiled] == [Collective.REDUCE_SCATTER, Collective.ALL_GATHER]
    for name in ("partial-manual-unpartitioned.hlo", "partial-manual-gspmd.mlir", "partial-manual.mlir"):
        assert steps(name) == compiled, name
    text = (HLO / "partial-manual-unpartitioned.hlo").read_text()
    assert 'custom_call_target="Sharding"' in text.split("ENTRY")[0]
    # another custom call in the combiner, or the target only in a string elsewhere, is no annotation
    for fake in ('custom_call_target="Other"', 'custom_call_target="Other", metadata={op_name="custom_call_target=\\"Sharding\\""}'):
        with pytest.raises(P2Error, match="reduces with custom-call"):
            parse_module(text.replace('custom_call_target="Sharding"', fake, 1), "m")


ADD = {t: f"""%add_{t} (a: {t}[], b: {t}[]) -> {t}[] {{
  %a = {t}[] parameter(0)
  %b = {t}[] parameter(1)
  ROOT %s = {t}[] add({t}[] %a, {t}[] %b)
}}
""" for t in ("f32", "s32", "f16", "f64")}


def _converts(narrow: str, wide: str, between: list[str]) -> str:
    """Two all-reduces on ``wide`` values of a ``narrow`` input, with converts through ``between`` types."""
    lines, last, t = [f"  %w = {wide}[8]{{0}} convert({narrow}[8]{{0}} %p)"], "%w", wide
    lines.append(f"  %a = {wide}[8]{{0}} all-reduce(%w), replica_groups={{{{0,1}},{{2,3}}}}, to_apply=%add_{wide}")
    last = "%a"
    for k, u in enumerate(between):
        lines.append(f"  %c{k} = {u}[8]{{0}} convert({t}[8]{{0}} {last})")
        last, t = f"%c{k}", u
    lines.append(f"  ROOT %b = {t}[8]{{0}} all-reduce({last}), replica_groups={{{{0,2}},{{1,3}}}}, to_apply=%add_{t}")
    return "HloModule m, num_partitions=4\n" + ADD[wide] + (ADD[t] if t != wide else "") + \
        f"ENTRY %main (p: {narrow}[8]) -> {t}[8] {{\n  %p = {narrow}[8]{{0}} parameter(0)\n" + "\n".join(lines) + "\n}\n"


@pytest.mark.parametrize(("narrow", "wide", "between", "kept"), [
    ("bf16", "f32", ["bf16", "f32"], True),  # XLA's promotion: narrow back the widened sum, widen again
    ("s8", "s32", ["s8", "s32"], True),  # integers wrap alike whichever width sums them
    ("f16", "f32", ["f64"], True),  # an exact widening
    ("f32", "f32", ["bf16", "f32"], False),  # narrowing then widening a value never widened: rounds
    ("f16", "f32", ["bf16", "f32"], False),  # back to another type than it was widened from
    ("s8", "f32", ["s8", "f32"], False),  # integers summed as floats, converted back: may not fit
    ("s32", "s32", ["f32"], False),  # s32 to f32 rounds
])
def test_converts_between_steps_keep_a_value_only_when_provably_exact(narrow, wide, between, kept):
    text = _converts(narrow, wide, between)
    if kept:
        assert len(parse_hlo_text(text).collectives) == 2
    else:
        with pytest.raises(P2Error, match="through convert"):
            parse_hlo_text(text)


def _gathered(broadcast: str) -> str:
    return f"""module @m attributes {{mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32}} {{
  func.func public @main(%arg0: tensor<8xf32>) -> tensor<16xf32> {{
    %0 = "stablehlo.reduce_scatter"(%arg0) <{{replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>, scatter_dimension = 0 : i64}}> ({{
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }}) : (tensor<8xf32>) -> tensor<4xf32>
    {broadcast}
    %2 = "stablehlo.all_gather"(%1) <{{all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>}}> : (tensor<1x4xf32>) -> tensor<2x4xf32>
    %3 = stablehlo.reshape %2 : (tensor<2x4xf32>) -> tensor<8xf32>
    %4 = stablehlo.concatenate %3, %3, dim = 0 : (tensor<8xf32>, tensor<8xf32>) -> tensor<16xf32>
    return %4 : tensor<16xf32>
  }}
}}
"""


def test_only_a_broadcast_that_adds_unit_dimensions_is_a_reshape():
    unit = "%1 = stablehlo.broadcast_in_dim %0, dims = [1] : (tensor<4xf32>) -> tensor<1x4xf32>"
    assert len(parse_module(_gathered(unit), "m.mlir").collectives) == 2
    spread = ("%r = stablehlo.slice %0 [0:1] : (tensor<4xf32>) -> tensor<1xf32>\n"
              "    %1 = stablehlo.broadcast_in_dim %r, dims = [0] : (tensor<1xf32>) -> tensor<1x4xf32>")
    with pytest.raises(P2Error, match="through slice|through broadcast_in_dim"):
        parse_module(_gathered(spread), "m.mlir")
    copies = ("%r = stablehlo.slice %0 [0:1] : (tensor<4xf32>) -> tensor<1xf32>\n"
              "    %1 = stablehlo.broadcast_in_dim %r, dims = [1] : (tensor<1xf32>) -> tensor<1x4xf32>")
    with pytest.raises(P2Error, match="through"):
        parse_module(_gathered(copies), "m.mlir")
    square = _gathered(unit).replace("tensor<8xf32>) -> tensor<4xf32>", "tensor<8xf32>) -> tensor<4xf32>\n    %q = "
                                      "stablehlo.reshape %0 : (tensor<4xf32>) -> tensor<2x2xf32>")
    turned = square.replace(unit, "%t = stablehlo.broadcast_in_dim %q, dims = [1, 0] : (tensor<2x2xf32>) -> "
                                  "tensor<2x2xf32>\n    %1 = stablehlo.reshape %t : (tensor<2x2xf32>) -> tensor<1x4xf32>")
    with pytest.raises(P2Error, match="through broadcast_in_dim"):  # dims out of order: a transpose
        parse_module(turned, "m.mlir")


NUMBERS = """
import importlib.util, sys
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh
spec = importlib.util.spec_from_file_location("generate_steps", sys.argv[1])
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)
mesh = Mesh(np.array(jax.devices()).reshape(4, 4), gen.AXES)
steps = gen.steps(mesh)
def run(name, *args):
    fn, _ = steps[name]
    with jax.set_mesh(mesh):
        return np.asarray(jax.jit(fn)(*args), np.float64)
x = np.arange(256) % 8  # small integers: every sum exact, in bf16 too
total = np.tile(x.reshape(16, 16).sum(0), 16)
assert (run("gather-untiled", jnp.asarray(x, jnp.float32)) == total).all()
assert (run("bf16-two-psums", jnp.asarray(x, jnp.bfloat16)) == total).all()
assert (run("fori-psum", jnp.asarray(x, jnp.float32)) == 16 * total).all()  # the 2nd and 3rd psum: 4 times each
y = np.arange(1024) % 8
assert (run("partial-manual", jnp.asarray(y, jnp.float32)) == np.tile(y.reshape(4, 256).sum(0), 4)).all()
ws = jnp.asarray(np.random.default_rng(0).normal(size=(3, 8, 8)) / 4, jnp.float32)
h0 = jnp.asarray(np.random.default_rng(1).normal(size=(8, 8)), jnp.float32)
def loss(ws):
    h = h0
    for w in ws:
        h = jnp.tanh(h @ w)
    return jnp.sum(h)
assert np.allclose(run("scan-mlp", ws, h0), 4 * np.asarray(jax.grad(loss)(ws)), atol=1e-4)
print("ok")
"""


@pytest.mark.skipif(os.environ.get("P2SMT_SKIP_JAX") == "1", reason="JAX run disabled")
def test_the_step_fixtures_compute_what_their_verdicts_say(tmp_path):
    """generate_steps.py's functions run on 16 CPU devices on small integers: the untiled gather, the bf16
    psums and the partially manual scatter-gather are the sums proved above; the fori_loop's psum runs 3 times
    (the second and the third multiply by the 4 tensor devices, then over data); the scanned MLP's step is the gradient of the unsharded
    MLP's loss as each of the 16 devices computes it (each data shard's on its 4 tensor devices: 4 times)."""
    script = tmp_path / "step_numbers.py"  # not numbers.py: the script would shadow the standard library module
    script.write_text(NUMBERS)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=16", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, str(script), str(HLO / "generate_steps.py")], check=False,
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
