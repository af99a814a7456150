"""The proof store: a problem certified once is not proved again, and an entry that disagrees is an error."""

from __future__ import annotations

import json

import pytest

from p2smt.cli.main import main
from p2smt.errors import P2Error
from p2smt.model.dsl import problem
from p2smt.model.request import Request
from p2smt.runs.gridfile import load_grid
from p2smt.runs.gridsweep import sweep
from p2smt.runs.store import read_rows
from p2smt.runs.tasks import Task, expand, task_key
from p2smt.synth.config import EngineConfig
from p2smt.synth.driver import synthesize
from p2smt.synth.proofstore import ProofStore

REQ = Request("a100-4x16", axes=(2, 32), reduce=(1,), matrix=((1, 2), (4, 8)))


def _entry(folder):
    (path,) = sorted(folder.glob("*.json"))
    return path, json.loads(path.read_text())


def _problem(result):
    (m,) = result.matrices
    return problem(m.hierarchy, True)


def test_a_stored_proof_is_reused_with_the_same_result(tmp_path):
    """The second run proves nothing: same programs, same certificate figures, and it says where the proof
    came from (in words and under ``reused``)."""
    store = tmp_path / "proofs"
    fresh = synthesize(REQ, EngineConfig(proof_store=str(store)))
    path, entry = _entry(store)
    again = synthesize(REQ, EngineConfig(proof_store=str(store)))
    plain = synthesize(REQ, EngineConfig(proof="bmc"))
    first, second, alone = ({k: v for k, v in r.to_json()["matrices"][0].items() if k != "stats"}
                            for r in (fresh, again, plain))
    assert fresh.certified is True and again.certified is True
    assert first["programs"] == second["programs"] == alone["programs"]
    assert "reused" not in first["certificate"] and first == alone
    assert second["certificate"] == first["certificate"] | {"reused": path.stem}
    assert second["rests_on"] == first["rests_on"] + "; the proof reused from the proof store"
    assert again.certification().endswith("(1 proof, 1 reused from the proof store)")
    assert entry["key"] == path.stem and len(entry["programs"]) == len(first["programs"])
    assert entry["certificate"] == first["certificate"] and entry["resource_units"] > 0
    assert _entry(store)[1] == entry  # a reuse writes nothing


def test_keys_follow_the_problem_and_the_length(tmp_path):
    store = ProofStore(tmp_path)
    prob = _problem(synthesize(REQ, EngineConfig(engine="pieces")))
    other = _problem(synthesize(Request("a100-4x16", axes=(2, 32), reduce=(0,), matrix=((1, 2), (4, 8))),
                                EngineConfig(engine="pieces")))
    assert store.key(prob, 5) == ProofStore(tmp_path / "x").key(prob, 5)
    assert len({store.key(prob, 5), store.key(prob, 4), store.key(other, 5)}) == 3


def test_an_entry_with_another_set_is_proved_again_and_replaced(tmp_path):
    """A stored set that differs from the proposer's (an entry edited by hand) is not reused: the problem is
    proved again, the fresh proof decides and replaces the entry, and the certificate names the one it
    replaced."""
    store = tmp_path / "proofs"
    fresh = synthesize(REQ, EngineConfig(proof_store=str(store)))
    path, entry = _entry(store)
    for programs in (entry["programs"][:-1], entry["programs"] + [[0, 0, 0, 0, 0]]):
        path.write_text(json.dumps(entry | {"programs": programs}))
        again = synthesize(REQ, EngineConfig(proof_store=str(store)))
        cert = again.matrices[0].stats["certificate"]
        assert again.certified is True and cert["replaced"] == path.stem and "reused" not in cert
        assert [str(p) for p in again.matrices[0].programs] == [str(p) for p in fresh.matrices[0].programs]
        assert _entry(store)[1]["programs"] == entry["programs"]


def test_a_proposer_that_disagrees_with_the_fresh_proof_is_still_exit_3(tmp_path, monkeypatch, capsys):
    """With a store, a proposer that drops a program is caught as without one: the stored set does not
    match, the fresh proof finds the program the proposer missed, exit 3."""
    from p2smt.synth import driver

    store = tmp_path / "proofs"
    argv = ["synth", "--system", "a100-4x16", "--axes", "2,32", "--reduce", "1", "--matrix", "[[1,2],[4,8]]",
            "--proof-store", str(store)]
    assert main(argv) == 0
    capsys.readouterr()
    real = driver.run_engine

    def dropping(prob, config, h=None, **kw):
        out = real(prob, config, h, **kw)
        return out if config.engine == "certified" else driver.EngineOutcome(out.status, out.programs[1:], out.stats)

    monkeypatch.setattr(driver, "run_engine", dropping)
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "which the pieces proposer missed" in err and len(err.strip().splitlines()) == 1


