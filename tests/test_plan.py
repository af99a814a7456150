"""Whole-model placement (issue 8): known answers, Pareto front, profile validation, CLI."""

from __future__ import annotations

import json

import pytest

from p2smt.cli.main import main
from p2smt.cost.plan import pipeline_pairs, plan
from p2smt.cost.rank import rank
from p2smt.errors import P2Error
from p2smt.model.placement import Placement
from p2smt.model.profile import Profile, load_profile, shipped_profiles
from p2smt.model.request import Request
from p2smt.model.system import load_system


def _profile(axes, comms, name="t"):
    return Profile.model_validate({"name": name, "axes": axes, "communication": comms})


def test_shipped_profiles_load():
    assert shipped_profiles() == ["gpt3-13b-tp-dp", "gpt3-tp-pp-dp", "llama2-7b-fsdp", "llama2-7b-hsdp", "resnet50-dp"]
    for name in shipped_profiles():
        p = load_profile(name)
        assert p.sizes_for(64)


def test_data_parallel_profile_picks_the_placement_rank_picks_for_that_axis():
    system = load_system("a100-4x16")
    prof = _profile(
        [{"name": "data", "size": 4}, {"name": "model", "size": 16}],
        [{"name": "grads", "axes": ["data"], "bytes_per_device": 2**29 * 4 * 4}],
    )
    report = plan(prof, system)
    ranked = rank(Request.for_system(system, (4, 16), (0,)))
    assert report["best"]["matrix"] == ranked["best"]["matrix"]
    assert report["best"]["communications"][0]["program"] == ranked["best"]["program"]
    assert report["best"]["total_seconds"] == pytest.approx(ranked["best"]["seconds"])


@pytest.mark.parametrize(("profile", "system", "nodes", "algo"), [
    ("gpt3-13b-tp-dp", "dgx-a100", 4, "ring"), ("gpt3-tp-pp-dp", "a100-4x16", None, "tree"),
    ("resnet50-dp", "fig2-16gpu", None, "auto")])
def test_branch_and_bound_plans_what_ranking_every_program_plans(profile, system, nodes, algo):
    """The default plan (``auto``: each placement's cheapest program by the branch and bound) is the report
    ranking the pieces engine's whole program set gives: same programs, seconds, links, order and Pareto
    front; only the engine and what each choice rests on differ."""
    from p2smt.synth.config import EngineConfig

    sys_ = load_system(system, nodes=nodes)
    searched = plan(load_profile(profile), sys_, algo=algo)
    ranked = plan(load_profile(profile), sys_, algo=algo, config=EngineConfig(engine="pieces"))
    assert all("branch and bound" in c["rests_on"] for r in searched["placements"] for c in r["communications"]
               if c["kind"] == "reduce")
    assert all(c["rests_on"].startswith("the cheapest of ") and "Z3" not in c["rests_on"]
               for r in ranked["placements"] for c in r["communications"] if c["kind"] == "reduce")
    assert _without_grounds(searched) == _without_grounds(ranked)


def _without_grounds(report):
    """A plan report without its engine and what each choice rests on (its certification's words name them)."""
    def rows(rows_):
        return [r | {"communications": [{k: v for k, v in c.items() if k != "rests_on"} for c in r["communications"]]}
                for r in rows_]
    out = {k: v for k, v in report.items() if k not in ("engine", "certification")}
    return out | {"placements": rows(report["placements"]), "best": rows([report["best"]])[0],
                  "worst": rows([report["worst"]])[0]}


