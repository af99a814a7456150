"""The split reading of XLA modules (for the audit): every chain kept with what it starts from, unverified
communication recorded, sizes and the Shardy mesh read; the verify reading's refusals replayed by program()."""

from __future__ import annotations

from pathlib import Path

import pytest

from p2smt.errors import P2Error
from p2smt.frontend.hlo import parse_module, read_module
from p2smt.frontend.hlo_program import ChainStart

HLO = Path(__file__).parent / "data" / "hlo"
FILES = sorted(p for p in HLO.rglob("*") if p.suffix in (".hlo", ".mlir"))


def chains(path: Path):
    reading = read_module(path.read_text(), path.name, split=True)
    return [(c.steps, c.start, c.sources, c.with_input, c.escapes) for c in reading.chains]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_program_of_a_split_reading_is_the_verify_reading(path):
    text = path.read_text()
    try:
        expected = parse_module(text, path.name).to_json()
    except P2Error as err:
        expected = str(err)
    try:
        reading = read_module(text, path.name, split=True)
    except P2Error as err:  # a refusal about reading: the verify path refuses it in the same words
        assert str(err) == expected
        return
    try:
        got = reading.program().to_json()
    except P2Error as err:
        got = str(err)
    assert got == expected


@pytest.mark.parametrize("suffix", [".hlo", ".mlir"])
def test_modules_verify_refuses_for_their_shape_are_split_into_chains(suffix):
    one = (ChainStart.INPUT, (), False, ())
    assert chains(HLO / f"independent{suffix}") == [((0,), *one), ((1,), *one)]
    assert chains(HLO / f"mixed-with-input{suffix}") == [((0,), *one), ((1,), ChainStart.COMPUTED, (0,), True, ())]
    assert chains(HLO / f"reversed-between{suffix}") == [((0, 1), *one), ((2,), ChainStart.COMPUTED, (1,), False, ())]
    assert chains(HLO / f"return-intermediate{suffix}") == [((0, 1), ChainStart.INPUT, (), False, (0,))]
    assert chains(HLO / f"tuple-partial{suffix}") == [((0, 2), *one), ((1,), *one)]


@pytest.mark.parametrize("name", ["psum-pmax.mlir",
                                  "handwritten/unreachable-block.mlir", "handwritten/nested-module-main.mlir",
                                  "handwritten/use-before-definition.hlo", "handwritten/async-start-operand-returned.hlo"])
def test_refusals_about_reading_stay_refusals(name):
    with pytest.raises(P2Error):
        read_module((HLO / name).read_text(), name, split=True)


def test_sizes_and_mesh_are_read():
    for suffix in (".hlo", ".mlir"):
        reading = read_module((HLO / f"rs-ar-ag{suffix}").read_text(), "m", split=True)
        assert [(c.shape, c.element_type, c.bytes, c.result_bytes) for c in reading.collectives] == [
            ((16,), "f32", 64, 16), ((4,), "f32", 16, 16), ((4,), "f32", 16, 64)]
    for name in ("rs-ar-ag.mlir", "blueconnect-unpartitioned.hlo"):
        mesh = read_module((HLO / name).read_text(), name, split=True).mesh
        assert (mesh.name, mesh.axes, mesh.device_ids) == ("mesh", (("node", 4), ("gpu", 4)), tuple(range(16)))
    assert read_module((HLO / "rs-ar-ag.hlo").read_text(), "m", split=True).mesh is None


HLO_PERMUTE = """HloModule m, num_partitions=4
%add (a: bf16[], b: bf16[]) -> bf16[] {
  %a = bf16[] parameter(0)
  %b = bf16[] parameter(1)
  ROOT %s = bf16[] add(bf16[] %a, bf16[] %b)
}
ENTRY %main (p: bf16[8]) -> (bf16[8], bf16[8]) {
  %p = bf16[8]{0} parameter(0)
  %ar = bf16[8]{0} all-reduce(%p), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=%add
  %cp = bf16[8]{0} collective-permute(%ar), channel_id=2, source_target_pairs={{0,1},{1,0},{2,3},{3,2}}
  %ar2 = bf16[8]{0} all-reduce(%cp), channel_id=3, replica_groups={{0,2},{1,3}}, use_global_device_ids=true, to_apply=%add
  %ar3 = bf16[8]{0} all-reduce(%ar), channel_id=4, replica_groups={{0,2},{1,3}}, use_global_device_ids=true, to_apply=%add
  ROOT %t = (bf16[8]{0}, bf16[8]{0}) tuple(%ar2, %ar3)
}
"""

