"""The branch and bound above 256 synthesis devices searches the compressed interpreter's state: on hierarchies
both can search it gives the bitmatrix search's list, float for float, and at 1,024 devices rank's best."""

from __future__ import annotations

import pytest

from p2smt.cost import branch
from p2smt.cost.branch import BranchAndBound
from p2smt.model.hierarchy import synthesis_hierarchy
from p2smt.model.placement import Placement
from p2smt.model.system import load_system

CASES = [
    ("fig2-16gpu", (16,), ((1, 2, 2, 4),), (0,), 6),
    ("fig2-16gpu", (4, 4), ((1, 2, 2, 1), (1, 1, 1, 4)), (0, 1), 5),
    ("a100-4x16", (4, 16), ((1, 4), (4, 4)), (1,), 5),
    ("a100-4x16", (8, 8), ((2, 4), (2, 4)), (0,), 5),
]


def _search(system, axes, matrix, reduce, max_len, top=5):
    sys_ = load_system(system)
    h = synthesis_hierarchy(Placement(sys_.sizes, axes, matrix), reduce, sys_.level_names)
    search = BranchAndBound(sys_, h, algo="ring", bytes_per_device=1e9, max_len=max_len, top=top)
    ranked, stats = search.run()
    return [(r.text, r.seconds) for r in ranked], stats


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[3]}")
def test_the_compressed_search_gives_the_bitmatrix_list(case, monkeypatch):
    bitmatrix, stats = _search(*case)
    assert "interpreter" not in stats and bitmatrix
    monkeypatch.setattr(branch, "MAX_DEVICES", 0)
    compressed, stats = _search(*case)
    assert stats["interpreter"] == "compressed"
    assert compressed == bitmatrix


@pytest.mark.slow
def test_best_at_1024_devices_is_rank_s_cheapest(run_cli):
    """best on the superpod's 1,024-device reduction (was refused: the bitmatrix search stops at 256) gives the
    cheapest programs rank lists, saying it rests on the compressed interpreter's exhaustive search, no proof."""
    import json

    args = ["--system", "h100-superpod", "--axes", "1024", "--reduce", "0", "--max-len", "4", "--top", "3", "--json"]
    rc, out, _ = run_cli("best", *args)
    assert rc == 0
    (m,) = json.loads(out)["matrices"]
    assert "compressed interpreter at the real size" in m["stats"]["rests_on"]
    assert "no proof" in m["stats"]["rests_on"] and m["certified"] is False
    rc, out, _ = run_cli("rank", *args)
    ranked = json.loads(out)["matrices"][0]["programs"]
    assert [(p["program"], p["seconds"]) for p in m["programs"]] == [(p["program"], p["seconds"]) for p in ranked]


def test_an_unproved_best_says_so_in_status_line_and_json(run_cli):
    """The exhaustive search alone (--proof none, and auto above 256 synthesis devices) is optimal by exhaustion,
    not certified: the JSON's ``certified`` and the header say so; the default proof says certified."""
    import json

    args = ["best", "--system", "a100-4x16", "--axes", "64", "--reduce", "0", "--max-len", "3"]
    rc, out, _ = run_cli(*args, "--proof", "none", "--json")
    payload = json.loads(out)
    assert rc == 0 and payload["status"] == "optimal" and payload["certified"] is False
    assert [m["certified"] for m in payload["matrices"]] == [False]
    rc, out, _ = run_cli(*args, "--proof", "none")
    assert "optimal by exhaustive search, not certified by Z3" in " ".join(out.split())
    rc, out, _ = run_cli(*args, "--json")
    assert rc == 0 and json.loads(out)["certified"] is True
