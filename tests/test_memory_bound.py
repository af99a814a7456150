"""The Z3 encodings' memory bound (``smt.memory``): a size whose estimate exceeds ``--memory`` is refused up
front in one line (exit 2, nothing written), and a run that reaches Z3's cap ends unknown with the reason,
never as "no program exists"."""

from __future__ import annotations

import json

import pytest
import z3

from p2smt.errors import P2Error
from p2smt.model.request import Request
from p2smt.smt.engine import _check, enumerate_z3
from p2smt.smt.memory import GIB, MemoryCap, memory_reason
from p2smt.smt.registry import load_encoding
from p2smt.synth.config import Engine, EngineConfig
from p2smt.synth.driver import synthesize

A100_64 = ["--system", "a100-4x16", "--axes", "64", "--reduce", "0", "--matrix", "[[4,16]]"]
SMALL = ["--system", "a100-4x16", "--axes", "4,16", "--reduce", "0", "--matrix", "[[1,4],[4,4]]"]
SMALL_REQUEST = Request("a100-4x16", axes=(4, 16), reduce=(0,), matrix=((1, 4), (4, 4)))
TINY_GIB = 0.01  # below what Z3 itself holds once loaded (its counter is the process's): the cap is always hit


def _problem(request: Request):
    from p2smt.api import hierarchy_of
    from p2smt.model.dsl import problem

    _, h = hierarchy_of(request)
    return problem(h)


def test_bitvec_on_64_devices_is_refused_up_front_in_one_line(run_cli, tmp_path):
    queries = tmp_path / "queries"
    rc, out, err = run_cli("synth", *A100_64, "--engine", "z3", "--encoding", "bitvec", "--max-len", "4",
                           "--memory", "8", "--emit-smt2", queries, "--json")
    assert rc == 2 and out == "" and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert "64 devices, up to 4 steps: the bitvec encoding needs about" in err and "more than --memory 8 GiB" in err
    assert "the default certified engine" in err and "--encoding bool-matrix" in err and "a larger --memory" in err
    assert "--encoding bitvec" not in err  # what is refused is not offered instead
    assert not queries.exists()  # refused before the first query's folder is made