_AR = """"stablehlo.all_reduce"(ARG) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<GROUPS> : tensor<2x2xi64>, use_global_device_ids}> ({
    ^bb0(%a: tensor<bf16>, %b: tensor<bf16>):
      %s = stablehlo.add %a, %b : tensor<bf16>
      stablehlo.return %s : tensor<bf16>
    }) : (tensor<8xbf16>) -> tensor<8xbf16>"""
MLIR_PERMUTE = """module @m attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["a"=2, "b"=2], device_ids=[0, 2, 1, 3]>
  func.func public @main(%arg0: tensor<8xbf16>) -> (tensor<8xbf16>, tensor<8xbf16>) {
    %0 = AR0
    %1 = "stablehlo.collective_permute"(%0) <{channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, source_target_pairs = dense<[[0, 1], [1, 0], [2, 3], [3, 2]]> : tensor<4x2xi64>}> : (tensor<8xbf16>) -> tensor<8xbf16>
    %2 = AR1
    %3 = AR2
    return %2, %3 : tensor<8xbf16>, tensor<8xbf16>
  }
}
""".replace("AR0", _AR.replace("ARG", "%arg0").replace("GROUPS", "[[0, 1], [2, 3]]")).replace(
    "AR1", _AR.replace("ARG", "%1").replace("GROUPS", "[[0, 2], [1, 3]]")).replace(
    "AR2", _AR.replace("ARG", "%0").replace("GROUPS", "[[0, 2], [1, 3]]"))


@pytest.mark.parametrize(("text", "op"), [(HLO_PERMUTE, "collective-permute"),
                                          (MLIR_PERMUTE, "collective_permute")])
def test_unverified_communication_is_recorded_and_what_it_gives_starts_a_chain(text, op):
    with pytest.raises(P2Error, match=f"{op} is not a reduction collective"):
        parse_module(text, "m")
    reading = read_module(text, "m", split=True)
    assert [o.op for o in reading.opaque] == [op]
    # the permute is no step: the all-reduce that reads the first one's result directly extends its chain
    assert [(c.steps, c.start, c.sources, c.opaque) for c in reading.chains] == [
        ((0, 2), ChainStart.INPUT, (), ()), ((1,), ChainStart.COMPUTED, (0,), (0,))]
    assert [(c.bytes, c.element_type) for c in reading.collectives] == [(16, "bf16")] * 3
    with pytest.raises(P2Error, match=f"{op} is not a reduction collective"):
        reading.program()
    if op.startswith("collective_"):
        assert reading.mesh.device_ids == (0, 2, 1, 3)


def test_a_fork_starts_a_chain_computed_from_its_branch_point():
    text = HLO_PERMUTE.replace("all-reduce(%cp)", "all-reduce(%ar)")
    with pytest.raises(P2Error, match="not a chain that forks"):
        parse_module(text.replace("  %cp = bf16[8]{0} collective-permute(%ar), channel_id=2, "
                                  "source_target_pairs={{0,1},{1,0},{2,3},{3,2}}\n", ""), "m")
    reading = read_module(text, "m", split=True)
    assert [(c.steps, c.start, c.sources) for c in reading.chains] == [
        ((0, 1), ChainStart.INPUT, ()), ((2,), ChainStart.COMPUTED, (0,))]