def test_the_certified_plan_chooses_from_z3_certified_sets():
    """Under ``certified`` each reduction's program is the cheapest of a set Z3 certified; the choices equal
    the default's (``auto``, the branch and bound)."""
    from p2smt.synth.config import EngineConfig

    sys_ = load_system("v100-4x8")
    certified = plan(load_profile("resnet50-dp"), sys_, config=EngineConfig())
    assert certified["engine"] == "certified" and certified["certified"] is True
    assert certified["certification"].startswith("certified by Z3: each choice is the cheapest of a program set")
    (comm,) = certified["best"]["communications"]
    assert comm["rests_on"].startswith("the cheapest of 93 programs; Z3-certified at the real size (32 devices)")
    auto = plan(load_profile("resnet50-dp"), sys_)
    assert auto["engine"] == "auto" and auto["certified"] is False
    assert auto["certification"].startswith("NOT certified by Z3 (--engine auto; ")
    assert {k: v for k, v in _without_grounds(certified).items() if not k.startswith("certifi")} \
        == {k: v for k, v in _without_grounds(auto).items() if not k.startswith("certifi")}


def test_dominant_tensor_parallel_volume_puts_tensor_inside_the_node():
    for system in (load_system("a100-4x16"), load_system("dgx-a100", nodes=4)):
        report = plan(load_profile("gpt3-13b-tp-dp"), system)
        tensor_row = report["best"]["matrix"][1]
        assert tensor_row[0] == 1, (system.name, report["best"]["matrix"])
        assert report["best"]["total_seconds"] <= report["worst"]["total_seconds"]


def test_gradient_dominated_profile_flips_the_choice():
    system = load_system("a100-4x16")
    prof = _profile(
        [{"name": "data", "size": 8}, {"name": "tensor", "size": 8}],
        [
            {"name": "tp", "axes": ["tensor"], "bytes_per_device": 1e6, "count": 1},
            {"name": "dp", "axes": ["data"], "bytes_per_device": 8e9, "count": 1},
        ],
    )
    report = plan(prof, system)
    assert report["best"]["matrix"][0][0] == 1, report["best"]["matrix"]


def test_ranking_totals_sorted_and_pareto_is_consistent():
    report = plan(load_profile("gpt3-tp-pp-dp"), load_system("a100-4x16"))
    totals = [r["total_seconds"] for r in report["placements"]]
    assert totals == sorted(totals)
    assert report["placements"][0]["pareto"]
    for r in report["placements"]:
        assert r["total_seconds"] == pytest.approx(sum(c["seconds_total"] for c in r["communications"]))
        vec = [c["seconds_total"] for c in r["communications"]]
        dominated = any(
            all(o <= s for o, s in zip(w, vec)) and any(o < s for o, s in zip(w, vec))
            for w in ([c["seconds_total"] for c in o["communications"]] for o in report["placements"])
        )
        assert r["pareto"] == (not dominated)


def test_pipeline_pairs_link_neighbouring_stages():
    placement = Placement((4, 16), (4, 4, 4), ((1, 4), (4, 1), (1, 4)))
    first, second = pipeline_pairs(placement, 1)
    for src, dst in first + second:
        a, b = placement.axis_coords(src), placement.axis_coords(dst)
        assert (a[0], a[2]) == (b[0], b[2]) and b[1] == a[1] + 1
    assert len(first) + len(second) == 3 * 16
    for rnd in (first, second):
        devices = [d for pair in rnd for d in pair]
        assert len(devices) == len(set(devices))


