"""The public API: every exported name resolves, and every documented example runs (doctests)."""

from __future__ import annotations

import doctest
import importlib

import pytest

import p2smt

DOCUMENTED = ["p2smt", "p2smt.api", "p2smt.model.request", "p2smt.synth.config", "p2smt.synth.driver",
              "p2smt.synth.proofstore", "p2smt.cost.plan", "p2smt.cost.best", "p2smt.timings"]


def test_every_export_resolves():
    for name in p2smt.__all__:
        assert getattr(p2smt, name) is not None, name
    with pytest.raises(AttributeError):
        p2smt.no_such_name  # noqa: B018


@pytest.mark.parametrize("module", DOCUMENTED)
def test_doctests(module):
    mod = importlib.import_module(module)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.IGNORE_EXCEPTION_DETAIL)
    assert result.attempted > 0, f"{module} has no examples"
    assert result.failed == 0


def test_request_round_trip_and_errors():
    r = p2smt.Request("fig2-16gpu", axes=(4, 4), reduce=(0,), levels={"rack": 2}, hierarchy="a")
    assert p2smt.Request.from_json(r.to_json()) == r
    with pytest.raises(p2smt.P2Error, match="unknown synthesis hierarchy"):
        p2smt.Request("fig2-16gpu", axes=(4, 4), reduce=(0,), hierarchy="z")
    with pytest.raises(p2smt.P2Error, match="unknown keys"):
        p2smt.Request.from_json({"system": "x", "axes": [2], "reduce": [0], "bogus": 1})
    with pytest.raises(p2smt.P2Error, match="unknown engine"):
        p2smt.EngineConfig(engine="magic")
    with pytest.raises(p2smt.P2Error, match="--max-len"):
        p2smt.EngineConfig(max_len=0)
    c = p2smt.EngineConfig(engine="z3", max_len=3, encoding="bitvec", encoding_options={"choice": "onehot"})
    assert p2smt.EngineConfig.from_json(c.to_json()) == c


def test_best_and_plan_take_names_as_the_cli_does():
    by_name = p2smt.best("v100-2x8", (16,), (0,), max_len=3, method="search")
    by_object = p2smt.best(p2smt.load_system("v100-2x8"), (16,), (0,), max_len=3, method="search")
    assert by_name.to_json()["best"] == by_object.to_json()["best"]
    report = p2smt.plan("resnet50-dp", "v100-2x8")
    assert report["best"]["matrix"] == [[2, 8]]
    with pytest.raises(p2smt.P2Error, match="nosuch"):
        p2smt.best("nosuch", (16,), (0,))


def test_functions_named_like_sub_packages_stay_functions():
    """``lower`` and ``cost`` are also sub-packages: once imported, calling them still calls the functions,
    and imports through the package still reach the sub-packages."""
    import p2smt.cost.model
    import p2smt.lower.run
    from p2smt.lower import run_program

    req = p2smt.Request("v100-2x8", axes=(2, 8), reduce=(0,), matrix=((2, 1), (1, 8)))
    for _ in range(2):
        assert "def reduce(" in p2smt.lower(req, "(root, InsideGroup, AllReduce)", backend="torch")
        assert p2smt.cost("v100-2x8", "allreduce", 1e6).seconds > 0
    assert callable(run_program) and p2smt.groups is not None
    import p2smt.cost.rank as ranking
    import p2smt.lower.run as running

    assert ranking.rank is p2smt.rank and running.run_program is run_program