def test_an_unreadable_entry_or_store_is_a_clear_error(tmp_path, capsys):
    store = tmp_path / "proofs"
    synthesize(REQ, EngineConfig(proof_store=str(store)))
    path, entry = _entry(store)
    argv = ["synth", "--system", "a100-4x16", "--axes", "2,32", "--reduce", "1", "--matrix", "[[1,2],[4,8]]",
            "--proof-store"]
    for text in ("{", json.dumps(entry | {"key": "0" * 64}), json.dumps(entry | {"programs": [[99]]}), "[]",
                 json.dumps(entry | {"programs": ["00"]}), json.dumps(entry | {"certificate": {}}),
                 json.dumps(entry | {"resource_units": "9"})):
        path.write_text(text)
        assert main([*argv, str(store), "--json"]) == 2
        err = capsys.readouterr()
        assert err.out == "" and len(err.err.strip().splitlines()) == 1 and "--proof-store: " in err.err
        assert "delete it to prove again" in err.err and str(path) in err.err
    afile = tmp_path / "f"
    afile.write_text("")
    assert main([*argv, str(afile)]) == 2
    assert capsys.readouterr().err.strip() == f"p2smt: error: --proof-store '{afile}' exists and is not a folder"
    assert main([*argv, str(store), "--engine", "pieces"]) == 2
    assert "--proof-store: only with --engine certified" in capsys.readouterr().err
    with pytest.raises(P2Error, match="--proof-store: only with --engine certified"):
        EngineConfig(engine="auto", proof_store=str(store))
    assert EngineConfig(proof_store="x").proposing(EngineConfig().engine).proof_store is None


def test_an_entry_beyond_the_budget_is_proved_again(tmp_path):
    """An entry that spent more units than the budget asked is not reused: a fresh proof within that budget
    would not finish either, so the result is what it would be without the store."""
    store = tmp_path / "proofs"
    fresh = synthesize(REQ, EngineConfig(proof_store=str(store)))
    path, entry = _entry(store)
    short = synthesize(REQ, EngineConfig(proof_store=str(store), proof_budget=1))
    assert short.certified is False and entry["resource_units"] > 1_000_000
    path.write_text(json.dumps(entry | {"resource_units": 10**12}))
    again = synthesize(REQ, EngineConfig(proof_store=str(store)))
    assert again.certified is True and "reused" not in again.matrices[0].stats["certificate"]
    assert _entry(store)[1]["resource_units"] == entry["resource_units"]  # rewritten by the fresh proof
    assert [str(p) for p in again.matrices[0].programs] == [str(p) for p in fresh.matrices[0].programs]


def test_a_written_certificate_neither_reads_nor_fills_the_store(tmp_path):
    store = tmp_path / "proofs"
    res = synthesize(REQ, EngineConfig(proof_store=str(store), certificate=str(tmp_path / "cert")))
    assert res.certified is True and not store.exists() and any((tmp_path / "cert").iterdir())


def test_a_sweep_proves_each_problem_once(tmp_path, monkeypatch):
    """Two requests of one problem (AllReduce over 16 devices, on placements of two axes orders) are proved
    once: by default through a folder kept for the run only (removed at its end), or through the store
    given, which a second run then reuses whole."""
    import tempfile

    from p2smt.runs.paper import paper_sweep
    from p2smt.smt import certify

    grid = load_grid(str(_grid(tmp_path)))
    calls = []
    real = certify.certify
    monkeypatch.setattr(certify, "certify", lambda prob, *a, **kw: calls.append(prob) or real(prob, *a, **kw))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    summary = paper_sweep(tmp_path / "a", grid=grid, plots=False)
    assert summary["aggregate"]["units_certified"] == summary["aggregate"]["units"] == 8
    assert len(calls) == len(set(calls)) < 4 and not list((tmp_path / "tmp").iterdir())
    store = tmp_path / "proofs"
    calls.clear()
    paper_sweep(tmp_path / "b", grid=grid, plots=False, proof_store=store)
    assert len(calls) == len(set(calls)) == len(list(store.glob("*.json")))
    calls.clear()
    again = paper_sweep(tmp_path / "c", grid=grid, plots=False, proof_store=str(store))
    assert calls == [] and again["aggregate"] == summary["aggregate"]