def test_sizes_of_async_starts_are_their_results_not_their_operand_tuples():
    text = HLO_PERMUTE.split("ENTRY")[0] + """ENTRY %main (p: bf16[8]) -> bf16[8] {
  %p = bf16[8]{0} parameter(0)
  %rs = bf16[4]{0} reduce-scatter(%p), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, dimensions={0}, to_apply=%add
  %ars = bf16[4]{0} all-reduce-start(%rs), channel_id=2, replica_groups={{0,2},{1,3}}, use_global_device_ids=true, to_apply=%add
  %ard = bf16[4]{0} all-reduce-done(%ars)
  %ags = (bf16[4]{0}, bf16[8]{0}) all-gather-start(%ard), channel_id=3, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  ROOT %agd = bf16[8]{0} all-gather-done(%ags)
}
"""
    reading = read_module(text, "m", split=True)
    assert [(c.op, c.shape, c.bytes, c.result_bytes) for c in reading.collectives] == [
        ("reduce-scatter", (8,), 16, 8), ("all-reduce-start", (4,), 8, 8), ("all-gather-start", (4,), 8, 16)]
    assert [c.steps for c in reading.chains] == [(0, 1, 2)]


COMPUTED = ChainStart.COMPUTED


@pytest.mark.parametrize("name", ["scan-mlp.mlir", "scan-mlp.hlo", "scan-mlp-unpartitioned.hlo"])
def test_a_scanned_training_step_runs_its_layer_psums_per_layer(name):
    """The gradient of a 3-layer MLP scanned over layers: the forward psum over 'tensor' and the backward psums
    over 'tensor' and 'data' run inside the loops, 3 times a step; each reads what an iteration computed from
    them (a chain of its own every iteration), and the psum over 'data' after the loops reads their result once.
    Compiled HLO gives XLA's known_trip_count; the other two the counted loop read from the condition, the
    increment and the start. (XLA orders the backward loop's two psums differently before partitioning.)"""
    reading = read_module((HLO / name).read_text(), name, split=True)
    tensor, data = tuple(range(4)), (0, 4, 8, 12)
    inside = [c for c in reading.chains if c.runs == 3]
    after = [c for c in reading.chains if c.runs == 1]
    assert len(inside) == 3 and len(after) == 1 and len(reading.chains) == 4
    assert all(len(c.steps) == 1 and c.start is COMPUTED and c.with_input for c in inside)
    first = [reading.collectives[c.steps[0]].groups[0] for c in inside]
    assert sorted(first) == sorted([tensor, tensor, data])
    assert reading.collectives[after[0].steps[0]].groups[0] == data
    assert after[0].start is COMPUTED and set(after[0].sources) <= {c.steps[0] for c in inside}
    assert reading.outputs[0].sources == frozenset(after[0].steps)
    with pytest.raises(P2Error, match="while|not in the entry computation"):  # the verify reading refuses loops
        reading.program()


@pytest.mark.parametrize("suffix", [".mlir", ".hlo", "-unpartitioned.hlo"])
def test_a_loop_carried_sum_starts_a_chain_each_iteration_and_the_loop_result_one_after_it(suffix):
    reading = read_module((HLO / f"fori-psum{suffix}").read_text(), "m", split=True)
    assert [(c.steps, c.start, c.sources, c.runs) for c in reading.chains] == [
        ((0,), COMPUTED, (0,), 3), ((1,), COMPUTED, (0,), 1)]
    assert reading.outputs[0].sources == frozenset({1})


@pytest.mark.parametrize("name", ["loop-psum.hlo", "loop-psum.mlir", "cond-psum.hlo", "cond-psum.mlir",
                                  "handwritten/while-runs-a-called-collective.hlo"])
def test_loops_and_branches_are_read_split_with_how_often_they_run(name):
    """fori_loop(0, 2, psum) runs its psum twice; a branch once or not at all (None); a while whose condition is
    a constant is no counted loop (None)."""
    reading = read_module((HLO / name).read_text(), name, split=True)
    runs = {"loop": 2, "cond": None, "hand": None}[name[:4]]
    assert reading.chains[-1].runs == runs
    with pytest.raises(P2Error):
        reading.program()


