"""NCCL's tuner per algorithm × protocol: choices that match NCCL's known behaviour, and calibration bounds."""

from __future__ import annotations

from itertools import pairwise

import pytest

from p2smt.cost.calibration import calibration_points, fit_launch_us, launch_us_per_gpu
from p2smt.cost.step import flat_collective_choice
from p2smt.cost.tuner import Protocol, channels, constants, versions
from p2smt.errors import P2Error
from p2smt.model.system import load_system

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def _bound(nbytes: int) -> float:
    """The issue's per-point error bounds: 10 % at >= 64 MB, 20 % from 64 KiB to 64 MB, 35 % below."""
    return 0.10 if nbytes >= 64 * MIB else (0.20 if nbytes >= 64 * KIB else 0.35)


def test_every_public_point_is_within_its_bound():
    points = calibration_points()
    assert len(points) == 24
    for p in points:
        assert abs(p["relative_error"]) <= _bound(p["bytes"]), p


def test_the_harness_floor_is_fitted_on_the_public_points_and_binds_only_where_one_thread_drives_all_gpus():
    # C1 ran one process for 8 GPUs (nccl-tests -g 8): its 1 KiB and 64 KiB AllReduces take 42-45 us where
    # NCCL's Ring/LL estimate is 15 us. C2 (one GPU per process) has no floor and matches NCCL's estimate.
    points = calibration_points()
    assert fit_launch_us(points) == pytest.approx(launch_us_per_gpu(), abs=0.01)
    for p in points:
        bound = p["floor_s"] > p["nccl_s"]
        assert bound == (p["source"] == "C1" and p["bytes"] <= 64 * KIB), p
        assert p["predicted_s"] == max(p["nccl_s"], p["floor_s"])
    held_out = [p for p in points if p["source"] == "C1" and p["bytes"] <= 64 * KIB]
    for p in held_out:
        rest = [q for q in points if q is not p]
        floor = p["gpus_per_process"] * fit_launch_us(rest) * 1e-6
        assert abs(floor - p["measured_s"]) / p["measured_s"] < 0.10


@pytest.mark.parametrize("system", ["dgx-a100", "dgx-h100"])
def test_protocol_follows_size_on_one_nvlink_node(system):
    s = load_system(system, nodes=1)
    assert flat_collective_choice(s, "allgather", KIB, "auto").protocol is Protocol.LL
    assert flat_collective_choice(s, "allgather", 4 * MIB, "auto").protocol is Protocol.LL128
    assert flat_collective_choice(s, "allgather", GIB, "auto").protocol is Protocol.SIMPLE
    assert flat_collective_choice(s, "allreduce", KIB, "auto").protocol is Protocol.LL


def test_tree_wins_small_allreduces_across_many_nodes_and_ring_inside_one():
    many = load_system("dgx-h100", nodes=16)
    assert flat_collective_choice(many, "allreduce", 64 * KIB, "auto").algo == "tree"
    one = load_system("dgx-a100", nodes=1)
    assert flat_collective_choice(one, "allreduce", 64 * KIB, "auto").algo == "ring"


def test_nvls_wins_large_allreduces_on_an_nvlink_sharp_switch():
    assert flat_collective_choice(load_system("dgx-h100", nodes=1), "allreduce", GIB, "auto").algo == "nvls"


def test_forced_algorithms_the_system_cannot_run_are_refused():
    with pytest.raises(P2Error, match="cannot run AllGather with tree"):
        flat_collective_choice(load_system("dgx-h100", nodes=2), "allgather", MIB, "tree")
    with pytest.raises(P2Error, match="cannot run AllReduce with nvls"):
        flat_collective_choice(load_system("dgx-a100", nodes=1), "allreduce", MIB, "nvls")
    forced = flat_collective_choice(load_system("dgx-h100", nodes=1), "allreduce", GIB, "ring")
    assert forced.algo == "ring"