def test_a_grid_sweeps_tasks_get_the_store(tmp_path):
    """Tasks run in child processes: the store reaches them (they fill it), and it is no part of a key."""
    store = tmp_path / "proofs"
    summary = sweep(str(_grid(tmp_path)), tmp_path / "out.jsonl", workers=1, progress=False, proof_store=store)
    ran = [r for r in read_rows(tmp_path / "out.jsonl") if r["status"] == "ok"]
    assert summary.certified == len(ran) == 4 and all(r["certified"] is True for r in ran)
    assert list(store.glob("*.json"))
    task = expand(load_grid(str(_grid(tmp_path))))[0]
    from dataclasses import replace

    assert task_key(replace(task, proof_store=str(store))) == task_key(task)
    assert Task.from_json(replace(task, proof_store="s").payload()).engine_config().proof_store == "s"
    assert main(["sweep", "--grid", str(_grid(tmp_path)), "--out", str(tmp_path / "x.jsonl"),
                 "--proof-store", str(tmp_path / "out.jsonl")]) == 2
    assert not (tmp_path / "x.jsonl").exists()


def _grid(tmp_path):
    grid = tmp_path / "g.yaml"
    grid.write_text("systems: [a100-2x16]\naxes: [[2, 16], [16, 2]]\nreductions: [[1], [0]]\n"
                    "algorithms: [ring]\nmax_len: 3\n")
    return grid


def test_a_sweep_of_another_engine_refuses_a_proof_store(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("systems: [a100-2x16]\naxes: [[2, 16]]\nreductions: [[1]]\nengine: auto\n")
    for argv in (["--grid", str(grid), "--out", str(tmp_path / "o.jsonl")],
                 ["--paper", "--engine", "pieces", "--out", str(tmp_path / "p")]):
        assert main(["sweep", *argv, "--proof-store", str(tmp_path / "s")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("p2smt: error: --proof-store: only with --engine certified (the sweep's engine is ")
        assert not (tmp_path / "o.jsonl").exists() and not (tmp_path / "p").exists()


def test_an_edited_source_changes_every_key(tmp_path, monkeypatch):
    """The key follows the bytes of the files the proofs rest on: an edit starts afresh."""
    from p2smt.synth import proofstore

    extra = tmp_path / "extra.py"
    extra.write_text("a = 1\n")
    sources = list(proofstore._sources())
    monkeypatch.setattr(proofstore, "_sources", lambda: [*sources, extra])
    prob = _problem(synthesize(REQ, EngineConfig(engine="pieces")))
    store = ProofStore(tmp_path)
    before = store.key(prob, 5)
    assert store.key(prob, 5) == before
    extra.write_text("a = 22\n")  # another size: a coarse clock may keep the time
    assert store.key(prob, 5) != before


def test_a_spent_budget_is_remembered_for_the_same_attempt(tmp_path, monkeypatch):
    """Z3's resource counts repeat, so a proof that ran out of a budget runs out again: the store records
    it, and the same attempt (same budget, same threads) gives the same answer without Z3. Another budget
    tries again; a certified set is never replaced by a spent attempt."""
    from p2smt.smt import certify

    calls = []
    real = certify.certify
    monkeypatch.setattr(certify, "certify", lambda prob, *a, **kw: calls.append(prob) or real(prob, *a, **kw))
    store = tmp_path / "proofs"
    short = EngineConfig(proof_store=str(store), proof_budget=1)
    first = synthesize(REQ, short)
    path, entry = _entry(store)
    assert first.certified is False and entry["spent"]["budget"] == 1_000_000 and len(calls) == 1
    again = synthesize(REQ, short)
    one, two = (r.to_json()["matrices"][0] for r in (first, again))
    assert len(calls) == 1 and again.certified is False
    assert two["why_not"] == one["why_not"] and two["rests_on"] == one["rests_on"]
    assert two["certificate"] == one["certificate"] | {"reused": path.stem}
    assert synthesize(REQ, EngineConfig(proof_store=str(store), proof_budget=1, jobs=2)).certified is False
    assert len(calls) == 2  # another number of threads is another attempt
    proved = synthesize(REQ, EngineConfig(proof_store=str(store)))
    assert proved.certified is True and len(calls) == 3 and _entry(store)[1]["spent"] is None
    assert synthesize(REQ, short).certified is False and len(calls) == 4
    assert _entry(store)[1]["spent"] is None  # the certified set stays
