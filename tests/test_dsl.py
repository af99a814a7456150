"""The reduction DSL of docs/semantics.md §3: syntax, round trip, error positions, candidates and lowering."""

from __future__ import annotations

import dataclasses

import pytest

from p2smt.errors import P2Error, PlanSyntaxError
from p2smt.model.collectives import Collective, ExplicitStep
from p2smt.model.dsl import (
    Form,
    Instruction,
    Program,
    candidate_instructions,
    format_program,
    instruction_groups,
    lower_program,
    parse_explicit_plan,
    parse_program,
    problem,
    program_steps,
)
from p2smt.model.placement import Placement, matrices
from p2smt.model.system import load_system
from p2smt.semantics.dense import execute

# The four well-known programs of docs/semantics.md §3 on a two-level [root, node, gpu] hierarchy.
EXAMPLES = {
    "allreduce": "(root, InsideGroup, AllReduce)",
    "two-allreduce": "(node, InsideGroup, AllReduce); (node, Parallel(root), AllReduce)",
    "reduce-allreduce-broadcast": (
        "(node, InsideGroup, Reduce); (node, Master(root), AllReduce); (node, InsideGroup, Broadcast)"
    ),
    "rs-ar-ag": (
        "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); (node, InsideGroup, AllGather)"
    ),
}


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_parse_and_print_back(name):
    text = EXAMPLES[name]
    prog = parse_program(text)
    assert format_program(prog) == text
    assert str(prog) == text
    assert parse_program(format_program(prog)) == prog
    assert len(prog) == text.count(";") + 1


def test_parsed_structure():
    prog = parse_program(EXAMPLES["reduce-allreduce-broadcast"])
    assert prog.instructions == (
        Instruction("node", Form("InsideGroup"), Collective.REDUCE),
        Instruction("node", Form("Master", "root"), Collective.ALL_REDUCE),
        Instruction("node", Form("InsideGroup"), Collective.BROADCAST),
    )