def test_profile_errors_are_clear(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\naxes:\n  - {name: data, size: auto}\ncommunication:\n  - {name: g, axes: [nope], bytes_per_device: 1}\n")
    with pytest.raises(P2Error, match="unknown axis 'nope'"):
        load_profile(bad)
    prof = _profile([{"name": "a", "size": 3}], [{"name": "g", "axes": ["a"], "bytes_per_device": 1}])
    with pytest.raises(P2Error, match="axes multiply to 3, the system has 64 devices"):
        prof.sizes_for(64)


def test_cli_plan_json_and_errors(tmp_path, capsys):
    png = tmp_path / "plan.png"
    assert main(["plan", "--profile", "resnet50-dp", "--system", "v100-2x8", "--json", "--png", str(png)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["axes"] == {"data": 16} and len(report["placements"]) == 1
    assert png.stat().st_size > 1000
    assert main(["plan", "--profile", "nope", "--system", "a100-4x16"]) == 2
    err = capsys.readouterr().err
    assert "unknown profile" in err and "Traceback" not in err


def test_cli_plan_exports_mesh_order_and_lowered_programs(tmp_path, capsys):
    out = tmp_path / "export"
    assert main(["plan", "--profile", "gpt3-13b-tp-dp", "--system", "fig2-16gpu", "--json",
                 "--export-dir", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    mesh = json.loads((out / "mesh.json").read_text())
    assert mesh["matrix"] == report["best"]["matrix"] and mesh["axis_names"] == ["data", "tensor"]
    placement = Placement((1, 2, 2, 4), tuple(mesh["axes"]), tuple(tuple(r) for r in mesh["matrix"]))
    assert tuple(mesh["device_order"]) == placement.mesh_order()
    for comm in report["best"]["communications"]:
        for backend in ("jax", "torch"):
            source = (out / f"{comm['name']}_{backend}.py").read_text()
            compile(source, f"{comm['name']}_{backend}.py", "exec")
            assert "def reduce(" in source
            for instruction in comm["program"].split("; "):
                assert instruction in source
    assert sorted(report["exported"]) == sorted(str(p) for p in out.iterdir())


def test_plan_reports_the_link_classes_of_each_program_against_the_allreduce():
    # 4 DGX A100 nodes: a data-parallel gradient AllReduce over nodes crosses the network; a hierarchical
    # program moves part of it onto NVLink (ReduceScatter/AllGather inside the node), which the report names.
    report = plan(load_profile("gpt3-13b-tp-dp"), load_system("dgx-a100", nodes=4))
    for row in report["placements"]:
        for c in row["communications"]:
            if c["kind"] != "reduce":
                continue
            assert c["allreduce_links"] in ("nvlink", "net") and set(c["links"]) <= {"nvlink", "pci", "net"}
            assert len(c["links"]) == c["program"].count(";") + 1
            assert (c["moved"] is None) == (set(c["links"]) == {c["allreduce_links"]})
    tensor = [c for r in report["placements"] for c in r["communications"] if c["allreduce_links"] == "nvlink"]
    assert tensor and all("net" not in c["links"] for c in tensor)


@pytest.mark.parametrize("engine", ["auto", "certified"])
def test_a_reduction_over_axes_of_size_1_costs_nothing(engine):
    from p2smt.synth.config import Engine, EngineConfig

    report = plan(load_profile("gpt3-13b-tp-dp"), load_system("dgx-h100", nodes=1), config=EngineConfig(engine=Engine(engine)))
    (row,) = report["placements"]
    dp = next(c for c in row["communications"] if c["name"] == "dp_gradients")
    tp = next(c for c in row["communications"] if c["name"] == "tp_activations")
    assert dp["seconds_total"] == 0.0 and dp["program"] is None and "nothing to communicate" in dp["rests_on"]
    assert row["total_seconds"] == tp["seconds_total"] > 0
    if engine == "certified":  # the one unit that communicates is certified; the empty one proves nothing
        assert report["certified"] and "(1 (placement, reduction) unit)" in report["certification"]


def test_pipeline_stages_send_and_receive_at_once():
    """Inside one NVSwitch node a stage's receive and its own send use the two directions of its links: a
    four-stage transfer takes one pair's time, not two rounds' (it was twice, 138.5 against 69.3 µs)."""
    from p2smt.cost.model import step_time
    from p2smt.cost.plan import p2p_seconds
    from p2smt.model.collectives import Collective
    from p2smt.model.system import load_system
    from p2smt.model.topology import build_topology

    system = load_system("dgx-h100", nodes=2)
    placement = Placement(system.sizes, (1, 4, 4), ((1, 1), (1, 4), (2, 2)))
    one_pair = step_time(build_topology(system), Collective.BROADCAST, [pipeline_pairs(placement, 1)[0][0]],
                         [2e7], "ring")
    assert p2p_seconds(system, placement, 1, 2e7, "ring") == pytest.approx(one_pair, rel=1e-9)
