"""System files: the shipped topologies match docs/semantics.md §1 and docs/cost-model.md, and bad files fail with one clear P2Error."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from p2smt.errors import P2Error
from p2smt.model.system import Level, System, load_system, parse_system, shipped_systems, topologies_dir

SHIPPED_LEVELS = {
    "fig2-16gpu": (("rack", 1), ("server", 2), ("cpu", 2), ("gpu", 4)),
    "a100-2x16": (("node", 2), ("gpu", 16)),
    "a100-4x16": (("node", 4), ("gpu", 16)),
    "v100-2x8": (("node", 2), ("gpu", 8)),
    "v100-4x8": (("node", 4), ("gpu", 8)),
    "gb200-nvl72": (("rack", 1), ("tray", 18), ("superchip", 2), ("gpu", 2)),
    "dgx-b200": (("node", 2), ("gpu", 8)),
    "dgx-h200": (("node", 2), ("gpu", 8)),
}


def test_shipped_systems_are_listed_and_sorted():
    names = shipped_systems()
    assert set(SHIPPED_LEVELS) <= set(names)
    assert names == sorted(names)
    assert all((topologies_dir() / f"{n}.yaml").is_file() for n in names)


@pytest.mark.parametrize("name", sorted(SHIPPED_LEVELS))
def test_shipped_levels(name):
    s = load_system(name)
    assert s.name == name
    assert tuple((lv.name, lv.size) for lv in s.levels) == SHIPPED_LEVELS[name]
    assert s.sizes == tuple(size for _, size in SHIPPED_LEVELS[name])
    assert s.level_names == tuple(n for n, _ in SHIPPED_LEVELS[name])
    expected = 1
    for _, size in SHIPPED_LEVELS[name]:
        expected *= size
    assert s.num_devices == expected


def _bandwidths(system: System) -> dict[str, float]:
    return {ic.kind: ic.bandwidth_gbps for ic in system.interconnects}


@pytest.mark.parametrize("name", ["a100-2x16", "a100-4x16"])
def test_a100_bandwidths_follow_p2_section6(name):
    s = load_system(name)
    bw = _bandwidths(s)
    assert bw["nvswitch"] == 270
    assert min(ic.bandwidth_gbps for ic in s.interconnects if "node" in ic.joins) == 8


@pytest.mark.parametrize("name", ["v100-2x8", "v100-4x8"])
def test_v100_bandwidths_follow_p2_section6(name):
    s = load_system(name)
    bw = _bandwidths(s)
    assert bw["nvlink"] == 135
    assert bw["pcie"] == 32
    assert min(ic.bandwidth_gbps for ic in s.interconnects if "node" in ic.joins) == 8


def test_interconnects_join_existing_levels():
    for name in shipped_systems():
        s = load_system(name)
        for ic in s.interconnects:
            assert set(ic.joins) <= set(s.level_names)


@pytest.mark.parametrize(
    "name, nodes, sizes",
    [("a100-4x16", 8, (8, 16)), ("v100-2x8", 3, (3, 8)), ("fig2-16gpu", 4, (1, 4, 2, 4))],
)
def test_nodes_reinstantiates_the_scalable_level(name, nodes, sizes):
    s = load_system(name, nodes=nodes)
    assert s.sizes == sizes
    assert s.num_devices == __import__("math").prod(sizes)
    assert load_system(name).with_nodes(nodes) == s


def test_nodes_must_be_positive():
    with pytest.raises(P2Error, match="at least 1"):
        load_system("a100-4x16", nodes=0)


def test_load_by_path(data_dir):
    s = load_system(data_dir / "custom-2x4.yaml")
    assert s.name == "custom-2x4"
    assert s.sizes == (2, 4)
    assert load_system(str(data_dir / "custom-2x4.yaml"), nodes=5).sizes == (5, 4)


def test_unknown_system_names_the_shipped_ones():
    with pytest.raises(P2Error) as err:
        load_system("no-such-system")
    msg = str(err.value)
    assert "no-such-system" in msg and "a100-4x16" in msg
    assert "\n" not in msg


def test_missing_yaml_path():
    with pytest.raises(P2Error, match="does not exist"):
        load_system("/nonexistent/dir/system.yaml")


def test_malformed_yaml_names_file_and_line(data_dir):
    path = data_dir / "malformed.yaml"
    with pytest.raises(P2Error) as err:
        load_system(path)
    msg = str(err.value)
    assert str(path) in msg and "malformed YAML" in msg
    assert "\n" not in msg
    assert f"{path}:4:" in msg or f"{path}:3:" in msg


def test_level_size_zero_names_file_and_field(data_dir):
    path = data_dir / "zero_level.yaml"
    with pytest.raises(P2Error) as err:
        load_system(path)
    msg = str(err.value)
    assert str(path) in msg
    assert "levels.1.size" in msg
    assert "\n" not in msg


def test_interconnect_joining_an_unknown_level(data_dir):
    with pytest.raises(P2Error, match="rack"):
        load_system(data_dir / "unknown_join.yaml")


def test_document_must_be_a_mapping(data_dir):
    with pytest.raises(P2Error, match="mapping"):
        load_system(data_dir / "not_a_mapping.yaml")


def test_non_utf8_system_file_is_a_p2error(data_dir):
    with pytest.raises(P2Error):
        load_system(data_dir / "not_utf8.yaml")


BASE = {"name": "t", "levels": [{"name": "node", "size": 2}, {"name": "gpu", "size": 4}]}


@pytest.mark.parametrize(
    "patch, field",
    [
        ({"levels": []}, "levels"),
        ({"levels": [{"name": "node", "size": 2}, {"name": "node", "size": 4}]}, "distinct"),
        ({"levels": [{"name": "root", "size": 2}]}, "reserved"),
        ({"levels": [{"name": "9lives", "size": 2}]}, "identifier"),
        ({"levels": [{"name": "node", "size": -1}]}, "levels.0.size"),
        ({"levels": [{"name": "node", "size": 2, "colour": "red"}]}, "colour"),
        ({"scalable_level": "rack"}, "scalable_level"),
        ({"interconnects": [{"name": "x", "kind": "warp", "joins": ["node"], "bandwidth_gbps": 1,
                             "latency_us": 1}]}, "interconnects.0.kind"),
        ({"interconnects": [{"name": "x", "kind": "nic", "joins": ["node"], "bandwidth_gbps": 0,
                             "latency_us": 1}]}, "interconnects.0.bandwidth_gbps"),
    ],
)
def test_validation_errors_name_the_field(patch, field):
    with pytest.raises(P2Error) as err:
        parse_system({**BASE, **patch}, "inline.yaml")
    msg = str(err.value)
    assert msg.startswith("inline.yaml: ")
    assert field in msg
    assert "\n" not in msg


def test_systems_are_immutable_values():
    s = load_system("a100-4x16")
    with pytest.raises(ValidationError):
        s.name = "other"  # type: ignore[misc]
    assert Level(name="gpu", size=16) == s.levels[1]
    assert load_system("a100-4x16") == s


def test_nvl72_scales_racks_with_nodes_and_cites_nvidia():
    system = load_system("gb200-nvl72", nodes=4)
    assert system.sizes == (4, 18, 2, 2) and system.num_devices == 288
    for name in ("gb200-nvl72", "dgx-b200", "dgx-h200"):
        text = (topologies_dir() / f"{name}.yaml").read_text()
        assert "https://www.nvidia.com/en-us/data-center/" in text