def test_values_are_immutable_and_hashable():
    prog = parse_program(EXAMPLES["rs-ar-ag"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        prog.instructions[0].slice = "gpu"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        prog.instructions = ()  # type: ignore[misc]
    assert len({prog, parse_program(EXAMPLES["rs-ar-ag"])}) == 1


def _a100_cases():
    system = load_system("a100-4x16")
    out = []
    for m in matrices(system.sizes, (4, 16)):
        for red in [(0,), (1,), (0, 1)]:
            out.append((system, m, red))
    return out


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_valid_on_every_a100_placement(hierarchy_of, name):
    prog = parse_program(EXAMPLES[name])
    checked = 0
    for system, m, red in _a100_cases():
        h = hierarchy_of(system.sizes, (4, 16), m, red, system.level_names)
        node, gpu = h.sizes[1], h.sizes[2]
        if name == "allreduce" and h.num_devices < 2:
            continue
        if name != "allreduce" and (node < 2 or gpu < 2):
            continue
        checked += 1
        steps = program_steps(h, prog)
        run = execute(h.num_devices, steps, h.goal_groups, require_progress=True)
        assert run.valid, (m, red, run.violation)
        placement = Placement(system.sizes, (4, 16), m)
        lowered = lower_program(h, prog)
        whole = execute(
            placement.num_devices,
            [(s.collective, s.groups) for s in lowered],
            placement.reduction_groups(red),
            require_progress=True,
            chunks=h.num_devices,
        )
        assert whole.valid, (m, red, whole.violation)
    assert checked >= (9 if name == "allreduce" else 6)


def test_multi_line_semicolons_and_comments(data_dir):
    text = (data_dir / "rs_ar_ag.p2").read_text()
    assert parse_program(text) == parse_program(EXAMPLES["rs-ar-ag"])
    mixed = (
        "  # leading comment\n"
        "(node, InsideGroup, Reduce);\n"
        "\n"
        "(node, Master(root), AllReduce) ; (node, InsideGroup, Broadcast);  # trailing\n"
    )
    assert format_program(parse_program(mixed)) == EXAMPLES["reduce-allreduce-broadcast"]
    assert parse_program("(node,InsideGroup,AllReduce)") == parse_program("( node , InsideGroup , AllReduce )")


SYNTAX_ERRORS = [
    # text, line, column, message fragment
    ("(node InsideGroup, AllReduce)", 1, 7, "expected ','"),
    ("(node, InsideGroup, AllReduze)", 1, 21, "unknown collective 'AllReduze'"),
    ("(node, Inside, AllReduce)", 1, 8, "unknown form 'Inside'"),
    ("(node, Parallel(root, AllReduce)", 1, 21, "expected ')'"),
    ("(node, InsideGroup, AllReduce", 1, 30, "end of line"),
    ("node, InsideGroup, AllReduce)", 1, 1, "expected '('"),
    ("(node, InsideGroup, AllReduce))", 1, 31, "expected ';'"),
    ("(node, InsideGroup, AllReduce) (node, Parallel(root), AllReduce)", 1, 32, "expected ';'"),
    ("(node, InsideGroup, AllReduce)\n  (node, Master(root) AllReduce)", 2, 23, "expected ','"),
    ("(node, InsideGroup, AllReduce) $", 1, 32, "unexpected character '$'"),
    ("(node, Parallel, AllReduce)", 1, 16, "expected '(' after Parallel"),
    ("# only a comment\n", 1, 1, "empty program"),
    ("(node,\n InsideGroup, AllReduce)", 1, 7, "end of line"),
]


@pytest.mark.parametrize("text, line, column, fragment", SYNTAX_ERRORS)
def test_syntax_errors_carry_line_and_column(text, line, column, fragment):
    with pytest.raises(PlanSyntaxError) as err:
        parse_program(text)
    e = err.value
    assert isinstance(e, P2Error)
    assert (e.line, e.column) == (line, column)
    assert fragment in str(e)
    assert str(e).startswith(f"{line}:{column}: ")
    assert "\n" not in str(e)


def test_syntax_error_names_the_source(data_dir):
    path = data_dir / "syntax_error.p2"
    with pytest.raises(PlanSyntaxError) as err:
        parse_program(path.read_text(), source=str(path))
    assert (err.value.line, err.value.column) == (3, 7)
    assert str(err.value).startswith(f"{path}:3:7: ")


@pytest.fixture(scope="module")
def a100_h():
    system = load_system("a100-4x16")
    p = Placement(system.sizes, (4, 16), ((2, 2), (2, 8)))
    from p2smt.model.hierarchy import synthesis_hierarchy

    return synthesis_hierarchy(p, (1,), system.level_names)


@pytest.mark.parametrize(
    "text, line, column, fragment",
    [
        ("(node, InsideGroup, AllReduce)\n(rack, InsideGroup, AllReduce)", 2, 2, "unknown slice level 'rack'"),
        ("(gpu, Parallel(rack), AllReduce)", 1, 16, "unknown ancestor level 'rack'"),
        ("(node, InsideGroup, Reduce); (node, Master(gpu), AllReduce)", 1, 44, "strict ancestor"),
        ("(root, Parallel(root), AllReduce)", 1, 17, "strict ancestor"),
    ],
)
def test_level_names_checked_against_hierarchy(a100_h, text, line, column, fragment):
    assert parse_program(text) is not None  # syntactically fine without a hierarchy
    with pytest.raises(PlanSyntaxError) as err:
        parse_program(text, a100_h)
    assert (err.value.line, err.value.column) == (line, column)
    assert fragment in str(err.value)


def test_unknown_level_file(a100_h, data_dir):
    with pytest.raises(PlanSyntaxError) as err:
        parse_program((data_dir / "unknown_level.p2").read_text(), a100_h, "unknown_level.p2")
    assert str(err.value).startswith("unknown_level.p2:1:31: unknown slice level 'rack'")


def test_candidates_two_level(flat_hierarchy):
    h = flat_hierarchy((3, 4), ("node", "gpu"))
    cands = candidate_instructions(h)
    # distinct group sets: all devices, inside nodes, across nodes (per GPU), across nodes (GPU 0 only)
    group_sets = {g for _, g in cands}
    assert len(group_sets) == 4
    assert len(cands) == 4 * len(Collective)
    keys = [(ins.collective, g) for ins, g in cands]
    assert len(keys) == len(set(keys))
    assert all(g and all(len(x) >= 2 for x in g) for _, g in cands)
    labels = {str(ins) for ins, _ in cands}
    assert "(root, InsideGroup, AllReduce)" in labels
    assert "(node, Master(root), AllReduce)" in labels
    assert "(gpu, Parallel(root), AllReduce)" not in labels  # same groups as (root, InsideGroup, …)
    prob = problem(h)
    assert prob.num_devices == 12
    assert prob.goal_groups == (tuple(range(12)),)
    assert [c.label for c in prob.candidates] == [str(ins) for ins, _ in cands]
    for c, (ins, g) in zip(prob.candidates, cands):
        assert c.groups == g == instruction_groups(h, ins)
        assert c.collective == ins.collective


def test_candidates_are_deterministic(flat_hierarchy):
    h = flat_hierarchy((1, 2, 2, 4), ("rack", "server", "cpu", "gpu"))
    assert candidate_instructions(h) == candidate_instructions(flat_hierarchy((1, 2, 2, 4),
                                                                             ("rack", "server", "cpu", "gpu")))


LOWERING_CASES = [
    ("fig2-16gpu", (4, 4), ((1, 2, 1, 2), (1, 1, 2, 2)), (1,)),
    ("fig2-16gpu", (4, 4), ((1, 1, 2, 2), (1, 2, 1, 2)), (1,)),
    ("fig2-16gpu", (2, 2, 4), ((1, 2, 1, 1), (1, 1, 2, 1), (1, 1, 1, 4)), (0, 2)),
    ("a100-4x16", (8, 2, 4), ((2, 4), (1, 2), (2, 2)), (0, 2)),
    ("v100-4x8", (4, 8), ((2, 2), (2, 4)), (0,)),
]


@pytest.mark.parametrize("system_name, axes, matrix, red", LOWERING_CASES)
def test_lowering_replicates_over_non_reduction_axes(hierarchy_of, system_name, axes, matrix, red):
    system = load_system(system_name)
    h = hierarchy_of(system.sizes, axes, matrix, red, system.level_names)
    placement = Placement(system.sizes, axes, matrix)
    reduction_groups = set(placement.reduction_groups(red))
    for ins, groups in candidate_instructions(h):
        (step,) = lower_program(h, Program((ins,)))
        assert isinstance(step, ExplicitStep)
        assert step.collective == ins.collective
        assert len(step.groups) == len(groups) * len(h.replicas)
        expected = tuple(tuple(rep[d] for d in g) for rep in h.replicas for g in groups)
        assert step.groups == expected
        flat = [d for g in step.groups for d in g]
        assert len(flat) == len(set(flat))
        for g in step.groups:
            assert any(set(g) <= rg for rg in map(set, reduction_groups))
    (whole,) = lower_program(h, parse_program("(root, InsideGroup, AllReduce)"))
    assert {tuple(sorted(g)) for g in whole.groups} == reduction_groups


def test_lowering_keeps_ranks(hierarchy_of):
    system = load_system("fig2-16gpu")
    h = hierarchy_of(system.sizes, (4, 4), ((1, 2, 1, 2), (1, 1, 2, 2)), (1,), system.level_names)
    plan = lower_program(h, parse_program("(server, Master(root), AllReduce); (gpu, InsideGroup, Reduce)"))
    assert [s.collective for s in plan] == [Collective.ALL_REDUCE, Collective.REDUCE]
    # shard row [1, 1, 2, 2] → (d) = root 1, rack 1, server 1, cpu 2, gpu 2: server slices are single devices
    assert plan[0].groups == ()
    # roots (rank 0) are the replicas' first device of each gpu slice group
    for g in plan[1].groups:
        assert g[0] == min(g)


def test_explicit_plan_parsing(data_dir):
    import json

    plan = parse_explicit_plan(json.loads((data_dir / "plan_rs_then_ar.json").read_text()), "x.json")
    assert [s.collective for s in plan] == [Collective.REDUCE_SCATTER, Collective.ALL_REDUCE]
    assert plan[0].groups == ((0, 4), (1, 5), (2, 6), (3, 7))
    alias = parse_explicit_plan(json.loads((data_dir / "plan_double_count.json").read_text()), "x.json")
    assert alias[1].collective == Collective.ALL_REDUCE
    for bad in ([], {"steps": 3}, [{"collective": "AllReduce"}], [{"collective": "Foo", "replica_groups": []}],
                [{"collective": "AllReduce", "replica_groups": [[0, "a"]]}],
                [{"collective": "AllReduce", "replica_groups": [[0, 1]], "extra": 1}]):
        with pytest.raises(P2Error, match="x.json"):
            parse_explicit_plan(bad, "x.json")