WHILE_MLIR = """module @m attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
    %c = stablehlo.constant dense<START> : tensor<i32>
    %0:2 = stablehlo.while(%i = %c, %v = %arg0) : tensor<i32>, tensor<8xf32>
    cond {
      %l = stablehlo.constant dense<LIMIT> : tensor<i32>
      %t = stablehlo.compare DIRECTION, %i, %l, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %t : tensor<i1>
    } do {
      %s = stablehlo.constant dense<STEP> : tensor<i32>
      %n = stablehlo.add %i, %s : tensor<i32>
      %r = "stablehlo.all_reduce"(%arg0) <{replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>}> ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %x = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %x : tensor<f32>
      }) : (tensor<8xf32>) -> tensor<8xf32>
      %w = "stablehlo.all_reduce"(%r) <{replica_groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64>}> ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %x = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %x : tensor<f32>
      }) : (tensor<8xf32>) -> tensor<8xf32>
      stablehlo.return %n, %w : tensor<i32>, tensor<8xf32>
    }
    return %0#1 : tensor<8xf32>
  }
}
"""


@pytest.mark.parametrize(("start", "limit", "step", "direction", "runs"), [
    (0, 5, 1, "LT", 5), (0, 5, 2, "LT", 3), (0, 5, 1, "LE", 6), (5, 0, -1, "GT", 5), (5, 0, -2, "GE", 3),
    (0, 6, 2, "NE", 3), (0, 5, 2, "NE", None), (0, 5, -1, "LT", None), (5, 0, 1, "LT", 0),
    (2147483640, 2147483647, 4, "LT", None), (-3, 2, 1, "LT", 5), (-3, 2, 1, "LT, UNSIGNED", None)])
def test_trip_counts_of_counted_loops(start, limit, step, direction, runs):
    """A chain inside a loop body reading the module's input runs the trip count times, its two steps one chain
    (the same iteration); a count that wraps around the integer type, or a loop that never ends, is None."""
    text = WHILE_MLIR.replace("START", str(start)).replace("LIMIT", str(limit)).replace("STEP", str(step)).replace(
        "DIRECTION", direction.split(", ")[0]).replace("SIGNED", direction.split(", ")[-1] if ", " in direction
                                                       else "SIGNED")
    reading = read_module(text, "m", split=True)
    assert [(c.steps, c.start, c.runs) for c in reading.chains] == [((0, 1), ChainStart.INPUT, runs)]


def test_known_trip_count_is_read_at_the_top_level_only():
    from p2smt.frontend.hlo import known_trip_count

    line = ('%w = (s32[], f32[8]{0}) while(%t), condition=%c, body=%b, backend_config={"known_trip_count":{"n":"7"}}')
    assert known_trip_count(line) == 7
    decoy = '%w = (s32[], f32[8]{0}) while(%t), condition=%c, body=%b, metadata={op_name="backend_config={\\"known'
    assert known_trip_count(decoy + '_trip_count\\":{\\"n\\":\\"7\\"}}"}') is None
    assert known_trip_count(line.replace("backend_config=", "/* x */ backend_config=").replace(
        ", backend", ' /* backend_config={"known_trip_count":{"n":"9"}} */, backend')) == 7
    assert known_trip_count(line + ', backend_config={"known_trip_count":{"n":"9"}}') is None


def test_a_collective_in_a_loop_condition_stays_refused():
    """A condition runs once more than the body: its collectives are not followed, split or not."""
    text = (HLO / "handwritten/while-runs-a-called-collective.hlo").read_text().replace(
        "condition=%wcond, body=%wbody", "condition=%wbody, body=%wcond")
    with pytest.raises(P2Error, match="which runs a collective, in a way p2smt does not follow"):
        read_module(text, "m", split=True)
    mlir = WHILE_MLIR.replace("START", "0").replace("LIMIT", "3").replace("STEP", "1").replace("DIRECTION", "LT")
    head, rest = mlir.split("    cond {\n")
    cond, body = rest.split("    } do {\n")
    moved = head + "    cond {\n" + body.split("      stablehlo.return %n")[0].replace("%n = stablehlo.add %i, %s : tensor<i32>", "") + \
        cond.split("      stablehlo.return")[0] + "      stablehlo.return %t : tensor<i1>\n    } do {\n      %s = stablehlo.constant " \
        "dense<1> : tensor<i32>\n      %n = stablehlo.add %i, %s : tensor<i32>\n      stablehlo.return %n, %v : " \
        "tensor<i32>, tensor<8xf32>\n    }\n" + rest.split("    }\n", 2)[-1].split("    }\n")[-1]
    with pytest.raises(P2Error, match="runs inside the stablehlo.while"):
        read_module(moved, "m", split=True)
