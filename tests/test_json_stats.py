"""``--json`` keeps every wall-clock figure under a ``stats`` key, so two runs' outputs can be diffed."""

from __future__ import annotations

import json

import pytest

from p2smt.timings import is_timing

V100 = ["--system", "v100-2x8", "--axes", "2,8", "--reduce", "1", "--max-len", "3", "--json"]


def without_stats(value):
    """``value`` with every ``stats`` subtree removed."""
    if isinstance(value, dict):
        return {k: without_stats(v) for k, v in value.items() if k != "stats"}
    if isinstance(value, list):
        return [without_stats(v) for v in value]
    return value


def timing_paths(value, path: str = "") -> list[str]:
    """Paths of timing keys outside any ``stats`` subtree."""
    if isinstance(value, dict):
        return [p for k, v in value.items() if k != "stats"
                for p in ([f"{path}.{k}"] if is_timing(k) else timing_paths(v, f"{path}.{k}"))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in timing_paths(v, f"{path}[{i}]")]
    return []


def test_two_synth_runs_differ_only_inside_stats(run_cli):
    runs = []
    for _ in range(2):
        rc, out, _ = run_cli("synth", *V100, "--proof", "bmc")
        assert rc == 0
        runs.append(json.loads(out))
    first, second = runs
    assert without_stats(first) == without_stats(second)
    assert timing_paths(first) == []
    assert first["stats"]["seconds"] >= 0
    certified = [m for m in first["matrices"] if "certificate" in m]
    assert certified, "the certified engine reports its proof"
    for m in certified:
        assert m["stats"]["seconds"] >= 0 and m["stats"]["certificate"]["validity"]["seconds"] >= 0
        assert "seconds" not in m["certificate"] and "seconds" not in m["certificate"]["validity"]
        assert m["stats"]["certificate"]["completeness"]["seconds"] >= 0
        assert m["certificate"]["completeness"]["lengths"] == "1-3" and "seconds" not in m["certificate"]["completeness"]


PROGRAM = ["--matrix", "[[2,1],[1,8]]", "--program", "(node, InsideGroup, AllReduce)"]


@pytest.mark.parametrize("argv", [
    ("best", "--top", "2", *V100),
    ("synth", "--engine", "z3", *V100),
    ("verify", *PROGRAM, *V100[:6], "--json"),
    ("verify", *PROGRAM, "--values", *V100[:6], "--json"),
], ids=["best", "synth-z3", "verify", "verify-values"])
def test_other_commands_differ_only_inside_stats(run_cli, argv):
    runs = []
    for _ in range(2):
        rc, out, _ = run_cli(*argv)
        assert rc == 0
        runs.append(json.loads(out))
    assert without_stats(runs[0]) == without_stats(runs[1])
    assert runs[0]["stats"]["seconds"] >= 0
    if argv[0] != "best":  # best's other "seconds" are predicted times, computed not measured
        assert timing_paths(runs[0]) == []
    else:
        assert all(m["stats"]["seconds"] >= m["stats"]["search_seconds"] >= 0 for m in runs[0]["matrices"])


def test_a_lowered_run_reports_its_wall_times_under_stats():
    from p2smt.lower.run import RunReport

    runs = [RunReport("jax", "rs-ag", 4, 4, 2, True, step_labels=("ReduceScatter", "AllGather"),
                      step_seconds=(t, 2 * t), total_seconds=5 * t, setup_seconds=t) for t in (0.1, 0.2)]
    first, second = (r.to_json() for r in runs)
    assert without_stats(first) == without_stats(second) and timing_paths(first) == []
    assert first["steps"] == [{"step": "ReduceScatter"}, {"step": "AllGather"}]
    assert first["stats"] == {"step_seconds": [0.1, 0.2], "total_seconds": 0.5, "setup_seconds": 0.1}