def test_the_estimate_follows_the_measured_peaks():
    """bitvec's AllReduce estimate against the peaks measured (docs/usage.md, "The Z3 encodings' memory"): 1.95 GB at 32 devices
    and length 4, past 23 GiB at 64; bool-matrix's hardly grows with the devices."""
    def estimate(name, k, max_len, options=None):
        req = Request(f"a100-{k // 16}x16", axes=(k,), reduce=(0,), matrix=((k // 16, 16),))
        return load_encoding(name).estimate(_problem(req), max_len, options) / GIB

    assert 1.5 < estimate("bitvec", 32, 4) < 3 and estimate("bitvec", 64, 4) > 12
    assert estimate("bitvec", 32, 4, {"padding": "exact"}) > estimate("bitvec", 32, 4)  # one unrolling per length
    assert estimate("bool-matrix", 64, 4) < 0.1 < estimate("bool-matrix", 64, 4, {"cells": "all"})
    assert load_encoding("representative").estimate(_problem(SMALL_REQUEST), 4) is None  # a wrapper: no estimate


def test_the_api_refuses_the_same_size():
    with pytest.raises(P2Error, match="the bitvec encoding needs about .* more than --memory 2 GiB"):
        enumerate_z3(_problem(Request("a100-4x16", axes=(64,), reduce=(0,), matrix=((4, 16),))), 4,
                     encoding="bitvec", memory=MemoryCap(2))


def test_a_run_at_the_cap_is_unknown_with_the_reason(run_cli):
    rc, out, err = run_cli("synth", *SMALL, "--engine", "z3", "--max-len", "5", "--memory", TINY_GIB, "--json")
    payload = json.loads(out)
    (m,) = payload["matrices"]
    assert rc == 4 and err == "" and payload["status"] == m["status"] == "unknown"
    assert m["reason_unknown"] == f"Z3 stopped at the memory cap of {TINY_GIB:g} GiB (max. memory exceeded; --memory raises it)"
    rc, out, _ = run_cli("synth", *SMALL, "--engine", "z3", "--max-len", "5", "--memory", TINY_GIB)
    text = " ".join(out.split())
    assert rc == 4 and "UNKNOWN: Z3 stopped at the memory cap" in text and "no program" not in text
    rc, out, _ = run_cli("synth", *SMALL, "--engine", "z3", "--max-len", "5", "--memory", "1", "--json")
    assert rc == 0 and json.loads(out)["total_programs"] == 3  # the same run under a cap it stays below


def test_the_api_takes_the_cap_in_the_engine_configuration():
    capped = synthesize(SMALL_REQUEST, EngineConfig(engine=Engine.Z3, memory_gib=TINY_GIB))
    assert capped.status == "unknown" and "memory cap" in capped.matrices[0].stats["reason_unknown"]
    assert EngineConfig.from_json(EngineConfig(engine="z3", memory_gib=3.5).to_json()).memory_gib == 3.5
    cegis = synthesize(SMALL_REQUEST, EngineConfig(engine=Engine.Z3_CEGIS, memory_gib=TINY_GIB, max_len=3))
    assert cegis.status == "unknown"


@pytest.mark.parametrize("argv", [
    ["--engine", "z3", "--memory", "0"], ["--engine", "z3", "--memory", "nan"], ["--engine", "z3", "--memory", "-1"],
    ["--engine", "z3", "--memory", "lots"], ["--engine", "pieces", "--memory", "4"], ["--memory", "4"],
    ["--engine", "z3", "--encoding", "representative", "--memory", "4"],  # a wrapper the cap does not reach
])
def test_bad_memory_options_are_one_line_errors(run_cli, argv):
    rc, out, err = run_cli("synth", *SMALL, *argv)
    assert rc == 2 and out == "" and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "--memory" in err


@pytest.mark.parametrize("value", [0, -1.0, float("inf"), float("nan"), True, "4"])
def test_the_cap_takes_only_a_positive_finite_number(value):
    with pytest.raises(P2Error, match="--memory must be a positive number of GiB"):
        MemoryCap(value)


def test_z3s_memory_error_in_a_check_is_an_unknown_with_the_reason():
    """Z3 raises its memory message when preprocessing passes the cap, or when an allocation fails (a ulimit):
    either is an unknown, any other error is not."""
    class Raising:
        def __init__(self, message: bytes):
            self.message = message

        def check(self, *assumptions):
            raise z3.Z3Exception(self.message)

    assert _check(Raising(b"max. memory exceeded"), [], MemoryCap(2)) == (
        z3.unknown, "Z3 stopped at the memory cap of 2 GiB (max. memory exceeded; --memory raises it)")
    assert _check(Raising(b"out of memory"), [], MemoryCap(2)) == (
        z3.unknown, "Z3 ran out of memory (out of memory: the process's limit, e.g. ulimit -v, came first)")
    with pytest.raises(z3.Z3Exception):
        _check(Raising(b"invalid argument"), [], MemoryCap(2))
    assert memory_reason("canceled") is None


def test_a_refusal_suggests_only_encodings_whose_estimate_fits(run_cli):
    """representative declares no estimate: it is not offered as fitting."""
    rc, _, err = run_cli("synth", "--system", "a100-4x16", "--axes", "64", "--reduce", "0", "--matrix", "[[4,16]]",
                         "--engine", "z3", "--encoding", "bitvec", "--memory", "0.001", "--max-len", "3")
    assert rc == 2 and "the default certified engine" in err and "representative" not in err


@pytest.mark.parametrize("error", [MemoryError(), z3.Z3Exception("out of memory")])
def test_running_out_of_memory_past_the_checks_is_one_line_unknown(run_cli, monkeypatch, error):
    """Where no up-front check applies (terms built, a checker's solver), an allocation that fails is an unknown
    in one line (exit 4), not a traceback."""
    from p2smt.synth import driver

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(driver, "synthesize", fail)
    rc, out, err = run_cli("synth", *SMALL)
    assert rc == 4 and out == "" and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "out of memory" in err