def test_constant_sets_are_versioned_and_name_their_source():
    assert {"2.7", "2.18"} <= set(versions())
    for v in versions():
        assert "tuning.cc" in constants(v)["source"]
    # The 2.7 era charged far more per Tree/Simple hop than today's release.
    assert constants("2.7")["hop_latency_us"]["nvlink"]["tree"]["simple"] > constants("2.18")["hop_latency_us"][
        "nvlink"]["tree"]["simple"]
    with pytest.raises(P2Error):
        constants("0.1")


def test_channel_count_follows_the_speed_ladder():
    a100 = load_system("dgx-a100", nodes=1).physical.nccl
    assert channels(a100, 240.0) == 12  # 6 channels at 40 GB/s, duplicated at >= 25 GB/s
    assert channels(a100, 10.0) == 1


def test_ll128_only_on_nvlink_inside_nodes_and_pcie_switches_to_the_nic():
    """NCCL enables LL128 by default only for NVLink paths inside a node and, across nodes, NICs reached
    through PCIe switches alone (path type at most PXB): never on PCIe rings, nor across nodes when the
    NIC sits behind the CPU (P²'s A100 and V100 systems)."""
    def protocols(name: str, nodes: int | None) -> set[Protocol]:
        system = load_system(name, nodes=nodes)
        return {flat_collective_choice(system, c, float(1 << e), "ring").protocol
                for c in ("allreduce", "allgather") for e in range(10, 30)}

    assert Protocol.LL128 in protocols("dgx-h100", 2)  # NICs on the GPUs' PCIe switches (PXB)
    assert Protocol.LL128 in protocols("a100-2x16", 1)  # one NVSwitch node
    assert Protocol.LL128 not in protocols("a100-2x16", 2)  # its NIC is behind cpu0 (PHB)
    assert Protocol.LL128 not in protocols("fig2-16gpu", 1)  # PCIe rings inside the node


@pytest.mark.parametrize(("name", "nodes", "cap"), [
    ("dgx-h100", 1, 141.0), ("dgx-h100", 2, 39.0), ("dgx-h100", 4, 20.4),  # Hopper row, then Intel's
    ("dgx-a100", 1, 87.7), ("dgx-a100", 2, 22.5), ("dgx-a100", 4, 19.0),  # Ampere row, then AMD's
])
def test_lls_cap_across_nodes_follows_the_cpu_vendor(name, nodes, cap):
    """NCCL's llMaxBws: one node reads the GPU's row; several nodes read the CPU vendor's (Intel, AMD)."""
    from p2smt.cost.tuner import GroupShape, bus_bandwidth
    from p2smt.model.collectives import Collective
    from p2smt.model.topology import build_topology

    nccl = build_topology(load_system(name, nodes=nodes)).nccl
    shape = GroupShape(Collective.ALL_REDUCE, 8 * nodes, nodes, 16)
    assert bus_bandwidth(nccl, "ring", Protocol.LL, shape, 1e6) == pytest.approx(cap)


def test_tree_time_grows_with_the_bytes_while_nccls_steps_steer():
    """NCCL's Tree correction is a step per power of two, so its estimate falls from 3.5 to 4 MiB; the
    predicted time interpolates it (the same at every power of two) and grows with the bytes, while the
    protocol is still chosen on NCCL's steps."""
    from p2smt.cost.tuner import tree_correction
    from p2smt.model.topology import build_topology

    nccl = build_topology(load_system("dgx-h100")).nccl
    for proto in (Protocol.LL, Protocol.LL128, Protocol.SIMPLE):
        for e in range(7, 31):
            assert tree_correction(nccl, proto, 2.0 ** e, smooth=True) == tree_correction(nccl, proto, 2.0 ** e)
    for name in ("dgx-h100", "dgx-a100"):
        system = load_system(name)
        times, nbytes = [], 1024.0
        while nbytes < 2 ** 31:
            times.append(flat_collective_choice(system, "allreduce", nbytes, "tree").seconds)
            nbytes *= 1.05
        assert all(b >= a for a, b in pairwise(times)), name
