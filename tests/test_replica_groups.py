"""XLA replica-group forms (issue 16): singleton no-op members, empty = all devices, iota and mesh forms."""

from __future__ import annotations

import json

import pytest

from p2smt.cli.main import main
from p2smt.errors import P2Error
from p2smt.model.dsl import parse_explicit_plan
from p2smt.model.replica_groups import DeviceSpace, GroupMode, global_groups, normalize, parse_groups_text

NODE = [list(range(n * 16, n * 16 + 16)) for n in range(4)]
ROOTS_AND_SINGLETONS = [[0, 16, 32, 48]] + [[d] for d in range(64) if d % 16]
A100 = ["--system", "a100-4x16", "--axes", "64", "--reduce", "0", "--matrix", "[[4,16]]"]


def test_iota_without_and_with_transpose():
    assert parse_groups_text("[2,4]<=[8]") == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert parse_groups_text("[4,2]<=[2,4]T(1,0)") == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert parse_groups_text("[2,4]<=[2,2,2]T(0,2,1)") == ((0, 2, 1, 3), (4, 6, 5, 7))


def test_explicit_empty_and_mesh_forms():
    assert parse_groups_text("{{0,1},{2,3}}") == ((0, 1), (2, 3))
    assert parse_groups_text("{}") == ()
    assert parse_groups_text("mesh['a'=2,'b'=3] {'b'}") == ((0, 1, 2), (3, 4, 5))
    assert parse_groups_text("mesh['a'=2,'b'=3] {'a'}") == ((0, 3), (1, 4), (2, 5))


@pytest.mark.parametrize("bad", ["[4]<=[4]", "[3,3]<=[8]", "[2,4]<=[2,4]T(0,0)", "{{0,1},{2", "<=",
                                 "mesh['a'=2] {'c'}"])
def test_unsupported_forms_are_errors(bad):
    with pytest.raises(P2Error):
        parse_groups_text(bad)


@pytest.mark.parametrize("huge, message", [
    ("[100000000,100000000]<=[10000000000000000]", "more than the 1,048,576"),
    ("[10000,10000]<=[100000000]", "more than the 1,048,576"),
    ("mesh['a'=100000000000,'b'=100000000] {'b'}", "more than the 1,048,576"),
    ("[0,4]<=[0]", "sizes must be positive"),
    ("mesh['a'=0,'b'=4] {'b'}", "sizes must be positive"),
])
def test_iota_and_mesh_spans_are_checked_before_any_array_is_built(huge, message, tmp_path, capsys):
    with pytest.raises(P2Error, match=message):
        parse_groups_text(huge)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"collective": "AllReduce", "replica_groups": huge}]))
    assert main(["check", *A100, "--plan", str(plan)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_normalize_drops_singletons_and_expands_empty():
    assert normalize(((0, 1), (2,), (3,)), 4) == ((0, 1),)
    assert normalize((), 3) == ((0, 1, 2),)


def test_group_modes_follow_xla():
    assert GroupMode.of(False, None) is GroupMode.CROSS_REPLICA
    assert GroupMode.of(True, None) is GroupMode.CROSS_PARTITION
    assert GroupMode.of(True, False) is GroupMode.CROSS_REPLICA_AND_PARTITION
    assert GroupMode.of(True, True) is GroupMode.FLATTENED_ID
    with pytest.raises(P2Error, match="channel_id"):
        GroupMode.of(False, True)
    space = DeviceSpace(replicas=2, partitions=2)
    # replica ids: one group per partition; device id = replica * partitions + partition
    assert global_groups(((0, 1),), GroupMode.CROSS_REPLICA, space) == ((0, 2), (1, 3))
    assert global_groups(((0, 1),), GroupMode.CROSS_PARTITION, space) == ((0, 1), (2, 3))
    assert global_groups((), GroupMode.FLATTENED_ID, space) == ((0, 1, 2, 3),)
    assert global_groups(((0,),), GroupMode.CROSS_REPLICA_AND_PARTITION, DeviceSpace(1, 4)) == ((0, 1, 2, 3),)
    with pytest.raises(P2Error, match="not supported"):
        global_groups(((0, 1),), GroupMode.CROSS_REPLICA_AND_PARTITION, space)
    with pytest.raises(P2Error, match="out of range"):
        global_groups(((0, 4),), GroupMode.FLATTENED_ID, space)


def test_explicit_plan_needs_device_count_for_empty_groups():
    with pytest.raises(P2Error, match="number of devices"):
        parse_explicit_plan([{"collective": "AllReduce", "replica_groups": []}], "x.json")
    plan = parse_explicit_plan([{"collective": "AllReduce", "replica_groups": []}], "x.json", 4)
    assert plan[0].groups == ((0, 1, 2, 3),)


FORMS = {
    "horovod-singletons": [
        {"collective": "Reduce", "replica_groups": NODE},
        {"collective": "AllReduce", "replica_groups": ROOTS_AND_SINGLETONS},
        {"collective": "Broadcast", "replica_groups": NODE},
    ],
    "horovod-hlo-text": [
        {"collective": "Reduce", "replica_groups": "[4,16]<=[64]"},
        {"collective": "AllReduce",
         "replica_groups": "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in ROOTS_AND_SINGLETONS) + "}"},
        {"collective": "Broadcast", "replica_groups": "[4,16]<=[64]"},
    ],
    "rs-ar-ag-iota": [
        {"collective": "ReduceScatter", "replica_groups": "[4,16]<=[64]"},
        {"collective": "AllReduce", "replica_groups": "[16,4]<=[4,16]T(1,0)"},
        {"collective": "AllGather", "replica_groups": "[4,16]<=[64]"},
    ],
    "rs-ar-ag-singletons-padded": [
        {"collective": "ReduceScatter", "replica_groups": NODE},
        {"collective": "AllReduce", "replica_groups": [[g + 16 * n for n in range(4)] for g in range(16)]},
        {"collective": "AllGather", "replica_groups": NODE},
        {"collective": "AllReduce", "replica_groups": [[d] for d in range(64)]},
    ],
    "allreduce-empty": [{"collective": "AllReduce", "replica_groups": []}],
}


@pytest.mark.parametrize("name", FORMS)
@pytest.mark.parametrize("command", ["verify", "check"])
def test_xla_forms_of_published_plans_on_a100_are_proved(name, command, tmp_path, capsys):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(FORMS[name]))
    rc = main([command, *A100, "--plan", str(path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0, out
    assert out.get("status", "proved") == "proved" and out.get("valid", True)


def test_singleton_step_alone_is_a_no_op_not_a_progress_error(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(FORMS["allreduce-empty"] + [{"collective": "AllGather", "replica_groups": [[0]]}]))
    assert main(["check", *A100, "--plan", str(path), "--json"]) == 0
